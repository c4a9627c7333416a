//! Integration tests of tessera-trace: golden fixtures per reader, bad input, properties,
//! generators and built-in traces.

mod alibaba_2023;
mod bad_input;
mod common;
mod generator;
mod golden;
mod mig;
mod pai;
mod props;
mod services;
mod workload_jobs;
