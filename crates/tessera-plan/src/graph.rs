//! The operator graph: a single-device training step (forward pass; backward is derived).
//!
//! Format (JSON or YAML, documented in `docs/plan-format.md`): tensors with shapes, dtypes and
//! roles, and operators in topological order. Each operator labels the axes of its inputs and
//! output in einsum notation (`dims: "bsd,df->bsf"`); the labels say which axes may be split
//! together. A label in the inputs but not the output is contracted (its split leaves partial
//! sums, `Reduce`). `fixed` lists labels that must never be split (the normalised axis of a
//! layer norm, the spatial axes of a convolution).

use serde::{Deserialize, Serialize};

use crate::error::{invalid, PlanError};

/// Element type of a tensor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// 32-bit float (the default).
    #[default]
    F32,
    /// 16-bit float.
    F16,
    /// bfloat16.
    Bf16,
    /// 64-bit integer (token ids, labels).
    I64,
    /// 32-bit integer.
    I32,
}

impl Dtype {
    /// Bytes per element.
    pub fn bytes(self) -> u64 {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::I64 => 8,
        }
    }
}

/// What a tensor is in the training step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Computed by an operator.
    #[default]
    Activation,
    /// Fed by the data loader (no gradient).
    Input,
    /// A trainable parameter (its gradient is synchronised).
    Parameter,
}

/// Operator kinds. The kind fixes the FLOP count and which rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// Linear algebra in einsum notation (linear layers, matmuls, attention scores): 2 FLOPs
    /// per point of the label space. Contracted labels leave partial sums.
    Einsum,
    /// 2-D convolution written as an einsum over (batch, out-channel, in-channel, spatial,
    /// kernel-window) labels; mark spatial labels `fixed`.
    Conv2d,
    /// Table lookup `ids, table -> rows` (splitting the vocabulary leaves partial sums).
    Embedding,
    /// Elementwise sum.
    Add,
    /// Elementwise product.
    Mul,
    /// Elementwise nonlinearity (ReLU, GeLU, dropout).
    Activation,
    /// Layer normalisation over the output's last axis.
    LayerNorm,
    /// Softmax over the output's last axis.
    Softmax,
    /// Sum over contracted labels.
    Reduce,
    /// Softmax cross-entropy to a scalar (sum over the batch).
    Loss,
    /// MoE top-k gating: scores to a dispatch/combine mask with a capacity axis.
    MoeGate,
    /// Pooling (spatial labels change size; they are never split).
    Pool,
    /// Reshape, flatten, slice or concatenate without arithmetic.
    Reshape,
}

impl OpKind {
    /// Kinds whose labels missing from the output are summed (splitting them gives `Reduce`).
    pub fn contracts(self) -> bool {
        matches!(
            self,
            OpKind::Einsum | OpKind::Conv2d | OpKind::Embedding | OpKind::Reduce | OpKind::Loss
        )
    }

    /// Kinds linear in each input separately (a partial-sum input gives a partial-sum output
    /// when every other input is replicated).
    fn linear_in_each_input(self) -> bool {
        matches!(
            self,
            OpKind::Einsum | OpKind::Conv2d | OpKind::Mul | OpKind::Reduce
        )
    }

    /// Kinds whose label sizes must agree across tensors.
    fn sizes_must_agree(self) -> bool {
        matches!(
            self,
            OpKind::Einsum | OpKind::Conv2d | OpKind::Add | OpKind::Mul | OpKind::Activation
        )
    }
}

/// A tensor as written in the graph file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TensorSpec {
    /// Unique name.
    pub name: String,
    /// Length of each axis.
    pub shape: Vec<u64>,
    /// Element type.
    #[serde(default)]
    pub dtype: Dtype,
    /// Role in the step.
    #[serde(default)]
    pub role: Role,
}

/// An operator as written in the graph file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OpSpec {
    /// Unique name.
    pub name: String,
    /// Kind.
    pub kind: OpKind,
    /// Input tensor names.
    pub inputs: Vec<String>,
    /// Output tensor name (an activation, produced only here).
    pub output: String,
    /// Axis labels in einsum notation, `in1,in2->out`.
    pub dims: String,
    /// Labels that must not be split.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub fixed: String,
    /// Forward FLOPs, overriding the kind's formula.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flops: Option<f64>,
}

/// A graph file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GraphSpec {
    /// Model name.
    pub name: String,
    /// Every tensor.
    pub tensors: Vec<TensorSpec>,
    /// Operators in topological order.
    pub ops: Vec<OpSpec>,
    /// The scalar loss tensor.
    pub loss: String,
}

/// Largest tensor accepted (elements): 2^50, far beyond any device's memory.
pub const MAX_ELEMENTS: u64 = 1 << 50;

/// Index of a tensor in [`Graph::tensors`].
pub type TensorId = usize;

/// How a tensor is held across devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Prop {
    /// A full replica on every device.
    Identity,
    /// Split along this axis (possibly unevenly).
    Gather(u8),
    /// Every device holds a partial sum of the same shape.
    Reduce,
}

impl std::fmt::Display for Prop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Prop::Identity => write!(f, "Identity"),
            Prop::Gather(d) => write!(f, "Gather({d})"),
            Prop::Reduce => write!(f, "Reduce"),
        }
    }
}

/// A compute rule of an operator: the properties its inputs must have and the one its output
/// gets.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// The label whose range is split across devices (`None`: every device computes all of it).
    pub split: Option<char>,
    /// Length of the split label (the work divided by the ratios).
    pub split_len: u64,
    /// Required property of each input.
    pub inputs: Vec<Prop>,
    /// Resulting property of the output.
    pub output: Prop,
}

/// A validated tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Name.
    pub name: String,
    /// Shape.
    pub shape: Vec<u64>,
    /// Element type.
    pub dtype: Dtype,
    /// Role.
    pub role: Role,
    /// Operators reading it, in order.
    pub consumers: Vec<usize>,
}

impl Tensor {
    /// Size in bytes of the whole tensor.
    pub fn bytes(&self) -> f64 {
        self.shape.iter().product::<u64>() as f64 * self.dtype.bytes() as f64
    }
}

/// A validated operator with its compute rules.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// Name.
    pub name: String,
    /// Kind.
    pub kind: OpKind,
    /// Input tensors.
    pub inputs: Vec<TensorId>,
    /// Output tensor.
    pub output: TensorId,
    /// Forward FLOPs.
    pub flops: f64,
    /// Every valid way to run it; the first is the replicated one.
    pub rules: Vec<Rule>,
    /// The rule splitting the batch (axis 0 of the inputs, followed through the graph), which
    /// data parallelism uses; `None` when no input carries the batch.
    pub batch_rule: Option<usize>,
}

/// A validated operator graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// Model name.
    pub name: String,
    /// Tensors.
    pub tensors: Vec<Tensor>,
    /// Operators in topological order.
    pub ops: Vec<Op>,
    /// The loss tensor.
    pub loss: TensorId,
}

fn parse_dims(dims: &str, field: &str) -> Result<(Vec<Vec<char>>, Vec<char>), PlanError> {
    let (lhs, rhs) = dims
        .split_once("->")
        .ok_or_else(|| invalid(field, format!("{dims:?} has no `->`")))?;
    let label = |s: &str| -> Result<Vec<char>, PlanError> {
        let s = s.trim();
        if let Some(c) = s.chars().find(|c| !c.is_ascii_alphabetic()) {
            return Err(invalid(
                field,
                format!("label {c:?} is not an ASCII letter"),
            ));
        }
        Ok(s.chars().collect())
    };
    let inputs = lhs.split(',').map(label).collect::<Result<Vec<_>, _>>()?;
    Ok((inputs, label(rhs)?))
}

impl GraphSpec {
    /// Parses a graph from JSON or YAML text (YAML is a superset of JSON).
    pub fn from_text(text: &str) -> Result<GraphSpec, PlanError> {
        serde_norway::from_str(text).map_err(|e| PlanError::Syntax {
            what: "graph",
            message: e.to_string(),
        })
    }

    /// Checks names, shapes and labels, and derives each operator's FLOPs and rules.
    pub fn validate(&self) -> Result<Graph, PlanError> {
        let mut by_name = std::collections::BTreeMap::new();
        let mut tensors = Vec::with_capacity(self.tensors.len());
        for (i, t) in self.tensors.iter().enumerate() {
            let field = format!("tensors[{i}]");
            if by_name.insert(t.name.as_str(), i).is_some() {
                return Err(invalid(
                    field,
                    format!("duplicate tensor name {:?}", t.name),
                ));
            }
            if t.shape.contains(&0) {
                return Err(invalid(
                    format!("{field}.shape"),
                    "axes must have length >= 1",
                ));
            }
            if t.shape.len() > 8 {
                return Err(invalid(format!("{field}.shape"), "at most 8 axes"));
            }
            // Sizes are multiplied into FLOPs and bytes; keep them exact in f64 and u64.
            let numel = t.shape.iter().try_fold(1u64, |acc, &n| acc.checked_mul(n));
            if numel.is_none_or(|n| n > MAX_ELEMENTS) {
                return Err(invalid(
                    format!("{field}.shape"),
                    format!("more than {MAX_ELEMENTS} elements"),
                ));
            }
            tensors.push(Tensor {
                name: t.name.clone(),
                shape: t.shape.clone(),
                dtype: t.dtype,
                role: t.role,
                consumers: Vec::new(),
            });
        }
        let lookup = |name: &str, field: &str| -> Result<TensorId, PlanError> {
            by_name
                .get(name)
                .copied()
                .ok_or_else(|| invalid(field, format!("unknown tensor {name:?}")))
        };
        let mut produced = vec![false; tensors.len()];
        let mut batch_axis: Vec<Option<usize>> = tensors
            .iter()
            .map(|t| (t.role == Role::Input && !t.shape.is_empty()).then_some(0))
            .collect();
        let mut ops = Vec::with_capacity(self.ops.len());
        let mut op_names = std::collections::BTreeSet::new();
        for (i, o) in self.ops.iter().enumerate() {
            let field = format!("ops[{i}]");
            if !op_names.insert(o.name.as_str()) {
                return Err(invalid(
                    &field,
                    format!("duplicate operator name {:?}", o.name),
                ));
            }
            if o.inputs.is_empty() {
                return Err(invalid(
                    format!("{field}.inputs"),
                    "an operator needs an input",
                ));
            }
            let inputs = o
                .inputs
                .iter()
                .map(|n| lookup(n, &format!("{field}.inputs")))
                .collect::<Result<Vec<_>, _>>()?;
            let output = lookup(&o.output, &format!("{field}.output"))?;
            if tensors[output].role != Role::Activation {
                return Err(invalid(
                    format!("{field}.output"),
                    format!(
                        "{:?} is an input or parameter; operators produce activations",
                        o.output
                    ),
                ));
            }
            if produced[output] {
                return Err(invalid(
                    format!("{field}.output"),
                    format!("{:?} is produced twice", o.output),
                ));
            }
            for &t in &inputs {
                if tensors[t].role == Role::Activation && !produced[t] {
                    return Err(invalid(
                        format!("{field}.inputs"),
                        format!(
                            "{:?} is used before it is produced (ops must be in topological order)",
                            tensors[t].name
                        ),
                    ));
                }
                if t == output {
                    return Err(invalid(
                        format!("{field}.inputs"),
                        "an operator cannot read its own output",
                    ));
                }
            }
            produced[output] = true;
            let dims_field = format!("{field}.dims");
            let (in_labels, out_labels) = parse_dims(&o.dims, &dims_field)?;
            if in_labels.len() != inputs.len() {
                return Err(invalid(
                    &dims_field,
                    format!(
                        "{} input label groups for {} inputs",
                        in_labels.len(),
                        inputs.len()
                    ),
                ));
            }
            let mut sizes: std::collections::BTreeMap<char, Vec<u64>> = Default::default();
            let mut check_rank = |labels: &[char], t: TensorId| -> Result<(), PlanError> {
                let shape = &tensors[t].shape;
                if labels.len() != shape.len() {
                    return Err(invalid(
                        &dims_field,
                        format!(
                            "{:?} has {} axes but {} labels",
                            tensors[t].name,
                            shape.len(),
                            labels.len()
                        ),
                    ));
                }
                let mut seen = std::collections::BTreeSet::new();
                for (&l, &n) in labels.iter().zip(shape) {
                    if !seen.insert(l) {
                        return Err(invalid(
                            &dims_field,
                            format!("label {l:?} repeats within {:?}", tensors[t].name),
                        ));
                    }
                    sizes.entry(l).or_default().push(n);
                }
                Ok(())
            };
            for (labels, &t) in in_labels.iter().zip(&inputs) {
                check_rank(labels, t)?;
            }
            check_rank(&out_labels, output)?;
            let uneven = |l: char| sizes[&l].iter().any(|&n| n != sizes[&l][0]);
            if o.kind.sizes_must_agree() {
                if let Some(l) = sizes.keys().copied().find(|&l| uneven(l)) {
                    return Err(invalid(
                        &dims_field,
                        format!("label {l:?} has different lengths {:?}", sizes[&l]),
                    ));
                }
            }
            let mut fixed: std::collections::BTreeSet<char> = o.fixed.chars().collect();
            if matches!(o.kind, OpKind::LayerNorm | OpKind::Softmax) {
                if let Some(&last) = out_labels.last() {
                    fixed.insert(last);
                }
            }
            let out_numel = tensors[output].shape.iter().product::<u64>() as f64;
            let in_numel = tensors[inputs[0]].shape.iter().product::<u64>() as f64;
            let space: f64 = sizes.values().map(|v| v[0] as f64).product();
            let flops = match o.flops {
                Some(f) if f.is_finite() && f >= 0.0 => f,
                Some(_) => {
                    return Err(invalid(format!("{field}.flops"), "must be finite and >= 0"))
                }
                None => match o.kind {
                    OpKind::Einsum | OpKind::Conv2d => 2.0 * space,
                    OpKind::Embedding | OpKind::Add | OpKind::Mul | OpKind::Activation => out_numel,
                    OpKind::LayerNorm => 8.0 * out_numel,
                    OpKind::Softmax => 5.0 * out_numel,
                    OpKind::Reduce | OpKind::Pool => in_numel,
                    OpKind::Loss => 4.0 * in_numel,
                    OpKind::MoeGate => 5.0 * in_numel + out_numel,
                    OpKind::Reshape => 0.0,
                },
            };
            let mut rules = vec![Rule {
                split: None,
                split_len: 1,
                inputs: vec![Prop::Identity; inputs.len()],
                output: Prop::Identity,
            }];
            for (&l, lens) in &sizes {
                if fixed.contains(&l) || uneven(l) {
                    continue;
                }
                let out_axis = out_labels.iter().position(|&x| x == l);
                let output_prop = match out_axis {
                    Some(a) => Prop::Gather(a as u8),
                    None if o.kind.contracts() => Prop::Reduce,
                    None => continue,
                };
                let inputs_prop = in_labels
                    .iter()
                    .map(|ls| match ls.iter().position(|&x| x == l) {
                        Some(a) => Prop::Gather(a as u8),
                        None => Prop::Identity,
                    })
                    .collect();
                if lens[0] < 2 {
                    continue;
                }
                rules.push(Rule {
                    split: Some(l),
                    split_len: lens[0],
                    inputs: inputs_prop,
                    output: output_prop,
                });
            }
            // Partial sums flow through operators that are linear in them.
            if o.kind.linear_in_each_input() {
                for (k, &t) in inputs.iter().enumerate() {
                    if tensors[t].role == Role::Activation {
                        let mut ins = vec![Prop::Identity; inputs.len()];
                        ins[k] = Prop::Reduce;
                        rules.push(Rule {
                            split: None,
                            split_len: 1,
                            inputs: ins,
                            output: Prop::Reduce,
                        });
                    }
                }
            }
            if o.kind == OpKind::Add && inputs.iter().all(|&t| tensors[t].role == Role::Activation)
            {
                rules.push(Rule {
                    split: None,
                    split_len: 1,
                    inputs: vec![Prop::Reduce; inputs.len()],
                    output: Prop::Reduce,
                });
            }
            let batch_label = inputs
                .iter()
                .zip(&in_labels)
                .find_map(|(&t, ls)| batch_axis[t].and_then(|a| ls.get(a).copied()));
            let batch_rule =
                batch_label.and_then(|l| rules.iter().position(|r| r.split == Some(l)));
            batch_axis[output] = batch_label.and_then(|l| out_labels.iter().position(|&x| x == l));
            for &t in &inputs {
                tensors[t].consumers.push(i);
            }
            ops.push(Op {
                name: o.name.clone(),
                kind: o.kind,
                inputs,
                output,
                flops,
                rules,
                batch_rule,
            });
        }
        let loss = lookup(&self.loss, "loss")?;
        if !produced[loss] {
            return Err(invalid(
                "loss",
                format!("{:?} is not produced by any operator", self.loss),
            ));
        }
        if ops.is_empty() {
            return Err(invalid("ops", "the graph has no operators"));
        }
        Ok(Graph {
            name: self.name.clone(),
            tensors,
            ops,
            loss,
        })
    }
}

impl Graph {
    /// Total forward FLOPs.
    pub fn flops(&self) -> f64 {
        self.ops.iter().map(|o| o.flops).sum()
    }

    /// Total parameter bytes.
    pub fn parameter_bytes(&self) -> f64 {
        self.tensors
            .iter()
            .filter(|t| t.role == Role::Parameter)
            .map(Tensor::bytes)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: OpKind, dims: &str, fixed: &str, shapes: &[&[u64]]) -> Op {
        let n = shapes.len() - 1;
        let mut tensors: Vec<TensorSpec> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| TensorSpec {
                name: format!("t{i}"),
                shape: s.to_vec(),
                dtype: Dtype::F32,
                role: if i < n { Role::Input } else { Role::Activation },
            })
            .collect();
        tensors.push(TensorSpec {
            name: "loss".into(),
            shape: vec![],
            dtype: Dtype::F32,
            role: Role::Activation,
        });
        let spec = GraphSpec {
            name: "one".into(),
            ops: vec![
                OpSpec {
                    name: "op".into(),
                    kind,
                    inputs: (0..n).map(|i| format!("t{i}")).collect(),
                    output: format!("t{n}"),
                    dims: dims.into(),
                    fixed: fixed.into(),
                    flops: None,
                },
                OpSpec {
                    name: "sum".into(),
                    kind: OpKind::Reduce,
                    inputs: vec![format!("t{n}")],
                    output: "loss".into(),
                    dims: format!("{}->", dims.split("->").nth(1).unwrap_or("")),
                    fixed: String::new(),
                    flops: None,
                },
            ],
            tensors,
            loss: "loss".into(),
        };
        spec.validate().unwrap().ops.remove(0)
    }

    fn rule(o: &Op, split: Option<char>) -> Vec<(Vec<Prop>, Prop)> {
        o.rules
            .iter()
            .filter(|r| r.split == split)
            .map(|r| (r.inputs.clone(), r.output))
            .collect()
    }

    #[test]
    fn matmul_rules_are_data_column_row_and_partial_sums() {
        let o = op(
            OpKind::Einsum,
            "nd,dh->nh",
            "",
            &[&[8, 4], &[4, 6], &[8, 6]],
        );
        assert_eq!(o.flops, 2.0 * 8.0 * 4.0 * 6.0);
        use Prop::*;
        // Replicated first, then one rule per label, then partial sums through each input.
        assert_eq!(o.rules[0].split, None);
        assert_eq!(o.rules[0].inputs, vec![Identity, Identity]);
        assert_eq!(
            rule(&o, Some('n')),
            vec![(vec![Gather(0), Identity], Gather(0))]
        );
        assert_eq!(
            rule(&o, Some('d')),
            vec![(vec![Gather(1), Gather(0)], Reduce)]
        );
        assert_eq!(
            rule(&o, Some('h')),
            vec![(vec![Identity, Gather(1)], Gather(1))]
        );
        // Loader inputs are never partial sums, so no partial-sum rule here ...
        assert_eq!(rule(&o, None).len(), 1);
        // ... but an activation input passes them through: fc2 reads relu's output.
        let g = crate::builtin::mlp(8, 4, 6, 1).validate().unwrap();
        let fc2 = &g.ops[2];
        assert!(rule(fc2, None).contains(&(vec![Reduce, Identity], Reduce)));
        assert!(!rule(fc2, None).contains(&(vec![Identity, Reduce], Reduce)));
        // Data parallelism splits the batch of the input.
        assert_eq!(o.rules[o.batch_rule.unwrap()].split, Some('n'));
    }

    #[test]
    fn fixed_and_resized_labels_are_never_split() {
        let ln = op(OpKind::LayerNorm, "bsd->bsd", "", &[&[2, 3, 4], &[2, 3, 4]]);
        assert!(ln.rules.iter().all(|r| r.split != Some('d')));
        assert!(ln.rules.iter().any(|r| r.split == Some('s')));
        let conv = op(
            OpKind::Conv2d,
            "nchw,ock->nohw",
            "hwk",
            &[&[2, 3, 8, 8], &[5, 3, 9], &[2, 5, 8, 8]],
        );
        let splits: Vec<_> = conv.rules.iter().filter_map(|r| r.split).collect();
        assert_eq!(splits, vec!['c', 'n', 'o']);
        let pool = op(
            OpKind::Pool,
            "nchw->nchw",
            "",
            &[&[2, 3, 8, 8], &[2, 3, 4, 4]],
        );
        assert!(pool
            .rules
            .iter()
            .all(|r| !matches!(r.split, Some('h') | Some('w'))));
        // Nonlinear operators do not pass partial sums.
        assert!(ln.rules.iter().all(|r| r.output != Prop::Reduce));
    }
}
