//! `tessera repro synergy` (issue 3): not implemented yet.

use anyhow::{bail, Result};
use clap::Args;

/// Options of `tessera repro synergy`.
#[derive(Debug, Args)]
pub struct SynergyArgs {
    /// Seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(_args: &SynergyArgs) -> Result<()> {
    bail!("tessera repro synergy is not implemented yet (issue 3)")
}
