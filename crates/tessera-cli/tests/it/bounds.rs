//! Issue 36, "every input bounded": each reproducer of the fuzz runs here with a wall-clock
//! limit and an address-space limit, so a regression fails fast instead of hanging or taking
//! the machine's memory.

use std::io::Read;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{data, stderr, stdout};

/// Address space a bounded run may reserve (the debug binary and its allocator's arenas fit
/// well within it; the old reproducers asked for 21-80 GB).
const ADDRESS_SPACE_KIB: u64 = 4 << 20;

/// Runs `tessera ARGS` under `ulimit -v` and kills it (by its own pid) after `secs`.
fn bounded(args: &[&str], secs: u64) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tessera");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let readers = (
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = out.read_to_end(&mut v);
            v
        }),
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = err.read_to_end(&mut v);
            v
        }),
    );
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tessera {args:?} ran longer than {secs} s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: readers.0.join().unwrap(),
        stderr: readers.1.join().unwrap(),
    }
}

/// Exit 1 with `needle` in the message, no panic, no raw control character.
fn refused(args: &[&str], needle: &str) {
    let o = bounded(args, 20);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: want {needle:?} in {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(
        !has_control(&err),
        "{args:?}: raw control characters in {err:?}"
    );
}

fn has_control(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && c != '\n')
}

#[test]
fn every_generator_refuses_job_counts_past_its_limit_before_allocating() {
    for generator in ["crius", "synergy-reference", "miso-synthetic"] {
        for jobs in ["18446744073709551615", "100000001", "10000001"] {
            refused(
                &[
                    "trace",
                    "generate",
                    "--generator",
                    generator,
                    "--jobs",
                    jobs,
                ],
                "limit of 10000000 jobs",
            );
        }
        refused(
            &[
                "trace",
                "generate",
                "--generator",
                generator,
                "--jobs",
                "100",
                "--load",
                "1e-300",
            ],
            "past the limit",
        );
        for load in ["nan", "inf"] {
            refused(
                &[
                    "trace",
                    "generate",
                    "--generator",
                    generator,
                    "--load",
                    load,
                ],
                "--load",
            );
        }
    }
}

/// Spawns `tessera ARGS` with its stdout's reading end closed at once, as `| head -0` would.
fn with_stdout_closed(args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tessera");
    drop(child.stdout.take());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("tessera {args:?} did not end after its stdout closed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_closed_stdout_ends_every_command_quietly() {
    let trace = data("small.csv");
    let cluster = data("four_gpus.yaml");
    let cases: Vec<Vec<&str>> = vec![
        vec!["plan", "--model", "vgg19", "--cluster", "builtin:hap-1"],
        vec![
            "plan",
            "--model",
            "vgg19",
            "--cluster",
            "builtin:hap-1",
            "--json",
        ],
        vec!["trace", "generate", "--jobs", "100000"],
        vec![
            "trace",
            "generate",
            "--generator",
            "crius",
            "--jobs",
            "2000",
        ],
        vec!["trace", "inspect", &trace],
        vec!["builtins"],
        vec!["simulate", "--cluster", &cluster, "--trace", &trace],
    ];
    for args in cases {
        let o = with_stdout_closed(&args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("error"),
            "{args:?}: {err}"
        );
    }
}

fn workload_with_service(arrivals: &str, end_s: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: tessera/v1\nkind: Workload\nspec:\n  services:\n    - name: s\n      \
             endSeconds: {end_s}\n      sloMilliseconds: 100\n      resources: {{cpu: \"1\", \
             memory: 2Gi, gpuMemory: 4Gi}}\n      arrivals: {arrivals}\n"
        ),
    )
    .unwrap();
    let p = path.display().to_string();
    (dir, p)
}

#[test]
fn service_rates_burstiness_and_request_totals_are_bounded_before_the_run() {
    let cluster = data("four_gpus.yaml");
    for (arrivals, end, needle) in [
        (
            "{gamma: {rate: 20, cv: 1000000}}",
            "60",
            "more than the limit of 100",
        ),
        ("{poisson: {rate: 1e9}}", "60", "limit of 1e6"),
        ("{rateSeries: [1e12]}", "1", "limit of 1e6"),
        ("{poisson: {rate: .nan}}", "60", "not a non-negative rate"),
        (
            "{poisson: {rate: 1000}}",
            "100000000",
            "limit of 1e9 (tessera_model::MAX_EXPECTED_REQUESTS)",
        ),
    ] {
        let (_dir, w) = workload_with_service(arrivals, end);
        refused(&["simulate", "--cluster", &cluster, "--trace", &w], needle);
    }
    // Bursty but within bounds: runs to the end.
    let (_dir, w) = workload_with_service("{gamma: {rate: 20, cv: 100}}", "60");
    let o = bounded(
        &[
            "simulate",
            "--cluster",
            &cluster,
            "--trace",
            &w,
            "--policy",
            "serve-exclusive",
        ],
        20,
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn bench_and_repro_parameters_are_bounded() {
    for (args, needle) in [
        (vec!["bench", "serving", "--rate", "nan"], "rate"),
        (vec!["bench", "serving", "--rate", "1e9"], "limit of 1e6"),
        (vec!["bench", "serving", "--rate", "-1"], "rate"),
        (vec!["bench", "serving", "--secs", "0"], "secs"),
        (vec!["bench", "serving", "--services", "0"], "services"),
        (
            vec!["bench", "serving", "--instances", "18446744073709551615"],
            "instances",
        ),
        (
            vec!["bench", "serving", "--secs", "1000000000"],
            "MAX_EXPECTED_REQUESTS",
        ),
        (vec!["repro", "synergy", "--servers", "0"], "servers"),
        (
            vec!["repro", "synergy", "--servers", "4294967295"],
            "servers",
        ),
        (
            vec!["repro", "synergy", "--jobs", "18446744073709551615"],
            "jobs",
        ),
        (
            vec!["repro", "synergy", "--profile-error", "nan"],
            "profile-error",
        ),
        (
            vec!["repro", "synergy", "--profile-cost", "1e300"],
            "profile-cost",
        ),
        (
            vec!["repro", "synergy", "--parts", "c", "--loads", "1e-300"],
            "loads",
        ),
        (
            vec!["repro", "crius", "--jobs", "18446744073709551615"],
            "MAX_GENERATOR_JOBS",
        ),
        (vec!["repro", "crius", "--load", "1e-300"], "past the limit"),
        (vec!["repro", "miso", "--mean", "inf"], "mean"),
        (vec!["repro", "miso", "--early-mean", "1e308"], "early-mean"),
        (
            vec!["repro", "dilu", "--parts", "b", "--load-scale", "1e19"],
            "limit of 1e6",
        ),
    ] {
        refused(&args, needle);
    }
    // Redrawn arrivals overflowed the engine's clock ("attempt to multiply with overflow");
    // with rounds the run ticked until they saturated at the end of the clock.
    let (cluster, trace) = (data("four_gpus.yaml"), data("small.csv"));
    refused(
        &[
            "simulate",
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--arrivals",
            "poisson:1e-300",
            "--round",
            "300",
        ],
        "past the limit of 1000000000 s",
    );
    refused(
        &[
            "trace",
            "convert",
            &trace,
            "--arrivals",
            "poisson:1e-300",
            "-o",
            "-",
        ],
        "past the limit of 1000000000 s",
    );
}

/// A graph of `branches` parallel layers over one input, summed: every branch's output is
/// live at once, so the search's state space grows exponentially with the width.
fn wide_graph(branches: usize) -> String {
    let mut t = String::from(
        "name: wide\nloss: loss\ntensors:\n  - {name: x, shape: [256, 512], role: input}\n  \
         - {name: labels, shape: [256], dtype: i64, role: input}\n  - {name: loss, shape: []}\n",
    );
    let mut ops = String::from("ops:\n");
    for b in 0..branches {
        t += &format!("  - {{name: w{b}, shape: [512, 512], role: parameter}}\n");
        t += &format!("  - {{name: h{b}, shape: [256, 512]}}\n");
        ops += &format!(
            "  - {{name: fc{b}, kind: einsum, inputs: [x, w{b}], output: h{b}, dims: \"nd,dh->nh\"}}\n"
        );
    }
    let mut acc = "h0".to_string();
    for b in 1..branches {
        t += &format!("  - {{name: s{b}, shape: [256, 512]}}\n");
        ops += &format!(
            "  - {{name: add{b}, kind: add, inputs: [{acc}, h{b}], output: s{b}, dims: \"nh,nh->nh\"}}\n"
        );
        acc = format!("s{b}");
    }
    ops += &format!(
        "  - {{name: loss, kind: loss, inputs: [{acc}, labels], output: loss, dims: \"nc,n->\", fixed: c}}\n"
    );
    t + &ops
}

#[test]
fn plan_search_on_a_wide_graph_stays_within_its_state_budget() {
    let dir = tempfile::tempdir().unwrap();
    let graph = dir.path().join("wide.yaml");
    std::fs::write(&graph, wide_graph(20)).unwrap();
    let cluster = data("plan_cluster.yaml");
    let g = graph.to_str().unwrap();
    let o = bounded(
        &[
            "plan",
            "--model",
            g,
            "--cluster",
            &cluster,
            "--max-search-states",
            "20000",
        ],
        20,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("search stopped at its state budget"),
        "{}",
        stdout(&o)
    );
    // Not even data parallelism fits in two states: a clear error naming the flag.
    refused(
        &[
            "plan",
            "--model",
            g,
            "--cluster",
            &cluster,
            "--max-search-states",
            "2",
        ],
        "--max-search-states",
    );
}

#[test]
fn control_characters_from_inputs_never_reach_the_terminal() {
    // Raw in CSV; as YAML escapes (`\e`, `\a`) in YAML, whose parser refuses them raw.
    const RAW: &str = "\u{1b}[2J\u{7}";
    const YAML: &str = r"\e[2J\a";
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let cluster = data("four_gpus.yaml");
    let trace = data("small.csv");
    let header = path(
        "header.csv",
        format!("job_id,submit_s,gpus,duration_s,x{RAW},x{RAW}\nj,0,1,10,1,1\n"),
    );
    let value = path(
        "value.csv",
        format!("job_id,submit_s,gpus,duration_s,gpu_types\nj,0,1,10,V{RAW}\n"),
    );
    let failures = path(
        "failures.yaml",
        format!("kind: Failures\nevents:\n  - {{ time: 10, node: \"node{YAML}\", duration: 5 }}\n"),
    );
    let gpu = format!(
        "{{name: \"X{YAML}\", memoryGiB: 16, fp16Tflops: 1, fp32Tflops: 1, memoryBandwidthGBs: 1, sms: 1}}"
    );
    let catalog = path(
        "catalog.yaml",
        format!("apiVersion: tessera/v1\nkind: GpuCatalog\ngpus:\n  - {gpu}\n  - {gpu}\n"),
    );
    let graph = path(
        "graph.yaml",
        format!(
            "name: \"g{YAML}\"\nloss: loss\ntensors:\n  - {{name: x, shape: [4, 4], role: input}}\n  \
             - {{name: loss, shape: []}}\nops:\n  - {{name: \"l{YAML}\", kind: loss, inputs: [x], \
             output: loss, dims: \"nc->\"}}\n"
        ),
    );
    let bad_graph = path(
        "bad_graph.yaml",
        format!(
            "name: g\nloss: loss\ntensors:\n  - {{name: x, shape: [4, 4], role: input}}\n  \
             - {{name: loss, shape: []}}\nops:\n  - {{name: l, kind: loss, inputs: [\"y{YAML}\"], \
             output: loss, dims: \"nc->\"}}\n"
        ),
    );
    let sweep = path(
        "sweep.yaml",
        format!(
            "apiVersion: tessera/v1\nkind: Sweep\nmetadata: {{name: \"s{YAML}\"}}\nspec:\n  \
             axes:\n    seed: [1, 2]\n"
        ),
    );
    let sweep_bad = path(
        "sweep_bad.yaml",
        format!(
            "apiVersion: tessera/v1\nkind: Sweep\nspec:\n  fixed: {{cluster: \"c{YAML}\"}}\n  \
             axes:\n    policy: [fifo]\n"
        ),
    );
    let policy = format!("f{RAW}");
    let cases: Vec<Vec<&str>> = vec![
        vec!["simulate", "--cluster", &cluster, "--trace", &header],
        vec!["simulate", "--cluster", &cluster, "--trace", &value],
        vec!["trace", "inspect", &header, "--skip-invalid"],
        vec![
            "simulate",
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--failures",
            &failures,
        ],
        vec![
            "simulate",
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--gpu-catalog",
            &catalog,
        ],
        vec!["plan", "--model", &graph, "--cluster", "builtin:hap-1"],
        vec!["plan", "--model", &bad_graph, "--cluster", "builtin:hap-1"],
        vec!["sweep", "plan", &sweep],
        vec!["sweep", "plan", &sweep_bad],
        vec![
            "simulate",
            "--cluster",
            &cluster,
            "--trace",
            &trace,
            "--policy",
            &policy,
        ],
    ];
    for args in cases {
        let o = bounded(&args, 20);
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(
            !has_control(&out) && !has_control(&err),
            "{args:?}: {out:?} {err:?}"
        );
        assert!(
            out.contains("\\u{1b}") || err.contains("\\u{1b}"),
            "{args:?}: {out:?} {err:?}"
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}
