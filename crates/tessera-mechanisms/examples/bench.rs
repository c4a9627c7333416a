//! Runs one registered benchmark exactly as `tessera bench NAME` does, from a release build of
//! this crate alone (no CLI, daemon or plotting to compile):
//!
//! ```sh
//! cargo run --release -p tessera-mechanisms --example bench -- miso --jobs 10000
//! ```

use tessera_mechanisms::experiment::{benches, ExperimentArgs, RunContext};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(name) = args.first() else {
        eprintln!("usage: bench NAME [--param value ...]");
        std::process::exit(2);
    };
    let Some(bench) = benches().find(|b| b.name() == name) else {
        let known: Vec<&str> = benches().map(|b| b.name()).collect();
        eprintln!("no benchmark {name:?} (known: {})", known.join(", "));
        std::process::exit(2);
    };
    let pairs: Vec<(&str, &str)> = args[1..]
        .chunks(2)
        .filter_map(|c| match c {
            [k, v] => Some((k.trim_start_matches('-'), v.as_str())),
            _ => None,
        })
        .collect();
    let result = ExperimentArgs::new(bench.params(), pairs)
        .and_then(|a| bench.run(&a, &RunContext::quiet(1)));
    match result {
        Ok(out) => print!("{}", out.text),
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
