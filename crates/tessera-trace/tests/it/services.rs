//! Workload specs with services: a golden fixture, bad input with clear errors, and
//! properties (any generated valid spec parses back to what was written; no input panics).

use proptest::prelude::*;
use tessera_model::{ArrivalProcess, GpuDemand, SimDuration, SimTime};
use tessera_trace::parse_workload_spec;

use crate::common::{catalog, data_path};

#[test]
fn services_fixture_matches_golden() {
    let text = std::fs::read_to_string(data_path("services_small.yaml")).unwrap();
    let w = parse_workload_spec(&text, &catalog()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(w.jobs().len(), 1);
    let s = w.services();
    let names: Vec<&str> = s.iter().map(|s| s.name.as_str()).collect();
    // Sorted by start: the two starting at 0 keep file order, bert starts at 10 s.
    assert_eq!(names, ["llama", "replay", "bert"]);
    assert_eq!(s[2].slo, SimDuration::from_micros(50_000));
    assert_eq!(
        s[2].instance.gpu,
        GpuDemand::Quota {
            sm_request: 300,
            sm_limit: 600
        }
    );
    assert_eq!(s[2].instance.cpu.0, 500);
    assert_eq!(s[0].instance.gpu, GpuDemand::Whole);
    assert_eq!(
        s[0].end,
        SimTime::from_secs(3),
        "a series ends with its data"
    );
    assert_eq!(s[1].end, SimTime::from_micros(1_250_001));
    let actual = serde_json::to_string_pretty(s).unwrap() + "\n";
    let path = data_path("expected").join("services_small.json");
    if std::env::var("TESSERA_BLESS").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with TESSERA_BLESS=1)", path.display()));
    assert_eq!(
        actual, expected,
        "re-bless with TESSERA_BLESS=1 if intended"
    );
}

fn one_service(arrivals: &str, extra: &str) -> String {
    format!(
        "kind: Workload\nspec:\n  services:\n    - name: s\n      endSeconds: 10\n      \
         sloMilliseconds: 50\n{extra}      resources: {{cpu: '1', memory: 1Gi, gpuMemory: 1Gi}}\n      \
         arrivals: {arrivals}\n"
    )
}

fn err(text: &str) -> String {
    parse_workload_spec(text, &catalog())
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_input_gives_clear_errors() {
    let e = err(&one_service("{rateSeries: [1, -2]}", ""));
    assert!(
        e.contains("spec.services[0].arrivals.rateSeries[1]") && e.contains("-2"),
        "{e}"
    );
    assert!(e.starts_with("line 8:"), "located: {e}");
    let e = err(&one_service("{rateSeries: [1, lots]}", ""));
    assert!(e.contains("line 8"), "non-numeric rate: {e}");
    let e = err(&one_service("{poisson: {rate: -1}}", ""));
    assert!(e.contains("poisson.rate"), "{e}");
    let e = err(&one_service("{gamma: {rate: 1, cv: 0}}", ""));
    assert!(e.contains("gamma.cv"), "{e}");
    let e = err(&one_service("{timestamps: [2, 1]}", ""));
    assert!(e.contains("timestamps[1]"), "{e}");
    let e = err(&one_service("{timestamps: [-1]}", ""));
    assert!(e.contains("timestamps[0]"), "{e}");
    let e = err(&one_service("{poisson: {rate: 1}}", "      maxBatch: 0\n"));
    assert!(e.contains("maxBatch"), "{e}");
    let e = err(&one_service(
        "{poisson: {rate: 1}}",
        "      gpuTypes: [Z80]\n",
    ));
    assert!(e.contains("gpuTypes[0]"), "{e}");
    let e = err(&one_service(
        "{poisson: {rate: 1}}",
        "      startSeconds: 20\n",
    ));
    assert!(e.contains("endSeconds"), "{e}");
    let e = err(&one_service("{poisson: {rate: 1}}", "      colour: blue\n"));
    assert!(e.contains("colour"), "unknown field: {e}");
    let e = err(&one_service("{poisson: {rate: 1}}", "").replace("1Gi}", "1Gb}"));
    assert!(e.contains("gpuMemory"), "{e}");
    let e = err(&one_service("{poisson: {rate: 1}}", "")
        .replace("gpuMemory: 1Gi", "gpuMemory: 1Gi, smRequest: 1.5"));
    assert!(e.contains("smRequest"), "{e}");
    let e = err(&one_service("{poisson: {rate: 1}}", "").replace(
        "gpuMemory: 1Gi",
        "gpuMemory: 1Gi, smRequest: 0.5, smLimit: 0.2",
    ));
    assert!(e.contains("smRequest") && e.contains("limit"), "{e}");
    let e = err(&one_service("{poisson: {rate: 1}}", "").replace("endSeconds: 10\n      ", ""));
    assert!(e.contains("endSeconds"), "poisson without an end: {e}");
    let e = err("kind: Cluster\nspec: {}\n");
    assert!(e.contains("Workload"), "{e}");
}

#[test]
fn json_is_read_too() {
    let json = r#"{"kind": "Workload", "spec": {"services": [{"name": "s", "endSeconds": 5,
        "sloMilliseconds": 20, "resources": {"cpu": "1", "memory": "1Gi", "gpuMemory": "2Gi"},
        "arrivals": {"poisson": {"rate": 2.5}}}]}}"#;
    let w = parse_workload_spec(json, &catalog()).unwrap();
    assert_eq!(
        w.services()[0].arrivals,
        ArrivalProcess::Poisson { rate: 2.5 }
    );
}

proptest! {
    #[test]
    fn generated_specs_round_trip(
        rates in prop::collection::vec(0.0f64..1e4, 1..20),
        start in 0u32..100_000,
        slo_ms in 1u32..10_000,
        batch in 1u32..64,
        req in 1u32..=1000,
        extra in 0u32..=1000,
    ) {
        let lim = (req + extra).min(1000);
        let series = rates.iter().map(|r| format!("{r}")).collect::<Vec<_>>().join(", ");
        let text = format!(
            "kind: Workload\nspec:\n  services:\n    - name: s\n      startSeconds: {start}\n      \
             sloMilliseconds: {slo_ms}\n      maxBatch: {batch}\n      resources: {{cpu: 250m, \
             memory: 1Gi, gpuMemory: 512Mi, smRequest: {}, smLimit: {}}}\n      arrivals: \
             {{rateSeries: [{series}]}}\n",
            req as f64 / 1000.0, lim as f64 / 1000.0
        );
        let w = parse_workload_spec(&text, &catalog()).unwrap();
        let s = &w.services()[0];
        prop_assert_eq!(s.start, SimTime::from_secs(start as u64));
        prop_assert_eq!(s.end, SimTime::from_secs(start as u64 + rates.len() as u64));
        prop_assert_eq!(s.slo, SimDuration::from_micros(slo_ms as u64 * 1000));
        prop_assert_eq!(s.max_batch, batch);
        prop_assert_eq!(s.instance.gpu, GpuDemand::Quota { sm_request: req as u16, sm_limit: lim as u16 });
        prop_assert_eq!(&s.arrivals, &ArrivalProcess::RateSeries { rates: rates.clone() });
    }

    #[test]
    fn never_panics_on_mutated_specs(cut in 0usize..400, junk in "[ -~\n]{0,12}") {
        let text = std::fs::read_to_string(data_path("services_small.yaml")).unwrap();
        let cut = cut.min(text.len());
        let cut = (0..=cut).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
        let mutated = format!("{}{junk}{}", &text[..cut], &text[cut..]);
        let _ = parse_workload_spec(&mutated, &catalog());
    }
}
