//! `tesserad --config FILE`: the daemon as a standalone binary (the `tessera serve` verb calls
//! the same library function). It installs no `tracing` subscriber, to keep the build light:
//! the daemon's state is in its store and API; `tessera serve` is where logging is set up.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let path = match args.as_slice() {
        [_, flag, path] if flag == "--config" => path.clone(),
        _ => {
            eprintln!("usage: tesserad --config FILE");
            return ExitCode::from(2);
        }
    };
    let config = match tessera_daemon::DaemonConfig::from_file(path.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for w in config.warnings() {
        eprintln!("warning: {path}: {w}");
    }
    match tessera_daemon::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
