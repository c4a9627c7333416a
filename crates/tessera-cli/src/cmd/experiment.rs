//! `tessera repro NAME` and `tessera bench NAME`: run an experiment of the mechanism
//! registry with the flags it declares, print its report, and write `summary.json` and its
//! figures when asked.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{anyhow, Context, Result};
use clap::ArgMatches;
use tessera_mechanisms::experiment::{
    benches, default_threads, experiments, Experiment, ExperimentArgs, ReproOutput, RunContext,
};

use crate::progress::Bars;

/// Which registry list a subcommand draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `tessera repro`.
    Repro,
    /// `tessera bench`.
    Bench,
}

/// Runs the experiment named by the subcommand of `matches`.
pub fn run(kind: Kind, matches: &ArgMatches) -> Result<()> {
    let Some((name, sub)) = matches.subcommand() else {
        return Err(anyhow!("name an experiment (see --help)"));
    };
    if kind == Kind::Bench && name == "all" {
        return run_all(sub.get_flag("json"));
    }
    let list: Vec<&'static dyn Experiment> = match kind {
        Kind::Repro => experiments().collect(),
        Kind::Bench => benches().collect(),
    };
    let Some(exp) = list.into_iter().find(|e| e.name() == name) else {
        return Err(anyhow!("unknown experiment {name:?}"));
    };
    let output = run_one(exp, sub)?;
    let json = sub.get_flag("json");
    let mut stdout = crate::output::stdout();
    if json {
        writeln!(stdout, "{}", serde_json::to_string_pretty(&output.summary)?)?;
    } else {
        write!(stdout, "{}", output.text)?;
    }
    if let Some(dir) = sub.get_one::<PathBuf>("out") {
        write_outputs(dir, &output)?;
    }
    Ok(())
}

/// Runs one experiment with the parameter values in `sub`.
fn run_one(exp: &dyn Experiment, sub: &ArgMatches) -> Result<ReproOutput> {
    let given: Vec<(&str, String)> = exp
        .params()
        .iter()
        .filter_map(|p| {
            if p.default == "false" {
                // `--X false` (the hidden old spelling of `--no-X`) sets `no-X`.
                let old = p
                    .name
                    .strip_prefix("no-")
                    .and_then(|positive| sub.get_one::<bool>(positive))
                    .map(|v| !v);
                (sub.get_flag(p.name) || old == Some(true)).then(|| (p.name, "true".to_string()))
            } else {
                sub.get_one::<String>(p.name).map(|v| (p.name, v.clone()))
            }
        })
        .collect();
    let args = ExperimentArgs::new(exp.params(), given.iter().map(|(k, v)| (*k, v.as_str())))?;
    let threads = sub
        .get_one::<usize>("threads")
        .copied()
        .unwrap_or_else(default_threads)
        .max(1);
    let bars = Bars::new();
    let bar = bars.bar(exp.name(), 0);
    let progress = move |done: usize, total: usize| bar.set(done, total);
    let ctx = RunContext {
        threads,
        progress: &progress,
    };
    exp.run(&args, &ctx)
        .with_context(|| format!("experiment {}", exp.name()))
}

/// `tessera bench all`: every benchmark with its defaults.
fn run_all(json: bool) -> Result<()> {
    let mut docs = serde_json::Map::new();
    let mut stdout = crate::output::stdout();
    for (i, b) in benches().enumerate() {
        let args = ExperimentArgs::new(b.params(), [])?;
        let out = b
            .run(&args, &RunContext::quiet(default_threads()))
            .with_context(|| format!("benchmark {}", b.name()))?;
        if json {
            docs.insert(b.name().to_string(), out.summary);
        } else {
            if i > 0 {
                writeln!(stdout)?;
            }
            write!(stdout, "{}", out.text)?;
        }
    }
    if json {
        writeln!(
            stdout,
            "{}",
            serde_json::to_string_pretty(&serde_json::Value::Object(docs))?
        )?;
    }
    Ok(())
}

/// Writes `summary.json` and each figure as SVG and PNG into `dir`.
pub(crate) fn write_outputs(dir: &std::path::Path, output: &ReproOutput) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("summary.json");
    std::fs::write(&path, serde_json::to_string_pretty(&output.summary)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let mut written = vec![path.display().to_string()];
    for f in &output.figures {
        for format in [crate::plot::PlotFormat::Svg, crate::plot::PlotFormat::Png] {
            let path = crate::plot::experiment_figure(dir, format, f)
                .with_context(|| format!("drawing {}", f.file_stem))?;
            written.push(path.display().to_string());
        }
    }
    eprintln!("wrote {}", written.join(", "));
    Ok(())
}
