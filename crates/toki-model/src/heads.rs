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
//! training ([`MedusaHeads::forward_on`] with [`HeadPath::Given`]). A tree node whose path
//! leaves the top-1 chain and then continues gets proposals conditioned on the chain, not on
//! its own path: they are only proposals, the base still verifies every one.
//!
//! Files: `heads.safetensors` + `heads.json` (native), or the reference implementation's
//! `medusa_lm_head.safetensors` + `config.json` (`medusa_num_heads`, `medusa_num_layers`).

use burn::module::Module;
use burn::nn::Linear;
use burn::tensor::activation::silu;
use burn::tensor::{DType, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::cache::host_vec;
use crate::kernels::HostPrecision;
use crate::llama::{LlamaModel, host_matmul, host_path};

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
// One per heads' pass, passed by reference: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
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
    /// What must agree for one head set's weights to carry over to another: kind, heads,
    /// blocks, hidden size, vocabulary.
    pub fn shape(&self) -> (HeadKind, usize, usize, usize, usize) {
        (
            self.kind,
            self.num_heads,
            self.num_layers,
            self.hidden_size,
            self.vocab_size,
        )
    }

    /// [`HeadsConfig::shape`] in words, for error messages.
    pub fn describe_shape(&self) -> String {
        format!(
            "{:?} heads: {} heads x {} blocks, hidden size {}, vocabulary {}",
            self.kind, self.num_heads, self.num_layers, self.hidden_size, self.vocab_size
        )
    }

    /// The `heads.json` a head set's folder holds (at `dir/heads.json`): what
    /// [`MedusaHeads::load`] and a training run's `--init` read first.
    pub fn read(dir: &std::path::Path) -> crate::Result<Self> {
        let path = dir.join("heads.json");
        let text = std::fs::read_to_string(&path).map_err(|e| crate::ModelError::io(&path, e))?;
        serde_json::from_str(&text).map_err(|e| crate::ModelError::Heads {
            path,
            msg: e.to_string(),
        })
    }

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

/// `linear`(x) [R, in] -> [R, out], on the host kernel where there is a host copy (and the
/// rows record no gradients).
fn project(linear: &Linear, host: Option<&HostLinear>, x: Tensor<2>) -> Tensor<2> {
    match host {
        Some(h) if host_path(&x) => {
            let y = host_matmul(&h.w, x);
            match &linear.bias {
                Some(b) => y + b.val().unsqueeze(),
                None => y,
            }
        }
        _ => linear.forward(x),
    }
}

/// How [`MedusaHeads::run`] scores each head's features.
pub(crate) struct Scoring<'a> {
    /// Head h's features [R, D] -> its logits [R, C].
    pub(crate) tensor: &'a dyn Fn(usize, Tensor<2>) -> Tensor<2>,
    /// The same on host rows, where the projection has a host copy.
    pub(crate) host: Option<HostScore<'a>>,
    /// Column c is token `ids[c]`, on the device and on the host (the vocabulary itself
    /// without).
    pub(crate) ids: Option<(&'a Tensor<1, Int>, &'a [u32])>,
}

/// `tokens` [R] read back, `None` where they cannot be.
fn token_vec(tokens: Tensor<1, Int>) -> Option<Vec<u32>> {
    let v = tokens.try_into_vec_as::<i64>().ok()?;
    v.into_iter().map(|t| u32::try_from(t).ok()).collect()
}

// Construction, loading and saving.
mod weights;
// The pass on host rows.
mod host;
pub(crate) use host::HostScore;
use host::{HostHead, HostLinear};

impl MedusaHeads {
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

    /// Every head's logits for hidden states [R, D]: `scoring.tensor(h, features)` maps head
    /// h's features [R, D] to logits [R, C]. Shared heads that read no proposals are scored
    /// in one `score(0, ..)` of all K heads' features ([K*R, D]: the matrix is read once).
    /// `enough(h, logits)` is told each head's logits [R, C] in order, as they come, and may
    /// end the run there (`true`): the heads after h are not computed, and only h + 1 come
    /// back. Rows on the host path run on host vectors where the heads and the scoring
    /// have host copies ([`host`]), with the same products.
    pub(crate) fn run(
        &self,
        hidden: Tensor<2>,
        path: HeadPath,
        base: &LlamaModel,
        scoring: &Scoring<'_>,
        enough: &mut dyn FnMut(usize, &Tensor<2>) -> bool,
    ) -> Vec<Tensor<2>> {
        let [r, _] = hidden.dims();
        let k = self.heads.len();
        let input = self.config.input;
        let reads = input.path_len(k - 1);
        if let (Some(hosts), Some(score)) = (self.host.as_deref(), scoring.host)
            && host_path(&hidden)
            && r > 0
            && let Some(tokens) = match &path {
                _ if reads == 0 => Some((vec![], false)),
                HeadPath::Root(root) => {
                    token_vec(root.clone()).map(|t| (vec![t], input == HeadInput::HiddenAndPath))
                }
                HeadPath::Given(given) => {
                    let t: Option<Vec<_>> =
                        given.iter().take(reads).cloned().map(token_vec).collect();
                    t.map(|t| (t, false))
                }
            }
        {
            let device = hidden.device();
            let mut out = Vec::with_capacity(k);
            let mut give = |h: usize, logits: Vec<f32>| {
                let c = logits.len() / r;
                let t = Tensor::from_data(TensorData::new(logits, [r, c]), &device);
                let stop = enough(h, &t);
                out.push(t);
                stop
            };
            let ids = scoring.ids.map(|(_, ids)| ids);
            self.run_host(
                hosts,
                &host_vec(hidden),
                r,
                tokens,
                base,
                score,
                ids,
                &mut give,
            );
            return out;
        }
        let score = scoring.tensor;
        let dtype = hidden.dtype();
        let embed = |t: Tensor<1, Int>| base.embed(t).cast(dtype); // [R, D]
        let (mut path, chained): (Vec<Tensor<2>>, bool) = match path {
            _ if reads == 0 => (vec![], false),
            HeadPath::Root(root) => (vec![embed(root)], input == HeadInput::HiddenAndPath),
            HeadPath::Given(tokens) => (tokens.into_iter().take(reads).map(embed).collect(), false),
        };
        if !chained && self.config.kind == HeadKind::Shared {
            let xs = (0..k)
                .map(|h| self.head_features(h, hidden.clone(), &path))
                .collect();
            let logits = score(0, Tensor::cat(xs, 0)); // [K*R, C]
            let [_, c] = logits.dims();
            let mut out = Vec::with_capacity(k);
            for h in 0..k {
                let head = logits.clone().slice([h * r..(h + 1) * r, 0..c]); // [R, C]
                let stop = enough(h, &head);
                out.push(head);
                if stop {
                    break;
                }
            }
            return out;
        }
        let mut out = Vec::with_capacity(k);
        for h in 0..k {
            let logits = score(h, self.head_features(h, hidden.clone(), &path)); // [R, C]
            if enough(h, &logits) {
                out.push(logits);
                break;
            }
            if chained && h + 1 < k {
                // The next head reads this one's top-1 proposal, chosen on the device.
                let col = logits.clone().argmax(1).reshape([r]); // [R]
                let token = match scoring.ids {
                    Some((ids, _)) => ids.clone().select(0, col),
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
    /// copies are taken now: for inference, after any training. They are kept as 8-bit
    /// blocks rounded to nearest ([`HostPrecision::Q8`]): heads only propose, and a step
    /// streams their weights from memory (the shipped heads' pass: 0.78-0.82 ms against
    /// 0.91-0.95 ms in f16, `cargo bench --bench heads`).
    pub fn with_host_kernels(self, base: &LlamaModel) -> Self {
        self.with_host_kernels_in(base, HostPrecision::Q8)
    }

    /// [`MedusaHeads::with_host_kernels`] with the host copies in `precision`.
    pub fn with_host_kernels_in(mut self, base: &LlamaModel, precision: HostPrecision) -> Self {
        if !base.uses_host_kernels() {
            self.host = None;
            return self;
        }
        let copy = |l: &Linear| HostLinear::copy(l, precision);
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

    /// The precision of the host copies ([`MedusaHeads::with_host_kernels_in`]); f32 where
    /// there are none (Burn's matmul, or heads still in training).
    pub fn host_precision(&self) -> HostPrecision {
        self.host
            .as_ref()
            .and_then(|h| h.iter().flat_map(|c| c.blocks.iter().chain(&c.path)).next())
            .map_or(HostPrecision::F32, |l| l.w.precision())
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

    /// [`MedusaHeads::forward`] on a [`HeadPath`]: [`HeadPath::Given`] tokens for training
    /// and scoring.
    pub fn forward_on(
        &self,
        hidden: Tensor<2>,
        path: HeadPath,
        base: &LlamaModel,
    ) -> Vec<Tensor<2>> {
        self.forward_until(hidden, path, base, &mut |_, _| false)
    }

    /// [`MedusaHeads::forward_on`] that stops after the first head h whose logits [R,
    /// vocab] make `enough(h, ..)` true: a decoding step that will not use the deeper
    /// heads' proposals skips computing them (at least one head, at most K, come back).
    pub fn forward_until(
        &self,
        hidden: Tensor<2>,
        path: HeadPath,
        base: &LlamaModel,
        enough: &mut dyn FnMut(usize, &Tensor<2>) -> bool,
    ) -> Vec<Tensor<2>> {
        let score = |h: usize, x: Tensor<2>| match self.own_lm_head(h) {
            Some(lm) => lm.forward(x).cast(DType::F32),
            None => base.logits(x),
        };
        // Own heads' vocabulary projections have no host copy; the base's has.
        let lm_host = base
            .lm_head_host()
            .filter(|_| self.config.kind == HeadKind::Shared);
        let host_score = lm_host.map(|w| move |_: usize, x: &[f32], m: usize| w.matmul(x, m));
        let scoring = Scoring {
            tensor: &score,
            host: host_score.as_ref().map(|f| f as HostScore<'_>),
            ids: None,
        };
        self.run(hidden, path, base, &scoring, enough)
    }
}
