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
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}: format {}{}",
        args.path,
        format_label(&args.path, &trace),
        if trace.detected { " (detected)" } else { "" }
    )?;
    if trace.skipped > 0 {
        writeln!(out, "skipped rows: {}", trace.skipped)?;
    }
    if trace.dropped > 0 {
        writeln!(
            out,
            "dropped jobs:   {} (did not finish, or no run time or GPUs)",
            trace.dropped
        )?;
    }
    write!(out, "{}", TraceStats::of(&trace.workload))?;
    Ok(())
}

fn write_csv(output: &str, workload: &tessera_model::Workload, catalog: &GpuCatalog) -> Result<()> {
    if output == "-" {
        tessera_trace::write_tessera_csv(std::io::stdout().lock(), workload, catalog)?;
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
    if trace.skipped > 0 {
        eprintln!("{}: skipped {} malformed rows", args.input, trace.skipped);
    }
    if trace.dropped > 0 {
        eprintln!(
            "{}: dropped {} jobs that did not finish or have no run time or GPUs",
            args.input, trace.dropped
        );
    }
    let arrivals: tessera_trace::Arrivals = args.arrivals.parse().context("--arrivals")?;
    let workload = tessera_trace::with_arrivals(&trace.workload, arrivals, args.seed);
    write_csv(&args.output, &workload, &catalog)
}

fn generate(args: &GenerateArgs) -> Result<()> {
    anyhow::ensure!(
        args.load.is_finite() && args.load > 0.0,
        "--load must be positive, got {}",
        args.load
    );
    match args.generator.as_str() {
        "philly" => {}
        "synergy-reference" => return generate_synergy_reference(args),
        g => anyhow::bail!("--generator must be philly or synergy-reference, got {g:?}"),
    }
    let gpu_mix = match args.gpus {
        Some(0) => anyhow::bail!("--gpus must be at least 1"),
        Some(g) => vec![(g, 1.0)],
        None => PHILLY_GPU_MIX.to_vec(),
    };
    let workload = PoissonWorkload {
        jobs: args.jobs,
        jobs_per_hour: args.load,
        gpu_mix,
        durations: DurationDist::PhillyRuntimes,
        seed: args.seed.unwrap_or(1),
    }
    .generate();
    write_csv(&args.output, &workload, &GpuCatalog::builtin())
}

fn generate_synergy_reference(args: &GenerateArgs) -> Result<()> {
    use tessera_mechanisms::synergy::reference_workload::{
        ReferenceTrace, ReferenceWorkload, REFERENCE_SEED,
    };
    anyhow::ensure!(
        args.gpus.is_none(),
        "--gpus does not apply to --generator synergy-reference (use --trace single|multi)"
    );
    let Some(trace) = ReferenceTrace::parse(&args.trace) else {
        anyhow::bail!("--trace must be single or multi, got {:?}", args.trace);
    };
    let workload = ReferenceWorkload {
        jobs: args.jobs,
        seed: args.seed.unwrap_or(REFERENCE_SEED),
        ..ReferenceWorkload::new(trace, args.load)
    }
    .generate()
    .context("--generator synergy-reference")?;
    write_csv(&args.output, &workload, &GpuCatalog::builtin())
}
