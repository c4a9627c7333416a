//! `tessera builtins`: what is built in.

use std::io::Write;

use anyhow::Result;

use crate::builtin;

pub fn run() -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "Clusters (--cluster builtin:NAME):")?;
    for (name, about, _) in builtin::CLUSTERS {
        writeln!(out, "  {name:<20} {about}")?;
    }
    writeln!(out, "\nTraces (--trace builtin:NAME):")?;
    for (name, about) in tessera_trace::BUILTIN_TRACES {
        writeln!(out, "  {name:<20} {about}")?;
    }
    for (name, about, ..) in tessera_sim::synergy_reference::BUILTIN_TRACES {
        writeln!(out, "  {name:<20} {about}")?;
    }
    writeln!(out, "\nPolicies (--policy NAME):")?;
    for p in tessera_sched::POLICIES {
        writeln!(out, "  {:<20} {}", p.name, p.about)?;
    }
    writeln!(out, "\nTrace formats (--trace-format NAME): auto")?;
    for f in tessera_trace::TraceFormat::ALL {
        writeln!(out, "  {f}")?;
    }
    Ok(())
}
