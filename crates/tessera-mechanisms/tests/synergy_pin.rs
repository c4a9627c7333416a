//! Regression pin (issue 7): moving Synergy onto the mechanism registry must not change its
//! results. `tessera repro synergy` at the default seed gives these average JCTs (seconds)
//! for every entry, exactly as before the move.

use tessera_mechanisms::experiment::{experiments, ExperimentArgs, RunContext};

/// (part, load, policy, semantics, avg_jct_s) as printed by `tessera repro synergy --out DIR`
/// before the move (commit f8500bd).
const PINNED: &[(&str, f64, &str, &str, f64)] = &[
    ("a", 9.0, "fifo+proportional", "exact", 214631.56734500002),
    ("a", 9.0, "fifo+greedy", "exact", 53714.11618197701),
    ("a", 9.0, "fifo+tune", "exact", 53779.28360678202),
    ("a", 9.0, "fifo+opt", "exact", 53999.234900924006),
    ("a", 9.0, "srtf+proportional", "exact", 145625.145510001),
    ("a", 9.0, "srtf+tune", "exact", 54707.28875321501),
    ("b", 3.0, "las+proportional", "exact", 62671.408425002),
    ("b", 3.0, "las+tune", "exact", 55603.09858070203),
    ("b", 4.0, "las+proportional", "exact", 165021.27327004503),
    ("b", 4.0, "las+tune", "exact", 101085.19085351807),
    ("a", 9.0, "fifo+proportional", "synergy", 220642.916),
    ("a", 9.0, "fifo+greedy", "synergy", 65997.116),
    ("a", 9.0, "fifo+tune", "synergy", 56686.616),
    ("a", 9.0, "fifo+opt", "synergy", 66772.616),
    ("a", 9.0, "srtf+proportional", "synergy", 150848.216),
    ("a", 9.0, "srtf+tune", "synergy", 56133.716),
    ("b", 3.0, "las+proportional", "synergy", 62959.162),
    ("b", 3.0, "las+tune", "synergy", 55817.662),
    ("b", 4.0, "las+proportional", "synergy", 166402.271),
    ("b", 4.0, "las+tune", "synergy", 101692.571),
];

#[test]
fn repro_synergy_default_seed_is_unchanged() {
    let exp = experiments()
        .find(|e| e.name() == "synergy")
        .expect("synergy experiment registered");
    let args = ExperimentArgs::new(exp.params(), []).unwrap();
    let out = exp.run(&args, &RunContext::quiet(2)).unwrap();
    let entries = out.summary["entries"].as_array().unwrap();
    assert_eq!(entries.len(), PINNED.len());
    for &(part, load, policy, semantics, avg) in PINNED {
        let e = entries
            .iter()
            .find(|e| {
                e["part"] == part
                    && e["load"].as_f64() == Some(load)
                    && e["policy"] == policy
                    && e["semantics"] == semantics
            })
            .unwrap_or_else(|| panic!("no entry {part} {load} {policy} {semantics}"));
        let got = e["avg_jct_s"].as_f64().unwrap();
        assert!(
            (got - avg).abs() <= 1e-6 * avg,
            "{part} {policy} at {load} ({semantics}): avg JCT {got} s, pinned {avg} s"
        );
    }
}
