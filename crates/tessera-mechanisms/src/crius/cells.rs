//! Analytic performance of large-model training on one GPU type, and Crius's *cells*.
//!
//! A model is a list of [`Layer`]s with per-sample FLOPs and activation bytes and per-layer
//! parameters (GPT/BERT layers: params ≈ 12·h², forward FLOPs ≈ 24·s·h² + 4·s²·h per sample;
//! WideResNet basic blocks; MoE layers with top-2 expert routing). A [`Device`] is one GPU
//! type: its roofline (catalog peak × efficiency), its memory, and the links inside a node
//! (NVLink or PCIe) and across nodes (network).
//!
//! A [`Cell`] is (GPU count, nodes spanned, pipeline stages) on one device type. Fixing a cell
//! leaves each stage's (data, tensor) split, the number of micro-batches and the stage
//! boundaries to choose. One iteration is composed GPipe-style (DESIGN §5.2):
//!
//! ```text
//! T_pass = (B−1)·max_j S_j + Σ_j S_j + (B−1)·max_j X_j + Σ_j X_j
//! iteration = T_fwd + T_bwd + max_j (gradient all-reduce_j + optimizer step_j)
//! ```
//!
//! where S_j is stage j's compute (a per-stage roofline) plus its tensor-parallel collectives,
//! X_j its activation transfer to the next stage and B the number of micro-batches. Backward
//! recomputes the forward (activation checkpointing), so it costs three forwards of compute
//! and two of communication. A cell is infeasible when no plan fits in memory (weights +
//! optimizer state + checkpointed activations + one layer's working set per GPU) or when the
//! iteration is longer than a scheduling round.
//!
//! Three [`View`]s estimate a cell: [`View::Optimal`] (every uniform split, every
//! micro-batch count, equal-layer and min-max compute-balanced stage boundaries, then
//! per-stage refinement of the splits; its candidates include the proxy's plan),
//! [`View::Proxy`] (Crius's estimator, after its artifact's cell planner: layers get GPU
//! fractions in proportion to their roofline load and the stage boundaries minimise the L2
//! gap to the equal per-stage quota; each stage, in order, takes the (data, tensor) split
//! that fits in memory with the least communication volume, changes of split between stages
//! penalised 1.1×; 16 micro-batches; the resulting single plan is what the cell is worth)
//! and [`View::DpOnly`] (one stage, tensor degree 1). Proxy ≤ optimal on every cell.
//! [`CellPlanner`] precomputes per (model, batch, device) what every cell reuses.

use tessera_model::{GpuModel, ParallelPlan};

use tessera_perf::collective::{self, Collective, CollectiveLinks, Fabric, Link};
use tessera_perf::roofline::{Precision, Roofline};

/// Bytes of training state per parameter under mixed-precision Adam: fp16 weights and
/// gradients (2 + 2) plus fp32 master weights, momentum and variance (4 + 4 + 4).
pub const STATE_BYTES_PER_PARAM: f64 = 16.0;
/// Bytes the optimizer step reads and writes per parameter (memory-bound).
pub const OPTIMIZER_TRAFFIC_PER_PARAM: f64 = 32.0;
/// Bytes of one activation element (fp16).
const ACT: f64 = 2.0;
/// Largest micro-batch count the search tries.
pub const MAX_MICRO_BATCHES: u32 = 64;
/// Most pipeline stages a cell may have (= the largest GPU count of a cell).
pub const MAX_STAGES: usize = 16;

/// One layer (or block) of a model; FLOPs and activations are per sample.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Layer {
    /// Parameters sharded by the tensor (or expert) degree.
    pub params_split: f64,
    /// Parameters every tensor rank holds in full.
    pub params_replicated: f64,
    /// Forward FLOPs per sample divided among tensor ranks.
    pub flops_split: f64,
    /// Forward FLOPs per sample every tensor rank does in full.
    pub flops_replicated: f64,
    /// Bytes per sample of the layer's output (checkpointed for recomputation, and what a
    /// pipeline boundary after it sends).
    pub boundary_bytes: f64,
    /// Bytes per sample of the layer's working activations while it runs (split by tensor
    /// degree).
    pub work_bytes: f64,
    /// Bytes per sample of each tensor-parallel collective in one forward pass.
    pub tp_bytes: f64,
    /// Tensor-parallel collectives per forward pass.
    pub tp_collectives: u32,
    /// Their kind (all-reduce for Megatron-style tensor parallelism, all-to-all for expert
    /// parallelism).
    pub tp_kind: Collective,
}

/// Model families of Crius's workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// BERT/GPT transformer encoder or decoder stacks.
    Transformer,
    /// WideResNet (basic blocks, CIFAR-size images).
    WideResNet,
    /// Transformer with a top-2 mixture of experts in every other layer.
    Moe,
}

/// A model as the analytic estimator sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct LargeModel {
    /// Name, e.g. `bert-1.3b`.
    pub name: String,
    /// Family.
    pub family: Family,
    /// Layers in order.
    pub layers: Vec<Layer>,
    /// Largest tensor (expert) degree the model supports.
    pub max_tensor: u32,
    /// Arithmetic the model trains in: FP16 with tensor cores (ours), or FP32 (Alpa's
    /// WideResNet benchmark, which Arena profiled).
    pub precision: Precision,
}

/// Vocabulary of BERT's WordPiece tokenizer.
pub const BERT_VOCAB: f64 = 30522.0;
/// Sequence length of the transformer jobs.
pub const SEQ_LEN: f64 = 512.0;

fn transformer_layer(h: f64, s: f64) -> Layer {
    transformer_layer_ffn(h, s, 4.0)
}

/// A transformer layer whose feed-forward block is `ffn`·h wide (4 in BERT/GPT; Alpa's MoE
/// models use 8 in every layer).
fn transformer_layer_ffn(h: f64, s: f64, ffn: f64) -> Layer {
    Layer {
        params_split: (4.0 + 2.0 * ffn) * h * h,
        params_replicated: 0.0,
        flops_split: 2.0 * (4.0 + 2.0 * ffn) * s * h * h + 4.0 * s * s * h,
        flops_replicated: 0.0,
        boundary_bytes: ACT * s * h,
        // Megatron-LM's activation count per layer: 34·s·h bytes plus 5·a·s² for the
        // attention scores (a = h/64 heads).
        work_bytes: 34.0 * s * h + 5.0 * (h / 64.0) * s * s,
        tp_bytes: ACT * s * h,
        tp_collectives: 2,
        tp_kind: Collective::AllReduce,
    }
}

fn embedding(h: f64, s: f64, vocab: f64) -> Layer {
    Layer {
        params_split: vocab * h,
        params_replicated: 0.0,
        flops_split: 2.0 * s * h,
        flops_replicated: 0.0,
        boundary_bytes: ACT * s * h,
        work_bytes: ACT * s * h,
        tp_bytes: ACT * s * h,
        tp_collectives: 1,
        tp_kind: Collective::AllReduce,
    }
}

fn lm_head(h: f64, s: f64, vocab: f64) -> Layer {
    Layer {
        params_split: vocab * h,
        params_replicated: 0.0,
        flops_split: 2.0 * s * h * vocab,
        flops_replicated: 0.0,
        boundary_bytes: 0.0,
        // fp16 logits plus fp32 softmax.
        work_bytes: 6.0 * s * vocab,
        tp_bytes: 4.0 * s,
        tp_collectives: 1,
        tp_kind: Collective::AllReduce,
    }
}

impl LargeModel {
    /// A BERT/GPT stack: embedding, `layers` transformer layers of width `hidden`, an output
    /// head over `vocab`.
    pub fn transformer(name: &str, layers: u32, hidden: f64, seq: f64, vocab: f64) -> LargeModel {
        let mut v = vec![embedding(hidden, seq, vocab)];
        v.extend((0..layers).map(|_| transformer_layer(hidden, seq)));
        v.push(lm_head(hidden, seq, vocab));
        LargeModel {
            name: name.to_string(),
            family: Family::Transformer,
            layers: v,
            max_tensor: 16,
            precision: Precision::Fp16,
        }
    }

    /// A transformer whose odd layers replace the feed-forward block by `experts` experts
    /// (top-2 routing); the tensor degree shards experts (expert parallelism) and attention
    /// is replicated.
    pub fn moe(
        name: &str,
        layers: u32,
        hidden: f64,
        seq: f64,
        vocab: f64,
        experts: u32,
    ) -> LargeModel {
        let (h, s) = (hidden, seq);
        let mut v = vec![embedding(h, s, vocab)];
        for i in 0..layers {
            if i % 2 == 0 {
                v.push(transformer_layer(h, s));
            } else {
                v.push(Layer {
                    params_split: experts as f64 * 8.0 * h * h,
                    params_replicated: 4.0 * h * h,
                    // Two experts per token: twice a dense feed-forward block.
                    flops_split: 2.0 * 16.0 * s * h * h,
                    flops_replicated: 8.0 * s * h * h + 4.0 * s * s * h,
                    boundary_bytes: ACT * s * h,
                    work_bytes: 34.0 * s * h + 5.0 * (h / 64.0) * s * s + 2.0 * 8.0 * s * h,
                    // Dispatch and combine, each token to two experts.
                    tp_bytes: 2.0 * ACT * s * h,
                    tp_collectives: 2,
                    tp_kind: Collective::AllToAll,
                });
            }
        }
        v.push(lm_head(h, s, vocab));
        LargeModel {
            name: name.to_string(),
            family: Family::Moe,
            layers: v,
            // The largest power of two dividing the expert count.
            max_tensor: 1 << experts.max(1).trailing_zeros().min(4),
            precision: Precision::Fp16,
        }
    }

    /// A WideResNet of basic blocks (two 3×3 convolutions each) in four groups of
    /// [3, 4, 6, 3] blocks on 32×32 images, `width` channels in the first group, doubling
    /// per group as the image halves. The tensor degree splits channels.
    pub fn wide_resnet(name: &str, width: f64) -> LargeModel {
        let mut v = Vec::new();
        for (g, blocks) in [3u32, 4, 6, 3].into_iter().enumerate() {
            let c = width * (1u32 << g) as f64;
            let side = 32.0 / (1u32 << g) as f64;
            let hw = side * side;
            for _ in 0..blocks {
                v.push(Layer {
                    params_split: 18.0 * c * c,
                    params_replicated: 0.0,
                    flops_split: 36.0 * c * c * hw,
                    flops_replicated: 0.0,
                    boundary_bytes: ACT * c * hw,
                    // Two convolutions, their batch norms and activations.
                    work_bytes: 6.0 * ACT * c * hw,
                    tp_bytes: ACT * c * hw,
                    tp_collectives: 2,
                    tp_kind: Collective::AllReduce,
                });
            }
        }
        LargeModel {
            name: name.to_string(),
            family: Family::WideResNet,
            layers: v,
            max_tensor: 16,
            precision: Precision::Fp16,
        }
    }

    /// A model from a name `FAMILY-SIZEb` (`bert-1.3b`, `gpt-6.7b`, `wrn-2b`, `moe-27b`):
    /// the configuration whose parameter count comes closest to SIZE billion. `None` for
    /// another family or an unreadable size.
    pub fn from_name(name: &str) -> Option<LargeModel> {
        if name.contains("__") {
            return LargeModel::alpa(name);
        }
        let lower = name.to_ascii_lowercase();
        let (family, size) = lower.rsplit_once('-')?;
        let billions: f64 = size.strip_suffix('b')?.parse().ok()?;
        if !(billions.is_finite() && billions > 0.0 && billions <= 1000.0) {
            return None;
        }
        let target = billions * 1e9;
        match family {
            "bert" | "gpt" => {
                let layers = if billions < 2.0 { 24 } else { 32 };
                // 12·L·h² + 2·V·h = target, h rounded to a multiple of 128.
                let (a, b) = (12.0 * layers as f64, 2.0 * BERT_VOCAB);
                let h = (-b + (b * b + 4.0 * a * target).sqrt()) / (2.0 * a);
                let h = ((h / 128.0).round() * 128.0).max(128.0);
                Some(LargeModel::transformer(
                    name, layers, h, SEQ_LEN, BERT_VOCAB,
                ))
            }
            "wrn" | "wideresnet" => {
                // 18·c²·(3 + 4·4 + 6·16 + 3·64) parameters.
                let width = (target / (18.0 * 307.0)).sqrt().round().max(16.0);
                Some(LargeModel::wide_resnet(name, width))
            }
            "moe" => {
                let (layers, h) = if billions < 3.0 {
                    (24, 1024.0)
                } else {
                    (24, 2048.0)
                };
                let dense = 12.0 * layers as f64 * h * h + 2.0 * BERT_VOCAB * h;
                let per_expert = (layers / 2) as f64 * 8.0 * h * h;
                let experts = (((target - dense) / per_expert).round() as i64 + 1).clamp(2, 256);
                // A power of two below 16, a multiple of 16 above: every expert degree of a
                // cell (up to 16) divides them.
                let experts = if experts < 16 {
                    (experts as u32).next_power_of_two()
                } else {
                    (((experts + 8) / 16) * 16) as u32
                };
                Some(LargeModel::moe(
                    name, layers, h, SEQ_LEN, BERT_VOCAB, experts,
                ))
            }
            _ => None,
        }
    }

    /// A model as Alpa's benchmark suite shapes it, which is what the Arena artifact profiled
    /// (`runtime/crius_worker/jax/configs.py` and the trainers of `sjtu-epcc/arena`, branch
    /// `ae-eurosys`; read, not copied), named as Arena's trace names it (`bert__760M`,
    /// `moe__10B`, `wide_resnet__500M`):
    ///
    /// - BERT/GPT: sequence 1,024, vocabulary 51,200, FP16 (760M: 24 layers × 1,536; 1.3B:
    ///   24 × 2,048; 2.6B: 32 × 2,560; 6.7B: 32 × 4,096; 15B: 48 × 5,120; 39B: 48 × 8,192).
    /// - MoE: sequence 1,024, vocabulary 32,000, FP16, feed-forward 8·h in every layer, experts
    ///   (top-2) in the even layers (690M: 8 layers × 768, 16 experts; 1.3B: 16 × 768, 16;
    ///   2.4B: 16 × 1,024, 16; 10B: 16 × 1,536, 32; 27B: 16 × 2,048, 48; 70B: 32 × 2,048, 64).
    /// - WideResNet: ResNet-50 bottleneck blocks ([3, 4, 6, 3]; 101: [3, 4, 23, 3]) on
    ///   224×224 images in **FP32**, `F` filters and width factor `w` (500M: F 224, w 2; 1B:
    ///   320, 2; 2B: 448, 2; 4B: 640, 2; 6.8B: 320, 16; 13B: ResNet-101, 320, 16).
    ///
    /// Ours ([`LargeModel::from_name`] with `FAMILY-SIZEb`) uses sequence 512 and 32×32
    /// images in FP16: per sample, about half the transformer work and 1/30–1/50 of the
    /// WideResNet time. `None` for a name outside these tables.
    pub fn alpa(name: &str) -> Option<LargeModel> {
        let (family, size) = name.split_once("__")?;
        let size = size.to_ascii_uppercase();
        let size = size.as_str();
        match family.to_ascii_lowercase().as_str() {
            "bert" | "gpt" => {
                let (layers, hidden) = match size {
                    "350M" => (24, 1024.0),
                    "760M" => (24, 1536.0),
                    "1.3B" => (24, 2048.0),
                    "2.6B" => (32, 2560.0),
                    "6.7B" => (32, 4096.0),
                    "15B" => (48, 5120.0),
                    "39B" => (48, 8192.0),
                    _ => return None,
                };
                Some(LargeModel::transformer(
                    name, layers, hidden, 1024.0, 51200.0,
                ))
            }
            "moe" => {
                let (layers, h, experts) = match size {
                    "690M" => (8, 768.0, 16u32),
                    "1.3B" => (16, 768.0, 16),
                    "2.4B" => (16, 1024.0, 16),
                    "10B" => (16, 1536.0, 32),
                    "27B" => (16, 2048.0, 48),
                    "70B" => (32, 2048.0, 64),
                    _ => return None,
                };
                let (s, vocab, ffn) = (1024.0, 32000.0, 8.0);
                let mut v = vec![embedding(h, s, vocab)];
                for i in 0..layers {
                    if i % 2 == 0 {
                        v.push(Layer {
                            params_split: experts as f64 * 2.0 * ffn * h * h,
                            params_replicated: 4.0 * h * h,
                            // Two experts per token.
                            flops_split: 2.0 * 4.0 * ffn * s * h * h,
                            flops_replicated: 8.0 * s * h * h + 4.0 * s * s * h,
                            boundary_bytes: ACT * s * h,
                            work_bytes: 34.0 * s * h + 5.0 * (h / 64.0) * s * s + 4.0 * ffn * s * h,
                            tp_bytes: 2.0 * ACT * s * h,
                            tp_collectives: 2,
                            tp_kind: Collective::AllToAll,
                        });
                    } else {
                        v.push(transformer_layer_ffn(h, s, ffn));
                    }
                }
                v.push(lm_head(h, s, vocab));
                Some(LargeModel {
                    name: name.to_string(),
                    family: Family::Moe,
                    layers: v,
                    max_tensor: 1 << experts.trailing_zeros().min(4),
                    precision: Precision::Fp16,
                })
            }
            "wide_resnet" => {
                let (stages, filters, width): ([u32; 4], f64, f64) = match size {
                    "500M" => ([3, 4, 6, 3], 224.0, 2.0),
                    "1B" => ([3, 4, 6, 3], 320.0, 2.0),
                    "2B" => ([3, 4, 6, 3], 448.0, 2.0),
                    "4B" => ([3, 4, 6, 3], 640.0, 2.0),
                    "6.8B" => ([3, 4, 6, 3], 320.0, 16.0),
                    "13B" => ([3, 4, 23, 3], 320.0, 16.0),
                    _ => return None,
                };
                Some(LargeModel::bottleneck_resnet(name, stages, filters, width))
            }
            _ => None,
        }
    }

    /// A ResNet of bottleneck blocks (1×1 to `f`, 3×3 to `f`·`width`, 1×1 to 4·`f`) on
    /// 224×224 images in FP32: a 7×7 stride-2 stem and a max-pool to 56×56, `filters`·2^i
    /// in group i as the image halves, a classifier over 1,024 classes. The tensor degree
    /// splits channels.
    pub fn bottleneck_resnet(name: &str, stages: [u32; 4], filters: f64, width: f64) -> LargeModel {
        // FP32 activations.
        const F32: f64 = 4.0;
        let stem_hw = 112.0 * 112.0;
        let mut v = vec![Layer {
            params_split: 49.0 * 3.0 * filters,
            params_replicated: 0.0,
            flops_split: 2.0 * 49.0 * 3.0 * filters * stem_hw,
            flops_replicated: 0.0,
            boundary_bytes: F32 * filters * stem_hw / 4.0,
            work_bytes: 3.0 * F32 * filters * stem_hw,
            tp_bytes: F32 * filters * stem_hw / 4.0,
            tp_collectives: 1,
            tp_kind: Collective::AllReduce,
        }];
        let mut in_ch = filters;
        for (g, blocks) in stages.into_iter().enumerate() {
            let f = filters * (1u32 << g) as f64;
            let side = 56.0 / (1u32 << g) as f64;
            let hw = side * side;
            for b in 0..blocks {
                let fw = f * width;
                let mut params = in_ch * f + 9.0 * f * fw + fw * 4.0 * f;
                if b == 0 {
                    // The projection of the residual.
                    params += in_ch * 4.0 * f;
                }
                v.push(Layer {
                    params_split: params,
                    params_replicated: 0.0,
                    flops_split: 2.0 * params * hw,
                    flops_replicated: 0.0,
                    boundary_bytes: F32 * 4.0 * f * hw,
                    // Three convolutions' outputs with their batch norms and activations.
                    work_bytes: 3.0 * F32 * (f + fw + 4.0 * f) * hw,
                    tp_bytes: F32 * 4.0 * f * hw,
                    tp_collectives: 2,
                    tp_kind: Collective::AllReduce,
                });
                in_ch = 4.0 * f;
            }
        }
        v.push(Layer {
            params_split: in_ch * 1024.0,
            params_replicated: 0.0,
            flops_split: 2.0 * in_ch * 1024.0,
            flops_replicated: 0.0,
            boundary_bytes: 0.0,
            work_bytes: F32 * 1024.0,
            tp_bytes: F32 * 1024.0,
            tp_collectives: 1,
            tp_kind: Collective::AllReduce,
        });
        LargeModel {
            name: name.to_string(),
            family: Family::WideResNet,
            layers: v,
            max_tensor: 16,
            precision: Precision::Fp32,
        }
    }

    /// Total parameters.
    pub fn params(&self) -> f64 {
        self.layers
            .iter()
            .map(|l| l.params_split + l.params_replicated)
            .sum()
    }

    /// Forward FLOPs per sample.
    pub fn fwd_flops(&self) -> f64 {
        self.layers
            .iter()
            .map(|l| l.flops_split + l.flops_replicated)
            .sum()
    }
}

/// Knobs of the hardware model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HwOptions {
    /// Fraction of the FP16 tensor peak that large-model kernels attain.
    pub efficiency: f64,
    /// Fraction of the catalog's NVLink figure (both directions) one direction attains.
    pub nvlink_fraction: f64,
    /// Bytes/s per GPU between GPUs of a node without NVLink (PCIe 4.0 x16, attained).
    pub pcie_bytes_per_s: f64,
    /// Bytes/s per GPU across nodes (100 Gb/s network, attained).
    pub network_bytes_per_s: f64,
    /// Latency per collective step inside a node, seconds.
    pub intra_latency_s: f64,
    /// Latency per collective step across nodes, seconds.
    pub inter_latency_s: f64,
    /// Device memory kept for the CUDA context, workspaces and fragmentation, bytes.
    pub reserved_bytes: f64,
}

impl Default for HwOptions {
    /// Round figures: 45% of the tensor peak (the model FLOPs utilisation Megatron-LM
    /// reports for large models is 40–50%), 40% of the NVLink figure (one direction at 80%),
    /// 20 GB/s over PCIe 4.0, 10 GB/s over a 100 Gb/s network, 5 µs / 20 µs per step, 2 GiB
    /// reserved.
    fn default() -> Self {
        HwOptions {
            efficiency: 0.45,
            nvlink_fraction: 0.4,
            pcie_bytes_per_s: 20e9,
            network_bytes_per_s: 10e9,
            intra_latency_s: 5e-6,
            inter_latency_s: 20e-6,
            reserved_bytes: 2.0 * 1024.0 * 1024.0 * 1024.0,
        }
    }
}

/// One GPU type as the estimator sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Device {
    /// Compute roof and memory slope (FP16 tensor peak × efficiency).
    pub roofline: Roofline,
    /// Attained FLOP/s of FP32 kernels (FP32 peak × the same efficiency).
    pub fp32_flops_per_s: f64,
    /// Usable device memory, bytes (after the reserve).
    pub memory_bytes: f64,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Links inside a node and across nodes.
    pub fabric: Fabric,
}

impl Device {
    /// A catalog GPU in nodes of `gpus_per_node`.
    pub fn from_gpu(gpu: &GpuModel, gpus_per_node: u32, hw: &HwOptions) -> Device {
        let intra_bw = if gpu.nvlink_g_bs > 0.0 {
            (gpu.nvlink_g_bs * 1e9 * hw.nvlink_fraction).max(hw.pcie_bytes_per_s)
        } else {
            hw.pcie_bytes_per_s
        };
        Device {
            roofline: Roofline::from_gpu(gpu, Precision::Fp16, hw.efficiency),
            fp32_flops_per_s: Roofline::from_gpu(gpu, Precision::Fp32, hw.efficiency).flops_per_s,
            memory_bytes: (gpu.memory_gib * 1024.0 * 1024.0 * 1024.0 - hw.reserved_bytes).max(0.0),
            gpus_per_node: gpus_per_node.max(1),
            fabric: Fabric {
                intra_node: CollectiveLinks::uniform(Link::new(hw.intra_latency_s, intra_bw)),
                inter_node: CollectiveLinks::uniform(Link::new(
                    hw.inter_latency_s,
                    hw.network_bytes_per_s,
                )),
            },
        }
    }
}

impl Device {
    /// The device as `model` sees it: an FP32 model computes at the FP32 roof.
    pub fn for_model(&self, model: &LargeModel) -> Device {
        let mut d = *self;
        if model.precision == Precision::Fp32 {
            d.roofline.flops_per_s = self.fp32_flops_per_s;
        }
        d
    }
}

/// Which nodes a cell's GPUs sit on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Locality {
    /// As few nodes as possible.
    Packed,
    /// One GPU per node.
    Spread,
}

/// A cell on one GPU type: GPU count, nodes spanned, pipeline stages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cell {
    /// GPUs.
    pub count: u32,
    /// Nodes they span (≥ 1).
    pub nodes: u32,
    /// Pipeline stages (divides `count`).
    pub stages: u32,
}

impl Cell {
    /// The cell of `count` GPUs in `stages` stages at `locality` on nodes of
    /// `gpus_per_node`.
    pub fn new(count: u32, stages: u32, locality: Locality, gpus_per_node: u32) -> Cell {
        let nodes = match locality {
            Locality::Packed => count.div_ceil(gpus_per_node.max(1)),
            Locality::Spread => count,
        };
        Cell {
            count,
            nodes: nodes.max(1),
            stages,
        }
    }

    /// GPUs per node (the largest group that stays on NVLink/PCIe).
    fn per_node(self) -> u32 {
        self.count.div_ceil(self.nodes.max(1)).max(1)
    }
}

/// How a cell is estimated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum View {
    /// Full search.
    Optimal,
    /// Crius's estimator: one plan per cell, chosen by compute balance and communication
    /// volume (not by estimated time), then estimated.
    Proxy,
    /// Data parallelism only (one stage, tensor degree 1).
    DpOnly,
}

impl View {
    /// Every view.
    pub const ALL: [View; 3] = [View::Optimal, View::Proxy, View::DpOnly];

    /// Name (`optimal`, `proxy`, `dp-only`).
    pub fn name(self) -> &'static str {
        match self {
            View::Optimal => "optimal",
            View::Proxy => "proxy",
            View::DpOnly => "dp-only",
        }
    }
}

/// Why a cell cannot run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Infeasible {
    /// The cell itself is malformed for the model or view (stages do not divide the GPUs,
    /// more stages than layers, the batch does not split, pipelines in the DP-only view).
    Invalid,
    /// No plan fits in device memory.
    OutOfMemory,
    /// The fastest plan's iteration is longer than the round.
    TooSlow,
}

/// The estimate of one cell.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CellEstimate {
    /// The cell.
    pub cell: Cell,
    /// Seconds per iteration of the best plan (infinite when infeasible).
    pub iteration_s: f64,
    /// Iterations per second (0 when infeasible).
    pub throughput: f64,
    /// The best plan (stage 0's degrees when stages differ), if feasible.
    pub plan: Option<ParallelPlan>,
    /// Micro-batches per iteration.
    pub micro_batches: u32,
    /// Peak bytes per GPU of the best plan.
    pub memory_bytes: f64,
    /// Why it cannot run, if so.
    pub infeasible: Option<Infeasible>,
}

impl CellEstimate {
    fn infeasible(cell: Cell, why: Infeasible) -> CellEstimate {
        CellEstimate {
            cell,
            iteration_s: f64::INFINITY,
            throughput: 0.0,
            plan: None,
            micro_batches: 0,
            memory_bytes: 0.0,
            infeasible: Some(why),
        }
    }
}

/// Sums over one stage's layers.
#[derive(Clone, Copy, Debug, Default)]
struct StageAgg {
    params_split: f64,
    params_rep: f64,
    flops_split: f64,
    flops_rep: f64,
    boundary_sum: f64,
    /// Output bytes per sample of the stage's last layer.
    boundary_out: f64,
    max_work: f64,
    /// Σ collectives × bytes per sample, by kind.
    ar_bytes: f64,
    a2a_bytes: f64,
    ar_count: u32,
    a2a_count: u32,
}

fn aggregate(layers: &[Layer]) -> StageAgg {
    let mut a = StageAgg::default();
    for l in layers {
        a.params_split += l.params_split;
        a.params_rep += l.params_replicated;
        a.flops_split += l.flops_split;
        a.flops_rep += l.flops_replicated;
        a.boundary_sum += l.boundary_bytes;
        a.max_work = a.max_work.max(l.work_bytes);
        let bytes = l.tp_bytes * l.tp_collectives as f64;
        match l.tp_kind {
            Collective::AllToAll => {
                a.a2a_bytes += bytes;
                a.a2a_count += l.tp_collectives;
            }
            _ => {
                a.ar_bytes += bytes;
                a.ar_count += l.tp_collectives;
            }
        }
    }
    a.boundary_out = layers.last().map_or(0.0, |l| l.boundary_bytes);
    a
}

/// Stage boundaries: `n` contiguous, non-empty runs of layers.
fn equal_partition(layers: usize, n: usize) -> Option<Vec<usize>> {
    if n == 0 || n > layers {
        return None;
    }
    // Boundaries as end indices; stage j gets layers[ends[j-1]..ends[j]].
    Some((1..=n).map(|j| j * layers / n).collect())
}

/// Contiguous partition into `n` stages minimising the largest stage's forward FLOPs
/// (binary search on the bottleneck, greedy fill), so that compute is balanced.
fn balanced_partition(layers: &[Layer], n: usize) -> Option<Vec<usize>> {
    if n == 0 || n > layers.len() {
        return None;
    }
    let w: Vec<f64> = layers
        .iter()
        .map(|l| l.flops_split + l.flops_replicated)
        .collect();
    let total: f64 = w.iter().sum();
    let heaviest = w.iter().copied().fold(0.0, f64::max);
    // Greedy: how many stages a bottleneck `cap` needs, keeping enough layers for the rest.
    let fill = |cap: f64| -> Option<Vec<usize>> {
        let mut ends = Vec::with_capacity(n);
        let mut i = 0;
        for j in 0..n {
            let left_stages = n - j - 1;
            let mut acc = 0.0;
            let start = i;
            while i < layers.len() - left_stages && (i == start || acc + w[i] <= cap) {
                acc += w[i];
                i += 1;
            }
            ends.push(i);
        }
        (i == layers.len()).then_some(ends)
    };
    let (mut lo, mut hi) = (heaviest.max(total / n as f64), total);
    let mut best = fill(hi)?;
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        match fill(mid) {
            Some(p) => {
                best = p;
                hi = mid;
            }
            None => lo = mid,
        }
    }
    Some(best)
}

fn stages_of(layers: &[Layer], ends: &[usize]) -> Vec<StageAgg> {
    let mut start = 0;
    ends.iter()
        .map(|&e| {
            let a = aggregate(&layers[start..e]);
            start = e;
            a
        })
        .collect()
}

/// One stage's (data, tensor) split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    data: u32,
    tensor: u32,
}

/// Links a cell's groups use.
#[derive(Clone, Copy, Debug)]
struct Links {
    per_node: u32,
    pipeline: Link,
}

struct Ctx<'a> {
    dev: &'a Device,
    batch: f64,
    links: Links,
}

impl Ctx<'_> {
    fn link(&self, intra: bool, kind: Collective) -> Link {
        self.dev.fabric.links(!intra).get(kind)
    }

    /// Forward time, backward time and (gradient sync + optimizer) time of one micro-batch
    /// on stage `a` split as `s`, and its memory per GPU; `None` when the batch does not
    /// split into `b` micro-batches over `s.data` replicas.
    fn stage(&self, a: &StageAgg, s: Split, b: u32) -> Option<(f64, f64, f64, f64)> {
        let per_replica = self.batch / s.data as f64;
        let m = per_replica / b as f64;
        if m < 1.0 || m.fract() != 0.0 {
            return None;
        }
        let t = s.tensor as f64;
        let params_gpu = a.params_split / t + a.params_rep;
        let flops = m * (a.flops_split / t + a.flops_rep);
        let bytes = ACT * params_gpu + m * a.max_work / t;
        let compute = self.dev.roofline.time(flops, bytes);
        let tp_intra = s.tensor <= self.links.per_node;
        let mut comm = 0.0;
        if s.tensor > 1 {
            let ar = self.link(tp_intra, Collective::AllReduce);
            let a2a = self.link(tp_intra, Collective::AllToAll);
            if a.ar_count > 0 {
                comm += a.ar_count as f64
                    * collective::time(
                        Collective::AllReduce,
                        m * a.ar_bytes / a.ar_count as f64,
                        s.tensor as usize,
                        ar,
                    );
            }
            if a.a2a_count > 0 {
                comm += a.a2a_count as f64
                    * collective::time(
                        Collective::AllToAll,
                        m * a.a2a_bytes / a.a2a_count as f64,
                        s.tensor as usize,
                        a2a,
                    );
            }
        }
        let fwd = compute + comm;
        // Backward: twice the forward's compute plus the recomputed forward; the recompute
        // repeats the forward's collectives and backward has as many again.
        let bwd = 3.0 * compute + 2.0 * comm;
        let dp_intra = s.data * s.tensor <= self.links.per_node;
        let sync = collective::time(
            Collective::AllReduce,
            ACT * params_gpu,
            s.data as usize,
            self.link(dp_intra, Collective::AllReduce),
        ) + OPTIMIZER_TRAFFIC_PER_PARAM * params_gpu
            / self.dev.roofline.memory_bytes_per_s;
        let memory =
            STATE_BYTES_PER_PARAM * params_gpu + per_replica * a.boundary_sum + m * a.max_work / t;
        Some((fwd, bwd, sync, memory))
    }

    /// Iteration seconds and peak memory per GPU of per-stage `splits` with `b`
    /// micro-batches; `None` when invalid or out of memory.
    fn iteration(&self, stages: &[StageAgg], splits: &[Split], b: u32) -> Option<(f64, f64)> {
        let (mut max_f, mut sum_f, mut max_b, mut sum_b) = (0.0f64, 0.0, 0.0f64, 0.0);
        let (mut max_x, mut sum_x, mut tail, mut mem) = (0.0f64, 0.0, 0.0f64, 0.0f64);
        for (j, (a, s)) in stages.iter().zip(splits).enumerate() {
            let (f, bw, sync, m) = self.stage(a, *s, b)?;
            if m > self.dev.memory_bytes {
                return None;
            }
            mem = mem.max(m);
            max_f = max_f.max(f);
            sum_f += f;
            max_b = max_b.max(bw);
            sum_b += bw;
            tail = tail.max(sync);
            if j + 1 < stages.len() {
                let micro = self.batch / b as f64 / s.data.min(splits[j + 1].data) as f64;
                let x = self.links.pipeline.latency_s
                    + micro * a.boundary_out / self.links.pipeline.bytes_per_s;
                max_x = max_x.max(x);
                sum_x += x;
            }
        }
        let bm1 = (b - 1) as f64;
        let pass = |max_s: f64, sum_s: f64| bm1 * max_s + sum_s + bm1 * max_x + sum_x;
        Some((pass(max_f, sum_f) + pass(max_b, sum_b) + tail, mem))
    }
}

fn pow2_upto(n: u32) -> impl Iterator<Item = u32> {
    (0..32)
        .map(|k| 1u32 << k)
        .take_while(move |&v| v <= n.max(1))
}

/// Micro-batches Crius's estimator assumes for every cell (its profiler's default
/// `--num_micro_batches 16`); fewer when the batch does not split that finely.
pub const PROXY_MICRO_BATCHES: u32 = 16;
/// Crius's penalty on a stage whose split differs from the previous stage's (the activations
/// must be resharded between them): its communication counts 1.1 times.
pub const RESHARD_PENALTY: f64 = 1.1;

/// Stage counts a cell may have, by log2: 1, 2, 4, 8, 16.
const STAGE_SLOTS: usize = 5;

/// One stage count's partitions of a model, as stage sums.
#[derive(Clone, Debug)]
struct Partitions {
    /// Equal numbers of layers per stage.
    equal: Vec<StageAgg>,
    /// Largest stage FLOPs minimised; `None` when it equals `equal` or there is one stage.
    balanced: Option<Vec<StageAgg>>,
    /// Crius's compute balance (least squares against the equal GPU quota).
    crius: Vec<StageAgg>,
}

/// Everything about one model (global batch) on one device that does not depend on the
/// cell: per stage count, the stage sums of the equal, the min-max balanced and Crius's
/// partitions. Estimating all cells of a job through one planner per GPU type computes
/// these once instead of once per cell.
#[derive(Clone, Debug)]
pub struct CellPlanner<'a> {
    model: &'a LargeModel,
    batch: u32,
    /// The device at the model's precision.
    dev: Device,
    parts: [Option<Partitions>; STAGE_SLOTS],
}

impl<'a> CellPlanner<'a> {
    /// Precomputes the partitions of `model` for every power-of-two stage count up to
    /// [`MAX_STAGES`] (and the model's layer count).
    pub fn new(model: &'a LargeModel, batch: u32, dev: &Device) -> CellPlanner<'a> {
        let dev = dev.for_model(model);
        let loads = layer_loads(model, batch, &dev);
        let parts = std::array::from_fn(|k| {
            let n = 1usize << k;
            let equal = equal_partition(model.layers.len(), n)?;
            let balanced = if n > 1 {
                balanced_partition(&model.layers, n).filter(|p| *p != equal)
            } else {
                None
            };
            let crius = crius_partition(&loads, n).unwrap_or_else(|| equal.clone());
            Some(Partitions {
                equal: stages_of(&model.layers, &equal),
                balanced: balanced.map(|p| stages_of(&model.layers, &p)),
                crius: stages_of(&model.layers, &crius),
            })
        });
        CellPlanner {
            model,
            batch,
            dev,
            parts,
        }
    }

    /// Estimates `cell` in `view`; a cell whose best iteration exceeds `round_s` seconds is
    /// infeasible.
    pub fn estimate(&self, cell: Cell, view: View, round_s: f64) -> CellEstimate {
        let (model, batch, dev) = (self.model, self.batch, &self.dev);
        let n = cell.stages;
        let valid = cell.count > 0
            && n > 0
            && cell.count.is_multiple_of(n)
            && cell.count.is_power_of_two()
            && n.is_power_of_two()
            && n as usize <= model.layers.len()
            && n as usize <= MAX_STAGES
            && batch > 0
            && !(view == View::DpOnly && n > 1);
        let parts = self
            .parts
            .get(n.trailing_zeros() as usize)
            .and_then(Option::as_ref);
        let Some(parts) = parts.filter(|_| valid) else {
            return CellEstimate::infeasible(cell, Infeasible::Invalid);
        };
        let g = cell.count / n;
        let ctx = Ctx {
            dev,
            batch: batch as f64,
            links: Links {
                per_node: cell.per_node(),
                pipeline: dev.fabric.links(cell.nodes > 1).get(Collective::Broadcast),
            },
        };
        let found = match view {
            View::Proxy => self.proxy(&ctx, &parts.crius, g),
            View::DpOnly => self.search(&ctx, &[&parts.equal], g, &[1], false),
            View::Optimal => {
                let mut tensors = [0u32; STAGE_SLOTS];
                let mut k = 0;
                for t in pow2_upto(g).filter(|&t| t <= model.max_tensor) {
                    tensors[k] = t;
                    k += 1;
                }
                let sets: [&[StageAgg]; 2] = [
                    &parts.equal,
                    parts.balanced.as_deref().unwrap_or(&parts.equal),
                ];
                let searched = self.search(&ctx, &sets, g, &tensors[..k], true);
                // The optimal view's candidates include the proxy's plan, so the proxy can
                // never beat it.
                match (searched, self.proxy(&ctx, &parts.crius, g)) {
                    (Ok(s), Ok(p)) if p.0 < s.0 => Ok(p),
                    (Ok(s), _) => Ok(s),
                    (Err(_), Ok(p)) => Ok(p),
                    (Err(e), Err(_)) => Err(e),
                }
            }
        };
        match found {
            Err(why) => CellEstimate::infeasible(cell, why),
            Ok((it, _, _, _)) if it > round_s => {
                CellEstimate::infeasible(cell, Infeasible::TooSlow)
            }
            Ok((it, mem, s, b)) => CellEstimate {
                cell,
                iteration_s: it,
                throughput: 1.0 / it,
                plan: Some(ParallelPlan {
                    data: s.data,
                    tensor: s.tensor,
                    pipeline: n,
                }),
                micro_batches: b,
                memory_bytes: mem,
                infeasible: None,
            },
        }
    }

    /// The best packed cell of `count` GPUs in `view` (fewest stages on ties).
    pub fn best_packed(&self, count: u32, view: View, round_s: f64) -> CellEstimate {
        let gpn = self.dev.gpus_per_node;
        let mut best = CellEstimate::infeasible(
            Cell::new(count, 1, Locality::Packed, gpn),
            Infeasible::OutOfMemory,
        );
        for stages in pow2_upto(count) {
            let e = self.estimate(
                Cell::new(count, stages, Locality::Packed, gpn),
                view,
                round_s,
            );
            if e.throughput > best.throughput {
                best = e;
            } else if best.infeasible.is_some() && e.infeasible == Some(Infeasible::TooSlow) {
                best.infeasible = e.infeasible;
            }
        }
        best
    }

    /// Full search over uniform splits with `tensors` degrees, every micro-batch count and
    /// the partitions `sets`; with `refine`, one sweep of per-stage coordinate descent.
    /// Returns (iteration, memory, stage 0's split, micro-batches).
    fn search(
        &self,
        ctx: &Ctx<'_>,
        sets: &[&[StageAgg]],
        g: u32,
        tensors: &[u32],
        refine: bool,
    ) -> Result<(f64, f64, Split, u32), Infeasible> {
        let batch = self.batch;
        let mut best: Option<(f64, f64, usize, Split, u32)> = None;
        let mut any_valid = false;
        let mut splits = [Split { data: 1, tensor: 1 }; MAX_STAGES];
        for (pi, stages) in sets.iter().enumerate() {
            if pi > 0 && std::ptr::eq(*stages, sets[0]) {
                continue;
            }
            let n = stages.len();
            for &t in tensors {
                let d = g / t;
                if !batch.is_multiple_of(d) {
                    continue;
                }
                let s = Split { data: d, tensor: t };
                splits[..n].fill(s);
                for b in pow2_upto((batch / d).min(MAX_MICRO_BATCHES)) {
                    any_valid = true;
                    if let Some((it, mem)) = ctx.iteration(stages, &splits[..n], b) {
                        if best.is_none_or(|x| it < x.0) {
                            best = Some((it, mem, pi, s, b));
                        }
                    }
                }
            }
        }
        if !any_valid {
            return Err(Infeasible::Invalid);
        }
        let Some((mut it, mut mem, pi, s, b)) = best else {
            return Err(Infeasible::OutOfMemory);
        };
        let stages = sets[pi];
        let n = stages.len();
        if refine && n > 1 {
            splits[..n].fill(s);
            for j in 0..n {
                let keep = splits[j];
                let mut chosen = keep;
                for &t in tensors {
                    let cand = Split {
                        data: g / t,
                        tensor: t,
                    };
                    if cand == keep || !batch.is_multiple_of(cand.data) {
                        continue;
                    }
                    splits[j] = cand;
                    if let Some((x, m)) = ctx.iteration(stages, &splits[..n], b) {
                        if x < it {
                            it = x;
                            mem = m;
                            chosen = cand;
                        }
                    }
                }
                splits[j] = chosen;
            }
        }
        Ok((it, mem, splits[0], b))
    }

    /// Crius's estimator on a fixed partition: [`PROXY_MICRO_BATCHES`] micro-batches; stage
    /// by stage, among the (data, tensor) splits of its `g` GPUs that fit in memory, the one
    /// with the least communication volume — tensor-parallel collectives per micro-batch plus
    /// the gradient all-reduce spread over the micro-batches, × [`RESHARD_PENALTY`] when it
    /// differs from the previous stage's — in Crius's order (data degree ascending, first
    /// wins ties); then the plan's iteration time.
    fn proxy(
        &self,
        ctx: &Ctx<'_>,
        stages: &[StageAgg],
        g: u32,
    ) -> Result<(f64, f64, Split, u32), Infeasible> {
        let batch = self.batch;
        let b = proxy_micro_batches(batch, g);
        let frac = |w: u32| (w as f64 - 1.0) / w as f64;
        let mut splits = [Split { data: 1, tensor: 1 }; MAX_STAGES];
        let mut any_valid = false;
        for (j, a) in stages.iter().enumerate() {
            let mut best: Option<(f64, Split)> = None;
            for t in pow2_upto(g).collect::<SmallPow2>().iter().rev() {
                let t = *t;
                let d = g / t;
                if t > self.model.max_tensor || !batch.is_multiple_of(d * b) {
                    continue;
                }
                any_valid = true;
                let s = Split { data: d, tensor: t };
                match ctx.stage(a, s, b) {
                    Some((_, _, _, mem)) if mem <= self.dev.memory_bytes => {}
                    _ => continue,
                }
                let m = batch as f64 / (d * b) as f64;
                let tp = m * (a.ar_bytes + a.a2a_bytes) * frac(t);
                let grads = ACT * (a.params_split / t as f64 + a.params_rep) * frac(d);
                let mut c = tp + grads / b as f64;
                if j > 0 && splits[j - 1] != s {
                    c *= RESHARD_PENALTY;
                }
                if best.is_none_or(|x| c < x.0) {
                    best = Some((c, s));
                }
            }
            match best {
                Some((_, s)) => splits[j] = s,
                None if any_valid => return Err(Infeasible::OutOfMemory),
                None => return Err(Infeasible::Invalid),
            }
        }
        let n = stages.len();
        let (it, mem) = ctx
            .iteration(stages, &splits[..n], b)
            .ok_or(Infeasible::OutOfMemory)?;
        Ok((it, mem, splits[0], b))
    }
}

/// Powers of two up to 16, without a heap allocation.
#[derive(Default)]
struct SmallPow2 {
    v: [u32; STAGE_SLOTS],
    n: usize,
}

impl FromIterator<u32> for SmallPow2 {
    fn from_iter<I: IntoIterator<Item = u32>>(it: I) -> Self {
        let mut s = SmallPow2::default();
        for x in it {
            if s.n < STAGE_SLOTS {
                s.v[s.n] = x;
                s.n += 1;
            }
        }
        s
    }
}

impl SmallPow2 {
    fn iter(&self) -> std::slice::Iter<'_, u32> {
        self.v[..self.n].iter()
    }
}

/// Crius's micro-batch count for stages of `g` GPUs: [`PROXY_MICRO_BATCHES`], halved until
/// every data degree up to `g` splits the batch into whole micro-batches.
pub fn proxy_micro_batches(batch: u32, g: u32) -> u32 {
    let mut b = PROXY_MICRO_BATCHES;
    while b > 1 && !batch.is_multiple_of(g.max(1).saturating_mul(b)) {
        b /= 2;
    }
    b
}

/// Crius's per-layer computation load: the roofline time of the layer's forward over the
/// global batch (FLOPs against weight and activation bytes) on `dev`.
fn layer_loads(model: &LargeModel, batch: u32, dev: &Device) -> Vec<f64> {
    let b = batch.max(1) as f64;
    model
        .layers
        .iter()
        .map(|l| {
            dev.roofline.time(
                b * (l.flops_split + l.flops_replicated),
                ACT * (l.params_split + l.params_replicated) + b * l.work_bytes,
            )
        })
        .collect()
}

/// Crius's stage partition into `n` contiguous stages: each layer gets a GPU fraction in
/// proportion to its computation load, and the partition minimises the L2 gap between each
/// stage's summed fraction and its GPU quota. A cell gives every stage the same quota, so
/// the gap is Σ_j (F_j − 1/n)² on normalised loads (dynamic programming; first minimum
/// kept). `None` when `n` is 0 or exceeds the layers.
fn crius_partition(loads: &[f64], n: usize) -> Option<Vec<usize>> {
    let l = loads.len();
    if n == 0 || n > l {
        return None;
    }
    let total: f64 = loads.iter().sum();
    let mut pre = Vec::with_capacity(l + 1);
    pre.push(0.0);
    for x in loads {
        let last = pre.last().copied().unwrap_or(0.0);
        pre.push(
            last + if total > 0.0 {
                x / total
            } else {
                1.0 / l as f64
            },
        );
    }
    let quota = 1.0 / n as f64;
    // cost[j * (l + 1) + i]: best gap of the first i layers in j stages; from[..]: the split.
    let w = l + 1;
    let mut cost = vec![f64::INFINITY; (n + 1) * w];
    let mut from = vec![0usize; (n + 1) * w];
    cost[0] = 0.0;
    for j in 1..=n {
        // Stage j ends at layer i; leave at least one layer per remaining stage.
        for i in j..=l - (n - j) {
            let mut best = (f64::INFINITY, 0usize);
            for k in (j - 1)..i {
                let prev = cost[(j - 1) * w + k];
                if !prev.is_finite() {
                    continue;
                }
                let gap = pre[i] - pre[k] - quota;
                let c = prev + gap * gap;
                if c < best.0 {
                    best = (c, k);
                }
            }
            cost[j * w + i] = best.0;
            from[j * w + i] = best.1;
        }
    }
    let mut ends = vec![0usize; n];
    let mut i = l;
    for j in (1..=n).rev() {
        ends[j - 1] = i;
        i = from[j * w + i];
    }
    Some(ends)
}

/// Estimates one cell of `model` trained with global `batch` on `dev`, in `view`; a cell
/// whose best iteration exceeds `round_s` seconds is infeasible. (Builds a [`CellPlanner`];
/// use one directly to estimate many cells of a job.)
pub fn estimate_cell(
    model: &LargeModel,
    batch: u32,
    dev: &Device,
    cell: Cell,
    view: View,
    round_s: f64,
) -> CellEstimate {
    CellPlanner::new(model, batch, dev).estimate(cell, view, round_s)
}

/// Evaluates a fixed uniform `plan` (every stage split as `plan.data` × `plan.tensor`) on
/// `count` GPUs over `nodes` nodes: the micro-batch count and stage boundaries are tuned
/// (equal, min-max balanced and Crius's partitions, every count up to
/// [`MAX_MICRO_BATCHES`]), the degrees are not.
pub fn estimate_plan(
    model: &LargeModel,
    batch: u32,
    dev: &Device,
    nodes: u32,
    plan: ParallelPlan,
    round_s: f64,
) -> CellEstimate {
    let dev = &dev.for_model(model);
    let count = plan.devices();
    let cell = Cell {
        count,
        nodes: nodes.max(1),
        stages: plan.pipeline,
    };
    let n = plan.pipeline as usize;
    if count == 0
        || n == 0
        || n > model.layers.len()
        || n > MAX_STAGES
        || plan.tensor > model.max_tensor
        || batch == 0
        || !batch.is_multiple_of(plan.data.max(1))
    {
        return CellEstimate::infeasible(cell, Infeasible::Invalid);
    }
    let ctx = Ctx {
        dev,
        batch: batch as f64,
        links: Links {
            per_node: cell.per_node(),
            pipeline: dev.fabric.links(cell.nodes > 1).get(Collective::Broadcast),
        },
    };
    let s = Split {
        data: plan.data,
        tensor: plan.tensor,
    };
    let splits = [s; MAX_STAGES];
    let mut best: Option<(f64, f64, u32)> = None;
    let mut partitions = Vec::with_capacity(3);
    partitions.extend(equal_partition(model.layers.len(), n));
    if n > 1 {
        partitions.extend(balanced_partition(&model.layers, n));
        // The boundaries Crius's planner hands the job.
        partitions.extend(crius_partition(&layer_loads(model, batch, dev), n));
    }
    for p in &partitions {
        let stages = stages_of(&model.layers, p);
        for b in pow2_upto((batch / plan.data).min(MAX_MICRO_BATCHES)) {
            if let Some((it, mem)) = ctx.iteration(&stages, &splits[..n], b) {
                if best.is_none_or(|x| it < x.0) {
                    best = Some((it, mem, b));
                }
            }
        }
    }
    match best {
        None => CellEstimate::infeasible(cell, Infeasible::OutOfMemory),
        Some((it, _, _)) if it > round_s => CellEstimate::infeasible(cell, Infeasible::TooSlow),
        Some((it, mem, b)) => CellEstimate {
            cell,
            iteration_s: it,
            throughput: 1.0 / it,
            plan: Some(plan),
            micro_batches: b,
            memory_bytes: mem,
            infeasible: None,
        },
    }
}

/// GPU counts of Crius's cells.
pub const CELL_COUNTS: [u32; 5] = [1, 2, 4, 8, 16];

/// Every cell of `count` GPUs on nodes of `gpus_per_node`: each power-of-two stage count
/// up to `count`, packed and (when different) spread.
pub fn cells_of(count: u32, gpus_per_node: u32) -> impl Iterator<Item = Cell> {
    let localities = if Cell::new(count, 1, Locality::Packed, gpus_per_node)
        == Cell::new(count, 1, Locality::Spread, gpus_per_node)
    {
        &[Locality::Packed][..]
    } else {
        &[Locality::Packed, Locality::Spread][..]
    };
    localities.iter().flat_map(move |&loc| {
        pow2_upto(count).map(move |stages| Cell::new(count, stages, loc, gpus_per_node))
    })
}

/// The best packed cell of `count` GPUs in `view` (fewest stages on ties).
pub fn best_packed(
    model: &LargeModel,
    batch: u32,
    dev: &Device,
    count: u32,
    view: View,
    round_s: f64,
) -> CellEstimate {
    CellPlanner::new(model, batch, dev).best_packed(count, view, round_s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tessera_model::GpuCatalog;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * a.abs().max(b.abs())
    }

    fn dev(name: &str, per_node: u32) -> Device {
        let cat = GpuCatalog::builtin();
        let id = cat.resolve(name).expect("catalog GPU");
        Device::from_gpu(cat.get(id), per_node, &HwOptions::default())
    }

    /// Alpa's shapes (what Arena profiled) have the parameter counts their names say, and
    /// their iteration on one A100-40GB lands near Arena's profiled one (its
    /// `database/prof_database.pkl`, batch 256: BERT-760M 12.34 s, MoE-690M 3.77 s,
    /// WideResNet-500M 13.68 s), where ours by size (sequence 512, 32×32 images in FP16)
    /// run BERT 2.2x and WideResNet 34x faster (our MoE-0.69B, 24 layers of 1,024, is
    /// slower than Alpa's 8 of 768) (issue 40).
    #[test]
    fn alpa_shapes_match_their_names_and_arenas_profile() {
        for (name, billions) in [
            ("bert__760M", 0.76),
            ("bert__6.7B", 6.7),
            ("moe__690M", 0.69),
            ("moe__10B", 10.0),
            ("moe__27B", 27.0),
            ("wide_resnet__500M", 0.5),
            ("wide_resnet__2B", 2.0),
            ("wide_resnet__6.8B", 6.8),
        ] {
            let m = LargeModel::from_name(name).unwrap();
            let ratio = m.params() / (billions * 1e9);
            // BERT's untied output head adds a vocabulary-sized matrix.
            assert!((0.9..1.2).contains(&ratio), "{name}: {:.3e}", m.params());
        }
        assert_eq!(LargeModel::alpa("bert__761M"), None);
        assert_eq!(LargeModel::alpa("resnet__1B"), None);
        let catalog = GpuCatalog::builtin();
        let a100 = catalog.get(catalog.find("A100-40GB").unwrap());
        let dev = Device::from_gpu(a100, 4, &HwOptions::default());
        let iter = |name: &str| {
            let m = LargeModel::from_name(name).unwrap();
            CellPlanner::new(&m, 256, &dev)
                .best_packed(1, View::Optimal, f64::INFINITY)
                .iteration_s
        };
        for (alpa, ours, profiled) in [
            ("bert__760M", "bert-0.76b", 12.34),
            ("moe__690M", "moe-0.69b", 3.77),
            ("wide_resnet__500M", "wrn-0.5b", 13.68),
        ] {
            let (a, o) = (iter(alpa), iter(ours));
            assert!(
                (0.6..1.5).contains(&(a / profiled)),
                "{alpa}: {a} s vs {profiled} s"
            );
            if !alpa.starts_with("moe") {
                assert!(a > 2.0 * o, "{alpa} {a} s vs {ours} {o} s");
            }
        }
        assert!(iter("wide_resnet__500M") > 20.0 * iter("wrn-0.5b"));
    }

    #[test]
    fn transformer_layer_by_hand() {
        // h = 1024, s = 512: params 12·2^20 = 12,582,912; FLOPs 24·512·2^20 + 4·512²·1024.
        let l = transformer_layer(1024.0, 512.0);
        assert_eq!(l.params_split, 12_582_912.0);
        assert_eq!(l.flops_split, 12_884_901_888.0 + 1_073_741_824.0);
        let m = LargeModel::transformer("t", 24, 1024.0, 512.0, BERT_VOCAB);
        assert_eq!(m.layers.len(), 26);
        assert!(close(
            m.params(),
            24.0 * 12_582_912.0 + 2.0 * BERT_VOCAB * 1024.0,
            1e-12
        ));
    }

    #[test]
    fn named_sizes_land_near_their_parameter_counts() {
        for (name, billions) in [
            ("bert-0.76b", 0.76),
            ("bert-1.3b", 1.3),
            ("bert-6.7b", 6.7),
            ("wrn-0.5b", 0.5),
            ("wrn-6.8b", 6.8),
        ] {
            let m = LargeModel::from_name(name).expect(name);
            assert!(
                close(m.params(), billions * 1e9, 0.08),
                "{name}: {:.3e}",
                m.params()
            );
        }
        // MoE expert counts are powers of two, so sizes land within a factor of 2.
        for (name, billions) in [("moe-0.7b", 0.7), ("moe-27b", 27.0)] {
            let m = LargeModel::from_name(name).expect(name);
            let r = m.params() / (billions * 1e9);
            assert!((0.6..1.4).contains(&r), "{name}: {:.3e}", m.params());
        }
        assert!(LargeModel::from_name("resnet50").is_none());
        assert!(LargeModel::from_name("bert-xb").is_none());
        assert!(LargeModel::from_name("bert--1b").is_none());
    }

    /// One GPU, one stage, one micro-batch: the iteration is four forwards of compute
    /// (forward, recompute, backward ×2) plus the optimizer step, all from the roofline.
    #[test]
    fn single_gpu_iteration_by_hand() {
        let m = LargeModel::transformer("t", 2, 1024.0, 512.0, 1024.0);
        let d = dev("A100-40GB", 4);
        let batch = 1;
        let e = estimate_cell(
            &m,
            batch,
            &d,
            Cell::new(1, 1, Locality::Packed, 4),
            View::Optimal,
            300.0,
        );
        let p = m.params();
        let flops = m.fwd_flops();
        let max_work = m.layers.iter().map(|l| l.work_bytes).fold(0.0, f64::max);
        let fwd = d.roofline.time(flops, 2.0 * p + max_work);
        let opt = 32.0 * p / d.roofline.memory_bytes_per_s;
        assert!(close(e.iteration_s, 4.0 * fwd + opt, 1e-9), "{e:?}");
        let mem = 16.0 * p + m.layers.iter().map(|l| l.boundary_bytes).sum::<f64>() + max_work;
        assert!(close(e.memory_bytes, mem, 1e-9));
        assert_eq!(e.plan, Some(ParallelPlan::data_parallel(1)));
    }

    /// The GPipe composition on a hand-built two-stage model with identical stages:
    /// T_pass = (B−1)·S + 2·S + (B−1)·X + X.
    #[test]
    fn pipeline_formula_by_hand() {
        let layer = Layer {
            params_split: 1e6,
            params_replicated: 0.0,
            flops_split: 1e12,
            flops_replicated: 0.0,
            boundary_bytes: 1e6,
            work_bytes: 1e6,
            tp_bytes: 0.0,
            tp_collectives: 0,
            tp_kind: Collective::AllReduce,
        };
        let m = LargeModel {
            name: "two".into(),
            family: Family::Transformer,
            layers: vec![layer, layer],
            max_tensor: 1,
            precision: Precision::Fp16,
        };
        let d = dev("A100-40GB", 4);
        let (batch, b) = (8u32, 4u32);
        let plan = ParallelPlan {
            data: 1,
            tensor: 1,
            pipeline: 2,
        };
        let ctx = Ctx {
            dev: &d,
            batch: batch as f64,
            links: Links {
                per_node: 2,
                pipeline: d.fabric.intra_node.broadcast,
            },
        };
        let stages = stages_of(&m.layers, &[1, 2]);
        let split = [Split { data: 1, tensor: 1 }; 2];
        let (it, _) = ctx.iteration(&stages, &split, b).unwrap();
        let micro = 2.0; // 8 samples in 4 micro-batches
        let s = d.roofline.time(micro * 1e12, 2.0 * 1e6 + micro * 1e6);
        let link = d.fabric.intra_node.broadcast;
        let x = link.latency_s + micro * 1e6 / link.bytes_per_s;
        let bm1 = (b - 1) as f64;
        let fwd = bm1 * s + 2.0 * s + bm1 * x + x;
        let bwd = bm1 * 3.0 * s + 2.0 * 3.0 * s + bm1 * x + x;
        let tail = 32.0 * 1e6 / d.roofline.memory_bytes_per_s;
        assert!(
            close(it, fwd + bwd + tail, 1e-9),
            "{it} vs {}",
            fwd + bwd + tail
        );
        // The public entry point finds the same plan (or a faster micro-batch count).
        let e = estimate_plan(&m, batch, &d, 1, plan, 300.0);
        assert!(e.iteration_s <= it * (1.0 + 1e-12));
    }

    #[test]
    fn big_models_do_not_fit_one_small_gpu_but_fit_sharded() {
        let m = LargeModel::from_name("bert-6.7b").unwrap();
        let a10 = dev("A10", 2);
        let one = estimate_cell(
            &m,
            256,
            &a10,
            Cell::new(1, 1, Locality::Packed, 2),
            View::Optimal,
            300.0,
        );
        assert_eq!(one.infeasible, Some(Infeasible::OutOfMemory));
        let a100 = dev("A100-40GB", 4);
        let many = best_packed(&m, 256, &a100, 16, View::Optimal, 300.0);
        assert!(many.throughput > 0.0, "{many:?}");
        assert!(many.memory_bytes <= a100.memory_bytes);
    }

    #[test]
    fn round_limit_marks_slow_cells() {
        let m = LargeModel::from_name("bert-1.3b").unwrap();
        let d = dev("A100-40GB", 4);
        let cell = Cell::new(8, 1, Locality::Packed, 4);
        let ok = estimate_cell(&m, 256, &d, cell, View::Optimal, 300.0);
        assert!(ok.throughput > 0.0);
        let slow = estimate_cell(&m, 256, &d, cell, View::Optimal, ok.iteration_s * 0.5);
        assert_eq!(slow.infeasible, Some(Infeasible::TooSlow));
    }

    #[test]
    fn invalid_cells_are_refused() {
        let m = LargeModel::from_name("bert-1.3b").unwrap();
        let d = dev("A100-40GB", 4);
        for cell in [
            Cell {
                count: 0,
                nodes: 1,
                stages: 1,
            },
            Cell {
                count: 4,
                nodes: 1,
                stages: 3,
            },
            Cell {
                count: 6,
                nodes: 2,
                stages: 2,
            },
        ] {
            let e = estimate_cell(&m, 256, &d, cell, View::Optimal, 300.0);
            assert_eq!(e.infeasible, Some(Infeasible::Invalid), "{cell:?}");
        }
        let dp = estimate_cell(
            &m,
            256,
            &d,
            Cell::new(4, 2, Locality::Packed, 4),
            View::DpOnly,
            300.0,
        );
        assert_eq!(dp.infeasible, Some(Infeasible::Invalid));
        let zero = estimate_cell(
            &m,
            0,
            &d,
            Cell::new(4, 1, Locality::Packed, 4),
            View::Optimal,
            300.0,
        );
        assert_eq!(zero.infeasible, Some(Infeasible::Invalid));
    }

    #[test]
    fn faster_gpus_and_nvlink_help() {
        let m = LargeModel::from_name("bert-1.3b").unwrap();
        let a100 = best_packed(&m, 256, &dev("A100-40GB", 4), 4, View::Optimal, 300.0);
        let a10 = best_packed(&m, 256, &dev("A10", 2), 4, View::Optimal, 300.0);
        assert!(a100.throughput > a10.throughput, "{a100:?} {a10:?}");
        let d = dev("A100-40GB", 4);
        let packed = best_packed(&m, 256, &d, 4, View::Optimal, 300.0);
        let spread = estimate_cell(
            &m,
            256,
            &d,
            Cell::new(4, 1, Locality::Spread, 4),
            View::Optimal,
            300.0,
        );
        assert!(packed.throughput >= spread.throughput);
    }

    #[test]
    fn balanced_partition_evens_compute() {
        let m = LargeModel::from_name("bert-1.3b").unwrap();
        let p = balanced_partition(&m.layers, 4).unwrap();
        assert_eq!(p.len(), 4);
        assert_eq!(*p.last().unwrap(), m.layers.len());
        let stages = stages_of(&m.layers, &p);
        let loads: Vec<f64> = stages.iter().map(|s| s.flops_split).collect();
        let equal = stages_of(&m.layers, &equal_partition(m.layers.len(), 4).unwrap());
        let worst = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let eq_loads: Vec<f64> = equal.iter().map(|s| s.flops_split).collect();
        assert!(worst(&loads) <= worst(&eq_loads));
    }

    /// Crius's partition balances roofline load, not layer counts: loads 3:1:1:1 in two
    /// stages give the first layer a stage of its own (gap 0), where equal layers would put
    /// two layers in each.
    #[test]
    fn crius_partition_by_hand() {
        assert_eq!(crius_partition(&[3.0, 1.0, 1.0, 1.0], 2), Some(vec![1, 4]));
        assert_eq!(crius_partition(&[1.0; 4], 2), Some(vec![2, 4]));
        assert_eq!(
            crius_partition(&[1.0, 1.0, 1.0, 1.0], 4),
            Some(vec![1, 2, 3, 4])
        );
        assert_eq!(crius_partition(&[1.0, 2.0], 3), None);
        assert_eq!(
            crius_partition(&[5.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1),
            Some(vec![6])
        );
    }

    fn uniform_model(params: f64, tp_bytes: f64) -> LargeModel {
        let layer = Layer {
            params_split: params,
            params_replicated: 0.0,
            flops_split: 1e10,
            flops_replicated: 0.0,
            boundary_bytes: 1e4,
            work_bytes: 1e4,
            tp_bytes,
            tp_collectives: 2,
            tp_kind: Collective::AllReduce,
        };
        LargeModel {
            name: "hand".into(),
            family: Family::Transformer,
            layers: vec![layer; 4],
            max_tensor: 16,
            precision: Precision::Fp16,
        }
    }

    /// The proxy's split choice on a 4-GPU, 2-stage cell (2 GPUs a stage), by hand. With
    /// 16 micro-batches of a 256 batch, a stage of two layers (2 collectives each) moves per
    /// micro-batch, as (data 2, tensor 1): gradients 2·(2P)·½ / 16; as (1, 2): activations
    /// 4·T·(256/16)·½. Activation-heavy layers pick data parallelism, parameter-heavy ones
    /// tensor parallelism — whichever moves fewer bytes, not whichever runs faster.
    #[test]
    fn proxy_split_follows_crius_communication_rule() {
        let d = dev("A100-40GB", 4);
        let cell = Cell::new(4, 2, Locality::Packed, 4);
        // P = 1e6 params/layer: grads 2·2e6·0.5/16 = 1.25e5 B; T = 1e6 B/sample:
        // activations 4·1e6·16·0.5 = 3.2e7 B → data parallel.
        let act_heavy = uniform_model(1e6, 1e6);
        // P = 1e8: grads 2·2e8·0.5/16 = 1.25e7 B; T = 1e3: 4·1e3·16·0.5 = 3.2e4 B → tensor.
        let param_heavy = uniform_model(1e8, 1e3);
        for (m, want) in [
            (&act_heavy, Split { data: 2, tensor: 1 }),
            (&param_heavy, Split { data: 1, tensor: 2 }),
        ] {
            let e = estimate_cell(m, 256, &d, cell, View::Proxy, 300.0);
            assert_eq!(
                e.plan,
                Some(ParallelPlan {
                    data: want.data,
                    tensor: want.tensor,
                    pipeline: 2
                }),
                "{e:?}"
            );
            assert_eq!(e.micro_batches, PROXY_MICRO_BATCHES);
            // Its value is exactly that plan's iteration (equal loads: two layers a stage).
            let ctx = Ctx {
                dev: &d,
                batch: 256.0,
                links: Links {
                    per_node: 4,
                    pipeline: d.fabric.intra_node.broadcast,
                },
            };
            let stages = stages_of(&m.layers, &[2, 4]);
            let (it, _) = ctx.iteration(&stages, &[want; 2], 16).unwrap();
            assert!(close(e.iteration_s, it, 1e-12), "{} vs {it}", e.iteration_s);
            // The optimal view is at least as fast.
            let o = estimate_cell(m, 256, &d, cell, View::Optimal, 300.0);
            assert!(o.throughput >= e.throughput);
        }
        // The micro-batch count shrinks when the batch does not split 16 ways per replica.
        assert_eq!(proxy_micro_batches(256, 16), 16);
        assert_eq!(proxy_micro_batches(32, 16), 2);
        assert_eq!(proxy_micro_batches(24, 4), 2);
    }

    fn model_strategy() -> impl Strategy<Value = LargeModel> {
        prop_oneof![
            (0.5f64..7.0).prop_map(|b| LargeModel::from_name(&format!("bert-{b:.2}b")).unwrap()),
            (0.5f64..7.0).prop_map(|b| LargeModel::from_name(&format!("wrn-{b:.2}b")).unwrap()),
            (0.7f64..27.0).prop_map(|b| LargeModel::from_name(&format!("moe-{b:.2}b")).unwrap()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// The proxy searches a subset of the optimal search's plans: on every cell its
        /// throughput is at most the optimal one, and DP-only is too.
        #[test]
        fn proxy_and_dp_only_never_beat_optimal(
            model in model_strategy(),
            gpu in prop::sample::select(vec![("A100-40GB", 4u32), ("V100-32GB", 16), ("A40", 2), ("A10", 2)]),
            batch in prop::sample::select(vec![32u32, 128, 256]),
        ) {
            let d = dev(gpu.0, gpu.1);
            for count in CELL_COUNTS {
                for cell in cells_of(count, gpu.1) {
                    let opt = estimate_cell(&model, batch, &d, cell, View::Optimal, 300.0);
                    for view in [View::Proxy, View::DpOnly] {
                        let e = estimate_cell(&model, batch, &d, cell, view, 300.0);
                        prop_assert!(e.throughput <= opt.throughput * (1.0 + 1e-12),
                            "{view:?} {cell:?}: {} > {}", e.throughput, opt.throughput);
                        prop_assert!(e.throughput.is_finite() && e.throughput >= 0.0);
                        if e.throughput > 0.0 {
                            prop_assert!(e.memory_bytes <= d.memory_bytes);
                        }
                    }
                }
            }
        }
    }
}
