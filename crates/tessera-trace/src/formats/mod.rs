//! One module per trace format. Each has a `parse` over text that returns jobs with their
//! source lines, built on the shared helpers in [`crate::fields`].

pub mod gavel;
pub mod pollux;
pub mod pollux_philly;
pub mod tessera;
pub mod tiresias;
