//! `tessera builtins`: everything built in, from the mechanism registry and the trace crate.

use std::io::Write;

use anyhow::Result;
use tessera_mechanisms::experiment::{benches, engines, experiments};
use tessera_mechanisms::MECHANISMS;

use crate::args::BuiltinsArgs;
use crate::builtin;

pub fn run(args: &BuiltinsArgs) -> Result<()> {
    let mut out = crate::output::stdout();
    if args.capabilities_markdown {
        write!(
            out,
            "{}",
            tessera_mechanisms::capabilities::matrix_markdown()
        )?;
        return Ok(());
    }
    writeln!(out, "Mechanisms:")?;
    for m in MECHANISMS {
        writeln!(out, "  {:<20} {}", m.name(), m.about())?;
    }
    writeln!(out, "\nClusters (--cluster builtin:NAME):")?;
    for (name, about, _) in builtin::CLUSTERS {
        writeln!(out, "  {name:<20} {about}")?;
    }
    for (_, c) in tessera_mechanisms::clusters() {
        writeln!(out, "  {:<20} {}", c.name, c.about)?;
    }
    writeln!(out, "\nTraces (--trace builtin:NAME):")?;
    for (name, about) in tessera_trace::BUILTIN_TRACES {
        writeln!(out, "  {name:<20} {about}")?;
    }
    for w in tessera_mechanisms::workloads() {
        writeln!(out, "  {:<20} {}", w.name, w.about)?;
    }
    writeln!(
        out,
        "\nWorkload generators (tessera trace generate --generator NAME): philly"
    )?;
    for g in tessera_mechanisms::generators() {
        writeln!(out, "  {:<20} {}", g.name, g.about)?;
    }
    writeln!(out, "\nPolicies (--policy NAME):")?;
    for m in MECHANISMS {
        for p in m.policies() {
            writeln!(out, "  {:<20} {}", p.name, p.about)?;
        }
    }
    writeln!(
        out,
        "\nCapabilities (what each policy honours; a run asking for anything else is refused \
         unless `simulate --ignore-unsupported`; docs/capabilities.md):"
    )?;
    write!(out, "{}", tessera_mechanisms::capabilities::matrix_text())?;
    writeln!(out, "\nTruth models (--perf NAME): auto, trace")?;
    for (_, t) in tessera_mechanisms::truths() {
        writeln!(out, "  {:<20} {}", t.name, t.about)?;
    }
    writeln!(out, "\nEngine semantics (--semantics NAME): exact")?;
    for e in engines() {
        writeln!(out, "  {:<20} {}", e.name, e.about)?;
    }
    writeln!(out, "\nExperiments (tessera repro NAME):")?;
    for e in experiments() {
        writeln!(out, "  {:<20} {}", e.name(), e.about())?;
    }
    writeln!(out, "\nBenchmarks (tessera bench NAME):")?;
    for b in benches() {
        writeln!(out, "  {:<20} {}", b.name(), b.about())?;
    }
    writeln!(out, "\nTrace formats (--trace-format NAME): auto")?;
    for f in tessera_trace::TraceFormat::ALL {
        writeln!(out, "  {:<20} {}", f.name(), f.description())?;
    }
    for f in tessera_mechanisms::experiment::replay_formats() {
        writeln!(
            out,
            "  {:<20} {} (policies: {})",
            f.name,
            f.about,
            f.policies.join(", ")
        )?;
    }
    writeln!(
        out,
        "\nCluster files (--cluster PATH): a `kind: Cluster` YAML, Alibaba PAI's 2020 \
         pai_machine_spec.csv, or Alibaba GPU 2023's openb_node_list_*.csv"
    )?;
    Ok(())
}
