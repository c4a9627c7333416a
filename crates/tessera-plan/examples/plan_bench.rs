//! Synthesis speed: `cargo run --release -p tessera-plan --example plan_bench -- MODEL K`
//! times the synthesis (search + LP rounds) of a built-in MODEL on HAP's cluster with K GPUs
//! per machine (8K devices), and prints the states expanded. Defaults: the two targets of
//! DESIGN/issue 15 (BERT-Base on 16 devices, a 48-layer GPT on 64).
use std::time::Instant;

use tessera_plan::{builtin, synth};

fn one(model: &str, k: usize) {
    let devices = builtin::mixed_cluster(k, 2, 6);
    let graph = match builtin::by_name(model, devices.len()).and_then(|g| g.validate()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("{model}: {e}");
            return;
        }
    };
    let start = Instant::now();
    match synth::synthesize(&graph, &devices) {
        Ok(s) => println!(
            "{model} on {} devices ({} operators): synthesis {:.3} s, {} states expanded, {} round(s), {:.4} s/iteration",
            devices.len(),
            graph.ops.len(),
            start.elapsed().as_secs_f64(),
            s.expanded,
            s.history.len(),
            s.seconds
        ),
        Err(e) => eprintln!("{model}: {e}"),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() == 2 {
        let k: usize = args[1].parse().unwrap_or(1);
        one(&args[0], k);
    } else {
        one("bert-base", 2);
        one("gpt-48x1024", 8);
    }
}
