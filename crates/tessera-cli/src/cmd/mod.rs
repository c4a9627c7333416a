//! One module per command.

mod bench;
mod list;
pub mod repro;
mod simulate;
mod trace;

use anyhow::Result;

use crate::args::{Cli, Command};

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Simulate(args) => simulate::run(&args),
        Command::Trace(cmd) => trace::run(&cmd),
        Command::Bench(args) => bench::run(&args),
        Command::Repro(cmd) => repro::run(&cmd),
        Command::List => list::run(),
    }
}
