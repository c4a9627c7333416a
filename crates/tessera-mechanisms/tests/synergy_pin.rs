//! Regression pin (issue 7): moving Synergy onto the mechanism registry must not change its
//! results. `tessera repro synergy` at the default seed gives these average JCTs (seconds)
//! for every entry, exactly as before the move.

use tessera_mechanisms::experiment::{experiments, ExperimentArgs, RunContext};

/// (part, load, policy, semantics, avg_jct_s) as printed by `tessera repro synergy --out DIR`
/// before the move (commit f8500bd), at seed 1. Changed on purpose since (issue 8): the
/// starvation guard is sticky (set once a job has waited 1,000 h, never cleared, as in the
/// reference) in both engines, which changes every run lasting over 1,000 h (SRTF
/// proportional, LAS at 4 jobs/h); under the reference semantics SRTF ranks a job TUNE
/// switched to fair share at speed-up 1 and TUNE demotes as the reference does (SRTF+TUNE).
/// Changed on purpose again (issue 11, part 2): attained service is exact (integer GPU·µs)
/// and progress is folded only when a job's rate changes, so ties between equal services
/// break differently; only LAS at 4 jobs/h on the exact engine moved (las+proportional
/// 116409.44 → 116571.28 s, +0.14%; las+tune 79504.13 → 79501.56 s, -0.003%).
/// Changed on purpose again (issue 8, LAS + TUNE at 4 jobs/h): under the reference semantics a
/// placement is the reference's first fit in server order, GPU by GPU (its `_top_synergy_gpus`),
/// not the whole vector on the fullest server; only LAS + TUNE moved (3 jobs/h 55817.662 →
/// 55813.162 s, -0.008%; 4 jobs/h 79832.771 → 78894.671 s, -1.18%).
const PINNED: &[(&str, f64, &str, &str, f64)] = &[
    ("a", 9.0, "fifo+proportional", "exact", 214631.56734500002),
    ("a", 9.0, "fifo+greedy", "exact", 53714.11618197701),
    ("a", 9.0, "fifo+tune", "exact", 53779.28360678202),
    ("a", 9.0, "fifo+opt", "exact", 53999.234900924006),
    ("a", 9.0, "srtf+proportional", "exact", 125069.95657800099),
    ("a", 9.0, "srtf+tune", "exact", 54707.28875321501),
    ("b", 3.0, "las+proportional", "exact", 62671.408425002),
    ("b", 3.0, "las+tune", "exact", 55603.09858070203),
    ("b", 4.0, "las+proportional", "exact", 116571.27995901501),
    ("b", 4.0, "las+tune", "exact", 79501.55796411003),
    ("a", 9.0, "fifo+proportional", "synergy", 220642.916),
    ("a", 9.0, "fifo+greedy", "synergy", 65997.116),
    ("a", 9.0, "fifo+tune", "synergy", 56686.616),
    ("a", 9.0, "fifo+opt", "synergy", 66772.616),
    ("a", 9.0, "srtf+proportional", "synergy", 129200.216),
    ("a", 9.0, "srtf+tune", "synergy", 55949.216),
    ("b", 3.0, "las+proportional", "synergy", 62959.162),
    ("b", 3.0, "las+tune", "synergy", 55813.162),
    ("b", 4.0, "las+proportional", "synergy", 126878.771),
    ("b", 4.0, "las+tune", "synergy", 78894.671),
];

#[test]
fn repro_synergy_default_seed_is_unchanged() {
    let exp = experiments()
        .find(|e| e.name() == "synergy")
        .expect("synergy experiment registered");
    // Seed 1 alone of the synthetic study on both engines (the synthetic study runs seeds
    // 1–5; each seed's runs are independent). Since issue 40 the repro's default is the
    // reference workload under its semantics, so the study is asked for by name.
    let args = ExperimentArgs::new(
        exp.params(),
        [
            ("seed", "1"),
            ("workload", "synthetic"),
            ("semantics", "both"),
        ],
    )
    .unwrap();
    let out = exp.run(&args, &RunContext::quiet(2)).unwrap();
    let entries = out.summary["entries"].as_array().unwrap();
    assert_eq!(entries.len(), PINNED.len());
    let mut moved = Vec::new();
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
        if (got - avg).abs() > 1e-6 * avg {
            moved.push(format!(
                "{part} {policy} at {load} ({semantics}): avg JCT {got:?} s, pinned {avg:?} s"
            ));
        }
    }
    assert!(moved.is_empty(), "moved:\n{}", moved.join("\n"));
}
