//! One module per trace format. Each has a `parse` over text that returns jobs with their
//! source lines, built on the shared field helpers (`src/fields.rs`).

pub mod acme;
pub mod gavel;
pub mod helios;
pub mod philly_json;
pub mod pollux;
pub mod pollux_philly;
pub mod tessera;
pub mod tiresias;
