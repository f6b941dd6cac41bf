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
mod tests {
    use super::*;
    use crate::testing::lcg;

    /// The textbook formula, one (head, token) at a time, in f64.
    fn reference(q: &[f32], k: &[f32], v: &[f32], a: HostAttn, bias: Option<&[f32]>) -> Vec<f32> {
        let (nh, hd, t, s) = (a.n_heads, a.head_dim, a.t, a.s);
        let group = nh / a.n_kv_heads;
        let mut out = vec![0.0f32; t * nh * hd];
        for h in 0..nh {
            let g = h / group;
            for i in 0..t {
                let qi = &q[(h * t + i) * hd..(h * t + i + 1) * hd];
                let scores: Vec<f64> = (0..s)
                    .map(|j| {
                        let d: f64 = (0..hd)
                            .map(|c| f64::from(qi[c] * k[(g * hd + c) * a.capacity + j]))
                            .sum();
                        d / (hd as f64).sqrt() + bias.map_or(0.0, |b| f64::from(b[i * s + j]))
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let e: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                for c in 0..hd {
                    let o: f64 = (0..s)
                        .map(|j| e[j] / sum * f64::from(v[(g * a.capacity + j) * hd + c]))
                        .sum();
                    out[(i * nh + h) * hd + c] = o as f32;
                }
            }
        }
        out
    }

    #[test]
    fn matches_the_formula_with_and_without_a_mask() {
        // Small shapes (the blocks' tails only), and the demo model's head size over more
        // keys than a block, not a whole number of blocks (the AVX2 blocks and the tails).
        let small = HostAttn {
            n_heads: 6,
            n_kv_heads: 2,
            head_dim: 12,
            t: 3,
            s: 9,
            capacity: 11,
        };
        let demo = |t: usize| HostAttn {
            n_heads: 9,
            n_kv_heads: 3,
            head_dim: 64,
            t,
            s: 150,
            capacity: 160,
        };
        for a in [small, demo(1), demo(2), demo(5)] {
            matches_the_formula(a);
        }
    }

    fn matches_the_formula(a: HostAttn) {
        let q = lcg(a.n_heads * a.t * a.head_dim, 1);
        let k = lcg(a.n_kv_heads * a.capacity * a.head_dim, 2);
        let v = lcg(k.len(), 3);
        // New token i (row s - t + i) sees the prefix and new tokens 0 and i only.
        let bias: Vec<f32> = (0..a.t * a.s)
            .map(|x| {
                let (i, j) = (x / a.s, x % a.s);
                let new = j.checked_sub(a.s - a.t);
                if new.is_none_or(|n| n == 0 || n == i) {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        for b in [None, Some(&bias[..])] {
            let got = attention(&q, &k, &v, a, b);
            let want = reference(&q, &k, &v, a, b);
            let diff = got
                .iter()
                .zip(&want)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f32::max);
            assert!(diff < 1e-5, "{a:?}: max difference {diff}");
        }
    }

    #[test]
    fn units_follow_kv_groups_and_thread_shares() {
        assert_eq!(units(9, 3, 2), vec![(0, 3), (3, 2), (5, 1), (6, 3)]);
        assert_eq!(units(9, 3, 1), vec![(0, 3), (3, 3), (6, 3)]);
        assert_eq!(units(8, 8, 2), vec![(0, 4), (4, 4)]);
        assert_eq!(units(4, 1, 2), vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
    }

    /// Heads that share a kv head and attend together (one pass over the keys and values
    /// for all their rows) give the same bits as each head over its own copy of the kv head,
    /// for a plain step and tree steps of 2-7 tokens, over full key blocks and a tail.
    #[test]
    fn grouped_heads_attend_bit_for_bit_as_one_head_each() {
        let (nh, nkv, hd, s, cap) = (9, 3, 64, 150, 160);
        for t in [1, 2, 4, 7] {
            let q = lcg(nh * t * hd, 11);
            let k = lcg(nkv * hd * cap, 12); // [nkv, hd, cap]
            let v = lcg(nkv * cap * hd, 13); // [nkv, cap, hd]
            let bias: Vec<f32> = (0..t * s)
                .map(|x| {
                    if (x / s + x % s) % 5 == 1 {
                        f32::NEG_INFINITY
                    } else {
                        0.0
                    }
                })
                .collect();
            let group = nh / nkv;
            // Each head's own copy of its kv head.
            let copy = |x: &[f32]| -> Vec<f32> {
                (0..nh)
                    .flat_map(|h| x[(h / group) * hd * cap..(h / group + 1) * hd * cap].to_vec())
                    .collect()
            };
            let (k1, v1) = (copy(&k), copy(&v));
            let grouped = HostAttn {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                t,
                s,
                capacity: cap,
            };
            let alone = HostAttn {
                n_kv_heads: nh,
                ..grouped
            };
            let got = attention(&q, &k, &v, grouped, Some(&bias));
            let want = attention(&q, &k1, &v1, alone, Some(&bias));
            for (x, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "t {t}, value {x}: {g} vs {w}");
            }
        }
    }

    /// Where the CPU has AVX-512, its loops (several rows per loaded vector) give the same
    /// bits as the AVX2 loops (one row at a time), for 1-13 rows.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn avx512_and_avx2_loops_agree_bit_for_bit() {
        if !(wide_loops(64)
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma"))
        {
            return;
        }
        let (hd, s, cap) = (64, 200, 256);
        let keys = lcg(hd * cap, 21);
        let values = lcg(cap * hd, 22);
        for (rows, t) in [(1, 1), (3, 1), (6, 2), (12, 4), (13, 13)] {
            let q = lcg(rows * hd, 23);
            let bias: Vec<f32> = (0..t * s)
                .map(|x| if x % 7 == 3 { f32::NEG_INFINITY } else { 0.0 })
                .collect();
            let run = |wide: bool| {
                let r = Rows {
                    q: &q,
                    keys: &keys,
                    values: &values[..s * hd],
                    capacity: cap,
                    bias: Some(&bias),
                    t,
                    s,
                    hd,
                    scale: 0.125,
                    wide,
                };
                // SAFETY: AVX2 and FMA are present (checked above).
                unsafe { r.run_avx2() }
            };
            let (wide, narrow) = (run(true), run(false));
            for (x, (a, b)) in wide.iter().zip(&narrow).enumerate() {
                assert_eq!(
                    a.to_bits(),
                    b.to_bits(),
                    "{rows} rows, value {x}: {a} vs {b}"
                );
            }
        }
    }

    /// A token's output is the same bits whether it attends alone over its keys in a row
    /// (plain decoding) or as one row of a tree step whose visible keys sit among hidden
    /// ones, shifted across a block boundary: tree verification computes exactly what plain
    /// decoding would. Head sizes 64 (the AVX2 blocks) and 12 (the tails).
    #[test]
    fn a_token_attends_bit_for_bit_alone_or_among_hidden_keys() {
        for hd in [64, 12] {
            let (nh, nkv, seen, hidden_at, hidden) = (2, 1, 70, 60, 6);
            // Plain: one token over `seen` keys.
            let k = lcg(nkv * hd * seen, 5); // [hd, seen]
            let v = lcg(nkv * seen * hd, 6); // [seen, hd]
            let q = lcg(nh * hd, 7); // [nh, 1, hd]
            let one = HostAttn {
                n_heads: nh,
                n_kv_heads: nkv,
                head_dim: hd,
                t: 1,
                s: seen,
                capacity: seen,
            };
            let alone = attention(&q, &k, &v, one, None);
            // Tree step: three tokens over the same keys with `hidden` others inserted at
            // `hidden_at`; the middle token (1) is ours and sees all but the inserted ones.
            let s = seen + hidden;
            let at = |j: usize| {
                if j < hidden_at {
                    Some(j)
                } else {
                    j.checked_sub(hidden)
                }
            };
            let visible = |j: usize| !(hidden_at..hidden_at + hidden).contains(&j);
            let junk = lcg(s * hd * 2, 8);
            let mut kt = vec![0.0; hd * s];
            let mut vt = vec![0.0; s * hd];
            for j in 0..s {
                for c in 0..hd {
                    let src = at(j).filter(|_| visible(j));
                    kt[c * s + j] = src.map_or(junk[j * hd + c], |jj| k[c * seen + jj]);
                    vt[j * hd + c] = src.map_or(junk[s * hd + j * hd + c], |jj| v[jj * hd + c]);
                }
            }
            let others = lcg(nh * 3 * hd, 9);
            let mut qt = vec![0.0; nh * 3 * hd]; // [nh, 3, hd]
            for h in 0..nh {
                for i in 0..3 {
                    let dst = &mut qt[(h * 3 + i) * hd..][..hd];
                    match i {
                        1 => dst.copy_from_slice(&q[h * hd..][..hd]),
                        _ => dst.copy_from_slice(&others[(h * 3 + i) * hd..][..hd]),
                    }
                }
            }
            let bias: Vec<f32> = (0..3 * s)
                .map(|x| match (x / s, visible(x % s)) {
                    (1, false) => f32::NEG_INFINITY,
                    _ => 0.0,
                })
                .collect();
            let tree = HostAttn {
                t: 3,
                s,
                capacity: s,
                ..one
            };
            let got = attention(&qt, &kt, &vt, tree, Some(&bias));
            let row = &got[nh * hd..2 * nh * hd];
            for (c, (g, w)) in row.iter().zip(&alone).enumerate() {
                assert_eq!(g.to_bits(), w.to_bits(), "hd {hd}, value {c}: {g} vs {w}");
            }
        }
    }
}
