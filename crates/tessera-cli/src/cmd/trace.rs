//! `tessera trace inspect|convert|generate`.

use std::io::Write;

use anyhow::{Context, Result};
use tessera_model::GpuCatalog;
use tessera_trace::synthetic::{DurationDist, PoissonWorkload, PHILLY_GPU_MIX};
use tessera_trace::TraceStats;

use crate::args::{ConvertArgs, GenerateArgs, InspectArgs, TraceCommand};
use crate::inputs::{format_label, load_catalog, load_trace, parse_format};

pub fn run(cmd: &TraceCommand) -> Result<()> {
    match cmd {
        TraceCommand::Inspect(a) => inspect(a),
        TraceCommand::Convert(a) => convert(a),
        TraceCommand::Generate(a) => generate(a),
    }
}

fn inspect(args: &InspectArgs) -> Result<()> {
    let catalog = load_catalog(args.gpu_catalog.as_deref())?;
    let trace = load_trace(
        &args.path,
        parse_format(&args.trace_format)?,
        &catalog,
        args.skip_invalid,
        1,
    )?;
    let mut out = crate::output::stdout();
    writeln!(
        out,
        "{}: format {}{}",
        tessera_trace::printable(&args.path),
        format_label(&args.path, &trace),
        if trace.detected { " (detected)" } else { "" }
    )?;
    if trace.skipped > 0 {
        writeln!(out, "skipped rows: {}", trace.skipped)?;
        for e in &trace.skipped_examples {
            writeln!(out, "  {}", tessera_trace::printable(&e.to_string()))?;
        }
    }
    if trace.dropped > 0 {
        writeln!(
            out,
            "dropped jobs:   {} (unfinished, CPU-only, or no run time)",
            trace.dropped
        )?;
    }
    if trace.workload.is_empty() {
        writeln!(out, "no jobs")?;
        return Ok(());
    }
    write!(
        out,
        "{}",
        crate::output::printable_lines(&TraceStats::of(&trace.workload).to_string())
    )?;
    Ok(())
}

fn write_csv(output: &str, workload: &tessera_model::Workload, catalog: &GpuCatalog) -> Result<()> {
    if output == "-" {
        tessera_trace::write_tessera_csv(crate::output::stdout(), workload, catalog)?;
    } else {
        let file = std::fs::File::create(output).with_context(|| format!("creating {output}"))?;
        tessera_trace::write_tessera_csv(std::io::BufWriter::new(file), workload, catalog)
            .with_context(|| format!("writing {output}"))?;
        eprintln!("wrote {} jobs to {output}", workload.len());
    }
    Ok(())
}

fn convert(args: &ConvertArgs) -> Result<()> {
    let catalog = load_catalog(args.gpu_catalog.as_deref())?;
    let trace = load_trace(
        &args.input,
        parse_format(&args.trace_format)?,
        &catalog,
        false,
        args.seed,
    )?;
    crate::inputs::report_skips(&args.input, &trace);
    let arrivals: tessera_trace::Arrivals = args.arrivals.parse().context("--arrivals")?;
    let workload = tessera_trace::with_arrivals_checked(&trace.workload, arrivals, args.seed)
        .context("--arrivals")?;
    write_csv(&args.output, &workload, &catalog)
}

fn generate(args: &GenerateArgs) -> Result<()> {
    if args.generator != "philly" {
        return generate_registered(args);
    }
    let gpu_mix = match args.gpus {
        Some(g) => vec![(g, 1.0)],
        None => PHILLY_GPU_MIX.to_vec(),
    };
    let spec = PoissonWorkload {
        jobs: args.jobs,
        jobs_per_hour: args.load,
        gpu_mix,
        durations: DurationDist::PhillyRuntimes,
        seed: args.seed.unwrap_or(1),
    };
    spec.check().map_err(|e| {
        let flag = match e {
            tessera_trace::GenerateError::TooManyJobs(_) => "--jobs",
            tessera_trace::GenerateError::BadGpus(_) => "--gpus",
            tessera_trace::GenerateError::BadRate(_) => "--load",
            _ => "--load/--jobs",
        };
        anyhow::anyhow!("{flag}: {e}")
    })?;
    let catalog = GpuCatalog::builtin();
    // Jobs are written as they are drawn: memory stays flat whatever --jobs is.
    let write = |w: &mut dyn Write| -> Result<usize> {
        let mut out = tessera_trace::TesseraCsvWriter::new(w, &catalog)?;
        let mut n = 0;
        for job in spec.stream() {
            out.write(&job.context("--load/--jobs")?)?;
            n += 1;
        }
        out.finish()?;
        Ok(n)
    };
    if args.output == "-" {
        write(&mut crate::output::stdout())?;
    } else {
        let file = std::fs::File::create(&args.output)
            .with_context(|| format!("creating {}", args.output))?;
        let n = write(&mut std::io::BufWriter::new(file))
            .with_context(|| format!("writing {}", args.output))?;
        eprintln!("wrote {n} jobs to {}", args.output);
    }
    Ok(())
}

/// `--generator NAME` for a generator of the mechanism registry.
fn generate_registered(args: &GenerateArgs) -> Result<()> {
    let Some(generator) = tessera_mechanisms::generators().find(|g| g.name == args.generator)
    else {
        let known: Vec<&str> = std::iter::once("philly")
            .chain(tessera_mechanisms::generators().map(|g| g.name))
            .collect();
        let hint = tessera_mechanisms::did_you_mean(&args.generator, known.iter().copied())
            .map(|k| format!("; did you mean {k:?}?"))
            .unwrap_or_default();
        anyhow::bail!(
            "--generator: unknown generator {:?}{hint} (known: {})",
            args.generator,
            known.join(", ")
        );
    };
    let options = tessera_mechanisms::GeneratorOptions {
        jobs: args.jobs,
        load: args.load,
        seed: args.seed,
        variant: Some(args.trace.clone()),
        gpus: args.gpus,
    };
    let workload = generator
        .run(&options)
        .map_err(|e| anyhow::anyhow!("--generator {}: {e}", generator.name))?;
    write_csv(&args.output, &workload, &GpuCatalog::builtin())
}
