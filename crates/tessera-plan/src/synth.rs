//! Synthesis: search a program under speed-proportional ratios, solve the ratio LP for that
//! program, search again under the new ratios, and repeat while the (rounded) cost improves.
//! Also the baselines (data parallelism with an equal and with a speed-proportional split)
//! and the [`Plan`] that `tessera plan` prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cluster::Devices;
use crate::cost::{shard_lengths, CostModel, Exchange};
use crate::error::PlanError;
use crate::graph::{Graph, Prop, Role};
use crate::lp::solve_ratios;
use crate::search::{
    evaluate, refresh_exchanges, search_within, validate, Program, Space, Step, MAX_SEARCH_STATES,
};

/// Rounds of search + LP at most (each round must improve, so it usually stops sooner).
pub const MAX_ROUNDS: usize = 8;

/// Speed-proportional ratios.
pub fn proportional(devices: &Devices) -> Vec<f64> {
    let s = devices.speeds();
    let total: f64 = s.iter().sum();
    s.iter().map(|x| x / total).collect()
}

/// Equal ratios.
pub fn equal(devices: &Devices) -> Vec<f64> {
    vec![1.0 / devices.len() as f64; devices.len()]
}

/// The outcome of a synthesis.
#[derive(Clone, Debug)]
pub struct Synthesis {
    /// The program.
    pub program: Program,
    /// Its ratios.
    pub ratios: Vec<f64>,
    /// Estimated seconds per iteration (with shard lengths rounded).
    pub seconds: f64,
    /// Cost after each accepted round.
    pub history: Vec<f64>,
    /// Search states expanded over all rounds.
    pub expanded: u64,
    /// A search hit its state budget: the program is the best found within it (data
    /// parallelism at worst), not necessarily the cheapest.
    pub exhausted: bool,
}

/// Data parallelism under `ratios`: (program, seconds).
pub fn data_parallel(
    graph: &Graph,
    devices: &Devices,
    ratios: &[f64],
) -> Result<(Program, f64), PlanError> {
    data_parallel_within(graph, devices, ratios, MAX_SEARCH_STATES)
}

fn data_parallel_within(
    graph: &Graph,
    devices: &Devices,
    ratios: &[f64],
    max_states: u64,
) -> Result<(Program, f64), PlanError> {
    let model = CostModel::new(graph, devices, ratios);
    let res = search_within(
        graph,
        &model,
        Space::DataParallel,
        f64::INFINITY,
        max_states,
    );
    match res.program {
        Some(p) => Ok((p, res.cost)),
        None if res.exhausted => Err(PlanError::SearchBudget {
            graph: graph.name.clone(),
            max_states,
        }),
        None if model.memory_limit().is_finite() => {
            Err(does_not_fit(graph, devices, "data parallelism"))
        }
        None => Err(PlanError::NoProgram {
            graph: graph.name.clone(),
        }),
    }
}

fn does_not_fit(graph: &Graph, devices: &Devices, what: &'static str) -> PlanError {
    PlanError::DoesNotFit {
        graph: graph.name.clone(),
        what,
        limit_gib: devices.min_memory_bytes() / crate::cluster::GIB,
    }
}

/// Data parallelism's seconds under `ratios`, `None` when it does not fit in memory.
pub fn data_parallel_if_it_fits(
    graph: &Graph,
    devices: &Devices,
    ratios: &[f64],
    max_states: u64,
) -> Result<Option<f64>, PlanError> {
    match data_parallel_within(graph, devices, ratios, max_states) {
        Ok((_, s)) => Ok(Some(s)),
        Err(PlanError::DoesNotFit { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Synthesizes a program and ratios for `graph` on `devices`: search under speed-proportional
/// ratios (bounded by the cheaper data-parallel program's cost), LP over the ratios for the program found,
/// search again under the LP's ratios, while the rounded cost improves.
pub fn synthesize(graph: &Graph, devices: &Devices) -> Result<Synthesis, PlanError> {
    synthesize_within(graph, devices, MAX_SEARCH_STATES)
}

/// [`synthesize`] with each search limited to `max_states` states. A full search that hits
/// the limit keeps the best program so far (data parallelism at worst) and marks the
/// synthesis `exhausted`; a data-parallel search that hits it is an error.
pub fn synthesize_within(
    graph: &Graph,
    devices: &Devices,
    max_states: u64,
) -> Result<Synthesis, PlanError> {
    let mut ratios = proportional(devices);
    // The better data-parallel program (speed-proportional or equal: with expert layers,
    // uneven expert shards can cost more than they save) bounds the search when it fits;
    // otherwise nothing does.
    let mut start = (Program::default(), f64::INFINITY, ratios.clone());
    for r in [ratios.clone(), equal(devices)] {
        match data_parallel_within(graph, devices, &r, max_states) {
            Ok((p, c)) if c < start.1 => start = (p, c, r),
            Ok(_) | Err(PlanError::DoesNotFit { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    let (dp, dp_cost, dp_ratios) = start;
    let mut best = Synthesis {
        program: dp,
        ratios: dp_ratios,
        seconds: dp_cost,
        history: Vec::new(),
        expanded: 0,
        exhausted: false,
    };
    for _ in 0..MAX_ROUNDS {
        let model = CostModel::new(graph, devices, &ratios);
        let res = search_within(graph, &model, Space::Full, best.seconds, max_states);
        best.expanded += res.expanded;
        if res.exhausted {
            best.exhausted = true;
            best.history.push(best.seconds);
            break;
        }
        if let Some(program) = res.program {
            if res.cost <= best.seconds {
                best.program = program;
                best.seconds = res.cost;
                best.ratios = ratios.clone();
            }
        }
        if !best.seconds.is_finite() {
            break;
        }
        best.history.push(best.seconds);
        let lin = evaluate(graph, &best.program, &model).linear;
        let Some(next) = solve_ratios(&lin, &devices.speeds()) else {
            break;
        };
        if next.iter().zip(&ratios).all(|(a, b)| (a - b).abs() < 1e-9) {
            break;
        }
        // Keep the LP's ratios only when the program costs less under them once shard lengths
        // are rounded; otherwise the alternation has converged.
        let next_model = CostModel::new(graph, devices, &next);
        let ev_next = evaluate(graph, &best.program, &next_model);
        let at_next = ev_next.seconds;
        if at_next >= best.seconds * (1.0 - 1e-9)
            || ev_next.memory_bytes > next_model.memory_limit()
        {
            break;
        }
        best.seconds = at_next;
        best.ratios = next.clone();
        ratios = next;
    }
    if !best.seconds.is_finite() {
        return Err(if best.exhausted {
            PlanError::SearchBudget {
                graph: graph.name.clone(),
                max_states,
            }
        } else {
            does_not_fit(graph, devices, "every plan")
        });
    }
    let model = CostModel::new(graph, devices, &best.ratios);
    refresh_exchanges(graph, &mut best.program, &model);
    Ok(best)
}

/// One device in a plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RankReport {
    /// Rank.
    pub rank: usize,
    /// GPU model.
    pub gpu: String,
    /// Machine index.
    pub machine: usize,
    /// FLOP/s.
    pub flops_per_s: f64,
    /// Sharding ratio.
    pub ratio: f64,
}

/// How a tensor is held.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TensorReport {
    /// Name.
    pub name: String,
    /// Input, parameter or activation.
    pub role: Role,
    /// Shape.
    pub shape: Vec<u64>,
    /// Properties it is held in, first the one it is produced or placed in.
    pub sharding: Vec<Prop>,
}

/// One step of the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepReport {
    /// An operator run.
    Compute {
        /// Operator.
        op: String,
        /// Split label (`null`: replicated or partial sums in, partial sums out).
        split: Option<char>,
        /// Output tensor and its property.
        output: String,
        /// Output property.
        output_prop: Prop,
        /// Seconds (forward + backward).
        seconds: f64,
    },
    /// An exchange.
    Exchange {
        /// Tensor.
        tensor: String,
        /// From.
        from: Prop,
        /// To.
        to: Prop,
        /// Forward collective (kebab-case), `null` when free.
        forward: Option<String>,
        /// Backward dual.
        backward: Option<String>,
        /// Padded, grouped (broadcasts), whole or free.
        exchange: Exchange,
        /// Seconds (forward + backward).
        seconds: f64,
    },
    /// A replicated parameter's gradient all-reduce.
    GradientAllReduce {
        /// Parameter.
        tensor: String,
        /// Seconds.
        seconds: f64,
    },
}

/// Shard lengths of one split axis length.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ShardReport {
    /// Axis length.
    pub length: u64,
    /// Shard length per rank.
    pub per_rank: Vec<u64>,
}

/// A plan: the program, its ratios and shard lengths, its estimate, and the baselines.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Model name.
    pub model: String,
    /// Devices.
    pub ranks: Vec<RankReport>,
    /// Estimated seconds per iteration of the synthesized plan.
    pub iteration_s: f64,
    /// Of which compute.
    pub compute_s: f64,
    /// Of which communication.
    pub communication_s: f64,
    /// Bytes the synthesized plan holds on its fullest device (parameters with gradients and
    /// Adam state, activations kept for the backward pass).
    pub memory_bytes: f64,
    /// Data parallelism (expert-parallel in expert layers), equal split; `None` when it does
    /// not fit in the devices' memory.
    pub dp_equal_s: Option<f64>,
    /// Data parallelism, speed-proportional split; `None` when it does not fit.
    pub dp_proportional_s: Option<f64>,
    /// `dp_equal_s / iteration_s`.
    pub speedup_vs_dp_equal: Option<f64>,
    /// Search states expanded.
    pub states_expanded: u64,
    /// A search hit its state budget: the plan is the best found within it, not necessarily
    /// the cheapest.
    pub search_exhausted: bool,
    /// Cost after each round of search + LP.
    pub rounds: Vec<f64>,
    /// Per tensor its sharding.
    pub tensors: Vec<TensorReport>,
    /// The program.
    pub steps: Vec<StepReport>,
    /// Per split length, per rank shard lengths.
    pub shards: Vec<ShardReport>,
}

/// Synthesizes and reports a plan with its baselines.
pub fn plan(graph: &Graph, devices: &Devices) -> Result<Plan, PlanError> {
    plan_within(graph, devices, MAX_SEARCH_STATES)
}

/// [`plan`] with each search limited to `max_states` states (see [`synthesize_within`]).
pub fn plan_within(graph: &Graph, devices: &Devices, max_states: u64) -> Result<Plan, PlanError> {
    let dp_equal_s = data_parallel_if_it_fits(graph, devices, &equal(devices), max_states)?;
    let dp_proportional_s =
        data_parallel_if_it_fits(graph, devices, &proportional(devices), max_states)?;
    let syn = synthesize_within(graph, devices, max_states)?;
    Ok(report(graph, devices, &syn, dp_equal_s, dp_proportional_s))
}

fn report(
    graph: &Graph,
    devices: &Devices,
    syn: &Synthesis,
    dp_equal_s: Option<f64>,
    dp_proportional_s: Option<f64>,
) -> Plan {
    let model = CostModel::new(graph, devices, &syn.ratios);
    let ev = evaluate(graph, &syn.program, &model);
    let mut sharding: Vec<Vec<Prop>> = vec![Vec::new(); graph.tensors.len()];
    let mut lengths = std::collections::BTreeSet::new();
    let mut steps = Vec::new();
    for (step, &secs) in syn.program.steps.iter().zip(&ev.step_seconds) {
        match step {
            Step::Place { tensor, prop } => {
                sharding[*tensor].push(*prop);
                if let Prop::Gather(a) = prop {
                    lengths.insert(graph.tensors[*tensor].shape[*a as usize]);
                }
                if secs > 0.0 {
                    steps.push(StepReport::GradientAllReduce {
                        tensor: graph.tensors[*tensor].name.clone(),
                        seconds: secs,
                    });
                }
            }
            Step::Comm {
                tensor,
                from,
                to,
                forward,
                backward,
                exchange,
                ..
            } => {
                if !sharding[*tensor].contains(to) {
                    sharding[*tensor].push(*to);
                }
                if let Prop::Gather(a) = to {
                    lengths.insert(graph.tensors[*tensor].shape[*a as usize]);
                }
                steps.push(StepReport::Exchange {
                    tensor: graph.tensors[*tensor].name.clone(),
                    from: *from,
                    to: *to,
                    forward: forward.map(|c| c.name().to_string()),
                    backward: backward.map(|c| c.name().to_string()),
                    exchange: *exchange,
                    seconds: secs,
                });
            }
            Step::Compute { op, rule } => {
                let o = &graph.ops[*op];
                let r = &o.rules[*rule];
                sharding[o.output].insert(0, r.output);
                if r.split.is_some() {
                    lengths.insert(r.split_len);
                }
                steps.push(StepReport::Compute {
                    op: o.name.clone(),
                    split: r.split,
                    output: graph.tensors[o.output].name.clone(),
                    output_prop: r.output,
                    seconds: secs,
                });
            }
        }
    }
    let tensors = graph
        .tensors
        .iter()
        .zip(sharding)
        .map(|(t, s)| TensorReport {
            name: t.name.clone(),
            role: t.role,
            shape: t.shape.clone(),
            sharding: s,
        })
        .collect();
    let ranks = devices
        .devices
        .iter()
        .enumerate()
        .map(|(rank, d)| RankReport {
            rank,
            gpu: d.gpu.clone(),
            machine: d.machine,
            flops_per_s: d.flops_per_s,
            ratio: syn.ratios[rank],
        })
        .collect();
    let shards = lengths
        .into_iter()
        .map(|length| ShardReport {
            length,
            per_rank: shard_lengths(&syn.ratios, length),
        })
        .collect();
    Plan {
        model: graph.name.clone(),
        ranks,
        iteration_s: ev.seconds,
        compute_s: ev.compute_seconds,
        communication_s: ev.comm_seconds,
        dp_equal_s,
        dp_proportional_s,
        memory_bytes: ev.memory_bytes,
        speedup_vs_dp_equal: dp_equal_s.map(|d| d / ev.seconds),
        states_expanded: syn.expanded,
        search_exhausted: syn.exhausted,
        rounds: syn.history.clone(),
        tensors,
        steps,
        shards,
    }
}

/// Checks a synthesis' program (see [`validate`]).
pub fn check(graph: &Graph, syn: &Synthesis) -> Result<(), String> {
    validate(graph, &syn.program)
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1e3)
}

/// A readable listing: summary, per-rank shard lengths, then the program.
pub fn listing(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "model {}: {} ranks", plan.model, plan.ranks.len());
    let _ = writeln!(
        out,
        "estimated iteration: {} (compute {}, communication {})",
        ms(plan.iteration_s),
        ms(plan.compute_s),
        ms(plan.communication_s)
    );
    let fits = |s: Option<f64>| s.map_or_else(|| "does not fit in memory".to_string(), ms);
    let _ = writeln!(
        out,
        "  fullest device holds:        {:.2} GiB",
        plan.memory_bytes / crate::cluster::GIB
    );
    let _ = writeln!(
        out,
        "  DP equal split:              {}",
        fits(plan.dp_equal_s)
    );
    let _ = writeln!(
        out,
        "  DP speed-proportional split: {}",
        fits(plan.dp_proportional_s)
    );
    if let Some(x) = plan.speedup_vs_dp_equal {
        let _ = writeln!(out, "  speed-up over DP equal:      {x:.2}x");
    }
    let _ = writeln!(
        out,
        "  search: {} states expanded, {} round(s)",
        plan.states_expanded,
        plan.rounds.len()
    );
    if plan.search_exhausted {
        let _ = writeln!(
            out,
            "  search stopped at its state budget (--max-search-states): the best plan found \
             within it, not necessarily the cheapest"
        );
    }
    let _ = writeln!(out, "\nper rank (shard length of each split axis length):");
    let header: Vec<String> = plan
        .shards
        .iter()
        .map(|s| format!("L={}", s.length))
        .collect();
    let _ = writeln!(
        out,
        "  rank  gpu         machine  TFLOP/s  ratio    {}",
        header.join("  ")
    );
    for r in &plan.ranks {
        let cols: Vec<String> = plan
            .shards
            .iter()
            .map(|s| {
                format!(
                    "{:>w$}",
                    s.per_rank[r.rank],
                    w = format!("L={}", s.length).len()
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "  {:>4}  {:<10}  {:>7}  {:>7.2}  {:.4}   {}",
            r.rank,
            r.gpu,
            r.machine,
            r.flops_per_s / 1e12,
            r.ratio,
            cols.join("  ")
        );
    }
    let _ = writeln!(
        out,
        "\ninputs and parameters (replicated parameters all-reduce their gradients):"
    );
    for t in plan.tensors.iter().filter(|t| t.role != Role::Activation) {
        let held: Vec<String> = t.sharding.iter().map(Prop::to_string).collect();
        let role = if t.role == Role::Parameter {
            "parameter"
        } else {
            "input"
        };
        let _ = writeln!(
            out,
            "  {role:<9} {:<28} {:?}  {}",
            t.name,
            t.shape,
            held.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "\nprogram (forward; backward duals included in the times):"
    );
    for s in &plan.steps {
        match s {
            StepReport::Compute {
                op,
                split,
                output,
                output_prop,
                seconds,
            } => {
                let how = match split {
                    Some(l) => format!("split {l}"),
                    None => "whole".into(),
                };
                let _ = writeln!(
                    out,
                    "  compute   {op:<28} {how:<9} -> {output} {output_prop}  {}",
                    ms(*seconds)
                );
            }
            StepReport::Exchange {
                tensor,
                from,
                to,
                forward,
                backward,
                exchange,
                seconds,
            } => {
                let coll = match (forward, backward) {
                    (Some(f), Some(b)) => {
                        format!("{f} (backward {b}, {})", exchange_name(*exchange))
                    }
                    _ => "free".into(),
                };
                let _ = writeln!(
                    out,
                    "  exchange  {tensor:<28} {from} -> {to}: {coll}  {}",
                    ms(*seconds)
                );
            }
            StepReport::GradientAllReduce { tensor, seconds } => {
                let _ = writeln!(
                    out,
                    "  gradient  {tensor:<28} all-reduce (replicated parameter)  {}",
                    ms(*seconds)
                );
            }
        }
    }
    out
}

fn exchange_name(e: Exchange) -> &'static str {
    match e {
        Exchange::Free => "free",
        Exchange::Whole => "one collective",
        Exchange::Padded => "padded",
        Exchange::Grouped => "grouped broadcasts",
    }
}

/// Sharding label of each compute step (test helper, also handy to summarise a plan).
pub fn compute_splits(graph: &Graph, program: &Program) -> BTreeMap<String, Option<char>> {
    program
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Compute { op, rule } => Some((
                graph.ops[*op].name.clone(),
                graph.ops[*op].rules[*rule].split,
            )),
            _ => None,
        })
        .collect()
}
