//! A layer's attention block and MLP on host vectors, for every step on the CPU (built for
//! the few rows of a decoding or verification step; prefill takes it too): where the
//! projections have host copies (flex, f32, no biases) and the cache is on the host.
//!
//! The same arithmetic as the tensor path around the host kernels, without its traffic:
//! the activations are read back once per block instead of once per projection, and RoPE,
//! the head layout and SiLU(gate)·up are loops over host memory instead of a dozen tensor
//! ops each (every op on flex allocates its result and pays a dispatch, whatever its
//! size). RoPE takes the same products and sums in the same order as [`RopeAt::apply`]
//! (bit-identical); SiLU is [`silu_times`] (not bit-identical to Burn's, within 1e-6).
//!
//! Where every layer has host weights (the norms' gains too, copied at load), the whole
//! layer stack runs on host rows ([`DecoderLayer::rows`]): RMSNorm ([`rms_norm`], Burn's
//! formula), the blocks and the residual adds, with no tensor op between the layers.

use burn::tensor::{Tensor, TensorData};

use super::{Attention, DecoderLayer, Mlp, Proj};
use crate::attention::{HostAttn, attention};
use crate::cache::{KvCache, host_vec};
use crate::kernels::{HostWeight, silu_times};
use crate::rope::RopeAt;

/// cos and sin of one forward's positions on the host: [T, head_dim / 2] each.
pub(crate) struct HostRope {
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl HostRope {
    pub(crate) fn new(rope: &RopeAt) -> Self {
        let (cos, sin) = rope.tables(); // [1, 1, T, hd / 2]
        Self {
            cos: host_vec(cos),
            sin: host_vec(sin),
        }
    }

    /// Rotates `x` [T, heads, hd] in place (rotate_half pairs, as [`RopeAt::apply`]).
    fn apply(&self, x: &mut [f32], t: usize, hd: usize) {
        let half = hd / 2;
        for (i, token) in x.chunks_exact_mut(x.len() / t).enumerate() {
            let (cos, sin) = (
                &self.cos[i * half..(i + 1) * half],
                &self.sin[i * half..(i + 1) * half],
            );
            for head in token.chunks_exact_mut(hd) {
                let (x1, x2) = head.split_at_mut(half);
                for j in 0..half {
                    let (a, b) = (x1[j], x2[j]);
                    x1[j] = a * cos[j] - b * sin[j];
                    x2[j] = b * cos[j] + a * sin[j];
                }
            }
        }
    }
}

/// The host copy of a projection without a bias.
fn host(p: &Proj) -> Option<&HostWeight> {
    p.host.as_ref().filter(|_| p.bias.is_none())
}

/// [T, heads, hd] -> [heads, T, hd].
fn heads_first(x: &[f32], t: usize, heads: usize, hd: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for i in 0..t {
        for h in 0..heads {
            out[(h * t + i) * hd..(h * t + i + 1) * hd]
                .copy_from_slice(&x[(i * heads + h) * hd..(i * heads + h + 1) * hd]);
        }
    }
    out
}

impl Attention {
    /// x [T, D] -> [T, D] on host vectors, appending the keys and values to the host
    /// `cache`; `None` where a projection has no host copy or has a bias.
    pub(super) fn forward_host(
        &self,
        x: &Tensor<2>,
        rope: &HostRope,
        bias: Option<&[f32]>,
        cache: &mut KvCache,
        layer: usize,
    ) -> Option<Tensor<2>> {
        let w = [
            host(&self.q)?,
            host(&self.k)?,
            host(&self.v)?,
            host(&self.o)?,
        ];
        let [t, _] = x.dims();
        let y = self.rows(w, &host_vec(x.clone()), t, rope, bias, cache, layer);
        Some(Tensor::from_data(
            TensorData::new(y, [t, w[3].out_features()]),
            &x.device(),
        ))
    }

    /// [`Attention::forward_host`] on host rows `xv` [T, D] with the projections' host
    /// copies `[q, k, v, o]`: [T, D].
    #[allow(clippy::too_many_arguments)]
    fn rows(
        &self,
        [wq, wk, wv, wo]: [&HostWeight; 4],
        xv: &[f32],
        t: usize,
        rope: &HostRope,
        bias: Option<&[f32]>,
        cache: &mut KvCache,
        layer: usize,
    ) -> Vec<f32> {
        let (nh, nkv, hd) = (self.n_heads, self.n_kv_heads, self.head_dim);
        let (mut q, mut k) = (wq.matmul(xv, t), wk.matmul(xv, t)); // [T, nh / nkv, hd]
        let v = wv.matmul(xv, t); // [T, nkv, hd]
        rope.apply(&mut q, t, hd);
        rope.apply(&mut k, t, hd);
        let (k, v) = (heads_first(&k, t, nkv, hd), heads_first(&v, t, nkv, hd));
        let q = heads_first(&q, t, nh, hd);
        let out = self.attend(&q, &k, &v, bias, cache, layer); // [T, nh * hd]
        wo.matmul(&out, t) // [T, D]
    }

    /// Appends the keys and values `k`, `v` [nkv, T, hd] of T new tokens to the host
    /// `cache`'s `layer` and attends the queries `q` [nh, T, hd] over the cache and them
    /// ([`attention`], additive `bias` [T, S]): [T, nh * hd].
    pub(super) fn attend(
        &self,
        q: &[f32],
        k: &[f32],
        v: &[f32],
        bias: Option<&[f32]>,
        cache: &mut KvCache,
        layer: usize,
    ) -> Vec<f32> {
        let t = q.len() / (self.n_heads * self.head_dim);
        cache.write_host(layer, k, v, t);
        let (ck, cv) = cache.host_layer(layer);
        let dims = HostAttn {
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            t,
            s: cache.len() + t,
            capacity: cache.capacity(),
        };
        attention(q, ck, cv, dims, bias)
    }
}

impl Mlp {
    /// x [T, D] -> [T, D] on host vectors; `None` where a projection has no host copy or
    /// has a bias.
    pub(super) fn forward_host(&self, x: &Tensor<2>) -> Option<Tensor<2>> {
        let w = [host(&self.gate)?, host(&self.up)?, host(&self.down)?];
        let [t, _] = x.dims();
        let y = Self::rows(w, &host_vec(x.clone()), t);
        Some(Tensor::from_data(
            TensorData::new(y, [t, w[2].out_features()]),
            &x.device(),
        ))
    }

    /// [`Mlp::forward_host`] on host rows `xv` [T, D] with the host copies
    /// `[gate, up, down]`: [T, D].
    fn rows([gate, up, down]: [&HostWeight; 3], xv: &[f32], t: usize) -> Vec<f32> {
        let h = silu_times(&gate.matmul(xv, t), &up.matmul(xv, t)); // [T, F]
        down.matmul(&h, t) // [T, D]
    }
}

/// A decoder layer's weights on the host, borrowed for one forward pass.
pub(super) struct HostLayer<'a> {
    attn: [&'a HostWeight; 4],
    mlp: [&'a HostWeight; 3],
    /// The two norms' gains [D] and epsilons.
    norms: &'a [Vec<f32>; 2],
    eps: [f64; 2],
}

impl DecoderLayer {
    /// Its host weights; `None` where a projection has no host copy or has a bias, or the
    /// norms have no host copy.
    pub(super) fn host_layer(&self) -> Option<HostLayer<'_>> {
        let (a, m) = (&self.attn, &self.mlp);
        Some(HostLayer {
            attn: [host(&a.q)?, host(&a.k)?, host(&a.v)?, host(&a.o)?],
            mlp: [host(&m.gate)?, host(&m.up)?, host(&m.down)?],
            norms: self.host_norms.as_ref()?,
            eps: [self.attn_norm.epsilon, self.mlp_norm.epsilon],
        })
    }

    /// The layer on host rows `x` [T, D], in place: x += attn(norm(x)); x += mlp(norm(x)).
    /// Row by row, so a row's result does not depend on the others.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rows(
        &self,
        w: &HostLayer<'_>,
        x: &mut [f32],
        t: usize,
        rope: &HostRope,
        bias: Option<&[f32]>,
        cache: &mut KvCache,
        layer: usize,
    ) {
        let h = rms_norm(x, &w.norms[0], w.eps[0]);
        let a = self.attn.rows(w.attn, &h, t, rope, bias, cache, layer);
        x.iter_mut().zip(&a).for_each(|(x, a)| *x += a);
        let h = rms_norm(x, &w.norms[1], w.eps[1]);
        let m = Mlp::rows(w.mlp, &h, t);
        x.iter_mut().zip(&m).for_each(|(x, m)| *x += m);
    }
}

/// RMSNorm of each row of `x` [T, D] with gain `gamma` [D], as Burn's `RmsNorm`:
/// `x / sqrt(mean(x²) + eps) · gamma` (the mean summed in order, in f32).
pub(super) fn rms_norm(x: &[f32], gamma: &[f32], eps: f64) -> Vec<f32> {
    let d = gamma.len();
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks_exact(d) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / d as f32;
        let rms = (ms + eps as f32).sqrt();
        out.extend(row.iter().zip(gamma).map(|(v, g)| v / rms * g));
    }
    out
}
