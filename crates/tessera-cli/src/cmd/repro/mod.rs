//! `tessera repro <paper>`: each paper's setup in the simulator, our figures beside theirs.

pub mod synergy;

use anyhow::Result;

use crate::args::ReproCommand;

pub fn run(cmd: &ReproCommand) -> Result<()> {
    match cmd {
        ReproCommand::Synergy(args) => synergy::run(args),
    }
}
