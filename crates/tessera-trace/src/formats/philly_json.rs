//! The raw Philly trace (msr-fiddle/philly-traces, `trace-data/cluster_job_log`): a JSON list
//! of jobs, each
//!
//! ```json
//! {"status": "Pass", "vc": "ee9e8c", "jobid": "application_1506638472019_14199",
//!  "submitted_time": "2017-10-07 01:11:39", "user": "ce2f4c",
//!  "attempts": [{"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
//!                "detail": [{"ip": "m47", "gpus": ["gpu0", "gpu1"]}]}]}
//! ```
//!
//! Times are local date-times `YYYY-MM-DD HH:MM:SS` (the trace's own clock; submit times become
//! relative to the earliest job), with `"None"` (or `null`) where the log lost one.
//!
//! A job becomes one [`TrainingJob`]: name = `jobid`, tenant = `vc` (the virtual cluster),
//! duration = the sum of its attempts' run times (`end_time − start_time`; attempts missing
//! either time, or ending before they start, are logging errors and count nothing), GPUs = the
//! GPUs listed in the `detail` of its last attempt that has both times (as the Synergy
//! simulator's Philly reader does when it sums attempts). Jobs that cannot be replayed are
//! *dropped* and counted in [`crate::LoadedTrace::dropped`], not reported as errors: a status
//! other than `Pass`, `Killed` or `Failed` (the README's three; anything else did not end),
//! a last attempt without an `end_time` (still running when the snapshot was taken), no
//! attempts, zero total run time, or no GPUs. Malformed values (a missing `jobid` or
//! `submitted_time`, a time that does not parse, a `gpus` that is not a list) are errors at the
//! job's line, or skipped under [`crate::ReadOptions::skip_invalid`].

use serde_json::value::RawValue;
use serde_json::Value;
use tessera_model::{SimDuration, SimTime, TrainingJob};

use crate::error::{TraceError, TraceErrorKind as K};
use crate::fields::{default_iterations, Ctx, Parsed, MAX_GPUS};
use crate::formats::pollux_philly::parse_datetime;

/// Statuses of jobs that ended (the philly-traces README lists exactly these).
pub const FINISHED_STATUSES: [&str; 3] = ["Pass", "Killed", "Failed"];

/// What became of one job entry.
enum Entry {
    Job(Box<TrainingJob>),
    /// Did not finish, or has nothing to replay.
    Dropped,
}

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Parsed, TraceError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.trim().is_empty() {
        return Err(TraceError::whole(
            ctx.source,
            K::Empty("no JSON list of jobs"),
        ));
    }
    let entries: Vec<&RawValue> = serde_json::from_str(text).map_err(|e| {
        TraceError::at(
            ctx.source,
            e.line().max(1) as u64,
            None,
            K::NotJson(format!("expected a JSON list of jobs: {e}")),
        )
    })?;
    let mut parsed = Parsed {
        jobs: Vec::with_capacity(entries.len()),
        skipped: 0,
        skipped_examples: Vec::new(),
        dropped: 0,
    };
    // Lines of each entry, counted incrementally (entries come in text order).
    let base = text.as_ptr() as usize;
    let (mut seen, mut line) = (0usize, 1u64);
    for raw in entries {
        let offset = (raw.get().as_ptr() as usize)
            .saturating_sub(base)
            .min(text.len());
        if offset > seen {
            line += text
                .get(seen..offset)
                .map_or(0, |s| s.bytes().filter(|&b| b == b'\n').count() as u64);
            seen = offset;
        }
        let outcome = serde_json::from_str::<Value>(raw.get())
            .map_err(|e| (None, K::NotJson(e.to_string())))
            .and_then(|v| entry(&v));
        match outcome {
            Ok(Entry::Job(job)) => parsed.jobs.push((*job, line)),
            Ok(Entry::Dropped) => parsed.dropped += 1,
            Err((field, kind)) => {
                let e = TraceError::at(ctx.source, line, field, kind);
                if ctx.opts.skip_invalid {
                    parsed.skip(e);
                } else {
                    return Err(e);
                }
            }
        }
    }
    Ok(parsed)
}

type Fail = (Option<&'static str>, K);

/// A string value, or `None` for absent, `null` or the log's `"None"`.
fn text<'v>(v: &'v Value, key: &'static str) -> Result<Option<&'v str>, Fail> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() || s.trim() == "None" => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err((
            Some(key),
            K::Invalid(format!("expected a string, got {other}")),
        )),
    }
}

/// A date-time in microseconds, `None` when absent.
fn time(v: &Value, key: &'static str) -> Result<Option<u64>, Fail> {
    match text(v, key)? {
        None => Ok(None),
        Some(s) => parse_datetime(s)
            .map(Some)
            .ok_or_else(|| (Some(key), K::BadTimestamp(s.to_string()))),
    }
}

fn entry(v: &Value) -> Result<Entry, Fail> {
    if !v.is_object() {
        return Err((None, K::NotJson(format!("expected a job object, got {v}"))));
    }
    let name = match v.get("jobid") {
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err((Some("jobid"), K::EmptyValue)),
    };
    let submit = time(v, "submitted_time")?.ok_or((Some("submitted_time"), K::EmptyValue))?;
    let tenant = text(v, "vc")?.unwrap_or_default().to_string();
    let status = text(v, "status")?.unwrap_or_default();
    let attempts = match v.get("attempts") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(other) => {
            return Err((
                Some("attempts"),
                K::Invalid(format!("expected a list, got {other}")),
            ))
        }
    };
    // Validate every attempt before deciding anything, so that malformed input is reported
    // whatever the job's status.
    let mut run_us: u64 = 0;
    let mut gpus: Option<u64> = None;
    let mut last_ended = false;
    for a in attempts {
        let (start, end) = (time(a, "start_time")?, time(a, "end_time")?);
        let count = gpu_count(a)?;
        last_ended = end.is_some();
        if let Some(e) = end {
            // A job cannot end before it was submitted: the times are corrupt.
            if e < submit {
                return Err((
                    Some("submitted_time"),
                    K::Invalid("is after the end of one of its attempts".into()),
                ));
            }
        }
        if let (Some(s), Some(e)) = (start, end) {
            if e > s {
                run_us = run_us.saturating_add(e - s);
            }
            gpus = Some(count);
        }
    }
    let finished = FINISHED_STATUSES
        .iter()
        .any(|s| s.eq_ignore_ascii_case(status.trim()));
    let gpus = gpus.unwrap_or(0);
    if !finished || !last_ended || run_us == 0 || gpus == 0 {
        return Ok(Entry::Dropped);
    }
    if gpus > MAX_GPUS {
        return Err((Some("gpus"), K::TooManyGpus(gpus.to_string())));
    }
    if run_us > tessera_model::MAX_INPUT_SECS * 1_000_000 {
        let secs = format!("{}", run_us / 1_000_000);
        return Err((Some("attempts"), K::TimeTooLarge(secs)));
    }
    let duration = SimDuration::from_micros(run_us);
    let mut job = TrainingJob::simple(0, SimTime::from_micros(submit), gpus as u32, duration);
    job.name = name.into();
    job.tenant = tenant;
    job.iterations = default_iterations(duration);
    Ok(Entry::Job(Box::new(job)))
}

/// GPUs an attempt holds: the lengths of its machines' `gpus` lists.
fn gpu_count(a: &Value) -> Result<u64, Fail> {
    if !a.is_object() {
        return Err((
            Some("attempts"),
            K::Invalid(format!("expected an attempt object, got {a}")),
        ));
    }
    let machines = match a.get("detail") {
        None | Some(Value::Null) => return Ok(0),
        Some(Value::Array(d)) => d,
        Some(other) => {
            return Err((
                Some("detail"),
                K::Invalid(format!("expected a list, got {other}")),
            ))
        }
    };
    let mut total: u64 = 0;
    for m in machines {
        match m.get("gpus") {
            None | Some(Value::Null) => {}
            Some(Value::Array(g)) => {
                // The same GPU listed twice on one machine would count it twice.
                for (i, id) in g.iter().enumerate() {
                    if g[..i].contains(id) {
                        return Err((
                            Some("gpus"),
                            K::Invalid(format!("GPU {id} is listed twice on one machine")),
                        ));
                    }
                }
                total = total.saturating_add(g.len() as u64)
            }
            Some(other) => {
                return Err((
                    Some("gpus"),
                    K::Invalid(format!("expected a list of GPU ids, got {other}")),
                ))
            }
        }
    }
    Ok(total)
}
