//! Prints the HAP reproduction table:
//! `cargo run --release -p tessera-plan --example hap_repro [hap|hap-bytes|ring] [MODEL...]`.
use tessera_plan::repro::{run_case_on, Calibration, KS, MODELS};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let calibration = match args.first().and_then(|a| Calibration::named(a)) {
        Some(c) => {
            args.remove(0);
            c
        }
        None => Calibration::Hap,
    };
    let models: Vec<&str> = if args.is_empty() {
        MODELS.to_vec()
    } else {
        args.iter().map(String::as_str).collect()
    };
    let opt = |x: Option<f64>| x.map_or("OOM".to_string(), |v| format!("{v:.4}"));
    println!("calibration {}", calibration.label());
    println!(
        "model       k  dp_equal_s  dp_prop_s  synth_s  comm_s  GiB  speedup  synthesis_s  states"
    );
    for m in models {
        for k in KS {
            match run_case_on(m, k, &calibration) {
                Ok(c) => println!(
                    "{:<10} {:>2}  {:>10}  {:>9}  {:>7.4}  {:>6.4}  {:>4.1}  {:>6}  {:>11.3}  {}",
                    c.model,
                    c.k,
                    opt(c.dp_equal_s),
                    opt(c.dp_proportional_s),
                    c.synthesized_s,
                    c.synthesized_comm_s,
                    c.synthesized_gib,
                    c.speedup.map_or("-".to_string(), |s| format!("{s:.2}x")),
                    c.synthesis_s,
                    c.states_expanded
                ),
                Err(e) => println!("{m} {k}: error: {e}"),
            }
        }
    }
}
