//! Integration tests of the daemon: one test binary, a module per area.
//!
//! - `api`: security, bad input, scheduling through the API (no processes).
//! - `local`: the local backend running real processes.
//! - `slurm`: a real Slurm (`scripts/slurm/up.sh`); skipped outside CI when absent, and a
//!   failure when `CI=true` and Slurm is missing.
//! - `hardening`: hostile clients and faults (timeouts, caps, limits, exhaustion).
//! - `restart`: SIGKILL the `tesserad` binary mid-run and restart it.
//! - `failures`: nodes marked down, and a bounded chaos run (kills and a node failure).
//! - `guard`: per-client connection caps and the limit on failed authentications.
//! - `services`: inference services over HTTP.
//! - `cancel`: cancels racing launches (no start after an acknowledged cancel, no shared GPU);
//!   launches withdrawn when their job is preempted or their service retired.
//! - `chaos_attacks`: issue 42's attacks rerun end to end over HTTP and on `tesserad`.

mod api;
mod cancel;
mod chaos_attacks;
mod common;
mod failures;
mod guard;
mod hardening;
mod local;
mod restart;
mod services;
mod slurm;
mod web;
