//! The Synergy reference's own workload from the CLI (issue 8): `trace generate --generator
//! synergy-reference` and the built-in traces.

use super::{stderr, stdout, tessera};

/// The golden file printed by the reference simulator itself (see its first line).
fn golden(name: &str) -> Vec<Vec<String>> {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tessera-mechanisms/tests/data")
        .join(name);
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn trace_generate_writes_the_reference_jobs() {
    let o = tessera(&[
        "trace",
        "generate",
        "--generator",
        "synergy-reference",
        "--trace",
        "multi",
        "--load",
        "4",
        "--jobs",
        "200",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let csv = stdout(&o);
    let mut lines = csv.lines().filter(|l| !l.starts_with('#'));
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (submit, gpus, model, iters) = (
        col("submit_s"),
        col("gpus"),
        col("model"),
        col("iterations"),
    );
    let want = golden("synergy_reference_multi_4.csv");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 200);
    for (r, w) in rows.iter().zip(&want) {
        // golden: id,arrival_s,gpus,model,iteration_time_s,iterations
        assert_eq!(
            r[submit].parse::<f64>().unwrap(),
            w[1].parse::<f64>().unwrap()
        );
        assert_eq!(r[gpus], w[2]);
        assert_eq!(r[model], w[3]);
        assert_eq!(r[iters], w[5]);
    }
}

#[test]
fn synergy_reference_generator_rejects_bad_flags() {
    let o = tessera(&[
        "trace",
        "generate",
        "--generator",
        "synergy-reference",
        "--trace",
        "both",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--trace must be single or multi"),
        "{}",
        stderr(&o)
    );
    let o = tessera(&[
        "trace",
        "generate",
        "--generator",
        "synergy-reference",
        "--gpus",
        "2",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("--gpus does not apply"),
        "{}",
        stderr(&o)
    );
    let o = tessera(&["trace", "generate", "--generator", "gavel"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("unknown generator \"gavel\"") && err.contains("synergy-reference"),
        "{err}"
    );
}

#[test]
fn builtin_reference_traces_are_listed_and_loadable() {
    let o = tessera(&["builtins"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("synergy-reference-single-9"));
    let o = tessera(&["trace", "inspect", "builtin:synergy-reference-multi-3"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("24000") || stdout(&o).contains("24,000"),
        "{}",
        stdout(&o)
    );
}
