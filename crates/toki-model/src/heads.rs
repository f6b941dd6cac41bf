//! Medusa heads: K extra heads on the frozen base's last hidden state (after the final norm).
//!
//! Head k (0-based) proposes the token k+2 positions ahead of the hidden state's position
//! (the base's own lm_head gives k+1). Each head is L residual blocks `x + SiLU(W x + b)`,
//! each block its own weights (the reference Medusa's `[ResBlock] * n` shares one), then a
//! vocabulary projection: its own (`Own`, initialised from the base's lm_head) or the base's
//! frozen one (`Shared`, a few MB per head set).
//!
//! What a head reads is a [`HeadInput`]: the hidden state alone (Medusa), the hidden state
//! plus the embedding of the base's own next token t+1, or the hidden state plus every
//! token on the path up to the head's target (Hydra's sequential heads). Token t+1 is known
//! when the heads run (it is the tree's root), and a head that must guess t+2 does better
//! knowing t+1; a head that must guess t+3 does better still knowing t+2, which is the
//! previous head's proposal:
//!
//! ```text
//!   hidden h_t ──────────────────┐
//!   e(t+1) ── F_k,0 ─────────────+ ── x ── ResBlock × L ── vocabulary projection ── t+k+2
//!   e(t+2) ── F_k,1 ─── (path) ──┤         (x = h_t + Σ_j F_k,j · e(t+1+j), F starts at 0)
//!   ...                          │
//!   e(t+k+1) ── F_k,k ── (path) ─┘
//! ```
//!
//! `HiddenAndNext` reads the first line (F_k,0); `HiddenAndPath` reads them all: head k
//! reads the root and the top-1 proposals of heads 0..k-1 when decoding
//! ([`MedusaHeads::forward`]: the heads run one after another), and the data's own tokens in
//! training ([`MedusaHeads::forward_given`]). A tree node whose path leaves the top-1 chain
//! and then continues gets proposals conditioned on the chain, not on its own path: they
//! are only proposals, the base still verifies every one.
//!
//! Files: `heads.safetensors` + `heads.json` (native), or the reference implementation's
//! `medusa_lm_head.safetensors` + `config.json` (`medusa_num_heads`, `medusa_num_layers`).

use std::path::Path;

use burn::module::{Module, Param};
use burn::nn::Linear;
use burn::tensor::activation::silu;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use safetensors::{Dtype, tensor::TensorView};
use serde::{Deserialize, Serialize};

use crate::cache::host_vec;
use crate::error::{ModelError, Result};
use crate::kernels::HostWeight;
use crate::llama::{LlamaModel, host_matmul, host_path, transpose};
use crate::weights::{SafetensorsWeights, WeightSource};

/// Where a head's vocabulary projection comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HeadKind {
    /// Each head has its own lm_head.
    Own,
    /// Every head reuses the base's frozen lm_head.
    Shared,
}

/// What the heads read at a position t (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadInput {
    /// The base's hidden state h_t only (the reference Medusa).
    #[default]
    Hidden,
    /// h_t plus a per-head projection of the embedding of the base's next token t+1.
    HiddenAndNext,
    /// h_t plus per-head projections of the embeddings of every token from t+1 to the one
    /// before the head's target: the root and the earlier heads' proposals (Hydra).
    HiddenAndPath,
}

impl HeadInput {
    /// How many path tokens (t+1, t+2, ..) head `h` (0-based) reads.
    pub fn path_len(self, h: usize) -> usize {
        match self {
            Self::Hidden => 0,
            Self::HiddenAndNext => 1,
            Self::HiddenAndPath => h + 1,
        }
    }
}

/// How `heads.safetensors` stores the weights (heads always compute in the model's
/// precision; loading takes either).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StoreDtype {
    #[default]
    F32,
    /// Half the file (a demo head set in the repository); weights rounded to 11 bits.
    F16,
}

/// The tokens path heads read past the hidden state, per row.
#[derive(Debug, Clone)]
pub enum HeadPath {
    /// The base's next token t+1 [R] (the tree root); `HiddenAndPath` heads then read the
    /// earlier heads' top-1 proposals (decoding).
    Root(Tensor<1, Int>),
    /// Known tokens: entry j [R] is token t+1+j, at least as many as the last head reads
    /// (training and held-out scoring on the data's own tokens).
    Given(Vec<Tensor<1, Int>>),
}

/// `heads.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadsConfig {
    pub kind: HeadKind,
    pub num_heads: usize,
    pub num_layers: usize,
    pub hidden_size: usize,
    pub vocab_size: usize,
    /// Free-form name of the base model the heads were trained on.
    #[serde(default)]
    pub base_model: String,
    /// Size of the draft vocabulary (`draft-vocab.json`) the heads were trained to score;
    /// 0: trained on the whole vocabulary.
    #[serde(default)]
    pub draft_vocab: usize,
    /// What each head reads; files without the field are Medusa heads (hidden state only).
    #[serde(default)]
    pub input: HeadInput,
    /// How [`MedusaHeads::save`] stores the weights.
    #[serde(default)]
    pub dtype: StoreDtype,
}

impl HeadsConfig {
    /// A head set sized for `base`: its hidden size and vocabulary.
    pub fn for_model(
        kind: HeadKind,
        num_heads: usize,
        num_layers: usize,
        base: &crate::LlamaConfig,
    ) -> Self {
        Self {
            kind,
            num_heads,
            num_layers,
            hidden_size: base.hidden_size,
            vocab_size: base.vocab_size,
            base_model: String::new(),
            draft_vocab: 0,
            input: HeadInput::Hidden,
            dtype: StoreDtype::F32,
        }
    }
}

#[derive(Module, Debug)]
pub struct ResBlock {
    linear: Linear,
}

#[derive(Module, Debug)]
pub struct Head {
    /// F_k,j: the embedding of path token t+1+j into the head's input
    /// ([`HeadInput::path_len`] of them).
    path: Vec<Linear>,
    blocks: Vec<ResBlock>,
    /// `None` for the `Shared` kind.
    lm_head: Option<Linear>,
}

#[derive(Module, Debug)]
pub struct MedusaHeads {
    heads: Vec<Head>,
    #[module(skip)]
    config: HeadsConfig,
    /// Host copies of each head's square projections for the CPU fast path
    /// ([`MedusaHeads::with_host_kernels`]); `None`: Burn's matmul only.
    #[module(skip)]
    host: Option<Vec<HostHead>>,
}

/// One head's F_k,j and residual-block weights on the host, `[out, in]`.
#[derive(Debug, Clone)]
struct HostHead {
    path: Vec<HostWeight>,
    blocks: Vec<HostWeight>,
}

/// `linear`(x) [R, in] -> [R, out], on the host kernel where there is a host copy and the
/// rows are few (and record no gradients).
fn project(linear: &Linear, host: Option<&HostWeight>, x: Tensor<2>) -> Tensor<2> {
    let [rows, _] = x.dims();
    match host {
        Some(w) if host_path(rows, &x) => {
            let y = host_matmul(w, x);
            match &linear.bias {
                Some(b) => y + b.val().unsqueeze(),
                None => y,
            }
        }
        _ => linear.forward(x),
    }
}

fn heads_err(path: &Path, msg: impl ToString) -> ModelError {
    ModelError::Heads {
        path: path.to_path_buf(),
        msg: msg.to_string(),
    }
}

fn tensor2(data: Vec<f32>, shape: [usize; 2], device: &Device) -> Tensor<2> {
    Tensor::from_data(TensorData::new(data, shape), device)
}

/// Key names of one head-file layout.
trait Layout {
    /// F_head,j (j = 0: the next token's, the only one of `HiddenAndNext` heads).
    fn path_weight(&self, head: usize, j: usize) -> String;
    fn block_weight(&self, head: usize, block: usize) -> String;
    fn block_bias(&self, head: usize, block: usize) -> String;
    fn lm_head(&self, head: usize) -> String;
}

struct Native;
impl Layout for Native {
    fn path_weight(&self, h: usize, j: usize) -> String {
        match j {
            0 => format!("heads.{h}.next.weight"),
            _ => format!("heads.{h}.path.{j}.weight"),
        }
    }
    fn block_weight(&self, h: usize, b: usize) -> String {
        format!("heads.{h}.blocks.{b}.weight")
    }
    fn block_bias(&self, h: usize, b: usize) -> String {
        format!("heads.{h}.blocks.{b}.bias")
    }
    fn lm_head(&self, h: usize) -> String {
        format!("heads.{h}.lm_head.weight")
    }
}

/// The reference Medusa: `{head}.{block}.linear.weight`, `{head}.{L}.weight`.
struct Reference {
    layers: usize,
}
impl Layout for Reference {
    // The reference heads read the hidden state only; a config never asks for this.
    fn path_weight(&self, h: usize, j: usize) -> String {
        format!("{h}.path.{j}.weight")
    }
    fn block_weight(&self, h: usize, b: usize) -> String {
        format!("{h}.{b}.linear.weight")
    }
    fn block_bias(&self, h: usize, b: usize) -> String {
        format!("{h}.{b}.linear.bias")
    }
    fn lm_head(&self, h: usize) -> String {
        format!("{h}.{}.weight", self.layers)
    }
}

impl MedusaHeads {
    /// Fresh heads: zero residual blocks (an untrained head starts at the base's own
    /// prediction), own lm_heads copied from the base's.
    pub fn init(config: HeadsConfig, base: &LlamaModel) -> Result<Self> {
        let mut src = InitSource {
            base: base.lm_head().weight.val(),
        };
        Self::build(config, &mut src, &Native, &base.device())
    }

    /// Seeded random heads (tests: acceptance then varies from step to step).
    pub fn random(config: HeadsConfig, seed: u64, std: f32, device: &Device) -> Result<Self> {
        let mut src = crate::weights::RandomWeights { seed, std };
        Self::build(config, &mut src, &Native, device)
    }

    /// Heads from named tensors in the native layout (`heads.{h}.next.weight` [D, D] for
    /// the `HiddenAndNext` and `HiddenAndPath` inputs, `heads.{h}.path.{j}.weight` [D, D]
    /// for j = 1..=h with `HiddenAndPath`, `heads.{h}.blocks.{b}.weight` [D, D] as [out, in], `.bias`
    /// [D], `heads.{h}.lm_head.weight` [V, D] for the own kind).
    pub fn from_source(
        config: HeadsConfig,
        src: &mut dyn WeightSource,
        device: &Device,
    ) -> Result<Self> {
        Self::build(config, src, &Native, device)
    }

    /// The native names and shapes of a head set's tensors, in file order.
    pub fn tensor_names(config: &HeadsConfig) -> Vec<(String, Vec<usize>)> {
        let (d, v) = (config.hidden_size, config.vocab_size);
        let mut out = vec![];
        for h in 0..config.num_heads {
            for j in 0..config.input.path_len(h) {
                out.push((Native.path_weight(h, j), vec![d, d]));
            }
            for b in 0..config.num_layers {
                out.push((Native.block_weight(h, b), vec![d, d]));
                out.push((Native.block_bias(h, b), vec![d]));
            }
            if config.kind == HeadKind::Own {
                out.push((Native.lm_head(h), vec![v, d]));
            }
        }
        out
    }

    fn build(
        config: HeadsConfig,
        src: &mut dyn WeightSource,
        layout: &dyn Layout,
        device: &Device,
    ) -> Result<Self> {
        let (d, v) = (config.hidden_size, config.vocab_size);
        if config.num_heads == 0 {
            return Err(ModelError::Heads {
                path: Default::default(),
                msg: "a head set needs at least one head".into(),
            });
        }
        let mut heads = Vec::with_capacity(config.num_heads);
        let square = |w: Vec<f32>| Linear {
            weight: Param::from_tensor(tensor2(transpose(&w, d, d), [d, d], device)),
            bias: None,
        };
        for h in 0..config.num_heads {
            let path = (0..config.input.path_len(h))
                .map(|j| Ok(square(src.tensor(&layout.path_weight(h, j), &[d, d])?)))
                .collect::<Result<Vec<_>>>()?;
            let mut blocks = Vec::with_capacity(config.num_layers);
            for b in 0..config.num_layers {
                let w = src.tensor(&layout.block_weight(h, b), &[d, d])?;
                let bias = src.tensor(&layout.block_bias(h, b), &[d])?;
                blocks.push(ResBlock {
                    linear: Linear {
                        weight: Param::from_tensor(tensor2(transpose(&w, d, d), [d, d], device)),
                        bias: Some(Param::from_tensor(Tensor::from_data(
                            TensorData::new(bias, [d]),
                            device,
                        ))),
                    },
                });
            }
            let lm_head = match config.kind {
                HeadKind::Shared => None,
                HeadKind::Own => {
                    let w = src.tensor(&layout.lm_head(h), &[v, d])?;
                    Some(Linear {
                        weight: Param::from_tensor(tensor2(transpose(&w, v, d), [d, v], device)),
                        bias: None,
                    })
                }
            };
            heads.push(Head {
                path,
                blocks,
                lm_head,
            });
        }
        src.finish(&|_| false)?;
        Ok(Self {
            heads,
            config,
            host: None,
        })
    }

    /// Load heads from a folder: native (`heads.json`) or reference Medusa
    /// (`medusa_lm_head.safetensors` + `config.json`). Checked against `base`.
    pub fn load(dir: &Path, base: &LlamaModel) -> Result<Self> {
        let native = dir.join("heads.json");
        let (config, file, layout): (HeadsConfig, _, Box<dyn Layout>) = if native.exists() {
            let text = std::fs::read_to_string(&native).map_err(|e| ModelError::io(&native, e))?;
            let cfg: HeadsConfig =
                serde_json::from_str(&text).map_err(|e| heads_err(&native, e))?;
            (cfg, dir.join("heads.safetensors"), Box::new(Native))
        } else {
            let cfg_path = dir.join("config.json");
            let file = dir.join("medusa_lm_head.safetensors");
            if !file.exists() {
                return Err(heads_err(
                    dir,
                    "no heads.json (toki) or medusa_lm_head.safetensors (reference Medusa) in this folder",
                ));
            }
            let text =
                std::fs::read_to_string(&cfg_path).map_err(|e| ModelError::io(&cfg_path, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| heads_err(&cfg_path, e))?;
            let field = |k: &str| {
                v.get(k)
                    .and_then(|x| x.as_u64())
                    .map(|x| x as usize)
                    .ok_or_else(|| heads_err(&cfg_path, format!("missing `{k}`")))
            };
            let (num_heads, num_layers) = (field("medusa_num_heads")?, field("medusa_num_layers")?);
            // The reference always has own lm_heads; sizes are read off the tensors below.
            let cfg = HeadsConfig {
                kind: HeadKind::Own,
                num_heads,
                num_layers,
                hidden_size: base.config().hidden_size,
                vocab_size: base.config().vocab_size,
                base_model: v
                    .get("base_model_name_or_path")
                    .and_then(|x| x.as_str())
                    .unwrap_or_default()
                    .into(),
                draft_vocab: 0,
                input: HeadInput::Hidden,
                dtype: StoreDtype::F32,
            };
            (cfg, file, Box::new(Reference { layers: num_layers }))
        };
        let c = base.config();
        if config.hidden_size != c.hidden_size {
            return Err(ModelError::HeadsMismatch {
                what: "hidden size",
                heads: config.hidden_size,
                base: c.hidden_size,
            });
        }
        if config.vocab_size != c.vocab_size {
            return Err(ModelError::HeadsMismatch {
                what: "vocabulary size",
                heads: config.vocab_size,
                base: c.vocab_size,
            });
        }
        let mut src = SafetensorsWeights::open_file(&file)?;
        // Shapes in the file decide: a head set for another model fails with both sizes named.
        let probe = layout.block_weight(0, 0);
        if let Some(shape) = src.shape(&probe)
            && shape.first() != Some(&c.hidden_size)
        {
            return Err(ModelError::HeadsMismatch {
                what: "hidden size",
                heads: shape[0],
                base: c.hidden_size,
            });
        }
        Self::build(config, &mut src, layout.as_ref(), &base.device())
    }

    /// Write `heads.safetensors` (in the config's [`StoreDtype`]) + `heads.json` into `dir`
    /// (each via a temp file + rename).
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
        let c = &self.config;
        let (d, v) = (c.hidden_size, c.vocab_size);
        let mut named: Vec<(String, Vec<usize>, Vec<u8>)> = vec![];
        let bytes = |t: Tensor<2>| -> Result<Vec<f32>> {
            t.cast(DType::F32)
                .try_into_vec_as::<f32>()
                .map_err(|e| heads_err(dir, e))
        };
        // A [rows, cols] Burn tensor ([in, out] for weights) as the file's [cols, rows] bytes.
        let entry = |name: String, t: Tensor<2>, rows: usize, cols: usize, shape: Vec<usize>| {
            let w = transpose(&bytes(t)?, rows, cols);
            let le: Vec<u8> = match c.dtype {
                StoreDtype::F32 => w.iter().flat_map(|x| x.to_le_bytes()).collect(),
                StoreDtype::F16 => w
                    .iter()
                    .flat_map(|&x| half::f16::from_f32(x).to_le_bytes())
                    .collect(),
            };
            Ok::<_, ModelError>((name, shape, le))
        };
        for (h, head) in self.heads.iter().enumerate() {
            for (j, f) in head.path.iter().enumerate() {
                named.push(entry(
                    Native.path_weight(h, j),
                    f.weight.val(),
                    d,
                    d,
                    vec![d, d],
                )?);
            }
            for (b, blk) in head.blocks.iter().enumerate() {
                let w = blk.linear.weight.val();
                named.push(entry(Native.block_weight(h, b), w, d, d, vec![d, d])?);
                let bias = blk
                    .linear
                    .bias
                    .as_ref()
                    .map(|b| b.val().reshape([1, d]))
                    .ok_or_else(|| heads_err(dir, "block without bias"))?;
                named.push(entry(Native.block_bias(h, b), bias, 1, d, vec![d])?);
            }
            if let Some(lm) = &head.lm_head {
                named.push(entry(Native.lm_head(h), lm.weight.val(), d, v, vec![v, d])?);
            }
        }
        let views: Vec<(String, TensorView<'_>)> = named
            .iter()
            .map(|(n, s, b)| {
                let dtype = match c.dtype {
                    StoreDtype::F32 => Dtype::F32,
                    StoreDtype::F16 => Dtype::F16,
                };
                TensorView::new(dtype, s.clone(), b)
                    .map(|t| (n.clone(), t))
                    .map_err(|e| heads_err(dir, e))
            })
            .collect::<Result<_>>()?;
        let st = dir.join("heads.safetensors");
        let tmp = dir.join("heads.safetensors.tmp");
        safetensors::serialize_to_file(views, None, &tmp).map_err(|e| heads_err(&tmp, e))?;
        std::fs::rename(&tmp, &st).map_err(|e| ModelError::io(&st, e))?;
        let json = dir.join("heads.json");
        let tmp = dir.join("heads.json.tmp");
        let text = serde_json::to_string_pretty(&self.config).map_err(|e| heads_err(&json, e))?;
        std::fs::write(&tmp, text).map_err(|e| ModelError::io(&tmp, e))?;
        std::fs::rename(&tmp, &json).map_err(|e| ModelError::io(&json, e))
    }

    pub fn config(&self) -> &HeadsConfig {
        &self.config
    }
    pub fn num_heads(&self) -> usize {
        self.heads.len()
    }

    /// Head `h`'s residual-block output [R, D], the input of its vocabulary projection,
    /// for hidden states [R, D] and the embeddings `path` (entry j [R, D]: token t+1+j) of
    /// at least the path tokens it reads.
    fn head_features(&self, h: usize, hidden: Tensor<2>, path: &[Tensor<2>]) -> Tensor<2> {
        let head = &self.heads[h];
        let host = self.host.as_ref().map(|hosts| &hosts[h]);
        let x = head
            .path
            .iter()
            .zip(path)
            .enumerate()
            .fold(hidden, |x, (j, (f, e))| {
                x + project(f, host.map(|c| &c.path[j]), e.clone())
            });
        head.blocks.iter().enumerate().fold(x, |x, (b, blk)| {
            let w = host.map(|c| &c.blocks[b]);
            x.clone() + silu(project(&blk.linear, w, x))
        })
    }

    /// Every head's logits for hidden states [R, D]: `score(h, features)` maps head h's
    /// features [R, D] to logits [R, C]; column c is token `ids[c]` (the vocabulary itself
    /// without `ids`). With `shared`, heads that read no proposals are scored in one
    /// `score(0, ..)` of all K heads' features ([K*R, D]: the matrix is read once).
    pub(crate) fn run(
        &self,
        hidden: Tensor<2>,
        path: HeadPath,
        base: &LlamaModel,
        score: &dyn Fn(usize, Tensor<2>) -> Tensor<2>,
        ids: Option<&Tensor<1, Int>>,
        shared: bool,
    ) -> Vec<Tensor<2>> {
        let [r, _] = hidden.dims();
        let k = self.heads.len();
        let input = self.config.input;
        let reads = input.path_len(k - 1);
        let dtype = hidden.dtype();
        let embed = |t: Tensor<1, Int>| base.embed(t).cast(dtype); // [R, D]
        let (mut path, chained): (Vec<Tensor<2>>, bool) = match path {
            _ if reads == 0 => (vec![], false),
            HeadPath::Root(root) => (vec![embed(root)], input == HeadInput::HiddenAndPath),
            HeadPath::Given(tokens) => (tokens.into_iter().take(reads).map(embed).collect(), false),
        };
        if !chained && shared {
            let xs = (0..k)
                .map(|h| self.head_features(h, hidden.clone(), &path))
                .collect();
            let logits = score(0, Tensor::cat(xs, 0)); // [K*R, C]
            let [_, c] = logits.dims();
            return (0..k)
                .map(|h| logits.clone().slice([h * r..(h + 1) * r, 0..c]))
                .collect();
        }
        let mut out = Vec::with_capacity(k);
        for h in 0..k {
            let logits = score(h, self.head_features(h, hidden.clone(), &path)); // [R, C]
            if chained && h + 1 < k {
                // The next head reads this one's top-1 proposal, chosen on the device.
                let col = logits.clone().argmax(1).reshape([r]); // [R]
                let token = match ids {
                    Some(ids) => ids.clone().select(0, col),
                    None => col,
                };
                path.push(embed(token));
            }
            out.push(logits);
        }
        out
    }

    /// The same heads with host copies of their square projections (F_k and the residual
    /// blocks), so that decoding steps run them on the host kernel like the base's
    /// projections ([`crate::kernels`]); unchanged where `base` has no host kernels. The
    /// copies are taken now: for inference, after any training.
    pub fn with_host_kernels(mut self, base: &LlamaModel) -> Self {
        if !base.uses_host_kernels() {
            self.host = None;
            return self;
        }
        let copy = |l: &Linear| {
            let [d_in, d_out] = l.weight.val().dims();
            // Burn keeps [in, out]; the kernel reads [out, in].
            HostWeight::new(
                transpose(&host_vec(l.weight.val()), d_in, d_out),
                d_out,
                d_in,
            )
        };
        let host = self
            .heads
            .iter()
            .map(|h| HostHead {
                path: h.path.iter().map(copy).collect(),
                blocks: h.blocks.iter().map(|b| copy(&b.linear)).collect(),
            })
            .collect();
        self.host = Some(host);
        self
    }

    /// Head `h`'s own vocabulary projection ([D, vocab] weight); `None` for the shared kind.
    pub fn own_lm_head(&self, h: usize) -> Option<&Linear> {
        self.heads.get(h).and_then(|head| head.lm_head.as_ref())
    }

    /// Logits of every head for hidden states [R, D] whose base next tokens are `next` [R]
    /// (path heads read the earlier heads' top-1 proposals, see the module docs): K
    /// tensors [R, vocab], f32.
    pub fn forward(
        &self,
        hidden: Tensor<2>,
        next: Tensor<1, Int>,
        base: &LlamaModel,
    ) -> Vec<Tensor<2>> {
        self.forward_on(hidden, HeadPath::Root(next), base)
    }

    /// [`MedusaHeads::forward`] on a [`HeadPath`]: given tokens for training and scoring.
    pub fn forward_given(
        &self,
        hidden: Tensor<2>,
        path: Vec<Tensor<1, Int>>,
        base: &LlamaModel,
    ) -> Vec<Tensor<2>> {
        self.forward_on(hidden, HeadPath::Given(path), base)
    }

    fn forward_on(&self, hidden: Tensor<2>, path: HeadPath, base: &LlamaModel) -> Vec<Tensor<2>> {
        let score = |h: usize, x: Tensor<2>| match self.own_lm_head(h) {
            Some(lm) => lm.forward(x).cast(DType::F32),
            None => base.logits(x),
        };
        let shared = self.config.kind == HeadKind::Shared;
        self.run(hidden, path, base, &score, None, shared)
    }
}

/// Initial weights: zero blocks, lm_heads copied from the base.
struct InitSource {
    /// The base lm_head, [D, V].
    base: Tensor<2>,
}

impl WeightSource for InitSource {
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        if name.ends_with("lm_head.weight") {
            let [d, v] = self.base.dims();
            let w: Vec<f32> = self
                .base
                .clone()
                .cast(DType::F32)
                .try_into_vec_as()
                .map_err(|e| ModelError::Heads {
                    path: Default::default(),
                    msg: e.to_string(),
                })?;
            Ok(transpose(&w, d, v))
        } else {
            Ok(vec![0.0; shape.iter().product()])
        }
    }
    fn contains(&self, _: &str) -> bool {
        true
    }
    fn finish(&self, _: &dyn Fn(&str) -> bool) -> Result<()> {
        Ok(())
    }
}
