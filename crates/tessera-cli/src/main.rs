//! `tessera`: simulate GPU-cluster schedulers on traces, inspect traces, benchmark, reproduce
//! papers, and (with a daemon) schedule real jobs.
//!
//! This binary is glue: arguments (`args`), one module per command (`cmd`), and rendering.
//! Errors print as `error: …` followed by `caused by: …` lines; exit 0 on success, 1 for bad
//! input or a failed command, 2 for internal errors (a policy bug caught by the simulator),
//! and 0 when stdout is closed early (`tessera … | head`).

mod args;
mod builtin;
mod cmd;
mod inputs;
mod plot;
mod progress;
mod report;

use std::io::ErrorKind;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

fn run() -> anyhow::Result<()> {
    let matches = args::with_registry(args::Cli::command()).get_matches();
    match matches.subcommand() {
        Some(("repro", sub)) => cmd::experiment::run(cmd::experiment::Kind::Repro, sub),
        Some(("bench", sub)) => cmd::experiment::run(cmd::experiment::Kind::Bench, sub),
        _ => cmd::run(args::Cli::from_arg_matches(&matches)?),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if err.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|e| e.kind() == ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            // One line per distinct fact: a cause already spelled out by the message above it
            // is not repeated.
            let mut shown = err.to_string();
            eprintln!("error: {shown}");
            for cause in err.chain().skip(1) {
                let text = cause.to_string();
                if !shown.contains(&text) {
                    eprintln!("  caused by: {text}");
                    shown = text;
                }
            }
            // A policy or model bug exits 2 whichever command surfaced it.
            let internal = err.chain().any(|c| {
                c.downcast_ref::<tessera_sim::SimError>().is_some()
                    || c.downcast_ref::<tessera_mechanisms::experiment::ExperimentError>()
                        .is_some_and(|e| e.is_internal())
            });
            ExitCode::from(if internal { 2 } else { 1 })
        }
    }
}
