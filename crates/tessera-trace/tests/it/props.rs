//! Properties: no reader panics on any input; canonical write → read is the identity.

use proptest::prelude::*;
use tessera_model::{
    Bytes, GpuModelId, GpuShareRequest, JobId, MilliCpu, SimDuration, SimTime, TrainingJob,
    Workload,
};
use tessera_trace::{parse_trace, ReadOptions, TraceFormat};

use crate::common::{canonical, catalog, parse};

/// Text that looks enough like a trace to reach the field parsers.
fn tracey_text() -> impl Strategy<Value = String> {
    let headers = prop::sample::select(vec![
        "job_id,submit_s,gpus,duration_s,iterations,model,batch_size,gpu_types,tenant,priority,cpu,memory\n",
        "timestamp,duration,num_gpus,gpu_time,cluster\n",
        "name,time,application,num_replicas,batch_size\n",
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n",
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n",
        "",
    ]);
    let body = "([-+0-9.eE,\t\"|:TZ a-zA-Z()\n]|NaN|inf|cifar10|V100|2017-10-09 07:01:55|LM \\(batch size 5\\)){0,60}";
    (headers, body).prop_map(|(h, b)| format!("{h}{b}"))
}

/// JSON that looks enough like the raw Philly log to reach the per-job checks: jobs built
/// from arbitrary picks of well- and ill-formed values, some of them truncated.
fn philly_json_text() -> impl Strategy<Value = String> {
    let value = prop::sample::select(vec![
        "\"2017-10-07 01:12:09\"",
        "\"2017-10-07 01:13:23\"",
        "\"None\"",
        "null",
        "\"\"",
        "7",
        "-1e400",
        "[]",
        "{}",
        "\"2017-02-30 00:00:00\"",
        "\"Pass\"",
        "\"Killed\"",
    ]);
    let attempt = (value.clone(), value.clone(), 0usize..4, any::<bool>()).prop_map(
        |(s, e, n, list)| {
            let gpus: Vec<String> = (0..n).map(|i| format!("\"gpu{i}\"")).collect();
            let gpus = if list { format!("[{}]", gpus.join(",")) } else { n.to_string() };
            format!(r#"{{"start_time": {s}, "end_time": {e}, "detail": [{{"ip": "m1", "gpus": {gpus}}}]}}"#)
        },
    );
    let job = (
        value.clone(),
        value.clone(),
        prop::collection::vec(attempt, 0..3),
    )
        .prop_map(|(status, submitted, attempts)| {
            format!(
                r#"{{"status": {status}, "vc": "v", "jobid": "j", "submitted_time": {submitted}, "attempts": [{}]}}"#,
                attempts.join(",")
            )
        });
    (prop::collection::vec(job, 0..4), 0usize..400).prop_map(|(jobs, cut)| {
        let text = format!("[{}]", jobs.join(",\n"));
        let mut end = cut
            .min(text.len())
            .max(if cut % 2 == 0 { text.len() } else { 0 });
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text[..end].to_string()
    })
}

fn every_reader(text: &str) {
    let c = catalog();
    for skip_invalid in [false, true] {
        let opts = ReadOptions { skip_invalid };
        for format in TraceFormat::ALL.into_iter().map(Some).chain([None]) {
            if let Ok(t) = parse_trace(text, "p.trace", format, &c, &opts) {
                assert_eq!(t.lines.len(), t.workload.len());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "(?s).{0,200}") {
        every_reader(&text);
    }

    #[test]
    fn trace_like_text_never_panics(text in tracey_text()) {
        every_reader(&text);
    }

    #[test]
    fn philly_json_like_text_never_panics(text in philly_json_text()) {
        every_reader(&text);
    }

    /// The Alibaba GPU 2023 pod fixture with characters replaced, inserted or cut at
    /// arbitrary places: every reader returns a trace or an error.
    #[test]
    fn mutated_alibaba_pod_list_never_panics(
        edits in prop::collection::vec((any::<prop::sample::Index>(), "[-0-9.,|a-zA-Z\n]{0,3}", 0usize..4), 1..6)
    ) {
        let mut text = std::fs::read_to_string(crate::common::data_path("alibaba_gpu_2023_pods_small.csv")).unwrap();
        for (at, insert, cut) in edits {
            let mut start = at.index(text.len() + 1);
            while !text.is_char_boundary(start) {
                start -= 1;
            }
            let mut end = (start + cut).min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.replace_range(start..end, &insert);
        }
        every_reader(&text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        every_reader(&String::from_utf8_lossy(&bytes));
    }

    /// Issue 10: times near the top of the microsecond range were accepted and saturated.
    /// Any submit time or duration past the input limit is refused, naming its field; any
    /// within it is read exactly.
    #[test]
    fn times_past_the_limit_are_refused_with_their_field(
        us in prop_oneof![0u64..2_000_000_000_000_000, any::<u64>()],
        as_duration in any::<bool>(),
        exponent in any::<bool>(),
    ) {
        let limit = tessera_model::MAX_INPUT_SECS * 1_000_000;
        let secs = if exponent {
            format!("{:e}", us as f64 / 1e6)
        } else {
            format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
        };
        let (field, row) = if as_duration {
            ("duration_s", format!("a,0,1,{secs}"))
        } else {
            ("submit_s", format!("a,{secs},1,10"))
        };
        let text = format!("job_id,submit_s,gpus,duration_s\n{row}\n");
        let parsed = parse(&text, None);
        let value_us = if exponent { (us as f64 / 1e6 * 1e6).round() } else { us as f64 };
        if value_us > limit as f64 {
            let err = parsed.expect_err("past the limit");
            prop_assert_eq!(err.field.as_deref(), Some(field), "{}", err);
        } else if value_us >= 1.0 || !as_duration {
            let t = parsed.map_err(|e| TestCaseError::fail(e.to_string()))?;
            let job = &t.workload.jobs()[0];
            let got = if as_duration { job.duration.as_micros() } else { job.submit.as_micros() };
            if !exponent {
                prop_assert_eq!(got, us);
            }
            prop_assert!(got <= limit);
        }
    }

    #[test]
    fn canonical_round_trip(jobs in prop::collection::vec(job(), 0..12)) {
        let w = Workload::new(jobs);
        let text = canonical(&w);
        let back = parse(&text, Some(TraceFormat::Tessera)).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back.workload, &w, "{}", text);
        // Detection finds the canonical format too.
        prop_assert_eq!(parse(&text, None).map(|t| t.format).ok(), Some(TraceFormat::Tessera));
    }
}

/// Text fields as the reader keeps them: CSV-special characters inside, no blanks around.
fn text_field() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_ ,\"|\n#-]{0,10}".prop_map(|s| s.trim().to_string())
}

fn job() -> impl Strategy<Value = TrainingJob> {
    let models = catalog().models().len() as u16;
    (
        (
            text_field(),
            0u64..1_000_000_000_000_000,
            1u32..=1_000_000,
            1u64..10_000_000_000_000,
        ),
        (
            1u64..=u64::MAX,
            text_field(),
            prop::option::of(1u32..=u32::MAX),
        ),
        (
            prop::collection::vec(0..models, 0..4),
            text_field(),
            any::<i32>(),
        ),
        (
            prop::option::of(0u64..1_000_000_000_000),
            prop::option::of(0u64..1u64 << 60),
            prop::option::of(1u16..=999),
        ),
    )
        .prop_map(
            |(
                (name, submit, gpus, duration),
                (iterations, model, batch_size),
                (types, tenant, priority),
                (cpu, memory, share),
            )| {
                let mut gpu_types: Vec<GpuModelId> = Vec::new();
                for t in types {
                    if !gpu_types.contains(&GpuModelId(t)) {
                        gpu_types.push(GpuModelId(t));
                    }
                }
                TrainingJob {
                    id: JobId(0),
                    name: name.into(),
                    submit: SimTime::from_micros(submit),
                    tenant,
                    priority,
                    model,
                    batch_size,
                    gpus,
                    gpu_types,
                    iterations,
                    duration: SimDuration::from_micros(duration),
                    cpu: cpu.map(MilliCpu),
                    memory: memory.map(Bytes),
                    gpu_share: share
                        .filter(|_| gpus == 1)
                        .map(|sm_permille| GpuShareRequest {
                            sm_permille,
                            memory: None,
                        }),
                    mig: None,
                }
            },
        )
}
