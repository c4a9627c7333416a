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
            // Issue 10: times the engine's clock cannot add up were saturated, not refused.
            ("b,18446744000000,1,100000,,", "submit_s"),
            ("b,1e13,1,10,,", "submit_s"),
            ("b,0,1,1e13,,", "duration_s"),
        ],
    },
    Case {
        format: TraceFormat::Helios,
        header: "job_id,vc,gpu_num,cpu_num,state,submit_time,duration",
        good: "h1,vcA,8,48,COMPLETED,2020-04-01 00:00:10,3600",
        bad: &[
            (",vcA,8,48,COMPLETED,2020-04-01 00:00:10,3600", "job_id"),
            ("h2,vcA,-8,48,COMPLETED,2020-04-01 00:00:10,3600", "gpu_num"),
            (
                "h2,vcA,2000000,48,COMPLETED,2020-04-01 00:00:10,3600",
                "gpu_num",
            ),
            ("h2,vcA,8,x,COMPLETED,2020-04-01 00:00:10,3600", "cpu_num"),
            ("h2,vcA,8,48,,2020-04-01 00:00:10,3600", "state"),
            (
                "h2,vcA,8,48,COMPLETED,2020-04-31 00:00:10,3600",
                "submit_time",
            ),
            ("h2,vcA,8,48,COMPLETED,2020-04-01 00:00:10,-1", "duration"),
            ("h2,vcA,8,48,COMPLETED,2020-04-01 00:00:10,1e13", "duration"),
        ],
    },
    Case {
        format: TraceFormat::Acme,
        header: "job_id,user,node_num,gpu_num,cpu_num,mem_per_pod_GB,state,submit_time,duration",
        good: "a1,u1,1,8,64,400,COMPLETED,2023-05-01 08:00:30+08:00,7200",
        bad: &[
            ("a2,u1,1,8,64,400,COMPLETED,yesterday,7200", "submit_time"),
            (
                "a2,u1,1,8,64,400,COMPLETED,2023-05-01 08:00:30+25:00,7200",
                "submit_time",
            ),
            (
                "a2,u1,1,8,64,-4,COMPLETED,2023-05-01 08:00:30+08:00,7200",
                "mem_per_pod_GB",
            ),
            (
                "a2,u1,0,8,64,400,COMPLETED,2023-05-01 08:00:30+08:00,7200",
                "node_num",
            ),
            (
                "a2,u1,1,8,NaN,400,COMPLETED,2023-05-01 08:00:30+08:00,7200",
                "cpu_num",
            ),
            (
                "a2,u1,1,8.5,64,400,COMPLETED,2023-05-01 08:00:30+08:00,7200",
                "gpu_num",
            ),
            (
                "a2,u1,1,8,64,400,COMPLETED,2023-05-01 08:00:30+08:00,NaN",
                "duration",
            ),
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
            // Issue 10: 2^64 - 1 steps saturated the run time instead of being refused.
            (
                "LM (batch size 5)\tc\t--steps\t1\t18446744073709551615\t1.0\t4",
                "total_steps",
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

/// Issue 10: a duplicated header column and rows longer than the header were accepted; binary
/// input was echoed raw into messages; `--skip-invalid` kept no trace of which rows it skipped.
#[test]
fn header_and_row_shape_and_printable_messages() {
    let err = parse("job_id,submit_s,gpus,duration_s,gpus\na,0,1,10,2\n", None).unwrap_err();
    assert_eq!(
        (err.line, err.field.as_deref()),
        (Some(1), Some("gpus")),
        "{err}"
    );
    assert!(
        matches!(err.kind, TraceErrorKind::DuplicateColumn(_)),
        "{err}"
    );

    let text = "job_id,submit_s,gpus,duration_s\na,0,1,10\nb,0,1,10,extra\n";
    let err = parse(text, None).unwrap_err();
    assert_eq!(err.line, Some(3), "{err}");
    assert!(
        err.to_string()
            .contains("row has 5 fields but the header has 4 columns"),
        "{err}"
    );

    let binary = "job\u{0}id,\u{1b}[31mred,gpus\na,b,c\n";
    let err = parse(binary, Some(TraceFormat::Tessera)).unwrap_err();
    let shown = err.to_string();
    assert!(
        !shown.contains('\u{0}') && !shown.contains('\u{1b}'),
        "{shown:?}"
    );
    assert!(
        shown.contains("\\0") && shown.contains("\\u{1b}"),
        "{shown}"
    );

    // The first five skipped rows are kept, with their lines.
    let mut text = String::from("job_id,submit_s,gpus,duration_s\n");
    for i in 0..8 {
        text.push_str(&format!("bad{i},0,0,10\n"));
    }
    text.push_str("ok,0,1,10\n");
    let t = parse_skipping(&text, TraceFormat::Tessera).unwrap();
    assert_eq!((t.skipped, t.workload.len()), (8, 1));
    let lines: Vec<Option<u64>> = t.skipped_examples.iter().map(|e| e.line).collect();
    assert_eq!(lines, [Some(2), Some(3), Some(4), Some(5), Some(6)]);
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
        // Issue 10: an attempt ending before the job was submitted, and a GPU listed twice on
        // one machine, were accepted without a word.
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "2017-10-07 00:58:00", "end_time": "2017-10-07 00:59:00",
                          "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}"#,
            Some("submitted_time"),
        ),
        (
            r#"{"status": "Pass", "jobid": "b", "submitted_time": "2017-10-07 01:00:00",
            "attempts": [{"start_time": "2017-10-07 01:00:00", "end_time": "2017-10-07 01:01:00",
                          "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1", "gpu0"]}]}]}"#,
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
            "attempts": [{"start_time": "2017-10-07 01:02:00", "end_time": "2017-10-07 01:01:00",
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

/// Issue 36: date-time columns took any year 0001-9999, so relative submit times ran far past
/// the 10^9 s every other span is held to. The latest row is blamed, naming the earliest.
#[test]
fn date_time_spans_are_held_to_the_input_limit() {
    let absolute = [
        (TraceFormat::PolluxPhilly, "2017", "timestamp"),
        (TraceFormat::Helios, "2020", "submit_time"),
        (TraceFormat::Acme, "2023", "submit_time"),
    ];
    for (format, year, field) in absolute {
        let case = CASES.iter().find(|c| c.format == format).unwrap();
        let early = case.good.replacen(year, "0001", 1);
        let late = case.good.replacen(year, "9999", 1);
        let text = text_with(case, &[&late, &early]);
        let err = parse(&text, Some(format)).expect_err("9999 after 0001");
        let shown = err.to_string();
        assert_eq!(err.line, Some(2), "{format}: {shown}");
        assert_eq!(err.field.as_deref(), Some(field), "{format}: {shown}");
        assert!(
            shown.contains("after the earliest job's (line 3)")
                && shown.contains("beyond the limit of 1000000000 s"),
            "{format}: {shown}"
        );
        // Thirty years apart is within the limit.
        let later = case.good.replacen(year, "2047", 1);
        let near = text_with(case, &[case.good, &later]);
        assert_eq!(parse(&near, Some(format)).unwrap().workload.len(), 2);
    }
    let job = |id: &str, year: &str| {
        format!(
            r#"{{"status": "Pass", "vc": "v", "jobid": "{id}", "submitted_time": "{year}-01-01 00:00:00",
  "attempts": [{{"start_time": "{year}-01-01 00:00:00", "end_time": "{year}-01-01 00:01:00", "detail": [{{"ip": "m1", "gpus": ["gpu0"]}}]}}]}}"#
        )
    };
    let text = format!("[{}, {}]", job("a", "0001"), job("b", "9999"));
    let err = parse(&text, Some(TraceFormat::PhillyJson)).expect_err("philly json span");
    assert!(err.to_string().contains("beyond the limit"), "{err}");
    assert_eq!(err.field.as_deref(), Some("submitted_time"), "{err}");
}
