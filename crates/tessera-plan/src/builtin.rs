//! Built-in graphs and clusters.
//!
//! Shapes follow the HAP artifact's models (EuroSys'24, Apache-2.0; facts only, no code):
//! VGG19 on CIFAR-10 with the torchvision classifier (7×7 adaptive pool, 25088→4096→4096→10),
//! ViT with 4×4 patches of 32×32 images (64 patches + a class token, d=768, 12 heads, 12
//! layers, FFN 3072), BERT-Base (12 layers, d=768, seq 128, FFN 3072, a separate output
//! projection to the vocabulary), BERT-MoE (every other layer's FFN replaced by top-2 experts,
//! experts = 2 × devices, capacity = ⌈seq / experts × 1.25 × 2⌉). Biases and layer-norm
//! scales are left out (they are < 0.1% of parameters and FLOPs); transformer layers are
//! post-LN as in PyTorch's `TransformerEncoderLayer`.

use tessera_perf::collective::{CollectiveLinks, Fabric, Link};

use crate::cluster::{Device, Devices, DEFAULT_INTER_LATENCY_S, DEFAULT_INTRA_LATENCY_S};
use crate::error::PlanError;
use crate::graph::{Dtype, GraphSpec, OpKind, OpSpec, Role, TensorSpec};

/// Samples per device in the built-in graphs (HAP's setting).
pub const BATCH_PER_DEVICE: u64 = 32;
/// BERT's WordPiece vocabulary.
pub const BERT_VOCAB: u64 = 30522;
/// Calibrated V100 speed from the HAP artifact (FLOP/s).
pub const HAP_V100_FLOPS: f64 = 3.86e12;
/// Calibrated P100 speed from the HAP artifact (FLOP/s).
pub const HAP_P100_FLOPS: f64 = 2.15e12;
/// HAP's inter-machine bandwidth: 10.4 Gb/s in bytes/s.
pub const HAP_INTER_BYTES_PER_S: f64 = 10.4e9 / 8.0;

struct Builder {
    spec: GraphSpec,
}

impl Builder {
    fn new(name: &str) -> Builder {
        Builder {
            spec: GraphSpec {
                name: name.into(),
                tensors: Vec::new(),
                ops: Vec::new(),
                loss: String::new(),
            },
        }
    }

    fn tensor(&mut self, name: &str, shape: &[u64], dtype: Dtype, role: Role) -> String {
        self.spec.tensors.push(TensorSpec {
            name: name.into(),
            shape: shape.to_vec(),
            dtype,
            role,
        });
        name.to_string()
    }

    fn input(&mut self, name: &str, shape: &[u64], dtype: Dtype) -> String {
        self.tensor(name, shape, dtype, Role::Input)
    }

    fn param(&mut self, name: &str, shape: &[u64]) -> String {
        self.tensor(name, shape, Dtype::F32, Role::Parameter)
    }

    fn op(
        &mut self,
        name: &str,
        kind: OpKind,
        inputs: &[&str],
        dims: &str,
        shape: &[u64],
        fixed: &str,
    ) -> String {
        self.tensor(name, shape, Dtype::F32, Role::Activation);
        self.spec.ops.push(OpSpec {
            name: name.into(),
            kind,
            inputs: inputs.iter().map(|s| s.to_string()).collect(),
            output: name.into(),
            dims: dims.into(),
            fixed: fixed.into(),
            flops: None,
        });
        name.to_string()
    }

    fn finish(mut self, loss: &str) -> GraphSpec {
        self.spec.loss = loss.into();
        self.spec
    }
}

/// Shape of a transformer stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransformerShape {
    /// Samples per iteration.
    pub batch: u64,
    /// Tokens per sample.
    pub seq: u64,
    /// Model width.
    pub d_model: u64,
    /// Attention heads.
    pub heads: u64,
    /// FFN width.
    pub d_ff: u64,
    /// Layers.
    pub layers: u64,
}

fn attention(g: &mut Builder, l: &str, x: &str, t: &TransformerShape) -> String {
    let (b, s, d, h) = (t.batch, t.seq, t.d_model, t.heads);
    let k = d / h;
    let wq = g.param(&format!("{l}.wq"), &[d, h, k]);
    let wk = g.param(&format!("{l}.wk"), &[d, h, k]);
    let wv = g.param(&format!("{l}.wv"), &[d, h, k]);
    let wo = g.param(&format!("{l}.wo"), &[h, k, d]);
    let q = g.op(
        &format!("{l}.q"),
        OpKind::Einsum,
        &[x, &wq],
        "bsd,dhk->bshk",
        &[b, s, h, k],
        "",
    );
    let kk = g.op(
        &format!("{l}.k"),
        OpKind::Einsum,
        &[x, &wk],
        "btd,dhk->bthk",
        &[b, s, h, k],
        "",
    );
    let v = g.op(
        &format!("{l}.v"),
        OpKind::Einsum,
        &[x, &wv],
        "btd,dhk->bthk",
        &[b, s, h, k],
        "",
    );
    let sc = g.op(
        &format!("{l}.scores"),
        OpKind::Einsum,
        &[&q, &kk],
        "bshk,bthk->bhst",
        &[b, h, s, s],
        "",
    );
    let p = g.op(
        &format!("{l}.softmax"),
        OpKind::Softmax,
        &[&sc],
        "bhst->bhst",
        &[b, h, s, s],
        "",
    );
    let ctx = g.op(
        &format!("{l}.context"),
        OpKind::Einsum,
        &[&p, &v],
        "bhst,bthk->bshk",
        &[b, s, h, k],
        "",
    );
    let o = g.op(
        &format!("{l}.attn_out"),
        OpKind::Einsum,
        &[&ctx, &wo],
        "bshk,hkd->bsd",
        &[b, s, d],
        "",
    );
    let r = g.op(
        &format!("{l}.residual1"),
        OpKind::Add,
        &[x, &o],
        "bsd,bsd->bsd",
        &[b, s, d],
        "",
    );
    g.op(
        &format!("{l}.norm1"),
        OpKind::LayerNorm,
        &[&r],
        "bsd->bsd",
        &[b, s, d],
        "",
    )
}

fn ffn(g: &mut Builder, l: &str, x: &str, t: &TransformerShape) -> String {
    let (b, s, d, f) = (t.batch, t.seq, t.d_model, t.d_ff);
    let w1 = g.param(&format!("{l}.w1"), &[d, f]);
    let w2 = g.param(&format!("{l}.w2"), &[f, d]);
    let h = g.op(
        &format!("{l}.ff1"),
        OpKind::Einsum,
        &[x, &w1],
        "bsd,df->bsf",
        &[b, s, f],
        "",
    );
    let a = g.op(
        &format!("{l}.act"),
        OpKind::Activation,
        &[&h],
        "bsf->bsf",
        &[b, s, f],
        "",
    );
    let o = g.op(
        &format!("{l}.ff2"),
        OpKind::Einsum,
        &[&a, &w2],
        "bsf,fd->bsd",
        &[b, s, d],
        "",
    );
    let r = g.op(
        &format!("{l}.residual2"),
        OpKind::Add,
        &[x, &o],
        "bsd,bsd->bsd",
        &[b, s, d],
        "",
    );
    g.op(
        &format!("{l}.norm2"),
        OpKind::LayerNorm,
        &[&r],
        "bsd->bsd",
        &[b, s, d],
        "",
    )
}

fn moe(g: &mut Builder, l: &str, x: &str, t: &TransformerShape, experts: u64) -> String {
    let (b, s, d, f) = (t.batch, t.seq, t.d_model, t.d_ff);
    let e = experts.max(1);
    // Top-2 gating with capacity factor 1.25, doubled for two experts per token (HAP's config).
    let c = (s as f64 / e as f64 * 1.25 * 2.0).ceil() as u64;
    let wg = g.param(&format!("{l}.gate_w"), &[d, e]);
    let w1 = g.param(&format!("{l}.expert_w1"), &[e, d, f]);
    let w2 = g.param(&format!("{l}.expert_w2"), &[e, f, d]);
    let logits = g.op(
        &format!("{l}.gate_logits"),
        OpKind::Einsum,
        &[x, &wg],
        "bsd,de->bse",
        &[b, s, e],
        "",
    );
    let mask = g.op(
        &format!("{l}.gate"),
        OpKind::MoeGate,
        &[&logits],
        "bse->bsec",
        &[b, s, e, c],
        "ec",
    );
    let disp = g.op(
        &format!("{l}.dispatch"),
        OpKind::Einsum,
        &[x, &mask],
        "bsd,bsec->becd",
        &[b, e, c, d],
        "",
    );
    let h = g.op(
        &format!("{l}.expert_ff1"),
        OpKind::Einsum,
        &[&disp, &w1],
        "becd,edf->becf",
        &[b, e, c, f],
        "",
    );
    let a = g.op(
        &format!("{l}.expert_act"),
        OpKind::Activation,
        &[&h],
        "becf->becf",
        &[b, e, c, f],
        "",
    );
    let o = g.op(
        &format!("{l}.expert_ff2"),
        OpKind::Einsum,
        &[&a, &w2],
        "becf,efd->becd",
        &[b, e, c, d],
        "",
    );
    let comb = g.op(
        &format!("{l}.combine"),
        OpKind::Einsum,
        &[&o, &mask],
        "becd,bsec->bsd",
        &[b, s, d],
        "",
    );
    let r = g.op(
        &format!("{l}.residual2"),
        OpKind::Add,
        &[x, &comb],
        "bsd,bsd->bsd",
        &[b, s, d],
        "",
    );
    g.op(
        &format!("{l}.norm2"),
        OpKind::LayerNorm,
        &[&r],
        "bsd->bsd",
        &[b, s, d],
        "",
    )
}

fn stack(g: &mut Builder, mut x: String, t: &TransformerShape, experts: Option<u64>) -> String {
    for i in 0..t.layers {
        let l = format!("layer{i}");
        x = attention(g, &l, &x, t);
        x = match experts {
            Some(e) if i % 2 == 1 => moe(g, &l, &x, t, e),
            _ => ffn(g, &l, &x, t),
        };
    }
    x
}

/// A language model over `vocab` tokens: embedding, a transformer stack (MoE on odd layers
/// when `experts` is set), an output projection and the loss over every position.
pub fn language_model(
    name: &str,
    t: TransformerShape,
    vocab: u64,
    experts: Option<u64>,
) -> GraphSpec {
    let (b, s, d) = (t.batch, t.seq, t.d_model);
    let mut g = Builder::new(name);
    let ids = g.input("tokens", &[b, s], Dtype::I64);
    let labels = g.input("labels", &[b, s], Dtype::I64);
    let table = g.param("embedding", &[vocab, d]);
    let pos = g.param("position", &[s, d]);
    let e = g.op(
        "embed",
        OpKind::Embedding,
        &[&ids, &table],
        "bs,vd->bsd",
        &[b, s, d],
        "",
    );
    let x = g.op(
        "add_position",
        OpKind::Add,
        &[&e, &pos],
        "bsd,sd->bsd",
        &[b, s, d],
        "",
    );
    let x = stack(&mut g, x, &t, experts);
    let w = g.param("decoder", &[d, vocab]);
    let logits = g.op(
        "logits",
        OpKind::Einsum,
        &[&x, &w],
        "bsd,dv->bsv",
        &[b, s, vocab],
        "",
    );
    let loss = g.op(
        "loss",
        OpKind::Loss,
        &[&logits, &labels],
        "bsv,bs->",
        &[],
        "v",
    );
    g.finish(&loss)
}

/// BERT-Base (12 layers, d=768, 12 heads, FFN 3072, seq 128) at `batch` samples.
pub fn bert_base(batch: u64) -> GraphSpec {
    let t = TransformerShape {
        batch,
        seq: 128,
        d_model: 768,
        heads: 12,
        d_ff: 3072,
        layers: 12,
    };
    language_model("bert-base", t, BERT_VOCAB, None)
}

/// BERT-MoE: BERT-Base with top-2 experts on every other layer.
pub fn bert_moe(batch: u64, experts: u64) -> GraphSpec {
    let t = TransformerShape {
        batch,
        seq: 128,
        d_model: 768,
        heads: 12,
        d_ff: 3072,
        layers: 12,
    };
    language_model("bert-moe", t, BERT_VOCAB, Some(experts))
}

/// A GPT-style decoder of `layers` layers of width `d_model` (heads of 64, FFN 4×, seq 1024,
/// GPT-2 vocabulary). The causal mask does not change the dense FLOP count modelled here.
pub fn gpt(batch: u64, layers: u64, d_model: u64) -> GraphSpec {
    let heads = (d_model / 64).max(1);
    let t = TransformerShape {
        batch,
        seq: 1024,
        d_model,
        heads,
        d_ff: 4 * d_model,
        layers,
    };
    language_model(&format!("gpt-{layers}x{d_model}"), t, 50257, None)
}

/// ViT on CIFAR-10: 4×4 patches of 32×32×3 images (64 patches plus a class token), 12 layers,
/// d=768, classification from the class token.
pub fn vit(batch: u64) -> GraphSpec {
    let t = TransformerShape {
        batch,
        seq: 65,
        d_model: 768,
        heads: 12,
        d_ff: 3072,
        layers: 12,
    };
    let (b, s, d) = (t.batch, t.seq, t.d_model);
    let mut g = Builder::new("vit");
    // Patches are cut by the loader; the class token's slot is part of the input.
    let patches = g.input("patches", &[b, s, 48], Dtype::F32);
    let labels = g.input("labels", &[b], Dtype::I64);
    let wp = g.param("patch_embed", &[48, d]);
    let pos = g.param("position", &[s, d]);
    let e = g.op(
        "embed",
        OpKind::Einsum,
        &[&patches, &wp],
        "bsp,pd->bsd",
        &[b, s, d],
        "",
    );
    let x = g.op(
        "add_position",
        OpKind::Add,
        &[&e, &pos],
        "bsd,sd->bsd",
        &[b, s, d],
        "",
    );
    let x = stack(&mut g, x, &t, None);
    let cls = g.op(
        "class_token",
        OpKind::Reshape,
        &[&x],
        "bsd->bd",
        &[b, d],
        "",
    );
    let w = g.param("head", &[d, 10]);
    let logits = g.op(
        "logits",
        OpKind::Einsum,
        &[&cls, &w],
        "bd,dc->bc",
        &[b, 10],
        "",
    );
    let loss = g.op(
        "loss",
        OpKind::Loss,
        &[&logits, &labels],
        "bc,b->",
        &[],
        "c",
    );
    g.finish(&loss)
}

/// VGG19 on `image`×`image` inputs (32 for CIFAR-10) with `classifier` hidden units in the
/// two hidden FC layers (torchvision: 4096, after a 7×7 adaptive pool; 0 drops the hidden
/// layers and the pool, leaving one linear layer to 10 classes as in CIFAR-style VGGs).
pub fn vgg19_with(batch: u64, image: u64, classifier: u64) -> GraphSpec {
    let cfg: [u64; 21] = [
        64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0,
    ];
    let name = if classifier == 4096 && image == 32 {
        "vgg19".to_string()
    } else {
        format!("vgg19-{image}px-fc{classifier}")
    };
    let mut g = Builder::new(&name);
    let b = batch;
    let mut x = g.input("images", &[b, 3, image, image], Dtype::F32);
    let labels = g.input("labels", &[b], Dtype::I64);
    let (mut c, mut hw) = (3u64, image.max(32));
    let (mut conv, mut pool) = (0, 0);
    for &v in &cfg {
        if v == 0 {
            pool += 1;
            hw /= 2;
            x = g.op(
                &format!("pool{pool}"),
                OpKind::Pool,
                &[&x],
                "nchw->nchw",
                &[b, c, hw, hw],
                "hw",
            );
        } else {
            conv += 1;
            let w = g.param(&format!("conv{conv}.w"), &[v, c, 9]);
            let y = g.op(
                &format!("conv{conv}"),
                OpKind::Conv2d,
                &[&x, &w],
                "nchw,ock->nohw",
                &[b, v, hw, hw],
                "hwk",
            );
            x = g.op(
                &format!("relu{conv}"),
                OpKind::Activation,
                &[&y],
                "nchw->nchw",
                &[b, v, hw, hw],
                "",
            );
            c = v;
        }
    }
    let logits = if classifier > 0 {
        let x = g.op(
            "avgpool",
            OpKind::Pool,
            &[&x],
            "nchw->nchw",
            &[b, 512, 7, 7],
            "hw",
        );
        let f = 512 * 49;
        let flat = g.op("flatten", OpKind::Reshape, &[&x], "nchw->nf", &[b, f], "");
        let w1 = g.param("fc1.w", &[f, classifier]);
        let h = g.op(
            "fc1",
            OpKind::Einsum,
            &[&flat, &w1],
            "nf,fo->no",
            &[b, classifier],
            "",
        );
        let h = g.op(
            "fc1.relu",
            OpKind::Activation,
            &[&h],
            "no->no",
            &[b, classifier],
            "",
        );
        let w2 = g.param("fc2.w", &[classifier, classifier]);
        let h = g.op(
            "fc2",
            OpKind::Einsum,
            &[&h, &w2],
            "nf,fo->no",
            &[b, classifier],
            "",
        );
        let h = g.op(
            "fc2.relu",
            OpKind::Activation,
            &[&h],
            "no->no",
            &[b, classifier],
            "",
        );
        let w3 = g.param("fc3.w", &[classifier, 10]);
        g.op("fc3", OpKind::Einsum, &[&h, &w3], "nf,fo->no", &[b, 10], "")
    } else {
        let f = 512 * hw * hw;
        let flat = g.op("flatten", OpKind::Reshape, &[&x], "nchw->nf", &[b, f], "");
        let w = g.param("fc.w", &[f, 10]);
        g.op(
            "fc",
            OpKind::Einsum,
            &[&flat, &w],
            "nf,fo->no",
            &[b, 10],
            "",
        )
    };
    let loss = g.op(
        "loss",
        OpKind::Loss,
        &[&logits, &labels],
        "nc,n->",
        &[],
        "c",
    );
    g.finish(&loss)
}

/// VGG19 as in the HAP artifact (torchvision classifier).
pub fn vgg19(batch: u64) -> GraphSpec {
    vgg19_with(batch, 32, 4096)
}

/// A stack of `layers` two-layer MLP blocks (`d → hidden → d`, ReLU) on `batch` rows, with a
/// d-way classification loss: the smallest graph where tensor parallelism can pay.
pub fn mlp(batch: u64, d: u64, hidden: u64, layers: u64) -> GraphSpec {
    let mut g = Builder::new("mlp");
    let mut x = g.input("x", &[batch, d], Dtype::F32);
    let labels = g.input("labels", &[batch], Dtype::I64);
    for i in 0..layers {
        let w1 = g.param(&format!("l{i}.w1"), &[d, hidden]);
        let w2 = g.param(&format!("l{i}.w2"), &[hidden, d]);
        let h = g.op(
            &format!("l{i}.fc1"),
            OpKind::Einsum,
            &[&x, &w1],
            "nd,dh->nh",
            &[batch, hidden],
            "",
        );
        let a = g.op(
            &format!("l{i}.relu"),
            OpKind::Activation,
            &[&h],
            "nh->nh",
            &[batch, hidden],
            "",
        );
        x = g.op(
            &format!("l{i}.fc2"),
            OpKind::Einsum,
            &[&a, &w2],
            "nh,hd->nd",
            &[batch, d],
            "",
        );
    }
    let loss = g.op("loss", OpKind::Loss, &[&x, &labels], "nc,n->", &[], "c");
    g.finish(&loss)
}

/// Names accepted by [`by_name`].
pub const NAMES: [&str; 5] = ["vgg19", "vit", "bert-base", "bert-moe", "gpt-LAYERSxWIDTH"];

/// A built-in graph for `devices` ranks at [`BATCH_PER_DEVICE`] samples each: `vgg19`, `vit`,
/// `bert-base` (or `bert`), `bert-moe` (2 experts per rank), `gpt-LxD` (e.g. `gpt-48x1024`),
/// `gpt-L` (width 1024) or `gpt` (`gpt-12x768`).
pub fn by_name(name: &str, devices: usize) -> Result<GraphSpec, PlanError> {
    by_name_with_batch(name, devices, BATCH_PER_DEVICE)
}

/// [`by_name`] at `per_device` samples per rank.
pub fn by_name_with_batch(
    name: &str,
    devices: usize,
    per_device: u64,
) -> Result<GraphSpec, PlanError> {
    if per_device == 0 || per_device > 1 << 20 {
        return Err(crate::error::invalid(
            "batch per device",
            "must be 1..=1048576",
        ));
    }
    let batch = per_device * devices.max(1) as u64;
    let unknown = || PlanError::UnknownModel {
        name: name.into(),
        known: NAMES.join(", "),
    };
    Ok(match name {
        "vgg19" => vgg19(batch),
        "vit" => vit(batch),
        "bert" | "bert-base" => bert_base(batch),
        "bert-moe" => bert_moe(batch, 2 * devices.max(1) as u64),
        "gpt" => gpt(batch, 12, 768),
        _ => {
            let rest = name.strip_prefix("gpt-").ok_or_else(unknown)?;
            let (l, d) = match rest.split_once('x') {
                Some((l, d)) => (l, d),
                None => (rest, "1024"),
            };
            let l: u64 = l.parse().map_err(|_| unknown())?;
            let d: u64 = d.parse().map_err(|_| unknown())?;
            if l == 0 || l > 512 || d < 64 || !d.is_multiple_of(64) || d > 65536 {
                return Err(crate::error::invalid(
                    "model",
                    format!("{name}: layers 1..=512, width a multiple of 64"),
                ));
            }
            gpt(batch, l, d)
        }
    })
}

/// HAP's heterogeneous cluster: `v100_machines` machines of `k` V100s and `p100_machines` of
/// `k` P100s, with the artifact's calibrated speeds and 10.4 Gb/s between machines.
pub fn mixed_cluster(k: usize, v100_machines: usize, p100_machines: usize) -> Devices {
    let k = k.max(1);
    let mut devices = Vec::new();
    for m in 0..v100_machines + p100_machines {
        let (gpu, flops) = if m < v100_machines {
            ("V100-16GB", HAP_V100_FLOPS)
        } else {
            ("P100", HAP_P100_FLOPS)
        };
        for _ in 0..k {
            devices.push(Device {
                gpu: gpu.into(),
                machine: m,
                flops_per_s: flops,
                // 16 GB parts both (the catalog's V100-16GB and P100).
                memory_bytes: 16.0 * crate::cluster::GIB,
            });
        }
    }
    Devices {
        devices,
        fabric: Fabric {
            // PCIe inside HAP's machines.
            intra_node: CollectiveLinks::uniform(Link::new(
                DEFAULT_INTRA_LATENCY_S,
                crate::cluster::PCIE_BYTES_PER_S,
            )),
            inter_node: CollectiveLinks::uniform(Link::new(
                DEFAULT_INTER_LATENCY_S,
                HAP_INTER_BYTES_PER_S,
            )),
        },
    }
}
