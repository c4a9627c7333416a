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
    } else {
        write!(
            out,
            "{}",
            crate::output::printable_lines(&TraceStats::of(&trace.workload).to_string())
        )?;
    }
    write!(out, "{}", services_summary(&trace.workload))?;
    Ok(())
}

/// The inference services of a workload: how many, and one line each (model, arrivals and
/// mean rate, window, SLO, per-instance demand); empty without services.
fn services_summary(workload: &tessera_model::Workload) -> String {
    use std::fmt::Write as _;
    use tessera_model::{ArrivalProcess, GpuDemand};
    let services = workload.services();
    if services.is_empty() {
        return String::new();
    }
    let mut models: Vec<&str> = services
        .iter()
        .map(|s| s.model.as_str())
        .filter(|m| !m.is_empty())
        .collect();
    models.sort_unstable();
    models.dedup();
    let mut out = format!(
        "services:       {}\nservice models: {}\n",
        services.len(),
        if models.is_empty() {
            "(none named)".to_string()
        } else {
            models.join(", ")
        }
    );
    for s in services {
        let span = s.end - s.start;
        let arrivals = match &s.arrivals {
            ArrivalProcess::Poisson { rate } => format!("poisson {rate}/s"),
            ArrivalProcess::Gamma { rate, cv } => format!("gamma {rate}/s cv {cv}"),
            ArrivalProcess::RateSeries { rates } => format!("rate series of {} s", rates.len()),
            ArrivalProcess::Timestamps { offsets } => format!("{} timestamps", offsets.len()),
        };
        let gpu = match s.instance.gpu {
            GpuDemand::Whole => "whole GPU".to_string(),
            GpuDemand::Quota {
                sm_request,
                sm_limit,
            } => format!("SM quota {sm_request}..{sm_limit}‰"),
        };
        let _ = writeln!(
            out,
            "  {}: model {}, {arrivals} (mean {:.3} req/s), {:.0}-{:.0} s, SLO {} ms, \
             max batch {}, {gpu}, {} GPU memory, {} CPU, {} memory",
            tessera_trace::printable(&s.name),
            if s.model.is_empty() {
                "-".to_string()
            } else {
                tessera_trace::printable(&s.model).to_string()
            },
            s.arrivals.mean_rate(span),
            s.start.as_secs_f64(),
            s.end.as_secs_f64(),
            s.slo.as_micros() as f64 / 1000.0,
            s.max_batch,
            memory_text(s.instance.gpu_memory),
            s.instance.cpu,
            memory_text(s.instance.memory),
        );
    }
    out
}

/// A memory size for people: the shortest exact quantity, decimal (`6G`, as specs often
/// write device memory) or binary (`4Gi`), instead of `5859375Ki` for 6 GB.
fn memory_text(b: tessera_model::Bytes) -> String {
    let binary = b.to_string();
    let decimal = [("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)]
        .iter()
        .find(|(_, size)| b.0 >= *size as u64 && b.0.is_multiple_of(*size as u64))
        .map(|(suffix, size)| format!("{}{suffix}", b.0 / *size as u64));
    match decimal {
        Some(d) if d.len() < binary.len() => d,
        _ => binary,
    }
}

/// Writes `workload` to `output` in `format` (`auto`: by the output's extension): a
/// `kind: Workload` spec keeps jobs and services; the CSV holds jobs only, and says so when
/// services are left out.
fn write_workload(
    output: &str,
    format: &str,
    workload: &tessera_model::Workload,
    catalog: &GpuCatalog,
) -> Result<()> {
    let lower = output.to_ascii_lowercase();
    let spec = match format.to_ascii_lowercase().as_str() {
        "auto" if lower.ends_with(".yaml") || lower.ends_with(".yml") => {
            Some(tessera_trace::SpecFormat::Yaml)
        }
        "auto" if lower.ends_with(".json") => Some(tessera_trace::SpecFormat::Json),
        "auto" | "csv" => None,
        "yaml" | "yml" => Some(tessera_trace::SpecFormat::Yaml),
        "json" => Some(tessera_trace::SpecFormat::Json),
        other => anyhow::bail!(
            "--output-format: unknown format {:?} (known: auto, csv, yaml, json)",
            tessera_trace::printable(other)
        ),
    };
    let Some(spec) = spec else {
        let services = workload.services().len();
        if services > 0 {
            eprintln!(
                "warning: the CSV holds training jobs only: {services} inference services are \
                 left out (write a .yaml or .json file, or --output-format yaml|json, to keep them)"
            );
        }
        return write_csv(output, workload, catalog);
    };
    let text = tessera_trace::write_workload_spec(workload, catalog, spec)?;
    if output == "-" {
        let mut out = crate::output::stdout();
        out.write_all(text.as_bytes())?;
        if !text.ends_with('\n') {
            writeln!(out)?;
        }
    } else {
        std::fs::File::create(output)
            .map(crate::output::Watched)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("writing {output}"))?;
        eprintln!(
            "wrote {} and {} to {output}",
            crate::output::count(workload.len() as u64, "job"),
            crate::output::count(workload.services().len() as u64, "service")
        );
    }
    Ok(())
}

fn write_csv(output: &str, workload: &tessera_model::Workload, catalog: &GpuCatalog) -> Result<()> {
    if output == "-" {
        tessera_trace::write_tessera_csv(crate::output::stdout(), workload, catalog)?;
    } else {
        let file = std::fs::File::create(output).with_context(|| format!("creating {output}"))?;
        let file = std::io::BufWriter::new(crate::output::Watched(file));
        tessera_trace::write_tessera_csv(file, workload, catalog)
            .with_context(|| format!("writing {output}"))?;
        eprintln!(
            "wrote {} to {output}",
            crate::output::count(workload.len() as u64, "job")
        );
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
    write_workload(&args.output, &args.output_format, &workload, &catalog)
}

fn generate(args: &GenerateArgs) -> Result<()> {
    if args.generator != "philly" {
        return generate_registered(args);
    }
    if let Some(variant) = &args.trace {
        anyhow::bail!(
            "--trace {:?}: the philly generator has no variants (--trace picks one of a \
             mechanism's generator, e.g. --generator synergy-reference --trace multi)",
            tessera_trace::printable(variant)
        );
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
        let n = write(&mut std::io::BufWriter::new(crate::output::Watched(file)))
            .with_context(|| format!("writing {}", args.output))?;
        eprintln!(
            "wrote {} to {}",
            crate::output::count(n as u64, "job"),
            args.output
        );
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
    if let Some(variant) = &args.trace {
        if generator.variants.is_empty() {
            anyhow::bail!(
                "--trace {:?}: generator {} has no variants",
                tessera_trace::printable(variant),
                generator.name
            );
        }
        if !generator.variants.contains(&variant.as_str()) {
            anyhow::bail!(
                "--trace must be {} for generator {}, got {:?}",
                generator.variants.join(" or "),
                generator.name,
                tessera_trace::printable(variant)
            );
        }
    }
    let options = tessera_mechanisms::GeneratorOptions {
        jobs: args.jobs,
        load: args.load,
        seed: args.seed,
        variant: args.trace.clone(),
        gpus: args.gpus,
    };
    let workload = generator
        .run(&options)
        .map_err(|e| anyhow::anyhow!("--generator {}: {e}", generator.name))?;
    write_csv(&args.output, &workload, &GpuCatalog::builtin())
}
