//! Arena's own comparison (the Crius paper's public artifact, `sjtu-epcc/arena`, branch
//! `ae-eurosys`): its Philly-derived trace, its 300 s rounds and its throughput metric, as
//! its simulator builds them (read, not copied).
//!
//! - **Trace**: CSV `job_id,submission_time,num_iteration,model_name,deadline,batch_size,
//!   num_gpu,gpu_type` (Arena's `traces/simulate_trace_philly.csv`, Apache-2.0, shipped in
//!   `data/arena_simulate_trace_philly.csv`; see `data/README.md`). Models are
//!   `FAMILY__SIZE` (`bert__760M`, `moe__10B`, `wide_resnet__1B`); GPU types `a100`, `v100`,
//!   `a40`, `a10` (our A100-40GB, V100-32GB, A40, A10).
//! - **Rounds**: the simulator groups arrivals in 300 s chunks from the first submission: a
//!   job submitted at `s` is handed to the scheduler in round `k = ⌈(s − s₀)/300⌉ − 1` (0 for
//!   the first), i.e. at the start of the round whose interval `(s₀ + 300k, s₀ + 300(k+1)]`
//!   holds it. We submit it at `300·k` s. A run of `R` rounds stops at `300·R` s; jobs of
//!   later rounds never arrive.
//! - **Iterations**: the simulator divides the trace's iteration count by 5
//!   (`ITER_NUM_SCALE_FACTOR_SIM`), integer division.
//! - **Throughput**: per round, Σ over running jobs of samples per second (global batch ÷
//!   iteration time), a job's round scaled by the part of it left after its restart tuning
//!   (nothing while it is still tuning); the report averages the rounds whose throughput
//!   exceeds 100 samples/s (its plotter's threshold, which drops the empty start) and takes
//!   their peak. Ours: per 300 s round the time average of Σ samples/s of the jobs not in a
//!   restore (same deduction, measured rather than charged per round).

use std::fmt;

use tessera_model::{Cluster, SimDuration, SimTime, TrainingJob, Workload};

use super::cells::{LargeModel, CELL_COUNTS};
use super::perf::{cluster_types, CellThroughput};

/// Arena's Philly-derived simulation trace (1,938 jobs), Apache-2.0 (see `data/README.md`).
pub const BUILTIN_TRACE: &str = include_str!("data/arena_simulate_trace_philly.csv");

/// Seconds per scheduling round of Arena's simulator (`SCHEDULING_INTERVAL`).
pub const ROUND_SECS: u64 = 300;
/// Arena's simulator divides every job's iteration count by this.
pub const ITERATION_SCALE: u64 = 5;
/// Rounds whose cluster throughput is at most this (samples/s) are left out of the average
/// (Arena's plotter).
pub const THROUGHPUT_THRESHOLD: f64 = 100.0;
/// Rounds of Arena's comparison (issue 14: the artifact's figures over its first 450).
pub const DEFAULT_ROUNDS: usize = 450;

/// A line of an Arena trace that cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("arena trace line {line}: {reason}")]
pub struct TraceError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong (values quoted with escapes).
    pub reason: String,
}

/// One job of an Arena trace, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct ArenaJob {
    /// `job_id`.
    pub id: String,
    /// `submission_time`, seconds.
    pub submit_s: u64,
    /// `num_iteration` (before the simulator's division).
    pub iterations: u64,
    /// Our model name (`bert-0.76b`, `wrn-1b`, `moe-10b`).
    pub model: String,
    /// The model as the trace names it (`bert__760M`): Alpa's shape ([`LargeModel::alpa`]).
    pub arena_model: String,
    /// `batch_size`.
    pub batch: u32,
    /// `num_gpu`.
    pub gpus: u32,
    /// GPU type as Arena names it (`a100`, `v100`, `a40`, `a10`).
    pub gpu_type: String,
}

/// Our GPU model name for an Arena GPU type.
pub fn gpu_model(arena_type: &str) -> Option<&'static str> {
    match arena_type {
        "a100" => Some("A100-40GB"),
        "v100" => Some("V100-32GB"),
        "a40" => Some("A40"),
        "a10" => Some("A10"),
        _ => None,
    }
}

/// `bert__760M` → `bert-0.76b`, `wide_resnet__1B` → `wrn-1b`.
pub fn model_name(arena: &str) -> Option<String> {
    let (family, size) = arena.split_once("__")?;
    let family = match family {
        "bert" => "bert",
        "gpt" => "gpt",
        "moe" => "moe",
        "wide_resnet" => "wrn",
        _ => return None,
    };
    let (digits, scale) = if let Some(d) = size.strip_suffix('B') {
        (d, 1.0)
    } else if let Some(d) = size.strip_suffix('M') {
        (d, 1e-3)
    } else {
        return None;
    };
    let billions = digits.parse::<f64>().ok()? * scale;
    if !(billions.is_finite() && billions > 0.0) {
        return None;
    }
    // Shortest decimal: 0.76, 1.3, 10.
    let text = format!("{:.3}", billions);
    let text = text.trim_end_matches('0').trim_end_matches('.');
    Some(format!("{family}-{text}b"))
}

/// Parses an Arena trace (header line first; blank lines skipped).
pub fn parse(text: &str) -> Result<Vec<ArenaJob>, TraceError> {
    let mut out = Vec::new();
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(TraceError {
            line: 1,
            reason: "empty file (expected a header line)".into(),
        });
    };
    let want =
        "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type";
    if header.trim() != want {
        return Err(TraceError {
            line: 1,
            reason: format!("header {:?}, expected {want:?}", header.trim()),
        });
    }
    for (i, raw) in lines {
        let line = i + 1;
        let err = |reason: String| TraceError { line, reason };
        let f: Vec<&str> = raw.trim().split(',').map(str::trim).collect();
        if f.len() != 8 {
            return Err(err(format!("{} fields, expected 8", f.len())));
        }
        let int = |k: usize, name: &str| -> Result<u64, TraceError> {
            f[k].parse::<u64>()
                .map_err(|_| err(format!("{name} {:?} is not a non-negative integer", f[k])))
        };
        let submit_s = int(1, "submission_time")?;
        let iterations = int(2, "num_iteration")?;
        int(4, "deadline")?;
        let batch = int(5, "batch_size")?;
        let gpus = int(6, "num_gpu")?;
        let model = model_name(f[3]).ok_or_else(|| {
            err(format!(
                "model_name {:?}: expected FAMILY__SIZE with FAMILY bert, gpt, moe or wide_resnet and SIZE like 760M or 1.3B",
                f[3]
            ))
        })?;
        if LargeModel::alpa(f[3]).is_none() {
            return Err(err(format!(
                "model_name {:?}: not a size of Alpa's benchmark suite (bert 350M–39B, moe 690M–70B, wide_resnet 500M–13B)",
                f[3]
            )));
        }
        if gpu_model(f[7]).is_none() {
            return Err(err(format!(
                "gpu_type {:?}: expected a100, v100, a40 or a10",
                f[7]
            )));
        }
        if iterations == 0 {
            return Err(err("num_iteration is 0".into()));
        }
        let batch = u32::try_from(batch)
            .ok()
            .filter(|&b| b > 0)
            .ok_or_else(|| err(format!("batch_size {:?} out of range", f[5])))?;
        let gpus = u32::try_from(gpus)
            .ok()
            .filter(|g| CELL_COUNTS.contains(g))
            .ok_or_else(|| err(format!("num_gpu {:?}: expected 1, 2, 4, 8 or 16", f[6])))?;
        if let Some(prev) = out.last().map(|j: &ArenaJob| j.submit_s) {
            if submit_s < prev {
                return Err(err(format!(
                    "submission_time {submit_s} before the previous line's {prev} (the trace must be sorted)"
                )));
            }
        }
        out.push(ArenaJob {
            id: f[0].to_string(),
            submit_s,
            iterations,
            model,
            arena_model: f[3].to_string(),
            batch,
            gpus,
            gpu_type: f[7].to_string(),
        });
    }
    if out.is_empty() {
        return Err(TraceError {
            line: 1,
            reason: "no job after the header".into(),
        });
    }
    Ok(out)
}

/// Which shapes the trace's models take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelShapes {
    /// Alpa's benchmark configurations, as Arena profiled them ([`LargeModel::alpa`]):
    /// sequence 1,024, WideResNet at 224×224 in FP32.
    Alpa,
    /// Ours by size ([`LargeModel::from_name`] of `bert-0.76b`): sequence 512, WideResNet at
    /// 32×32 in FP16.
    Tessera,
}

impl ModelShapes {
    /// `alpa` or `tessera`.
    pub fn from_name(name: &str) -> Option<ModelShapes> {
        match name {
            "alpa" => Some(ModelShapes::Alpa),
            "tessera" => Some(ModelShapes::Tessera),
            _ => None,
        }
    }

    /// The model name a job of `j` carries.
    pub fn model_of(self, j: &ArenaJob) -> &str {
        match self {
            ModelShapes::Alpa => &j.arena_model,
            ModelShapes::Tessera => &j.model,
        }
    }
}

/// The round in which Arena's simulator submits a job, given the first submission.
pub fn round_of(first_s: u64, submit_s: u64) -> u64 {
    (submit_s.saturating_sub(first_s))
        .div_ceil(ROUND_SECS)
        .saturating_sub(1)
}

/// An Arena trace as our workload, and what had to change.
#[derive(Debug, Clone)]
pub struct ArenaWorkload {
    /// Jobs arriving in the first `rounds` rounds, in trace order, submitted at their
    /// round's start, iterations ÷ [`ITERATION_SCALE`].
    pub workload: Workload,
    /// Jobs in the trace.
    pub trace_jobs: usize,
    /// Jobs whose requested count does not fit the model in our truth, raised to the
    /// smallest count of the same type that does (as our generator does).
    pub raised: usize,
    /// Jobs left out: no count of their type fits the model in our truth.
    pub dropped: usize,
}

/// Builds the workload of Arena's first `rounds` rounds on `cluster` (Crius's 1,280 GPUs).
pub fn workload(
    jobs: &[ArenaJob],
    rounds: usize,
    cluster: &Cluster,
    shapes: ModelShapes,
) -> Result<ArenaWorkload, String> {
    let types = cluster_types(cluster, &Default::default());
    let first = jobs.first().map_or(0, |j| j.submit_s);
    let (mut raised, mut dropped) = (0, 0);
    let mut out = Vec::new();
    for j in jobs {
        let round = round_of(first, j.submit_s);
        if round >= rounds as u64 {
            break;
        }
        let gpu = gpu_model(&j.gpu_type).ok_or_else(|| format!("GPU type {:?}", j.gpu_type))?;
        let ty = cluster
            .catalog
            .find(gpu)
            .and_then(|id| types.iter().find(|t| t.gpu == id))
            .ok_or_else(|| format!("the cluster has no {gpu}"))?;
        let name = shapes.model_of(j);
        let model = LargeModel::from_name(name).ok_or_else(|| format!("model {name:?}"))?;
        let rate_at = |c: u32| {
            let nodes = c.div_ceil(ty.device.gpus_per_node);
            CellThroughput::rate(&model, j.batch, &ty.device, c, nodes, None)
        };
        let found = CELL_COUNTS
            .iter()
            .filter(|&&c| c >= j.gpus && c as u64 <= ty.total)
            .map(|&c| (c, rate_at(c)))
            .find(|&(_, r)| r > 0.0);
        let Some((count, rate)) = found else {
            dropped += 1;
            continue;
        };
        if count != j.gpus {
            raised += 1;
        }
        let iterations = (j.iterations / ITERATION_SCALE).max(1);
        let id = out.len() as u32;
        let mut job = TrainingJob::simple(
            id,
            SimTime::from_secs(round * ROUND_SECS),
            count,
            SimDuration::from_secs_f64(iterations as f64 / rate),
        );
        job.name = format!("arena-{id}").into();
        job.model = name.to_string();
        job.batch_size = Some(j.batch);
        job.iterations = iterations;
        let mut allowed = vec![ty.gpu];
        allowed.extend(types.iter().map(|t| t.gpu).filter(|g| *g != ty.gpu));
        job.gpu_types = allowed;
        out.push(job);
    }
    Ok(ArenaWorkload {
        workload: Workload::new(out),
        trace_jobs: jobs.len(),
        raised,
        dropped,
    })
}

/// Per-round time averages of a rate sampled piecewise: `add(from, to, rate)` spreads a
/// constant rate over the rounds the interval covers.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundAverages {
    /// Rate × seconds per round.
    integral: Vec<f64>,
}

impl RoundAverages {
    /// `rounds` empty rounds of [`ROUND_SECS`].
    pub fn new(rounds: usize) -> RoundAverages {
        RoundAverages {
            integral: vec![0.0; rounds],
        }
    }

    /// Adds `rate` over `[from, to)` seconds (the part inside the rounds).
    pub fn add(&mut self, from: f64, to: f64, rate: f64) {
        let len = ROUND_SECS as f64;
        let end = self.integral.len() as f64 * len;
        let (mut a, b) = (from.max(0.0), to.min(end));
        while a < b {
            let r = (a / len).floor() as usize;
            let Some(slot) = self.integral.get_mut(r) else {
                break;
            };
            let next = ((r + 1) as f64 * len).min(b);
            *slot += rate * (next - a);
            a = next;
        }
    }

    /// The average rate of every round.
    pub fn averages(&self) -> Vec<f64> {
        self.integral
            .iter()
            .map(|x| x / ROUND_SECS as f64)
            .collect()
    }
}

/// Arena's summary of per-round throughputs: the mean and the peak of the rounds above
/// [`THROUGHPUT_THRESHOLD`], and how many rounds that is. `None` if no round is above.
pub fn summarise(per_round: &[f64]) -> Option<(f64, f64, usize)> {
    let kept: Vec<f64> = per_round
        .iter()
        .copied()
        .filter(|&x| x > THROUGHPUT_THRESHOLD)
        .collect();
    if kept.is_empty() {
        return None;
    }
    let mean = kept.iter().sum::<f64>() / kept.len() as f64;
    let peak = kept.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((mean, peak, kept.len()))
}

impl fmt::Display for ArenaWorkload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of the trace's {} jobs arrive in these rounds; {} raised to a count that fits, {} left out (no count of their type fits)",
            self.workload.len() + self.dropped,
            self.trace_jobs,
            self.raised,
            self.dropped
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace of our own in Arena's schema.
    const FIXTURE: &str = "\
job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,gpu_type
a,1000,5000,bert__760M,9000,256,1,a40
b,1000,10000,moe__1.3B,9000,128,2,a100
c,1300,7000,wide_resnet__500M,9000,256,4,v100
d,1301,4000,bert__1.3B,9000,512,8,a10
e,2500,3000,moe__690M,9000,256,2,a40
";

    #[test]
    fn model_names_map_to_ours() {
        assert_eq!(model_name("bert__760M").as_deref(), Some("bert-0.76b"));
        assert_eq!(model_name("moe__10B").as_deref(), Some("moe-10b"));
        assert_eq!(model_name("wide_resnet__6.8B").as_deref(), Some("wrn-6.8b"));
        assert_eq!(model_name("moe__690M").as_deref(), Some("moe-0.69b"));
        assert_eq!(model_name("resnet__1B"), None);
        assert_eq!(model_name("bert__1.3"), None);
        assert_eq!(model_name("bert__0B"), None);
    }

    #[test]
    fn rounds_follow_arenas_chunks() {
        // (s0, s0+300] is round 0, (s0+300, s0+600] round 1.
        assert_eq!(round_of(1000, 1000), 0);
        assert_eq!(round_of(1000, 1300), 0);
        assert_eq!(round_of(1000, 1301), 1);
        assert_eq!(round_of(1000, 1600), 1);
        assert_eq!(round_of(1000, 2500), 4);
    }

    #[test]
    fn fixture_parses_and_builds_the_first_rounds() {
        let jobs = parse(FIXTURE).unwrap();
        assert_eq!(jobs.len(), 5);
        assert_eq!(jobs[2].model, "wrn-0.5b");
        let cluster = super::super::workload::cluster().unwrap();
        let w = workload(&jobs, 2, &cluster, ModelShapes::Tessera).unwrap();
        // e arrives in round 4: outside two rounds.
        assert_eq!(w.workload.len() + w.dropped, 4);
        let js = w.workload.jobs();
        assert_eq!(js[0].submit, SimTime::from_secs(0));
        assert_eq!(js[2].submit, SimTime::from_secs(0));
        assert_eq!(js.last().unwrap().submit, SimTime::from_secs(300));
        assert_eq!(js[0].iterations, 1000);
        assert_eq!(js[1].batch_size, Some(128));
        assert_eq!(js[0].gpu_types.len(), 4);
        assert_eq!(Some(js[0].gpu_types[0]), cluster.catalog.find("A40"));
        // The embedded trace is Arena's: 1,938 jobs, 246 in the first 450 rounds.
        let arena = parse(BUILTIN_TRACE).unwrap();
        assert_eq!(arena.len(), 1938);
        let w = workload(&arena, DEFAULT_ROUNDS, &cluster, ModelShapes::Tessera).unwrap();
        assert_eq!(w.workload.len() + w.dropped, 246);
    }

    #[test]
    fn bad_lines_name_line_and_field() {
        let bad = FIXTURE.replace("a,1000,5000", "a,1000,-5");
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.reason.contains("num_iteration"), "{e}");
        let e = parse(&FIXTURE.replace("256,4,v100", "256,3,v100")).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.reason.contains("num_gpu"), "{e}");
        let e = parse(&FIXTURE.replace(",a10\n", ",h\u{1b}100\n")).unwrap_err();
        assert!(e.to_string().contains("\\u{1b}"), "{e}");
        let e = parse(&FIXTURE.replace("e,2500", "e,900")).unwrap_err();
        assert!(e.reason.contains("sorted"), "{e}");
        assert!(parse("").is_err());
        assert!(parse("a,b\n").is_err());
    }

    #[test]
    fn round_averages_split_intervals_and_summary_drops_quiet_rounds() {
        let mut r = RoundAverages::new(3);
        r.add(150.0, 450.0, 200.0); // half of round 0, half of round 1
        r.add(600.0, 2000.0, 50.0); // all of round 2, clipped at the end
        assert_eq!(r.averages(), vec![100.0, 100.0, 50.0]);
        r.add(0.0, 300.0, 1.0);
        let s = summarise(&r.averages()).unwrap();
        assert_eq!(s.2, 1);
        assert!((s.0 - 101.0).abs() < 1e-9);
        assert_eq!(summarise(&[1.0, 100.0]), None);
    }
}
