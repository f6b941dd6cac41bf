//! The heads' pass on host rows, for the few rows of a decoding step on the CPU: where every
//! projection the pass needs has a host copy (the heads' F_k and residual blocks, and the
//! vocabulary projection that scores them), the whole pass runs on host vectors, as the
//! base's layers do (`llama/host.rs`).
//!
//! The tensor path around the same host kernels pays a tensor op for every bias, SiLU,
//! residual add, concatenation, arg-max and slice: each allocates its result and pays a
//! dispatch on flex, whatever its size, and a pass of three chained heads makes some sixty
//! of them for a few thousand numbers. The products here are the host kernels' own, so the
//! logits agree with the tensor path's to SiLU's rounding (the model-unit test
//! `heads_on_host_rows_match_the_tensor_path`).
//!
//! Measured (`cargo bench --bench heads`, AMD EPYC, 2 cores, two rounds alternating with
//! the tensor path): a step of the three shipped heads 1.12-1.23 ms -> 0.98-1.06 ms. The
//! rest is memory: after the base's pass has streamed its weights through the caches, the
//! heads' 10 MB of weights come from DRAM (with the weights in cache the same products take
//! a sixth of the time).

use burn::nn::Linear;
use burn::tensor::{DType, Int, Tensor, TensorData};

use super::{HeadKind, MedusaHeads};
use crate::cache::host_vec;
use crate::kernels::{HostPrecision, HostWeight};
use crate::llama::{LlamaModel, transpose};

/// A linear layer's host copy: its weight `[out, in]` and its bias.
#[derive(Debug, Clone)]
pub(super) struct HostLinear {
    pub(super) w: HostWeight,
    bias: Option<Vec<f32>>,
}

impl HostLinear {
    /// `l`'s weight (Burn keeps `[in, out]`; the kernel reads `[out, in]`) in `precision`,
    /// and its bias in f32.
    pub(super) fn copy(l: &Linear, precision: HostPrecision) -> Self {
        let [d_in, d_out] = l.weight.val().dims();
        let w = transpose(&host_vec(l.weight.val()), d_in, d_out);
        Self {
            w: HostWeight::with_precision(w, d_out, d_in, precision),
            bias: l.bias.as_ref().map(|b| host_vec(b.val())),
        }
    }

    /// x [m, in] -> x Wᵀ + b [m, out]
    fn rows(&self, x: &[f32], m: usize) -> Vec<f32> {
        let mut y = self.w.matmul(x, m);
        if let Some(b) = &self.bias {
            for row in y.chunks_exact_mut(b.len()) {
                row.iter_mut().zip(b).for_each(|(v, b)| *v += b);
            }
        }
        y
    }
}

/// One head's F_k,j and residual blocks on the host.
#[derive(Debug, Clone)]
pub(super) struct HostHead {
    pub(super) path: Vec<HostLinear>,
    pub(super) blocks: Vec<HostLinear>,
}

/// Head h's features [m, D] -> its logits [m, C], on the host (see [`MedusaHeads::run`]).
pub(crate) type HostScore<'a> = &'a dyn Fn(usize, &[f32], usize) -> Vec<f32>;

/// `x += y`, elementwise.
fn add(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, b)| *a += b);
}

/// The arg-max column of each row of `logits` [m, c], the first on ties (unlike Burn's
/// arg-max, a NaN wins only in column 0).
fn argmax_rows(logits: &[f32], c: usize) -> Vec<usize> {
    logits
        .chunks_exact(c)
        .map(|row| (1..c).fold(0, |best, j| if row[j] > row[best] { j } else { best }))
        .collect()
}

/// Token embeddings [R, D] of `tokens`, on the host.
fn embed(base: &LlamaModel, tokens: &[u32]) -> Vec<f32> {
    let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
    let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [tokens.len()]), &base.device());
    host_vec(base.embed(ids).cast(DType::F32))
}

impl MedusaHeads {
    /// Head `h`'s residual-block output [R, D] on the host, for hidden states `hidden`
    /// [R, D] and the embeddings `path` (entry j [R, D]: token t+1+j) of at least the
    /// path tokens it reads ([`MedusaHeads::head_features`] on host rows).
    fn host_features(
        &self,
        hosts: &[HostHead],
        h: usize,
        hidden: &[f32],
        path: &[Vec<f32>],
        r: usize,
    ) -> Vec<f32> {
        let head = &hosts[h];
        let mut x = hidden.to_vec();
        for (f, e) in head.path.iter().zip(path) {
            add(&mut x, &f.rows(e, r));
        }
        for blk in &head.blocks {
            let y = blk.rows(&x, r);
            // x + SiLU(y), SiLU(y) = y·σ(y)
            x.iter_mut()
                .zip(&y)
                .for_each(|(a, &v)| *a += v / (1.0 + (-v).exp()));
        }
        x
    }

    /// [`MedusaHeads::run`] on host rows: hidden states [R, D], the path's tokens (entry j:
    /// token t+1+j of each row; the root alone where the heads are `chained`), `score` on
    /// host features and, for chained heads over a draft vocabulary, the draft `ids`.
    /// `enough(h, ..)` is given each head's logits [R, C] as they come and may end the run.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_host(
        &self,
        hosts: &[HostHead],
        hidden: &[f32],
        r: usize,
        (tokens, chained): (Vec<Vec<u32>>, bool),
        base: &LlamaModel,
        score: HostScore<'_>,
        ids: Option<&[u32]>,
        enough: &mut dyn FnMut(usize, Vec<f32>) -> bool,
    ) {
        let k = self.heads.len();
        let reads = self.config.input.path_len(k - 1);
        let mut path: Vec<Vec<f32>> = tokens.iter().take(reads).map(|t| embed(base, t)).collect();
        if !chained && self.config.kind == HeadKind::Shared {
            // All heads' features [K*R, D] in one product: the matrix is read once.
            let xs: Vec<f32> = (0..k)
                .flat_map(|h| self.host_features(hosts, h, hidden, &path, r))
                .collect();
            let logits = score(0, &xs, k * r); // [K*R, C]
            let per_head = logits.len() / k;
            for (h, head) in logits.chunks_exact(per_head).enumerate() {
                if enough(h, head.to_vec()) {
                    return;
                }
            }
            return;
        }
        for h in 0..k {
            let logits = score(h, &self.host_features(hosts, h, hidden, &path, r), r); // [R, C]
            if chained && h + 1 < k {
                // The next head reads this one's top-1 proposal.
                let cols = argmax_rows(&logits, logits.len() / r);
                let next: Vec<u32> = cols
                    .iter()
                    .map(|&c| ids.map_or(c as u32, |ids| ids[c]))
                    .collect();
                if enough(h, logits) {
                    return;
                }
                path.push(embed(base, &next));
            } else if enough(h, logits) {
                return;
            }
        }
    }
}
