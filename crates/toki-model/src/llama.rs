//! The Llama-family decoder: GQA attention with RoPE at explicit positions, RMSNorm,
//! SwiGLU MLP. Modules hold weights only; the KV cache, RoPE tables and attention mask are
//! arguments of [`LlamaModel::forward`], which returns the final-norm hidden state of every
//! new position. `lm_head` is a separate projection ([`LlamaModel::logits`]).

use burn::module::{Module, Param};
use burn::nn::{Embedding, Linear, RmsNorm};
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use crate::cache::{KvCache, host_vec};
use crate::config::LlamaConfig;
use crate::kernels::{HostWeight, Rounding, RowValues};
use crate::rope::{RopeAt, RopeTables};

mod host;
mod load;
mod mask;
use host::HostRope;
pub use mask::AttnMask;

/// Floating-point type the model computes in (weights are stored in it too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    #[default]
    F32,
    F16,
    BF16,
}

impl Precision {
    pub fn dtype(self) -> DType {
        match self {
            Precision::F32 => DType::F32,
            Precision::F16 => DType::F16,
            Precision::BF16 => DType::BF16,
        }
    }
}

/// A projection stored as HF stores it, `weight` [out, in]. It runs on the host kernel
/// where the model has one (flex, f32: [`crate::kernels`]), for every row count, so that a
/// row's product never depends on the step it is in. Elsewhere on Burn's matmul: for the
/// few rows of a decoding step as `(W xᵀ)ᵀ`, which on flex ran 1.3-7x faster than `x Wᵀ`
/// (`examples/mm.rs`); for many rows (prefill) as `x Wᵀ`.
#[derive(Module, Debug)]
pub struct Proj {
    weight: Param<Tensor<2>>,
    bias: Option<Param<Tensor<1>>>,
    /// Host copy of `weight` for the CPU fast path (`None`: Burn's matmul only).
    #[module(skip)]
    host: Option<HostWeight>,
}

/// Whether `x` takes the host kernel (where there is a host copy): never a tensor that
/// records gradients (the host copy would silently cut it off the graph). Every row count
/// does: a tree of any size, and prefill (where the kernels also beat Burn's matmul on the
/// demo model: a 560-token prompt in 1.7 s against 2.0-2.5 s).
pub(crate) fn host_path(x: &Tensor<2>) -> bool {
    !x.device().is_autodiff()
}

/// Up to this many rows, Burn's matmul runs as `(W xᵀ)ᵀ` (where there is no host copy).
const FEW_ROWS: usize = 16;

/// `x` [T, in] -> `x Wᵀ` [T, out] on the host kernel.
pub(crate) fn host_matmul(w: &HostWeight, x: Tensor<2>) -> Tensor<2> {
    let [t, _] = x.dims();
    let device = x.device();
    let y = w.matmul(&host_vec(x), t);
    Tensor::from_data(TensorData::new(y, [t, w.out_features()]), &device)
}

impl Proj {
    /// x [T, in] -> [T, out]
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        let [t, _] = x.dims();
        let y = match &self.host {
            Some(w) if host_path(&x) => host_matmul(w, x),
            _ if t <= FEW_ROWS => self.weight.val().matmul(x.transpose()).transpose(), // [T, out]
            _ => x.matmul(self.weight.val().transpose()),                              // [T, out]
        };
        match &self.bias {
            Some(b) => y + b.val().unsqueeze(),
            None => y,
        }
    }
}

#[derive(Module, Debug)]
pub struct Attention {
    q: Proj,
    k: Proj,
    v: Proj,
    o: Proj,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
}

#[derive(Module, Debug)]
pub struct Mlp {
    gate: Proj,
    up: Proj,
    down: Proj,
}

#[derive(Module, Debug)]
pub struct DecoderLayer {
    attn_norm: RmsNorm,
    attn: Attention,
    mlp_norm: RmsNorm,
    mlp: Mlp,
    /// Host copies of the two norms' gains, where the projections have host copies.
    #[module(skip)]
    host_norms: Option<[Vec<f32>; 2]>,
}

/// The base model's weights.
#[derive(Module, Debug)]
pub struct LlamaModel {
    embed: Embedding,
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    /// [hidden, vocab]; for tied models a transposed copy of the embedding.
    lm_head: Linear,
    /// Host copy of the lm_head as [vocab, hidden] for the CPU fast path.
    #[module(skip)]
    lm_head_host: Option<HostWeight>,
    #[module(skip)]
    config: LlamaConfig,
}

impl LlamaModel {
    /// The lm_head's host copy ([`crate::kernels`]), where small steps use one.
    pub(crate) fn lm_head_host(&self) -> Option<&HostWeight> {
        self.lm_head_host.as_ref()
    }

    /// Whether small steps run on the host kernel ([`crate::kernels`]).
    pub fn uses_host_kernels(&self) -> bool {
        self.lm_head_host.is_some()
    }

    pub fn config(&self) -> &LlamaConfig {
        &self.config
    }

    pub fn device(&self) -> Device {
        self.embed.weight.val().device()
    }

    /// Token embeddings [R, hidden] of `ids` [R] (the input layer's rows), in the compute dtype.
    pub fn embed(&self, ids: Tensor<1, Int>) -> Tensor<2> {
        let [r] = ids.dims();
        let d = self.config.hidden_size;
        self.embed.forward(ids.reshape([1, r])).reshape([r, d])
    }

    /// The vocabulary projection ([hidden, vocab] weight); heads of the `shared` kind reuse it.
    pub fn lm_head(&self) -> &Linear {
        &self.lm_head
    }

    /// A KV cache for this model holding up to `capacity` tokens (in host memory where the
    /// model runs the CPU fast path).
    pub fn new_cache(&self, capacity: usize) -> KvCache {
        let c = &self.config;
        let new = if self.uses_host_kernels() {
            KvCache::new_host
        } else {
            KvCache::new
        };
        new(
            c.num_hidden_layers,
            c.num_key_value_heads,
            c.head_dim,
            capacity,
            &self.device(),
        )
    }

    /// Run `tokens` [T] at `positions` [T] on top of `cache`, appending their keys and values.
    /// Returns the final-norm hidden states [T, hidden]. The caller keeps `cache.len() + T`
    /// within the cache capacity and every position within the RoPE tables.
    pub fn forward(
        &self,
        tokens: Tensor<1, Int>,
        positions: Tensor<1, Int>,
        mask: &AttnMask,
        cache: &mut KvCache,
        rope: &RopeTables,
    ) -> Tensor<2> {
        let [t] = tokens.dims();
        let prefix = cache.len();
        assert!(
            prefix + t <= cache.capacity(),
            "forward of {t} tokens over {prefix} cached overflows the cache capacity {}",
            cache.capacity()
        );
        let rope_at = rope.at(positions);
        // [1, 1, T, prefix + T] additive bias; a single causal token needs none. Causal and
        // tree masks cover the new tokens only: every new token sees the whole prefix.
        let see_prefix = |b: Tensor<2>| {
            if prefix == 0 {
                return b;
            }
            Tensor::cat(vec![Tensor::<2>::zeros([t, prefix], &b.device()), b], 1)
        };
        let bias = match mask {
            AttnMask::Causal if t == 1 => None,
            AttnMask::Causal => Some(see_prefix(AttnMask::causal_bias(t, &self.device()))),
            AttnMask::Tree(b) => Some(see_prefix(b.clone())),
            AttnMask::Full(b) => {
                let [rows, cols] = b.dims();
                assert!(
                    rows == t && cols == prefix + t,
                    "a full mask for {t} tokens over {prefix} cached is [{t}, {}], not [{rows}, {cols}]",
                    prefix + t
                );
                Some(b.clone())
            }
        }
        .map(|b| b.cast(self.config_dtype()).reshape([1, 1, t, prefix + t]));
        // Every step over a host cache (prefill too) takes the host attention kernel, which
        // reads the bias on the host ([T, prefix + T]).
        let host_attn = cache.is_host() && !self.device().is_autodiff();
        let host_bias = bias.clone().filter(|_| host_attn).map(host_vec);
        let host_rope = host_attn.then(|| HostRope::new(&rope_at));
        let path = match &host_rope {
            Some(rope) => AttnPath::Host {
                bias: host_bias.as_deref(),
                rope,
            },
            None => AttnPath::Burn(bias.as_ref()),
        };
        // Every layer on host rows where all have host weights: one read-back of the
        // embeddings, no tensor op between the layers.
        if let Some(rope) = &host_rope
            && let Some(hosts) = self
                .layers
                .iter()
                .map(|l| l.host_layer())
                .collect::<Option<Vec<_>>>()
        {
            let d = self.config.hidden_size;
            let mut x = host_vec(self.embed(tokens)); // [T, D]
            for (i, (layer, w)) in self.layers.iter().zip(&hosts).enumerate() {
                layer.rows(w, &mut x, t, rope, host_bias.as_deref(), cache, i);
            }
            cache.advance(t);
            let x = Tensor::from_data(TensorData::new(x, [t, d]), &self.device());
            return self.norm.forward(x);
        }
        //  Activations stay 2-D [T, D]: a 2-D matmul uses the transposed weight view as it
        // is, where a batched one would first copy the weight to contiguous memory.
        let mut x = self.embed(tokens); // [T, D]
        for (i, layer) in self.layers.iter().enumerate() {
            let h =
                layer
                    .attn
                    .forward(layer.attn_norm.forward(x.clone()), &rope_at, path, cache, i);
            x = x + h;
            let h = layer.mlp.forward(layer.mlp_norm.forward(x.clone()));
            x = x + h;
        }
        cache.advance(t);
        self.norm.forward(x)
    }

    /// Hidden states [T, hidden] of a whole sequence `ids` run from position 0 with a fresh
    /// cache (no decoding state kept): calibration, training data, reference checks.
    /// `rope` must cover T positions.
    pub fn sequence_hidden(&self, ids: &[u32], rope: &RopeTables) -> Tensor<2> {
        let t = ids.len();
        let device = self.device();
        let tok: Vec<i64> = ids.iter().map(|&x| x as i64).collect();
        let pos: Vec<i64> = (0..t as i64).collect();
        let mut cache = self.new_cache(t);
        self.forward(
            Tensor::<1, Int>::from_data(TensorData::new(tok, [t]), &device),
            Tensor::<1, Int>::from_data(TensorData::new(pos, [t]), &device),
            &AttnMask::Causal,
            &mut cache,
            rope,
        )
    }

    fn config_dtype(&self) -> DType {
        self.embed.weight.val().dtype()
    }

    /// Vocabulary logits [T, vocab] of hidden states [T, hidden], in f32.
    pub fn logits(&self, hidden: Tensor<2>) -> Tensor<2> {
        match &self.lm_head_host {
            Some(w) if host_path(&hidden) => host_matmul(w, hidden),
            _ => self.lm_head.forward(hidden).cast(DType::F32),
        }
    }

    /// The greedy token of each row of `hidden` [T, hidden] on the host kernel: the
    /// arg-max of [`LlamaModel::logits`]' values, bit for bit, without the [T, vocab]
    /// buffers. `None` where the rows do not take the host path (GPU, autodiff): take
    /// `logits(..).argmax(1)` there.
    pub fn host_argmax(&self, hidden: &Tensor<2>) -> Option<Vec<u32>> {
        let [t, _] = hidden.dims();
        match &self.lm_head_host {
            Some(w) if host_path(hidden) => Some(w.matmul_argmax(&host_vec(hidden.clone()), t)),
            _ => None,
        }
    }

    /// What a sampler needs of the logits of each row of `hidden` [T, hidden] on the host
    /// kernel: bounds on every logit where they can be had without the full product (as
    /// tight as `rounding` makes them), with [`HostLogits::exact`] for the logits it needs
    /// exactly, or else the logits ([`HostWeight::value_bounds`]). `None` where the rows do
    /// not take the host path.
    pub fn host_logit_bounds(
        &self,
        hidden: &Tensor<2>,
        rounding: Rounding,
    ) -> Option<HostLogits<'_>> {
        let [t, _] = hidden.dims();
        match &self.lm_head_host {
            Some(w) if host_path(hidden) => {
                let x = host_vec(hidden.clone());
                let rows = w.value_bounds(&x, t, rounding);
                Some(HostLogits { weight: w, x, rows })
            }
            _ => None,
        }
    }
}

/// The logits of some hidden rows, bounded or exact ([`LlamaModel::host_logit_bounds`]).
pub struct HostLogits<'a> {
    weight: &'a HostWeight,
    /// The hidden rows [T, hidden].
    x: Vec<f32>,
    /// Per row: bounds, or the logits.
    pub rows: Vec<RowValues>,
}

impl HostLogits<'_> {
    /// Logit `token` of row `row`, as [`LlamaModel::logits`] computes it, bit for bit.
    pub fn exact(&self, row: usize, token: usize) -> f32 {
        match &self.rows[row] {
            RowValues::Exact(v) => v[token],
            RowValues::Bounds { .. } => {
                let inn = self.weight.in_features();
                self.weight.value(&self.x[row * inn..][..inn], token)
            }
        }
    }
}

/// How a forward's attention runs, with its additive bias (`None`: every new token sees
/// every row).
#[derive(Clone, Copy)]
enum AttnPath<'a> {
    /// Burn's tensor ops; bias [1, 1, T, S].
    Burn(Option<&'a Tensor<4>>),
    /// The host kernel over a host cache ([`crate::attention`]); bias [T, S], and the
    /// pass's RoPE tables on the host.
    Host {
        bias: Option<&'a [f32]>,
        rope: &'a HostRope,
    },
}

impl Attention {
    /// x [T, D] -> [T, D]
    fn forward(
        &self,
        x: Tensor<2>,
        rope: &RopeAt,
        path: AttnPath<'_>,
        cache: &mut KvCache,
        layer: usize,
    ) -> Tensor<2> {
        if let AttnPath::Host { bias, rope } = path
            && let Some(y) = self.forward_host(&x, rope, bias, cache, layer)
        {
            return y;
        }
        let [t, _] = x.dims();
        let (nh, nkv, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        let group = nh / nkv;
        // [1, heads, T, hd]
        let q = self
            .q
            .forward(x.clone())
            .reshape([1, t, nh, hd])
            .swap_dims(1, 2);
        let k = self
            .k
            .forward(x.clone())
            .reshape([1, t, nkv, hd])
            .swap_dims(1, 2);
        let v = self.v.forward(x).reshape([1, t, nkv, hd]).swap_dims(1, 2);
        let q = rope.apply(q);
        let k = rope.apply(k);
        let bias = match path {
            AttnPath::Burn(bias) => bias,
            AttnPath::Host { bias, .. } => {
                let device = q.device();
                let (k, v) = (host_vec(k), host_vec(v)); // [nkv, T, hd]
                let out = self.attend(&host_vec(q), &k, &v, bias, cache, layer); // [T, nh * hd]
                let out = Tensor::from_data(TensorData::new(out, [t, nh * hd]), &device);
                return self.o.forward(out);
            }
        };
        let (k, v) = cache.write(layer, k, v); // [1, nkv, S, hd]
        let [_, _, s, _] = k.dims();
        // GQA without copying K/V: query heads g*group..(g+1)*group share kv head g, so
        // [1, nh, T, hd] regroups as [1, nkv, group*T, hd].
        let q = q.reshape([1, nkv, group * t, hd]);
        let scores = q
            .matmul(k.swap_dims(2, 3))
            .mul_scalar((hd as f64).powf(-0.5)); // [1, nkv, group*T, S]
        let scores = scores.reshape([1, nh, t, s]);
        let scores = match bias {
            Some(b) => scores + b.clone(),
            None => scores,
        };
        let probs = softmax(scores, 3).reshape([1, nkv, group * t, s]);
        let out = probs.matmul(v).reshape([1, nh, t, hd]); // [1, nh, T, hd]
        self.o.forward(out.swap_dims(1, 2).reshape([t, nh * hd]))
    }
}

impl Mlp {
    /// x [T, D] -> [T, D]
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        if host_path(&x)
            && let Some(y) = self.forward_host(&x)
        {
            return y;
        }
        self.down
            .forward(silu(self.gate.forward(x.clone())) * self.up.forward(x))
    }
}

/// The host kernel pays off on the flex (CPU) device in f32; autodiff (training) keeps
/// Burn's ops so gradients flow.
fn host_kernels_apply(device: &Device, precision: Precision) -> bool {
    #[cfg(feature = "flex")]
    {
        precision == Precision::F32 && *device == Device::flex() && !device.is_autodiff()
    }
    #[cfg(not(feature = "flex"))]
    {
        let _ = (device, precision);
        false
    }
}

/// Row-major [rows, cols] -> [cols, rows].
pub(crate) fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; w.len()];
    for r in 0..rows {
        for (c, &v) in w[r * cols..(r + 1) * cols].iter().enumerate() {
            out[c * rows + r] = v;
        }
    }
    out
}
