//! `tessera`: simulate GPU-cluster schedulers on traces, inspect traces, benchmark, reproduce
//! papers, and (with a daemon) schedule real jobs.
//!
//! This binary is glue: arguments (`args`), one module per command (`cmd`), and rendering.
//! Errors print as `error: …` followed by `caused by: …` lines; exit 0 on success, 1 for bad
//! input or a failed command, 2 for internal errors (a policy bug caught by the simulator),
//! 3 when `simulate` ran several policies and some failed (the others' results stand), and
//! 0 when stdout is closed early (`tessera … | head`).

mod args;
mod builtin;
mod cmd;
mod inputs;
mod output;
mod plot;
mod progress;
mod report;

use std::io::ErrorKind;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

// mimalloc, in 2 MiB pages where the kernel grants them (transparent huge pages): a
// simulation's per-job tables are touched once or twice per job, scattered, and span up to
// hundreds of MiB on a million-job run. With 4 KiB pages glibc's allocator paid a page fault
// per 4 KiB on first touch and a page walk on most later misses. Measured in BENCHMARKS.md
// (issue 11, part 20).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Lets mimalloc ask for large OS pages from here on (its default is not to). Its own
/// environment variable, read when the process starts, still decides when set.
fn allow_large_os_pages() {
    let set = |name| std::env::var_os(name).is_some();
    if set("MIMALLOC_ALLOW_LARGE_OS_PAGES") || set("MIMALLOC_LARGE_OS_PAGES") {
        return;
    }
    // SAFETY: sets one entry of mimalloc's option table, which it reads only when it next
    // asks the OS for memory; no memory is touched and nothing is held across the call.
    unsafe {
        libmimalloc_sys::mi_option_set_enabled(libmimalloc_sys::mi_option_large_os_pages, true);
    }
}

fn run() -> anyhow::Result<()> {
    let matches = args::with_registry(args::Cli::command()).get_matches();
    match matches.subcommand() {
        Some(("repro", sub)) => cmd::experiment::run(cmd::experiment::Kind::Repro, sub),
        Some(("bench", sub)) => cmd::experiment::run(cmd::experiment::Kind::Bench, sub),
        _ => cmd::run(args::Cli::from_arg_matches(&matches)?),
    }
}

/// A `print!` or `eprint!` anywhere (a library's progress line, a thread) panics when its
/// stream's reader has gone; that is a closed pipe, not a bug: end quietly with exit 0, as
/// for the commands' own writes. Every other panic keeps the default report.
fn quiet_on_closed_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if text.starts_with("failed printing to std") && text.contains("Broken pipe") {
            output::mark_closed();
            std::process::exit(0);
        }
        default(info);
    }));
}

/// An error's text for the terminal: whatever it quotes from the input, control characters
/// and other unprintable ones are escaped (one line per cause, so a newline is escaped too).
fn for_terminal(text: &str) -> String {
    // Line by line: a refusal lists one capability per line, and those breaks are the
    // message's own, not an input's.
    output::printable_lines(text)
}

fn main() -> ExitCode {
    allow_large_os_pages();
    quiet_on_closed_pipe();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            if output::closed()
                || err.chain().any(|c| {
                    c.downcast_ref::<std::io::Error>()
                        .is_some_and(|e| e.kind() == ErrorKind::BrokenPipe)
                })
            {
                return ExitCode::SUCCESS;
            }
            // One line per distinct fact: a cause already spelled out by the message above it
            // is not repeated.
            let mut shown = err.to_string();
            eprintln!("error: {}", for_terminal(&shown));
            for cause in err.chain().skip(1) {
                let text = cause.to_string();
                if !shown.contains(&text) {
                    eprintln!("  caused by: {}", for_terminal(&text));
                    shown = text;
                }
            }
            // Some policies failed, the others' results were printed and written.
            if err
                .downcast_ref::<cmd::simulate::PoliciesFailed>()
                .is_some()
            {
                return ExitCode::from(cmd::simulate::PoliciesFailed::EXIT_CODE);
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
