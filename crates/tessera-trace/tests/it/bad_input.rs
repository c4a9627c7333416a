//! Bad rows in every reader: the error names file, line and field; `skip_invalid` counts
//! and skips them.

use tessera_model::GpuCatalog;
use tessera_trace::{read_trace, ReadOptions, TraceErrorKind, TraceFormat};

use crate::common::{parse, parse_skipping};

/// A format with a header line, a valid row and bad rows with the field each must blame.
struct Case {
    format: TraceFormat,
    header: &'static str,
    good: &'static str,
    bad: &'static [(&'static str, &'static str)],
}

const CASES: &[Case] = &[
    Case {
        format: TraceFormat::Tessera,
        header: "job_id,submit_s,gpus,duration_s,gpu_types,cpu",
        good: "a,0,1,10,V100-32GB,2",
        bad: &[
            ("b,0,1", "duration_s"),
            ("b,0,1,-5,,", "duration_s"),
            ("b,0,1,0,,", "duration_s"),
            ("b,0,1,NaN,,", "duration_s"),
            ("b,0,1,inf,,", "duration_s"),
            ("b,0,1,ten,,", "duration_s"),
            ("b,0,0,10,,", "gpus"),
            ("b,0,-1,10,,", "gpus"),
            ("b,0,1.5,10,,", "gpus"),
            ("b,0,2000000,10,,", "gpus"),
            ("b,0,1,10,V200,", "gpu_types"),
            ("b,x,1,10,,", "submit_s"),
            ("b,-1,1,10,,", "submit_s"),
            ("b,0,1,10,,lots", "cpu"),
        ],
    },
    Case {
        format: TraceFormat::Tiresias,
        header: "job_id,num_gpu,submit_time,iterations,model_name,duration,interval",
        good: "0,1,0,606,vgg19,164,30",
        bad: &[
            ("garbage", "num_gpu"),
            ("1,0,0,1,m,1,1", "num_gpu"),
            ("1,1,abc,1,m,3,1", "submit_time"),
            ("1,1,0,1,m,-3,1", "duration"),
            ("1,1,0,1,m,0,1", "duration"),
            ("1,1,0,0,m,3,1", "iterations"),
        ],
    },
    Case {
        format: TraceFormat::PolluxPhilly,
        header: "timestamp,duration,num_gpus,gpu_time,cluster",
        good: "2017-10-09 07:01:55,66.0,1,66.0,11cb48",
        bad: &[
            ("garbage", "timestamp"),
            ("2017-13-09 07:01:55,66.0,1,66.0,x", "timestamp"),
            ("2017-10-09 07:01:55,-66.0,1,66.0,x", "duration"),
            ("2017-10-09 07:01:55,NaN,1,66.0,x", "duration"),
            ("2017-10-09 07:01:55,66.0,0,0,x", "num_gpus"),
            ("2017-10-09 07:01:55,66.0", "num_gpus"),
        ],
    },
    Case {
        format: TraceFormat::Gavel,
        header: "",
        good: "LM (batch size 5)\tcd x && python main.py\t--steps\t1\t2407237\t148883.000000\t4",
        bad: &[
            ("garbage", "command"),
            ("LM (batch size 5)\tc\t--steps\t1\t0\t1.0\t4", "total_steps"),
            (
                "LM (batch size 5)\tc\t--steps\t1\t10\t-1.0\t4",
                "arrival_time_s",
            ),
            (
                "LM (batch size 5)\tc\t--steps\t1\t10\t1.0\t0",
                "scale_factor",
            ),
            (
                "LM (batch size 5)\tc\t--steps\t1\t10\t1.0\t1000001",
                "scale_factor",
            ),
            (
                "ResNet-51 (batch size 1)\tc\t--steps\t1\t10\t1.0\t1",
                "job_type",
            ),
        ],
    },
    Case {
        format: TraceFormat::Pollux,
        header: "name,time,application,num_replicas,batch_size",
        good: "cifar10-0,107,cifar10,6,2048",
        bad: &[
            ("a,1,gpt9,1,128", "application"),
            ("a,1,cifar10,0,128", "num_replicas"),
            ("a,-1,cifar10,1,128", "time"),
            ("a,1,cifar10,1,0", "batch_size"),
            ("a,1,cifar10,1,", "batch_size"),
        ],
    },
];

fn text_with(case: &Case, rows: &[&str]) -> String {
    let mut text = String::new();
    if !case.header.is_empty() {
        text.push_str(case.header);
        text.push('\n');
    }
    for r in rows {
        text.push_str(r);
        text.push('\n');
    }
    text
}

#[test]
fn each_bad_row_is_located() {
    for case in CASES {
        let offset = u64::from(!case.header.is_empty());
        for (row, field) in case.bad {
            let text = text_with(case, &[case.good, row]);
            let err = parse(&text, Some(case.format)).expect_err(row);
            let line = offset + 2;
            let shown = err.to_string();
            assert_eq!(err.line, Some(line), "{}: {row:?}: {shown}", case.format);
            assert_eq!(
                err.field.as_deref(),
                Some(*field),
                "{}: {row:?}: {shown}",
                case.format
            );
            assert!(
                shown.starts_with(&format!("t.csv:{line}: field {field}: ")),
                "{}: {row:?}: {shown}",
                case.format
            );
            assert!(!shown.contains('\n'));
        }
    }
}

#[test]
fn skip_invalid_counts_bad_rows() {
    for case in CASES {
        let offset = u64::from(!case.header.is_empty());
        let mut rows = vec![case.good];
        rows.extend(case.bad.iter().map(|(r, _)| *r));
        rows.push(case.good);
        let t = parse_skipping(&text_with(case, &rows), case.format).unwrap();
        assert_eq!(t.skipped, case.bad.len(), "{}", case.format);
        assert_eq!(t.workload.len(), 2, "{}", case.format);
        let last = offset + rows.len() as u64;
        assert_eq!(t.lines, [offset + 1, last], "{}", case.format);
    }
}

#[test]
fn missing_columns_are_named_at_the_header() {
    for (format, header, missing) in [
        (TraceFormat::Tessera, "job_id,submit_s,duration_s", "gpus"),
        (
            TraceFormat::Tiresias,
            "job_id,num_gpu,duration",
            "submit_time",
        ),
        (TraceFormat::PolluxPhilly, "timestamp,num_gpus", "duration"),
        (
            TraceFormat::Pollux,
            "name,time,num_replicas,batch_size",
            "application",
        ),
    ] {
        let err = parse(&format!("{header}\n"), Some(format)).unwrap_err();
        assert_eq!(
            (err.line, err.field.as_deref()),
            (Some(1), Some(missing)),
            "{err}"
        );
        assert!(matches!(err.kind, TraceErrorKind::MissingColumn(_)));
        assert!(err
            .to_string()
            .starts_with(&format!("t.csv:1: field {missing}: missing column")));
        // Even when skipping rows: the file as a whole is unusable.
        assert!(parse_skipping(&format!("{header}\n"), format).is_err());
    }
}

#[test]
fn empty_and_unrecognised_input() {
    let err = parse("", Some(TraceFormat::Tessera)).unwrap_err();
    assert!(matches!(err.kind, TraceErrorKind::Empty(_)), "{err}");
    assert!(err.to_string().starts_with("t.csv: "));
    let err = parse("hello,world\n1,2\n", None).unwrap_err();
    assert!(
        matches!(err.kind, TraceErrorKind::UnknownFormat(_)),
        "{err}"
    );
    assert!(
        err.to_string().starts_with("t.csv:1: cannot detect"),
        "{err}"
    );
    // A Gavel file with no rows is an empty workload, not an error.
    assert!(parse("", Some(TraceFormat::Gavel))
        .unwrap()
        .workload
        .is_empty());
}

#[test]
fn non_utf8_bytes_are_located() {
    let dir = std::env::temp_dir().join(format!("tessera-trace-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.csv");
    let bytes = b"job_id,submit_s,gpus,duration_s\na,0,1,10\nb\xff\xfe,0,1,10\nc,1,1,10\n";
    std::fs::write(&path, bytes).unwrap();
    let catalog = GpuCatalog::builtin();
    let err = read_trace(&path, None, &catalog, &ReadOptions::default()).unwrap_err();
    assert_eq!(
        (err.line, err.field.as_deref()),
        (Some(3), Some("job_id")),
        "{err}"
    );
    assert!(matches!(err.kind, TraceErrorKind::NotUtf8));
    assert!(
        err.to_string()
            .contains("bad.csv:3: field job_id: not valid UTF-8"),
        "{err}"
    );
    let t = read_trace(&path, None, &catalog, &ReadOptions { skip_invalid: true }).unwrap();
    assert_eq!(
        (t.workload.len(), t.skipped, t.lines.clone()),
        (2, 1, vec![2, 4])
    );

    let missing = read_trace(
        &dir.join("absent.csv"),
        None,
        &catalog,
        &ReadOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(missing.kind, TraceErrorKind::Io(_)));
    assert!(
        missing.to_string().contains("absent.csv: I/O error"),
        "{missing}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn quoted_newlines_keep_line_numbers_right() {
    let text = "job_id,submit_s,gpus,duration_s\n\"multi\nline\",0,1,10\nbad,0,0,10\n";
    let err = parse(text, Some(TraceFormat::Tessera)).unwrap_err();
    assert_eq!(err.line, Some(4), "{err}");
}

/// philly-json: malformed jobs name their field and the line where the job starts; well-formed
/// jobs that cannot be replayed are dropped (counted), not errors.
#[test]
fn philly_json_bad_jobs() {
    let good = r#"{"status": "Pass", "vc": "v", "jobid": "a", "submitted_time": "2017-10-07 01:00:00",
  "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 01:01:00",
                "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}"#;
    let bad: &[(&str, Option<&str>)] = &[
        (
            r#"{"status": "Pass", "submitted_time": "2017-10-07 01:00:00", "attempts": []}"#,
            Some("jobid"),
        ),
        (
            r#"{"status": "Pass", "jobid": "", "submitted_time": "2017-10-07 01:00:00"}"#,
            Some("jobid"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "attempts": []}"#,
            Some("submitted_time"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "None"}"#,
            Some("submitted_time"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-13-07 01:00:00"}"#,
            Some("submitted_time"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": 5}"#,
            Some("submitted_time"),
        ),
        (
            r#"{"status": 1, "jobid": "b", "submitted_time": "2017-10-07 01:00:00"}"#,
            Some("status"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00", "attempts": 3}"#,
            Some("attempts"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00", "attempts": [7]}"#,
            Some("attempts"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "yesterday", "end_time": "None"}]}"#,
            Some("start_time"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 01:01:00", "detail": {}}]}"#,
            Some("detail"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 01:01:00",
                          "detail": [{"ip": "m1", "gpus": 8}]}]}"#,
            Some("gpus"),
        ),
        ("[1, 2]", None),
        ("\"job\"", None),
    ];
    for (entry, field) in bad {
        // The bad job starts on line 5 (after `[`, the good job's three lines and a comma).
        let text = format!("[\n{good},\n{entry}\n]\n");
        let err = parse(&text, Some(TraceFormat::PhillyJson)).expect_err(entry);
        assert_eq!(err.field.as_deref(), *field, "{entry}: {err}");
        if field.is_some() {
            assert_eq!(err.line, Some(5), "{entry}: {err}");
        }
        let t = parse_skipping(&text, TraceFormat::PhillyJson)
            .unwrap_or_else(|e| panic!("{entry}: {e}"));
        assert_eq!(
            (t.workload.len(), t.skipped, t.dropped),
            (1, 1, 0),
            "{entry}"
        );
    }
    // Not JSON, or not a list: the whole read fails, even when skipping.
    for text in [
        "",
        "   ",
        "[",
        "{\"jobid\": \"a\"}",
        "[{\"jobid\": }]",
        "jobid,vc\n",
    ] {
        for skip in [false, true] {
            let r = if skip {
                parse_skipping(text, TraceFormat::PhillyJson)
            } else {
                parse(text, Some(TraceFormat::PhillyJson))
            };
            let err = r.expect_err(text);
            assert!(
                matches!(
                    err.kind,
                    TraceErrorKind::NotJson(_) | TraceErrorKind::Empty(_)
                ),
                "{text:?}: {err}"
            );
        }
    }
    // Dropped, not errors: unfinished statuses, still running, no attempts, zero length.
    let dropped = [
        r#"{"status": "Running", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 01:01:00",
                          "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}"#,
        r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": null,
                          "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}"#,
        r#"{"status": "Killed", "jobid": "b", "submitted_time": "2017-10-07 01:00:00"}"#,
        r#"{"status": "Failed", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 00:59:00",
                          "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}"#,
        r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 01:01:00",
                          "detail": []}]}"#,
    ];
    for entry in dropped {
        let text = format!("[{good}, {entry}]");
        let t = parse(&text, Some(TraceFormat::PhillyJson)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (t.workload.len(), t.skipped, t.dropped),
            (1, 0, 1),
            "{entry}"
        );
    }
    // Detection: a JSON list of jobs, whatever the file is called.
    assert_eq!(
        tessera_trace::detect_format(
            "cluster_job_log",
            "[\n  {\"status\": \"Pass\", \"jobid\": \"x\""
        ),
        Some(TraceFormat::PhillyJson)
    );
    assert_eq!(tessera_trace::detect_format("x.json", "{\"a\": 1}"), None);
}
