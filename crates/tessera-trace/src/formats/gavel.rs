//! Gavel job traces (stanford-futuredata/gavel, `scheduler/traces/**/*.trace`): TSV without a
//! header, seven fields per line: `job_type`, `command`, `num_steps_arg`, `needs_data_dir`,
//! `total_steps`, `arrival_time_s`, `scale_factor` (GPUs).
//!
//! Gavel traces state work in steps, not time. The run time on the requested allocation is
//! `total_steps / throughput`, with the isolated throughput of that job type at that scale
//! factor on a V100 from Gavel's `simulation_throughputs.json` (embedded extract
//! `data/gavel_v100_throughputs.csv`). Where the table has no entry for the scale factor, the
//! largest tabulated scale factor below it is used and scaled linearly (ideal data-parallel
//! scaling) — a documented approximation, since Gavel profiled only 1, 2, 4 and 8 GPUs (and
//! some job types only on 1).

use std::sync::OnceLock;

use tessera_model::TrainingJob;

use crate::error::{TraceError, TraceErrorKind};
use crate::fields::{computed_duration, read_rows, Ctx, Layout, Parsed, Row};

/// The seven positional fields, in order.
pub const FIELDS: [&str; 7] = [
    "job_type",
    "command",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "arrival_time_s",
    "scale_factor",
];

const THROUGHPUTS: &str = include_str!("../../data/gavel_v100_throughputs.csv");

/// One row of the throughput extract.
struct Throughput {
    job_type: String,
    scale_factor: u32,
    steps_per_s: f64,
}

fn table() -> &'static [Throughput] {
    static TABLE: OnceLock<Vec<Throughput>> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The embedded file is checked by tests; a malformed line would simply be absent.
        THROUGHPUTS
            .lines()
            .skip(1)
            .filter_map(|line| {
                let mut parts = line.rsplitn(3, ',');
                let steps_per_s: f64 = parts.next()?.parse().ok()?;
                let scale_factor: u32 = parts.next()?.parse().ok()?;
                let job_type = parts.next()?.to_string();
                (steps_per_s.is_finite() && steps_per_s > 0.0).then_some(Throughput {
                    job_type,
                    scale_factor,
                    steps_per_s,
                })
            })
            .collect()
    })
}

/// Steps per second of `job_type` on `gpus` V100s, or `None` for an unknown job type.
pub fn v100_throughput(job_type: &str, gpus: u32) -> Option<f64> {
    table()
        .iter()
        .filter(|t| t.job_type == job_type && t.scale_factor <= gpus)
        .max_by_key(|t| t.scale_factor)
        .map(|t| t.steps_per_s * f64::from(gpus) / f64::from(t.scale_factor))
}

/// Job types of the throughput table.
pub fn job_types() -> Vec<&'static str> {
    let mut names: Vec<&str> = table().iter().map(|t| t.job_type.as_str()).collect();
    names.dedup();
    names
}

/// `"ResNet-50 (batch size 128)"` → (`"resnet50"`, `Some(128)`); `"A3C"` → (`"a3c"`, `None`).
pub fn model_and_batch(job_type: &str) -> (String, Option<u32>) {
    let (name, rest) = job_type.split_once('(').unwrap_or((job_type, ""));
    let model: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    let batch = rest
        .trim()
        .strip_prefix("batch size")
        .and_then(|b| b.trim().trim_end_matches(')').trim().parse().ok());
    (model, batch)
}

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Parsed, TraceError> {
    let layout = Layout {
        delimiter: b'\t',
        quoting: false,
        positional: Some(&FIELDS),
        required: &[],
    };
    read_rows(ctx, text, &layout, job)
}

fn job(row: &Row<'_>) -> Result<TrainingJob, TraceError> {
    let job_type = row.nonempty("job_type")?;
    for field in ["command", "num_steps_arg", "needs_data_dir"] {
        row.text(field)?;
    }
    let steps = row.count("total_steps")?;
    let submit = row.time("arrival_time_s")?;
    let gpus = row.gpus("scale_factor")?;
    let Some(rate) = v100_throughput(job_type, gpus) else {
        return Err(row.err(
            "job_type",
            TraceErrorKind::UnknownJobType {
                name: job_type.to_string(),
                scale: gpus,
                known: job_types().join(", "),
            },
        ));
    };
    let duration = computed_duration(steps as f64 / rate).map_err(|k| row.err("total_steps", k))?;
    let (model, batch_size) = model_and_batch(job_type);
    let mut job = TrainingJob::simple(0, submit, gpus, duration);
    job.name = row.index.to_string().into();
    job.model = model;
    job.batch_size = batch_size;
    job.iterations = steps;
    Ok(job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_table_is_complete() {
        assert_eq!(job_types().len(), 26);
        assert_eq!(table().len(), 83);
        let r50 = v100_throughput("ResNet-50 (batch size 128)", 1).unwrap();
        assert!((r50 - 2.4967655780898292).abs() < 1e-12);
        // 16 GPUs: twice the 8-GPU figure.
        let r16 = v100_throughput("ResNet-50 (batch size 128)", 16).unwrap();
        assert!((r16 - 2.0 * 10.293183147179176).abs() < 1e-9);
        // Only tabulated at 1 GPU: linear.
        let a3c = v100_throughput("A3C", 4).unwrap();
        assert!((a3c - 4.0 * 7.175767179667988).abs() < 1e-9);
        assert!(v100_throughput("ResNet-51", 1).is_none());
    }

    #[test]
    fn job_type_names_split() {
        assert_eq!(
            model_and_batch("ResNet-50 (batch size 128)"),
            ("resnet50".into(), Some(128))
        );
        assert_eq!(model_and_batch("LM (batch size 5)"), ("lm".into(), Some(5)));
        assert_eq!(model_and_batch("CycleGAN"), ("cyclegan".into(), None));
    }
}
