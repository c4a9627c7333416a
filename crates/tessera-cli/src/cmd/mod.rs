//! One module per command.

mod builtins;
pub mod daemon;
#[cfg(test)]
mod every_policy;
pub mod experiment;
pub mod plan;
pub(crate) mod simulate;
pub mod sweep;
mod trace;
pub mod whatif;

use anyhow::Result;

use crate::args::{Cli, Command};

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Simulate(args) => simulate::run(&args),
        Command::Trace(cmd) => trace::run(&cmd),
        // Dispatched from the raw matches in `main` (their flags come from the registry).
        Command::Bench(_) | Command::Repro(_) => Err(anyhow::anyhow!("name an experiment")),
        Command::Builtins(args) => builtins::run(&args),
        Command::Sweep(cmd) => sweep::run(&cmd),
        Command::Plan(args) => plan::run(&args),
        Command::Serve(a) => daemon::serve(&a),
        Command::Submit(a) => daemon::submit(&a),
        Command::List(a) => daemon::list(&a),
        Command::Describe(a) => daemon::describe(&a),
        Command::Cancel(a) => daemon::cancel(&a),
        Command::Nodes(a) => daemon::nodes(&a),
        Command::Services(a) => daemon::services(&a),
        Command::Queue(a) => daemon::queue(&a),
        Command::Whatif(a) => whatif::run(&a),
    }
}
