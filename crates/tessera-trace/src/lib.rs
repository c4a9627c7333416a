//! Workload traces for Tessera: readers, a writer, synthetic generators and statistics.
//!
//! A trace is a list of training jobs (submit time, GPUs, work). This crate turns trace files
//! into a [`Workload`] of [`tessera_model::TrainingJob`]s and back:
//!
//! - [`read_trace`] / [`parse_trace`] read any supported [`TraceFormat`], or detect it
//!   ([`detect_format`]) from the header line or file extension:
//!   - `tessera`: the canonical CSV (documented in `docs/trace-format.md`), written by
//!     [`write_tessera_csv`];
//!   - `pollux-philly`: the Philly job list of Pollux's artifact (date-time submit times);
//!   - `gavel`: Gavel's TSV job traces (run time from Gavel's V100 throughputs);
//!   - `pollux`: Pollux/Sia workloads (run time derived from Pollux's application facts);
//!   - `tiresias`: the Tiresias simulator CSV;
//!   - `philly-json`: the raw Philly `cluster_job_log` (JSON); unfinished and zero-length jobs
//!     are dropped and counted in [`LoadedTrace::dropped`];
//!   - `helios`: Helios `cluster_log.csv` (SenseTime); CPU-only jobs are dropped;
//!   - `acme`: Acme `trace_seren.csv` / `trace_kalos.csv` (Shanghai AI Lab), with CPU and
//!     memory requests; CPU-only jobs are dropped;
//!   - `alibaba-gpu-2023`: Alibaba GPU 2023 pod lists (`openb_pod_list_*.csv`), with CPU and
//!     memory requests and fractional GPU requests; CPU-only and never-scheduled pods are
//!     dropped.
//! - Every reader checks each value, never panics on any input, and reports the first bad row
//!   as a [`TraceError`] displayed as `FILE:LINE: field FIELD: reason`; with
//!   [`ReadOptions::skip_invalid`] bad rows are counted and skipped instead.
//! - Jobs come out sorted by submit time (stable), with ids equal to their positions, and
//!   [`LoadedTrace::lines`] gives the source line of each.
//! - [`synthetic`] generates Poisson workloads (Philly GPU mix and run times built in);
//!   [`builtin_trace`] names ready-made workloads ([`BUILTIN_TRACES`]).
//! - [`TraceStats`] summarises a workload.
//! - [`parse_workload_spec`] reads a `kind: Workload` spec (YAML/JSON) with training jobs and
//!   inference services.
//! - [`read_pai_machine_spec`] reads Alibaba PAI's 2020 machine list as a cluster spec, and
//!   [`read_alibaba_2023_node_list`] Alibaba GPU 2023's node list.
//!
//! ```
//! use tessera_model::GpuCatalog;
//! use tessera_trace::{parse_trace, ReadOptions, TraceFormat};
//!
//! let csv = "job_id,submit_s,gpus,duration_s\na,10,4,3600\nb,0,1,60.5\n";
//! let catalog = GpuCatalog::builtin();
//! let trace = parse_trace(csv, "jobs.csv", None, &catalog, &ReadOptions::default()).unwrap();
//! assert_eq!(trace.format, TraceFormat::Tessera);
//! assert!(trace.detected);
//! assert_eq!(trace.workload.jobs()[0].name, "b");
//! assert_eq!(trace.lines, [3, 2]);
//! ```
#![deny(missing_docs)]
#![warn(unreachable_pub)]

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use tessera_model::{GpuCatalog, SimTime, Workload};

mod alibaba_2023;
mod error;
pub(crate) mod fields;
pub mod formats;
mod pai;
mod services;
mod stats;
pub mod synthetic;

pub use alibaba_2023::{
    looks_like_alibaba_2023_node_list, read_alibaba_2023_node_list, Alibaba2023Cluster,
};
pub use error::{printable, TraceError, TraceErrorKind};
pub use formats::tessera::write_tessera_csv;
pub use formats::tessera::TesseraCsvWriter;
pub use pai::{looks_like_pai_machine_spec, read_pai_machine_spec, PaiCluster};
pub use services::{
    parse_workload_spec, parse_workload_spec_with_lines, write_workload_spec, SpecFormat,
};
pub use stats::{human_duration, TraceStats};
pub use synthetic::{with_arrivals, with_arrivals_checked, Arrivals, BadArrivals, GenerateError};

/// The most GPUs one job may ask for; every reader refuses larger counts.
pub const MAX_GPUS_PER_JOB: u64 = fields::MAX_GPUS;

use fields::{Ctx, Parsed};
use synthetic::{DurationDist, PoissonWorkload, PHILLY_GPU_MIX};

/// The trace formats this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TraceFormat {
    /// Tessera's canonical CSV.
    Tessera,
    /// The Philly job list of Pollux's artifact (`timestamp,duration,num_gpus,gpu_time,cluster`).
    PolluxPhilly,
    /// Gavel's TSV job traces.
    Gavel,
    /// Pollux/Sia workloads (`name,time,application,num_replicas,batch_size`).
    Pollux,
    /// The Tiresias simulator CSV.
    Tiresias,
    /// The raw Philly trace's `cluster_job_log` (a JSON list of jobs with attempts).
    PhillyJson,
    /// Helios job logs (`cluster_log.csv`: `job_id,vc,gpu_num,cpu_num,state,submit_time,duration`).
    Helios,
    /// Acme job traces (`trace_seren.csv`, `trace_kalos.csv`).
    Acme,
    /// Alibaba GPU 2023 pod lists (`openb_pod_list_*.csv`).
    AlibabaGpu2023,
}

impl TraceFormat {
    /// Every format, in the order they are listed to users.
    pub const ALL: [TraceFormat; 9] = [
        TraceFormat::Tessera,
        TraceFormat::PolluxPhilly,
        TraceFormat::Gavel,
        TraceFormat::Pollux,
        TraceFormat::Tiresias,
        TraceFormat::PhillyJson,
        TraceFormat::Helios,
        TraceFormat::Acme,
        TraceFormat::AlibabaGpu2023,
    ];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Tessera => "tessera",
            TraceFormat::PolluxPhilly => "pollux-philly",
            TraceFormat::Gavel => "gavel",
            TraceFormat::Pollux => "pollux",
            TraceFormat::Tiresias => "tiresias",
            TraceFormat::PhillyJson => "philly-json",
            TraceFormat::Helios => "helios",
            TraceFormat::Acme => "acme",
            TraceFormat::AlibabaGpu2023 => "alibaba-gpu-2023",
        }
    }

    /// One line about the format.
    pub fn description(self) -> &'static str {
        match self {
            TraceFormat::Tessera => {
                "canonical CSV: job_id,submit_s,gpus,duration_s[,iterations,model,...]"
            }
            TraceFormat::PolluxPhilly => {
                "Pollux's Philly job list: timestamp,duration,num_gpus,gpu_time,cluster"
            }
            TraceFormat::Gavel => "Gavel TSV (7 fields, no header), run time from V100 throughputs",
            TraceFormat::Pollux => {
                "Pollux/Sia workload: name,time,application,num_replicas,batch_size"
            }
            TraceFormat::Tiresias => {
                "Tiresias CSV: job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
            }
            TraceFormat::PhillyJson => {
                "raw Philly cluster_job_log JSON: jobid,vc,status,submitted_time,attempts[detail[gpus]]"
            }
            TraceFormat::Helios => {
                "Helios cluster_log.csv: job_id,vc,gpu_num,cpu_num,state,submit_time,duration"
            }
            TraceFormat::Acme => {
                "Acme trace_seren/kalos.csv: job_id,user,node_num,gpu_num,cpu_num,[mem_per_pod_GB,]state,submit_time,duration"
            }
            TraceFormat::AlibabaGpu2023 => {
                "Alibaba GPU 2023 pod list: name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,...,creation_time,deletion_time,scheduled_time"
            }
        }
    }

    /// The column of an absolute-time format's submit times.
    fn submit_column(self) -> &'static str {
        match self {
            TraceFormat::PolluxPhilly => "timestamp",
            TraceFormat::PhillyJson => "submitted_time",
            _ => "submit_time",
        }
    }

    /// Whether submit times are absolute (and so are made relative to the earliest job).
    fn absolute_times(self) -> bool {
        matches!(
            self,
            TraceFormat::PolluxPhilly
                | TraceFormat::PhillyJson
                | TraceFormat::Helios
                | TraceFormat::Acme
        )
    }
}

impl fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A trace format name that is not one of [`TraceFormat::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown trace format {0:?}")]
pub struct UnknownTraceFormat(pub String);

impl FromStr for TraceFormat {
    type Err = UnknownTraceFormat;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let key = s.trim().to_ascii_lowercase().replace('_', "-");
        TraceFormat::ALL
            .into_iter()
            .find(|f| f.name() == key)
            .ok_or_else(|| UnknownTraceFormat(s.to_string()))
    }
}

/// How to treat bad rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadOptions {
    /// Count and skip bad rows instead of failing on the first one.
    pub skip_invalid: bool,
}

/// A trace read from a file or text.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedTrace {
    /// The format it was read as.
    pub format: TraceFormat,
    /// True when the format was detected rather than given.
    pub detected: bool,
    /// The jobs, sorted by submit time.
    pub workload: Workload,
    /// 1-based source line of each job, aligned with `workload.jobs()`.
    pub lines: Vec<u64>,
    /// Rows skipped as invalid (only with [`ReadOptions::skip_invalid`]).
    pub skipped: usize,
    /// Why the first few skipped rows were skipped (at most five), to show the user.
    pub skipped_examples: Vec<TraceError>,
    /// Well-formed jobs left out because the trace says they cannot be replayed (philly-json:
    /// unfinished, no attempts, zero run time or no GPUs); 0 for the other formats.
    pub dropped: usize,
}

/// Reads a trace file in `format`, or in the detected format when `format` is `None`.
///
/// Bytes that are not UTF-8 are reported as an error at their line and field (or skipped
/// with the row under `skip_invalid`).
pub fn read_trace(
    path: &Path,
    format: Option<TraceFormat>,
    catalog: &GpuCatalog,
    opts: &ReadOptions,
) -> Result<LoadedTrace, TraceError> {
    let source = path.display().to_string();
    let bytes = std::fs::read(path)
        .map_err(|e| TraceError::whole(&source, TraceErrorKind::Io(e.to_string())))?;
    let text = fields::decode(&bytes);
    parse_trace(&text, &source, format, catalog, opts)
}

/// Parses trace text; `source` names it in messages and, for detection, by its extension.
pub fn parse_trace(
    text: &str,
    source: &str,
    format: Option<TraceFormat>,
    catalog: &GpuCatalog,
    opts: &ReadOptions,
) -> Result<LoadedTrace, TraceError> {
    let (format, detected) = match format {
        Some(f) => (f, false),
        None => match detect_format(source, head(text)) {
            Some(f) => (f, true),
            None => {
                let names: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.name()).collect();
                let kind = TraceErrorKind::UnknownFormat(names.join(", "));
                return Err(TraceError::at(source, 1, None, kind));
            }
        },
    };
    let ctx = Ctx {
        source,
        catalog,
        opts,
    };
    let parsed = match format {
        TraceFormat::Tessera => formats::tessera::parse(&ctx, text),
        TraceFormat::PolluxPhilly => formats::pollux_philly::parse(&ctx, text),
        TraceFormat::Gavel => formats::gavel::parse(&ctx, text),
        TraceFormat::Pollux => formats::pollux::parse(&ctx, text),
        TraceFormat::Tiresias => formats::tiresias::parse(&ctx, text),
        TraceFormat::PhillyJson => formats::philly_json::parse(&ctx, text),
        TraceFormat::Helios => formats::helios::parse(&ctx, text),
        TraceFormat::Acme => formats::acme::parse(&ctx, text),
        TraceFormat::AlibabaGpu2023 => formats::alibaba_gpu_2023::parse(&ctx, text),
    }?;
    finish(parsed, format, detected, source)
}

/// The first few KiB of `text`, cut at a character boundary.
fn head(text: &str) -> &str {
    let mut end = text.len().min(4096);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Sorts by submit time (stably, keeping lines aligned), makes absolute times relative and
/// numbers the jobs. Relative submit times are held to [`tessera_model::MAX_INPUT_SECS`] as
/// every read span is: a date-time of year 9999 after one of year 1 is an error at its line.
fn finish(
    parsed: Parsed,
    format: TraceFormat,
    detected: bool,
    source: &str,
) -> Result<LoadedTrace, TraceError> {
    let mut rows =
        tessera_model::sort_stably_by_key(parsed.jobs, |(job, _)| job.submit.as_micros());
    if format.absolute_times() {
        if let Some((base, base_line)) = rows.first().map(|(job, line)| (job.submit, *line)) {
            let limit = tessera_model::MAX_INPUT_SECS * 1_000_000;
            if let Some((job, line)) = rows.last() {
                let span = (job.submit - base).as_micros();
                if span > limit {
                    return Err(TraceError::at(
                        source,
                        *line,
                        Some(format.submit_column()),
                        TraceErrorKind::SubmitSpanTooLarge {
                            seconds: span / 1_000_000,
                            earliest_line: base_line,
                        },
                    ));
                }
            }
            for (job, _) in &mut rows {
                job.submit = SimTime::from_micros((job.submit - base).as_micros());
            }
        }
    }
    let lines = rows.iter().map(|(_, line)| *line).collect();
    let workload = Workload::new(rows.into_iter().map(|(job, _)| job).collect());
    Ok(LoadedTrace {
        format,
        detected,
        workload,
        lines,
        skipped: parsed.skipped,
        skipped_examples: parsed.skipped_examples,
        dropped: parsed.dropped,
    })
}

/// Recognises a format from the first non-blank line of the text (its header, or a Gavel
/// row of seven tab-separated fields), else from the file extension (`.trace` = Gavel).
pub fn detect_format(file_name: &str, text_head: &str) -> Option<TraceFormat> {
    let first = text_head
        .lines()
        .map(|l| l.trim_start_matches('\u{feff}').trim())
        .find(|l| !l.is_empty());
    // A JSON list of objects with a `jobid`: the raw Philly log (whatever the extension).
    let trimmed = text_head.trim_start_matches('\u{feff}').trim_start();
    if trimmed.starts_with('[')
        && (text_head.contains("\"jobid\"") || text_head.contains("\"attempts\""))
    {
        return Some(TraceFormat::PhillyJson);
    }
    if let Some(line) = first {
        if line.split('\t').count() == formats::gavel::FIELDS.len() {
            return Some(TraceFormat::Gavel);
        }
        let cols: Vec<String> = line
            .split(',')
            .map(|c| c.trim().trim_matches('"').to_ascii_lowercase())
            .collect();
        let has = |names: &[&str]| names.iter().all(|n| cols.iter().any(|c| c == n));
        if has(&["job_id", "submit_s", "duration_s"]) {
            return Some(TraceFormat::Tessera);
        }
        if has(&["timestamp", "duration", "num_gpus"]) {
            return Some(TraceFormat::PolluxPhilly);
        }
        if has(&["time", "application", "num_replicas"]) {
            return Some(TraceFormat::Pollux);
        }
        if has(&["num_gpu", "submit_time", "duration"]) {
            return Some(TraceFormat::Tiresias);
        }
        if has(&["job_id", "vc", "gpu_num", "submit_time", "duration"]) {
            return Some(TraceFormat::Helios);
        }
        if has(&["job_id", "gpu_num", "state", "submit_time", "duration"]) {
            return Some(TraceFormat::Acme);
        }
        if has(&["num_gpu", "gpu_milli", "creation_time", "scheduled_time"]) {
            return Some(TraceFormat::AlibabaGpu2023);
        }
    }
    let ext = Path::new(file_name).extension().and_then(|e| e.to_str());
    match ext {
        Some(e) if e.eq_ignore_ascii_case("trace") => Some(TraceFormat::Gavel),
        _ => None,
    }
}

/// Arrival rate of `philly-synthetic-2k`, in jobs per hour. On the default 256-GPU cluster
/// this offers about 1.5x the GPU-hours the cluster has while jobs arrive (10 h), so queues
/// build and orderings differ; Philly's long tail (runs of weeks) then drains for days.
pub const DEFAULT_JOBS_PER_HOUR: f64 = 200.0;

/// Built-in workloads for `--trace builtin:NAME`: (name, description).
pub const BUILTIN_TRACES: &[(&str, &str)] = &[
    (
        "philly-synthetic-2k",
        "2,000 jobs, Poisson 200 jobs/h, Philly GPU mix and run times; seeded",
    ),
    (
        "tiresias-60",
        "the 60-job trace of the Tiresias simulator (fixed; seed ignored)",
    ),
    (
        "pollux-philly-82k",
        "the 82,247 Philly jobs of the Pollux artifact's simulator (Sep-Dec 2017, 31.5 jobs/h; \
         fixed; seed ignored)",
    ),
];

const TIRESIAS_60: &str = include_str!("../data/tiresias_60_job.csv");

/// Pollux's `simulator/traces/philly.csv`, gzipped (3.4 MB as text).
const POLLUX_PHILLY_GZ: &[u8] = include_bytes!("../data/pollux_philly.csv.gz");

/// The text of an embedded gzipped file; `None` if it does not inflate to UTF-8.
fn inflate(gz: &[u8]) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

fn embedded_trace(text: &str, name: &str, format: TraceFormat) -> Option<Workload> {
    let catalog = GpuCatalog::builtin();
    let trace = parse_trace(text, name, Some(format), &catalog, &ReadOptions::default());
    trace.ok().map(|t| t.workload)
}

/// A built-in workload by name (see [`BUILTIN_TRACES`]); generated ones use `seed`.
pub fn builtin_trace(name: &str, seed: u64) -> Option<Workload> {
    match name {
        "philly-synthetic-2k" => Some(
            PoissonWorkload {
                jobs: 2_000,
                jobs_per_hour: DEFAULT_JOBS_PER_HOUR,
                gpu_mix: PHILLY_GPU_MIX.to_vec(),
                durations: DurationDist::PhillyRuntimes,
                seed,
            }
            .generate(),
        ),
        "tiresias-60" => embedded_trace(TIRESIAS_60, "builtin:tiresias-60", TraceFormat::Tiresias),
        "pollux-philly-82k" => embedded_trace(
            &inflate(POLLUX_PHILLY_GZ)?,
            "builtin:pollux-philly-82k",
            TraceFormat::PolluxPhilly,
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_names_round_trip() {
        for f in TraceFormat::ALL {
            assert_eq!(f.to_string().parse::<TraceFormat>(), Ok(f));
        }
        assert_eq!(
            "Pollux_Philly".parse::<TraceFormat>(),
            Ok(TraceFormat::PolluxPhilly)
        );
        assert!("auto".parse::<TraceFormat>().is_err());
    }

    #[test]
    fn every_builtin_trace_exists() {
        for (name, _) in BUILTIN_TRACES {
            assert!(
                builtin_trace(name, 1).is_some_and(|w| !w.is_empty()),
                "{name}"
            );
        }
        assert!(builtin_trace("nope", 1).is_none());
        assert_eq!(builtin_trace("tiresias-60", 0).map(|w| w.len()), Some(60));
    }

    /// The embedded Pollux Philly trace inflates to the upstream file: every row, its span
    /// and its GPU time (figures computed from the file itself).
    #[test]
    fn the_pollux_philly_trace_is_the_upstream_file() {
        let text = inflate(POLLUX_PHILLY_GZ).expect("inflates");
        let rows = text.lines().filter(|l| !l.is_empty()).count();
        assert_eq!(rows, 82_248, "header and 82,247 jobs");
        let w = builtin_trace("pollux-philly-82k", 7).expect("parses");
        assert_eq!(w.len(), 82_247);
        let jobs = w.jobs();
        let span_h =
            (jobs[jobs.len() - 1].submit.as_secs_f64() - jobs[0].submit.as_secs_f64()) / 3600.0;
        assert!((span_h - 2613.5).abs() < 0.1, "{span_h}");
        let gpu_h: f64 = jobs
            .iter()
            .map(|j| j.gpus as f64 * j.duration.as_secs_f64())
            .sum::<f64>()
            / 3600.0;
        assert!((gpu_h - 978_078.0).abs() < 1.0, "{gpu_h}");
    }

    #[test]
    fn detection_by_header_and_extension() {
        let d = detect_format;
        assert_eq!(
            d("x.csv", "job_id,submit_s,gpus,duration_s\n"),
            Some(TraceFormat::Tessera)
        );
        assert_eq!(
            d(
                "x.csv",
                "\u{feff}timestamp,duration,num_gpus,gpu_time,cluster\n"
            ),
            Some(TraceFormat::PolluxPhilly)
        );
        assert_eq!(
            d("x", "name,time,application,num_replicas,batch_size"),
            Some(TraceFormat::Pollux)
        );
        assert_eq!(
            d(
                "x",
                "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"
            ),
            Some(TraceFormat::Tiresias)
        );
        assert_eq!(
            d("x.txt", "a\tb\tc\td\te\tf\tg\n"),
            Some(TraceFormat::Gavel)
        );
        assert_eq!(d("dir/x.TRACE", ""), Some(TraceFormat::Gavel));
        assert_eq!(
            d(
                "x.csv",
                "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
            ),
            Some(TraceFormat::Helios)
        );
        assert_eq!(
            d(
                "x.csv",
                "job_id,user,node_num,gpu_num,cpu_num,type,state,submit_time,start_time,end_time,duration,queue,gpu_time"
            ),
            Some(TraceFormat::Acme)
        );
        assert_eq!(
            d(
                "x.csv",
                "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
            ),
            Some(TraceFormat::AlibabaGpu2023)
        );
        assert_eq!(d("x.csv", "what,is,this"), None);
        assert_eq!(d("x.csv", ""), None);
    }
}
