//! The CPU path of attention, built for the few new tokens of a decoding or verification
//! step (and taken by prefill too), over a KV cache kept in host memory ([`crate::KvCache`]
//! on the flex device in f32).
//!
//! Burn's tensor ops took about 1 ms per layer for one token over a 2,048-token cache (as
//! long as the layer's weights take), and their cost grows with every tree node
//! (`examples/attn.rs` times both side by side). Here the query heads that share a kv head
//! stream its keys and values once for all their rows (heads × T new tokens):
//!
//! ```text
//!   for each run of query heads h sharing kv head g (cut at equal shares per thread),
//!   in parallel, for every row (h, i), i < T new tokens, j < S cached + new:
//!     s[h,i][j] = q[h][i] · k_g[j] / √hd + bias[i][j]
//!     p[h,i]    = softmax(s[h,i])
//!     out[i][h] = Σ_j p[h,i][j] v_g[j]
//! ```
//!
//! On AVX-512 (`attention/avx512.rs`), up to six rows meet each key or value vector once it is loaded.
//!
//! Keys are stored transposed ([head_dim, capacity] per kv head), so `s[i]` is a sum of
//! hd contiguous key rows scaled by q's components, and `out[i]` a sum of value rows:
//! both loops run along contiguous memory without horizontal sums.

use crate::kernels::math::exp;
use crate::kernels::pool;

/// Shapes of one layer's attention on the host.
#[derive(Debug, Clone, Copy)]
pub struct HostAttn {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    /// New tokens.
    pub t: usize,
    /// Keys visible: cached + new (the cache's first `s` rows).
    pub s: usize,
    /// Rows the cache buffers hold per kv head.
    pub capacity: usize,
}

/// `q` [n_heads, T, hd]; `k` [n_kv_heads, hd, capacity] and `v` [n_kv_heads, capacity, hd],
/// of which positions `0..s` are valid; `bias` [T, s] additive (0 visible, -inf hidden), or `None` when every new token
/// sees every row. Returns [T, n_heads * hd].
pub fn attention(q: &[f32], k: &[f32], v: &[f32], a: HostAttn, bias: Option<&[f32]>) -> Vec<f32> {
    let HostAttn {
        n_heads,
        n_kv_heads,
        head_dim: hd,
        t,
        s,
        capacity,
    } = a;
    assert_eq!(
        q.len(),
        n_heads * t * hd,
        "queries are not [{n_heads}, {t}, {hd}]"
    );
    assert!(k.len() == n_kv_heads * capacity * hd && v.len() == k.len() && s <= capacity);
    assert!(
        bias.is_none_or(|b| b.len() == t * s),
        "bias is not [{t}, {s}]"
    );
    let group = n_heads / n_kv_heads;
    let scale = (hd as f32).powf(-0.5);
    let wide = wide_loops(hd);
    let units = units(n_heads, group, pool::threads());
    // Per unit: [heads, T, hd].
    let per_unit: Vec<Vec<f32>> = pool::map(units.len(), |u| {
        let (h0, heads) = units[u];
        let g = h0 / group;
        let rows = Rows {
            q: &q[h0 * t * hd..(h0 + heads) * t * hd],
            keys: &k[g * hd * capacity..(g + 1) * hd * capacity],
            values: &v[g * capacity * hd..(g * capacity + s) * hd],
            capacity,
            bias,
            t,
            s,
            hd,
            scale,
            wide,
        };
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above); the code is
            // safe Rust compiled with those features.
            return unsafe { rows.run_avx2() };
        }
        rows.run::<false>()
    });
    // [heads, T, hd] per unit -> [T, n_heads * hd]
    let mut out = vec![0.0f32; t * n_heads * hd];
    for (&(h0, heads), o) in units.iter().zip(&per_unit) {
        for (h, i) in (h0..h0 + heads).flat_map(|h| (0..t).map(move |i| (h, i))) {
            let r = (h - h0) * t + i;
            out[(i * n_heads + h) * hd..(i * n_heads + h + 1) * hd]
                .copy_from_slice(&o[r * hd..(r + 1) * hd]);
        }
    }
    out
}

/// Runs of query heads `(first, count)` that share a kv head, cut also at every
/// `⌈n_heads / threads⌉` heads: a run reads its kv head's keys and values once for all
/// its heads, and runs no longer than a thread's share let the threads, claiming them one
/// at a time, finish close together (9 heads over 3 kv heads and 2 threads: runs of 3, 2,
/// 1 and 3 heads).
fn units(n_heads: usize, group: usize, threads: usize) -> Vec<(usize, usize)> {
    let share = n_heads.div_ceil(threads.max(1)).max(1);
    let group = group.max(1);
    let cuts: Vec<usize> = (0..=n_heads)
        .filter(|&h| h % group == 0 || h % share == 0 || h == n_heads)
        .collect();
    cuts.windows(2).map(|w| (w[0], w[1] - w[0])).collect()
}

/// Whether the AVX-512 loops serve (`avx512.rs`; `TOKI_NO_AVX512=1` turns them off, as
/// for the projections): head sizes of whole 64-float blocks.
fn wide_loops(hd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        hd.is_multiple_of(B) && crate::kernels::has_avx512()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = hd;
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;

/// Register block: 64 floats, eight AVX2 vectors (eight independent add chains).
const B: usize = 64;
/// Value rows per block (16 KB at hd = 64: in L1 while every new token reads them).
const VB: usize = 64;

/// The query rows of one or more heads that share a kv head: `q` [R, hd] with R = heads ×
/// T (row r is token r % T), `keys` [hd, capacity], `values` [S, hd].
struct Rows<'a> {
    q: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    capacity: usize,
    bias: Option<&'a [f32]>,
    t: usize,
    s: usize,
    hd: usize,
    scale: f32,
    /// The AVX-512 loops ([`wide_loops`]).
    wide: bool,
}

impl Rows<'_> {
    /// The same code compiled for AVX2 and FMA (wider vectors for the loops below).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self) -> Vec<f32> {
        self.run::<true>()
    }

    /// -> [R, hd]. `FMA`: fused multiply-adds (only where the CPU has them: elsewhere
    /// `mul_add` is a slow library call).
    #[inline(always)]
    fn run<const FMA: bool>(&self) -> Vec<f32> {
        let mut p = self.scores::<FMA>(); // [R, S]
        self.softmax::<FMA>(&mut p);
        self.weighted_values::<FMA>(&p)
    }

    /// Whether this run takes the AVX-512 loops (`wide`, and compiled with FMA).
    #[inline(always)]
    fn takes_avx512<const FMA: bool>(&self) -> bool {
        cfg!(target_arch = "x86_64") && FMA && self.wide
    }

    /// Scaled scores `p` [R, S]: blocks of B keys, each row's B scores in registers over
    /// the hd components.
    #[inline(always)]
    fn scores<const FMA: bool>(&self) -> Vec<f32> {
        let (s, hd) = (self.s, self.hd);
        let rows = self.q.len() / hd;
        let mut p = vec![0.0f32; rows * s]; // [R, S]
        for j0 in (0..s).step_by(B) {
            let w = B.min(s - j0);
            #[cfg(target_arch = "x86_64")]
            if self.takes_avx512::<FMA>() && w == B {
                for r0 in (0..rows).step_by(avx512::ROWS) {
                    let r1 = (r0 + avx512::ROWS).min(rows);
                    let q = &self.q[r0 * hd..r1 * hd];
                    let (keys, cap, scale) = (self.keys, self.capacity, self.scale);
                    // SAFETY: `wide` is only set where the CPU has AVX-512F; the kernel
                    // asserts its bounds.
                    unsafe { avx512::scores(q, hd, keys, cap, j0, scale, &mut p[r0 * s..], s) };
                }
                continue;
            }
            for (r, row) in p.chunks_exact_mut(s).enumerate() {
                let qi = &self.q[r * hd..(r + 1) * hd];
                let mut acc = [0.0f32; B];
                self.score_block::<FMA>(qi, j0, w, &mut acc);
                row[j0..j0 + w]
                    .iter_mut()
                    .zip(&acc)
                    .for_each(|(x, a)| *x = a * self.scale);
            }
        }
        p
    }

    /// `acc[l] = Σ_c qi[c] · keys[c][j0 + l]`, l < w (one row's block of scores, unscaled).
    #[inline(always)]
    fn score_block<const FMA: bool>(&self, qi: &[f32], j0: usize, w: usize, acc: &mut [f32; B]) {
        #[cfg(target_arch = "x86_64")]
        if FMA && w == B {
            // SAFETY: FMA is only set where the CPU has AVX2 and FMA (`run_avx2`); the keys
            // hold hd rows of `capacity` >= j0 + B.
            unsafe { x86::weighted_sum(qi, self.keys, self.capacity, j0, acc) };
            return;
        }
        for (c, &qc) in qi.iter().enumerate() {
            axpy::<FMA>(acc, qc, &self.keys[c * self.capacity + j0..][..w]);
        }
    }

    /// Each row of `p` [R, S] plus its token's bias row, then softmax, in place.
    #[inline(always)]
    fn softmax<const FMA: bool>(&self, p: &mut [f32]) {
        let (t, s) = (self.t, self.s);
        #[cfg(target_arch = "x86_64")]
        if self.takes_avx512::<FMA>() {
            for r0 in (0..p.len() / s).step_by(avx512::ROWS) {
                let r1 = (r0 + avx512::ROWS).min(p.len() / s);
                let bias = self.bias.map(|b| (b, r0, t));
                // SAFETY: as in `scores`.
                unsafe { avx512::softmax(&mut p[r0 * s..r1 * s], s, bias) };
            }
            return;
        }
        for (r, row) in p.chunks_exact_mut(s).enumerate() {
            if let Some(b) = self.bias {
                let i = r % t;
                row.iter_mut()
                    .zip(&b[i * s..(i + 1) * s])
                    .for_each(|(x, b)| *x += b);
            }
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            row.iter_mut().for_each(|x| *x = exp(*x - max));
            let inv = 1.0 / row.iter().sum::<f32>();
            row.iter_mut().for_each(|x| *x *= inv);
        }
    }

    /// `Σ_j p[r][j] v[j]` for each row of the probabilities `p` [R, S]: [R, hd].
    ///
    /// Each row's sums run in one chain of multiply-adds over all keys in order, and a
    /// hidden key adds 0·v, which changes nothing: a token's output does not depend on
    /// where the blocks fall, on the hidden keys around the ones it sees, or on the other
    /// rows computed with it, so a tree node attends bit for bit as plain decoding does
    /// at its position.
    #[inline(always)]
    fn weighted_values<const FMA: bool>(&self, p: &[f32]) -> Vec<f32> {
        let (s, hd) = (self.s, self.hd);
        let rows = p.len() / s;
        let mut out = vec![0.0f32; rows * hd]; // [R, hd]
        #[cfg(target_arch = "x86_64")]
        if self.takes_avx512::<FMA>() {
            // All value rows at once for up to six rows: B columns at a time.
            let values = &self.values[..s * hd];
            for r0 in (0..rows).step_by(avx512::ROWS) {
                let r1 = (r0 + avx512::ROWS).min(rows);
                for c0 in (0..hd).step_by(B) {
                    let (pr, o) = (&p[r0 * s..r1 * s], &mut out[r0 * hd..r1 * hd]);
                    // SAFETY: as in `scores`.
                    unsafe { avx512::values(pr, s, values, hd, c0, o) };
                }
            }
            return out;
        }
        // Blocks of B output columns, kept in registers over a block of VB value rows; each
        // block's sums go on from the previous block's.
        for j0 in (0..s).step_by(VB) {
            let block = &self.values[j0 * hd..(j0 + VB).min(s) * hd];
            for (i, o) in out.chunks_exact_mut(hd).enumerate() {
                let pi = &p[i * s + j0..(i + 1) * s];
                for c0 in (0..hd).step_by(B) {
                    let w = B.min(hd - c0);
                    let mut acc = [0.0f32; B];
                    acc[..w].copy_from_slice(&o[c0..c0 + w]);
                    #[cfg(target_arch = "x86_64")]
                    if FMA && w == B {
                        let n = (block.len() / hd).min(pi.len());
                        // SAFETY: as in `scores`; `block` holds n rows of hd >= c0 + B.
                        unsafe { x86::weighted_sum(&pi[..n], block, hd, c0, &mut acc) };
                        o[c0..c0 + w].copy_from_slice(&acc);
                        continue;
                    }
                    for (vr, &pj) in block.chunks_exact(hd).zip(pi) {
                        axpy::<FMA>(&mut acc, pj, &vr[c0..c0 + w]);
                    }
                    o[c0..c0 + w].copy_from_slice(&acc[..w]);
                }
            }
        }
        out
    }
}

/// The two inner loops of [`Rows::run`] with the block's 64 sums held in eight AVX2
/// registers (the compiler kept some of them on the stack). Each lane's sum takes the same
/// fused multiply-adds in the same order as [`axpy`], so the results are the same bits.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::B;
    use std::arch::x86_64::*;

    /// `out[l] += Σ_i w[i] · rows[i·stride + at + l]`, l < 64, added in order onto `out`'s
    /// values: a block of scores (out zero, w = a query, rows = the transposed keys,
    /// stride = the capacity, at = the first key) or of output columns (out = the sums so
    /// far, w = a block's probabilities, rows = the values, stride = hd).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn weighted_sum(
        w: &[f32],
        rows: &[f32],
        stride: usize,
        at: usize,
        out: &mut [f32; B],
    ) {
        if let Some(last) = w.len().checked_sub(1) {
            assert!(at + B <= stride && last * stride + at + B <= rows.len());
        }
        // SAFETY: `out` holds 64 floats.
        let mut a: [__m256; 8] =
            std::array::from_fn(|l| unsafe { _mm256_loadu_ps(out.as_ptr().add(8 * l)) });
        for (i, &wi) in w.iter().enumerate() {
            let b = _mm256_set1_ps(wi);
            // SAFETY: row i's floats at..at + 64 lie inside `rows` (asserted above).
            let r = unsafe { rows.as_ptr().add(i * stride + at) };
            for (l, acc) in a.iter_mut().enumerate() {
                *acc = _mm256_fmadd_ps(b, unsafe { _mm256_loadu_ps(r.add(8 * l)) }, *acc);
            }
        }
        for (l, acc) in a.iter().enumerate() {
            // SAFETY: `out` holds 64 floats.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(8 * l), *acc) };
        }
    }
}

/// acc[..x.len()] += a x, x no longer than a block.
#[inline(always)]
fn axpy<const FMA: bool>(acc: &mut [f32; B], a: f32, x: &[f32]) {
    let f = |s: f32, x: f32| if FMA { a.mul_add(x, s) } else { s + a * x };
    match <&[f32; B]>::try_from(x) {
        Ok(x) => {
            for l in 0..B {
                acc[l] = f(acc[l], x[l]);
            }
        }
        Err(_) => acc.iter_mut().zip(x).for_each(|(s, x)| *s = f(*s, *x)),
    }
}

#[cfg(test)]
mod tests;
