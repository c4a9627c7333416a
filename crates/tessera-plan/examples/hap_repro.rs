//! Prints the HAP reproduction table: `cargo run --release -p tessera-plan --example hap_repro`.
fn main() {
    let models: Vec<String> = std::env::args().skip(1).collect();
    let models: Vec<&str> = if models.is_empty() {
        tessera_plan::repro::MODELS.to_vec()
    } else {
        models.iter().map(String::as_str).collect()
    };
    println!("model       k  dp_equal_s  dp_prop_s  synth_s  speedup  synthesis_s  states");
    for m in models {
        for k in tessera_plan::repro::KS {
            match tessera_plan::repro::run_case(m, k) {
                Ok(c) => println!(
                    "{:<10} {:>2}  {:>10.4}  {:>9.4}  {:>7.4}  {:>6.2}x  {:>11.3}  {}",
                    c.model,
                    c.k,
                    c.dp_equal_s,
                    c.dp_proportional_s,
                    c.synthesized_s,
                    c.speedup,
                    c.synthesis_s,
                    c.states_expanded
                ),
                Err(e) => println!("{m} {k}: error: {e}"),
            }
        }
    }
}
