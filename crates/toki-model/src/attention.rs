//! The CPU path of attention, built for the few new tokens of a decoding or verification
//! step (and taken by prefill too), over a KV cache kept in host memory ([`crate::KvCache`]
//! on the flex device in f32).
//!
//! Burn's tensor ops took about 1 ms per layer for one token over a 2,048-token cache (as
//! long as the layer's weights take), and their cost grows with every tree node
//! (`examples/attn.rs` times both side by side). Here each query head streams its keys and
//! values once for all T new tokens:
//!
//! ```text
//!   for each query head h (kv head h / group), in parallel:
//!     s[i][j] = q[h][i] · k[j] / √hd + bias[i][j]     i < T new tokens, j < S cached + new
//!     p[i]    = softmax(s[i])
//!     out[i][h] = Σ_j p[i][j] v[j]
//! ```
//!
//! Keys are stored transposed ([head_dim, capacity] per kv head), so `s[i]` is a sum of
//! hd contiguous key rows scaled by q's components, and `out[i]` a sum of value rows:
//! both loops run along contiguous memory without horizontal sums.

use rayon::prelude::*;

use crate::kernels::math::exp;

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
    // Per query head: [T, hd].
    let per_head: Vec<Vec<f32>> = (0..n_heads)
        .into_par_iter()
        .map(|h| {
            let g = h / group;
            let one = OneHead {
                q: &q[h * t * hd..(h + 1) * t * hd],
                keys: &k[g * hd * capacity..(g + 1) * hd * capacity],
                values: &v[g * capacity * hd..(g * capacity + s) * hd],
                capacity,
                bias,
                t,
                s,
                hd,
                scale,
            };
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                // SAFETY: the CPU supports AVX2 and FMA (checked just above); the code is
                // safe Rust compiled with those features.
                return unsafe { one.run_avx2() };
            }
            one.run::<false>()
        })
        .collect();
    // [n_heads][T, hd] -> [T, n_heads * hd]
    let mut out = vec![0.0f32; t * n_heads * hd];
    for (h, o) in per_head.iter().enumerate() {
        for i in 0..t {
            out[(i * n_heads + h) * hd..(i * n_heads + h + 1) * hd]
                .copy_from_slice(&o[i * hd..(i + 1) * hd]);
        }
    }
    out
}

/// Register block: 64 floats, eight AVX2 vectors (eight independent add chains).
const B: usize = 64;
/// Value rows per block (16 KB at hd = 64: in L1 while every new token reads them).
const VB: usize = 64;

/// One query head's attention: `q` [T, hd], `keys` [hd, capacity], `values` [S, hd].
struct OneHead<'a> {
    q: &'a [f32],
    keys: &'a [f32],
    values: &'a [f32],
    capacity: usize,
    bias: Option<&'a [f32]>,
    t: usize,
    s: usize,
    hd: usize,
    scale: f32,
}

impl OneHead<'_> {
    /// The same code compiled for AVX2 and FMA (wider vectors for the loops below).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(&self) -> Vec<f32> {
        self.run::<true>()
    }

    /// -> [T, hd]. `FMA`: fused multiply-adds (only where the CPU has them: elsewhere
    /// `mul_add` is a slow library call).
    #[inline(always)]
    fn run<const FMA: bool>(&self) -> Vec<f32> {
        let (t, s, hd) = (self.t, self.s, self.hd);
        let mut p = vec![0.0f32; t * s]; // [T, S]
        // Blocks of B keys: each token's B scores stay in registers over the hd components.
        for j0 in (0..s).step_by(B) {
            let w = B.min(s - j0);
            for (i, row) in p.chunks_exact_mut(s).enumerate() {
                let qi = &self.q[i * hd..(i + 1) * hd];
                let mut acc = [0.0f32; B];
                #[cfg(target_arch = "x86_64")]
                if FMA && w == B {
                    // SAFETY: FMA is only set where the CPU has AVX2 and FMA (`run_avx2`);
                    // the keys hold hd rows of `capacity` >= j0 + B.
                    unsafe { x86::weighted_sum(qi, self.keys, self.capacity, j0, &mut acc) };
                    row[j0..j0 + w]
                        .iter_mut()
                        .zip(&acc)
                        .for_each(|(x, a)| *x = a * self.scale);
                    continue;
                }
                for (c, &qc) in qi.iter().enumerate() {
                    let kc = &self.keys[c * self.capacity + j0..c * self.capacity + j0 + w];
                    axpy::<FMA>(&mut acc, qc, kc);
                }
                row[j0..j0 + w]
                    .iter_mut()
                    .zip(&acc)
                    .for_each(|(x, a)| *x = a * self.scale);
            }
        }
        if let Some(b) = self.bias {
            p.iter_mut().zip(b).for_each(|(x, b)| *x += b);
        }
        for row in p.chunks_exact_mut(s) {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            row.iter_mut().for_each(|x| *x = exp(*x - max));
            let inv = 1.0 / row.iter().sum::<f32>();
            row.iter_mut().for_each(|x| *x *= inv);
        }
        let mut out = vec![0.0f32; t * hd]; // [T, hd]
        // Blocks of B output columns, kept in registers over a block of VB value rows. Each
        // block's sums go on from the previous block's (one chain of multiply-adds over all
        // keys in order), and a hidden key adds 0·v, which changes nothing: a token's output
        // does not depend on where the blocks fall or on the hidden keys around the ones it
        // sees, so a tree node attends bit for bit as plain decoding does at its position.
        for j0 in (0..s).step_by(VB) {
            let rows = &self.values[j0 * hd..(j0 + VB).min(s) * hd];
            for (i, o) in out.chunks_exact_mut(hd).enumerate() {
                let pi = &p[i * s + j0..];
                for c0 in (0..hd).step_by(B) {
                    let w = B.min(hd - c0);
                    let mut acc = [0.0f32; B];
                    acc[..w].copy_from_slice(&o[c0..c0 + w]);
                    #[cfg(target_arch = "x86_64")]
                    if FMA && w == B {
                        let n = (rows.len() / hd).min(pi.len());
                        // SAFETY: as above; `rows` holds n rows of hd >= c0 + B values.
                        unsafe { x86::weighted_sum(&pi[..n], rows, hd, c0, &mut acc) };
                        o[c0..c0 + w].copy_from_slice(&acc);
                        continue;
                    }
                    for (vr, &pj) in rows.chunks_exact(hd).zip(pi) {
                        axpy::<FMA>(&mut acc, pj, &vr[c0..c0 + w]);
                    }
                    o[c0..c0 + w].copy_from_slice(&acc[..w]);
                }
            }
        }
        out
    }
}

/// The two inner loops of [`OneHead::run`] with the block's 64 sums held in eight AVX2
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
