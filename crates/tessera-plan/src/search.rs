//! Best-first synthesis of a sharded program, and the program's evaluation and validation.
//!
//! A program is a sequence of [`Step`]s over the graph's operators in their topological order.
//! The search state after `i` operators is the set of properties held by every live tensor
//! (produced or placed, and still to be read). Pruning, after HAP (EuroSys'24 §5):
//!
//! 1. each operator is computed once, in graph order, and each tensor is communicated at most
//!    once (free slices do not count);
//! 2. free and communication steps are fused into their consumer: a tensor is converted only
//!    when an operator needs it, so no state is spent on exchanges nobody reads;
//! 3. a per-state best-cost table drops a state reached again at no lower cost (and, when
//!    the devices' memory is known, no lower memory: plans over it are pruned, see
//!    [`CostModel::held_bytes`]);
//! 4. branch and bound: states whose cost plus an admissible bound on the rest (remaining
//!    FLOPs over the cluster's total speed) exceed an upper bound are dropped.
//!
//! The queue pops the lowest cost-plus-bound first (A*, ties by insertion order), so the first
//! finished state is the cheapest program under the fixed ratios.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use serde::Serialize;
use tessera_perf::collective::Collective;

use crate::cost::{CostModel, Exchange, LinearCost, FORWARD_AND_BACKWARD, PARAMETER_STATE_FACTOR};
use crate::graph::{Graph, Prop, Role, TensorId};

/// One instruction of a program.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// An input or parameter is placed in `prop` (free: the loader or initialiser does it).
    /// A parameter placed as `Identity` all-reduces its gradient in backward.
    Place {
        /// The tensor.
        tensor: TensorId,
        /// Its property.
        prop: Prop,
    },
    /// Change how a tensor is held.
    Comm {
        /// The tensor.
        tensor: TensorId,
        /// Held property read.
        from: Prop,
        /// Property produced.
        to: Prop,
        /// Forward collective (`None`: free).
        forward: Option<Collective>,
        /// Backward dual on the gradient.
        backward: Option<Collective>,
        /// Forward exchange method.
        exchange: Exchange,
        /// Backward exchange method.
        exchange_backward: Exchange,
    },
    /// Run an operator under one of its rules.
    Compute {
        /// Operator index.
        op: usize,
        /// Rule index in the operator's rules.
        rule: usize,
    },
}

/// A synthesized program.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Program {
    /// Steps in execution order.
    pub steps: Vec<Step>,
}

/// Which programs the search may produce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// Every rule and exchange.
    Full,
    /// Data parallelism: each operator split along its batch, parameters replicated,
    /// activations never exchanged (operators without a batch axis are free to choose).
    /// Expert layers run expert-parallel, as MoE systems train them (GShard, DeepSpeed-MoE)
    /// and as the MoE baselines HAP compares against do: see [`expert_rules`].
    DataParallel,
}

/// The expert-parallel rules data parallelism may use, per operator: a rule that splits a
/// stacked parameter (rank 3 or more) along its first axis (one expert per slice) while every other input
/// and the output stay split too (`becd,edf->becf` split along `e`), and, for an operator
/// without parameters whose inputs and output are all split, a rule along such an expert
/// label (the activation between two expert matrices). Graphs without stacked experts have
/// none, and their data parallelism is plain.
pub fn expert_rules(graph: &Graph) -> Vec<Vec<usize>> {
    let all_split = |o: &crate::graph::Op, r: &crate::graph::Rule| {
        matches!(r.output, Prop::Gather(_))
            && o.inputs
                .iter()
                .zip(&r.inputs)
                .all(|(&t, q)| matches!(q, Prop::Gather(_)) || graph.tensors[t].role == Role::Input)
    };
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); graph.ops.len()];
    let mut labels: Vec<char> = Vec::new();
    for (i, o) in graph.ops.iter().enumerate() {
        let has_param = o
            .inputs
            .iter()
            .any(|&t| graph.tensors[t].role == Role::Parameter);
        if !has_param {
            continue;
        }
        for (ri, r) in o.rules.iter().enumerate() {
            if Some(ri) == o.batch_rule || r.split.is_none() || !all_split(o, r) {
                continue;
            }
            // A stack of matrices (rank 3 or more) split along the stack.
            let params_by_expert = o.inputs.iter().zip(&r.inputs).all(|(&t, q)| {
                let x = &graph.tensors[t];
                x.role != Role::Parameter || (*q == Prop::Gather(0) && x.shape.len() >= 3)
            });
            if params_by_expert {
                out[i].push(ri);
                labels.extend(r.split);
            }
        }
    }
    for (i, o) in graph.ops.iter().enumerate() {
        if o.inputs
            .iter()
            .any(|&t| graph.tensors[t].role == Role::Parameter)
        {
            continue;
        }
        for (ri, r) in o.rules.iter().enumerate() {
            if Some(ri) != o.batch_rule
                && r.split.is_some_and(|c| labels.contains(&c))
                && all_split(o, r)
            {
                out[i].push(ri);
            }
        }
    }
    out
}

/// What a search returns.
#[derive(Clone, Debug)]
pub struct SearchResult {
    /// The cheapest program found (`None` when the bound pruned everything).
    pub program: Option<Program>,
    /// Its cost in seconds.
    pub cost: f64,
    /// States popped from the queue and expanded.
    pub expanded: u64,
    /// The search stopped at its state budget before finishing: `program` is `None` and
    /// nothing is known about programs cheaper than the upper bound.
    pub exhausted: bool,
}

/// States one search may create before it gives up (each holds its steps, its frontier and
/// a best-cost entry: some 700 bytes, so about 350 MB at the limit). Wide graphs (many
/// tensors live at once) grow the state space exponentially; the budget bounds time and
/// memory whatever the graph. `tessera plan --max-search-states` overrides it.
pub const MAX_SEARCH_STATES: u64 = 500_000;

/// Memory classes a state's dominance distinguishes (see `search_within`).
const MEMORY_CLASSES: f64 = 16.0;

const IDENTITY_BIT: u16 = 1;
const REDUCE_BIT: u16 = 2;
const COMMUNICATED_BIT: u16 = 1 << 15;

fn bit(p: Prop) -> u16 {
    match p {
        Prop::Identity => IDENTITY_BIT,
        Prop::Reduce => REDUCE_BIT,
        Prop::Gather(a) => 4 << a,
    }
}

fn props(mask: u16) -> impl Iterator<Item = Prop> {
    let mut v = Vec::with_capacity(3);
    if mask & IDENTITY_BIT != 0 {
        v.push(Prop::Identity);
    }
    for a in 0..8u8 {
        if mask & (4 << a) != 0 {
            v.push(Prop::Gather(a));
        }
    }
    if mask & REDUCE_BIT != 0 {
        v.push(Prop::Reduce);
    }
    v.into_iter()
}

type Frontier = Vec<(u32, u16)>;

struct Node {
    parent: u32,
    steps: Vec<Step>,
}

struct Entry {
    f: f64,
    g: f64,
    /// Bytes held so far on the fullest device (see [`CostModel::held_bytes`]).
    mem: f64,
    seq: u64,
    op: usize,
    node: u32,
    frontier: Frontier,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // BinaryHeap is a max-heap: reverse so the lowest f (then the earliest) pops first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.f.total_cmp(&self.f).then(o.seq.cmp(&self.seq))
    }
}

/// Searches the cheapest program for `graph` under `model`'s ratios, within `space`, pruning
/// states whose bound exceeds `upper_bound` (use `f64::INFINITY` for none), within
/// [`MAX_SEARCH_STATES`].
pub fn search(
    graph: &Graph,
    model: &CostModel<'_>,
    space: Space,
    upper_bound: f64,
) -> SearchResult {
    search_within(graph, model, space, upper_bound, MAX_SEARCH_STATES)
}

/// [`search`] creating at most `max_states` states; past it the result is `exhausted`.
pub fn search_within(
    graph: &Graph,
    model: &CostModel<'_>,
    space: Space,
    upper_bound: f64,
    max_states: u64,
) -> SearchResult {
    let n = graph.ops.len();
    let total_speed: f64 = model.devices.speeds().iter().sum();
    // Admissible: no program computes faster than perfectly balanced over the total speed.
    let mut rest = vec![0.0; n + 1];
    for i in (0..n).rev() {
        rest[i] = rest[i + 1] + FORWARD_AND_BACKWARD * graph.ops[i].flops / total_speed;
    }
    let last_use: Vec<usize> = graph
        .tensors
        .iter()
        .enumerate()
        .map(|(t, x)| {
            if t == graph.loss {
                usize::MAX
            } else {
                x.consumers.iter().copied().max().unwrap_or(0)
            }
        })
        .collect();
    let slack = 1e-9 * upper_bound.abs().max(1e-12);
    let mut nodes: Vec<Node> = vec![Node {
        parent: u32::MAX,
        steps: Vec::new(),
    }];
    // Per state: the (cost, memory) pairs reached so far that no other pair beats on both.
    // Memory counts in sixteenths of the limit, so that a state is kept for using less
    // memory only when it uses markedly less (at most 16 pairs per state); with unlimited
    // memory only the cost counts.
    let limit = model.memory_limit();
    let mem_key = |m: f64| {
        if limit.is_finite() {
            (m / limit * MEMORY_CLASSES).ceil()
        } else {
            0.0
        }
    };
    let mut best: HashMap<(usize, Frontier), Vec<(f64, f64)>> = HashMap::new();
    let mut heap = BinaryHeap::new();
    let mut seq = 0u64;
    // Data parallelism's expert layers, and the operators reading them, may exchange
    // activations (the all-to-alls of expert parallelism).
    let experts = if space == Space::DataParallel {
        expert_rules(graph)
    } else {
        vec![Vec::new(); n]
    };
    let relaxed: Vec<bool> = (0..n)
        .map(|i| {
            !experts[i].is_empty()
                || graph.ops[i]
                    .inputs
                    .iter()
                    .any(|&t| (0..i).any(|j| !experts[j].is_empty() && graph.ops[j].output == t))
        })
        .collect();
    heap.push(Entry {
        f: rest[0],
        g: 0.0,
        mem: 0.0,
        seq,
        op: 0,
        node: 0,
        frontier: Vec::new(),
    });
    let mut expanded = 0u64;
    let mut steps: Vec<Step> = Vec::with_capacity(8);
    while let Some(e) = heap.pop() {
        if let Some(pairs) = best.get(&(e.op, e.frontier.clone())) {
            let m = mem_key(e.mem);
            if pairs
                .iter()
                .any(|&(bg, bm)| (bg < e.g && bm <= m) || (bg <= e.g && bm < m))
            {
                continue;
            }
        }
        expanded += 1;
        if e.op == n {
            // Finished: the loss ends as partial sums (free from any property).
            let mut prog = Vec::new();
            let mut k = e.node;
            while k != u32::MAX {
                let node = &nodes[k as usize];
                prog.extend(node.steps.iter().rev().cloned());
                k = node.parent;
            }
            prog.reverse();
            if let Some(&(_, mask)) = e.frontier.iter().find(|(t, _)| *t as usize == graph.loss) {
                if mask & REDUCE_BIT == 0 {
                    if let Some(from) = props(mask).next() {
                        prog.push(Step::Comm {
                            tensor: graph.loss,
                            from,
                            to: Prop::Reduce,
                            forward: None,
                            backward: None,
                            exchange: Exchange::Free,
                            exchange_backward: Exchange::Free,
                        });
                    }
                }
            }
            return SearchResult {
                program: Some(Program { steps: prog }),
                cost: e.g,
                expanded,
                exhausted: false,
            };
        }
        let op = &graph.ops[e.op];
        // Data parallelism fixes every operator that carries the batch; one that does not
        // (a reshape that folds the batch away) may run any rule and read exchanged inputs.
        let strict_dp = space == Space::DataParallel && op.batch_rule.is_some() && !relaxed[e.op];
        let rules: Vec<usize> = match (space, op.batch_rule) {
            (Space::DataParallel, Some(r)) => std::iter::once(r)
                .chain(experts[e.op].iter().copied())
                .collect(),
            _ => (0..op.rules.len()).collect(),
        };
        'rules: for ri in rules {
            let rule = &op.rules[ri];
            let mut frontier = e.frontier.clone();
            let mut g = e.g;
            let mut mem = e.mem;
            steps.clear();
            for (&t, &q) in op.inputs.iter().zip(&rule.inputs) {
                let tensor = &graph.tensors[t];
                match frontier.binary_search_by_key(&(t as u32), |x| x.0) {
                    Ok(pos) => {
                        let mask = frontier[pos].1;
                        if mask & bit(q) != 0 {
                            continue;
                        }
                        let communicated = mask & COMMUNICATED_BIT != 0;
                        let mut choice = None;
                        for from in props(mask) {
                            if let Some(c) = model.comm(from, q, tensor.bytes(), &tensor.shape) {
                                let needs_data = c.forward.is_some();
                                if needs_data && (communicated || strict_dp) {
                                    continue;
                                }
                                if choice.as_ref().is_none_or(
                                    |(_, b): &(Prop, crate::cost::CommCost)| c.seconds < b.seconds,
                                ) {
                                    choice = Some((from, c));
                                }
                            }
                        }
                        let Some((from, c)) = choice else {
                            continue 'rules;
                        };
                        g += c.seconds;
                        let mut m = mask | bit(q);
                        if c.forward.is_some() {
                            m |= COMMUNICATED_BIT;
                            // A collective writes a new buffer; free re-labellings are views.
                            mem += model.held_bytes(tensor.bytes(), q, &tensor.shape);
                        }
                        frontier[pos].1 = m;
                        steps.push(Step::Comm {
                            tensor: t,
                            from,
                            to: q,
                            forward: c.forward,
                            backward: c.backward,
                            exchange: c.exchange,
                            exchange_backward: c.exchange_backward,
                        });
                    }
                    Err(pos) => {
                        if tensor.role == Role::Activation || q == Prop::Reduce {
                            continue 'rules;
                        }
                        if tensor.role == Role::Parameter {
                            if strict_dp && q != Prop::Identity {
                                continue 'rules;
                            }
                            if q == Prop::Identity {
                                g += model.grad_sync(tensor.bytes());
                            }
                            mem += PARAMETER_STATE_FACTOR
                                * model.held_bytes(tensor.bytes(), q, &tensor.shape);
                        } else {
                            mem += model.held_bytes(tensor.bytes(), q, &tensor.shape);
                        }
                        steps.push(Step::Place { tensor: t, prop: q });
                        if last_use[t] > e.op {
                            frontier.insert(pos, (t as u32, bit(q)));
                        }
                    }
                }
            }
            g += model.compute(op.flops, rule.split.map(|_| rule.split_len));
            // Every output is kept for the backward pass.
            let out_t = &graph.tensors[op.output];
            mem += model.held_bytes(out_t.bytes(), rule.output, &out_t.shape);
            if mem > model.memory_limit() {
                continue 'rules;
            }
            steps.push(Step::Compute { op: e.op, rule: ri });
            let out = op.output as u32;
            if last_use[op.output] > e.op {
                if let Err(pos) = frontier.binary_search_by_key(&out, |x| x.0) {
                    frontier.insert(pos, (out, bit(rule.output)));
                }
            }
            frontier.retain(|&(t, _)| last_use[t as usize] > e.op);
            let f = g + rest[e.op + 1];
            if f > upper_bound + slack {
                continue;
            }
            let key = (e.op + 1, frontier);
            let m = mem_key(mem);
            if let Some(pairs) = best.get(&key) {
                if pairs.iter().any(|&(bg, bm)| bg <= g && bm <= m) {
                    continue;
                }
            }
            if nodes.len() as u64 >= max_states {
                return SearchResult {
                    program: None,
                    cost: f64::INFINITY,
                    expanded,
                    exhausted: true,
                };
            }
            nodes.push(Node {
                parent: e.node,
                steps: steps.clone(),
            });
            let node = (nodes.len() - 1) as u32;
            let pairs = best.entry(key.clone()).or_default();
            pairs.retain(|&(bg, bm)| !(g <= bg && m <= bm));
            pairs.push((g, m));
            seq += 1;
            heap.push(Entry {
                f,
                g,
                mem,
                seq,
                op: key.0,
                node,
                frontier: key.1,
            });
        }
    }
    SearchResult {
        program: None,
        cost: f64::INFINITY,
        expanded,
        exhausted: false,
    }
}

/// A program's cost under a model, step by step, with its linear form in the ratios.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// Total seconds per iteration.
    pub seconds: f64,
    /// Seconds of each step.
    pub step_seconds: Vec<f64>,
    /// Linear form for the ratio LP (exchange methods fixed as chosen here).
    pub linear: LinearCost,
    /// Seconds spent computing.
    pub compute_seconds: f64,
    /// Seconds spent communicating (including gradient synchronisation).
    pub comm_seconds: f64,
    /// Bytes held on the fullest device: parameters with their gradients and optimizer
    /// state, and every activation kept for the backward pass (an upper bound).
    pub memory_bytes: f64,
}

/// Costs `program` under `model`. Exchange methods are re-chosen for the model's ratios.
pub fn evaluate(graph: &Graph, program: &Program, model: &CostModel<'_>) -> Evaluation {
    let mut ev = Evaluation {
        seconds: 0.0,
        step_seconds: Vec::with_capacity(program.steps.len()),
        linear: LinearCost::default(),
        compute_seconds: 0.0,
        comm_seconds: 0.0,
        memory_bytes: 0.0,
    };
    for step in &program.steps {
        let s = match step {
            Step::Place { tensor, prop } => {
                let t = &graph.tensors[*tensor];
                let held = model.held_bytes(t.bytes(), *prop, &t.shape);
                ev.memory_bytes += if t.role == Role::Parameter {
                    PARAMETER_STATE_FACTOR * held
                } else {
                    held
                };
                if t.role == Role::Parameter && *prop == Prop::Identity {
                    let s = model.grad_sync(t.bytes());
                    ev.linear.constant += s;
                    ev.comm_seconds += s;
                    s
                } else {
                    0.0
                }
            }
            Step::Comm {
                tensor, from, to, ..
            } => {
                let t = &graph.tensors[*tensor];
                match model.comm(*from, *to, t.bytes(), &t.shape) {
                    Some(c) => {
                        if c.forward.is_some() {
                            ev.memory_bytes += model.held_bytes(t.bytes(), *to, &t.shape);
                        }
                        ev.linear.constant += c.constant;
                        ev.linear.padded += c.per_max_ratio;
                        ev.comm_seconds += c.seconds;
                        c.seconds
                    }
                    None => f64::INFINITY,
                }
            }
            Step::Compute { op, rule } => {
                let o = &graph.ops[*op];
                let r = &o.rules[*rule];
                let split = r.split.map(|_| r.split_len);
                let s = model.compute(o.flops, split);
                let out = &graph.tensors[o.output];
                ev.memory_bytes += model.held_bytes(out.bytes(), r.output, &out.shape);
                if split.is_some() {
                    ev.linear.compute_flops += FORWARD_AND_BACKWARD * o.flops;
                } else {
                    ev.linear.constant += s;
                }
                ev.compute_seconds += s;
                s
            }
        };
        ev.step_seconds.push(s);
        ev.seconds += s;
    }
    ev
}

/// Refreshes the exchange methods recorded in a program's steps for `model`'s ratios.
pub fn refresh_exchanges(graph: &Graph, program: &mut Program, model: &CostModel<'_>) {
    for step in &mut program.steps {
        if let Step::Comm {
            tensor,
            from,
            to,
            exchange,
            exchange_backward,
            ..
        } = step
        {
            let t = &graph.tensors[*tensor];
            if let Some(c) = model.comm(*from, *to, t.bytes(), &t.shape) {
                *exchange = c.exchange;
                *exchange_backward = c.exchange_backward;
            }
        }
    }
}

/// Checks that a program is valid: every operator computed once in order, every input held
/// with the property its rule requires when read, each exchange reading a held property,
/// inputs and parameters placed before use, and the loss ending as partial sums.
pub fn validate(graph: &Graph, program: &Program) -> Result<(), String> {
    let mut held: Vec<u16> = vec![0; graph.tensors.len()];
    let mut next_op = 0;
    for (k, step) in program.steps.iter().enumerate() {
        match step {
            Step::Place { tensor, prop } => {
                let t = graph
                    .tensors
                    .get(*tensor)
                    .ok_or(format!("step {k}: no tensor {tensor}"))?;
                if t.role == Role::Activation {
                    return Err(format!(
                        "step {k}: activation {:?} placed instead of computed",
                        t.name
                    ));
                }
                if *prop == Prop::Reduce {
                    return Err(format!("step {k}: {:?} placed as partial sums", t.name));
                }
                held[*tensor] |= bit(*prop);
            }
            Step::Comm {
                tensor,
                from,
                to,
                forward,
                ..
            } => {
                let name = &graph.tensors[*tensor].name;
                if held[*tensor] & bit(*from) == 0 {
                    return Err(format!("step {k}: {name:?} is not held as {from}"));
                }
                let ok = match (from, to) {
                    (Prop::Gather(_), Prop::Identity) => *forward == Some(Collective::AllGather),
                    (Prop::Reduce, Prop::Gather(_)) => *forward == Some(Collective::ReduceScatter),
                    (Prop::Reduce, Prop::Identity) => *forward == Some(Collective::AllReduce),
                    (Prop::Gather(a), Prop::Gather(b)) => {
                        a != b && *forward == Some(Collective::AllToAll)
                    }
                    (Prop::Identity, Prop::Gather(_))
                    | (Prop::Identity, Prop::Reduce)
                    | (Prop::Gather(_), Prop::Reduce) => forward.is_none(),
                    _ => false,
                };
                if !ok {
                    return Err(format!(
                        "step {k}: no instruction turns {from} into {to} with {forward:?}"
                    ));
                }
                held[*tensor] |= bit(*to);
            }
            Step::Compute { op, rule } => {
                if *op != next_op {
                    return Err(format!(
                        "step {k}: operator {op} computed out of order (expected {next_op})"
                    ));
                }
                next_op += 1;
                let o = &graph.ops[*op];
                let r = o
                    .rules
                    .get(*rule)
                    .ok_or(format!("step {k}: {:?} has no rule {rule}", o.name))?;
                for (&t, &q) in o.inputs.iter().zip(&r.inputs) {
                    if held[t] & bit(q) == 0 {
                        return Err(format!(
                            "step {k}: {:?} reads {:?} as {q}, which is not held",
                            o.name, graph.tensors[t].name
                        ));
                    }
                }
                held[o.output] |= bit(r.output);
            }
        }
    }
    if next_op != graph.ops.len() {
        return Err(format!(
            "only {next_op} of {} operators computed",
            graph.ops.len()
        ));
    }
    if held[graph.loss] & REDUCE_BIT == 0 {
        return Err("the loss does not end as partial sums (Reduce)".into());
    }
    Ok(())
}
