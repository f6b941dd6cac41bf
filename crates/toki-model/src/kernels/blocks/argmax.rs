//! The arg-max of `x Wᵀ` over Q8 blocks (the lm_head of a converted model) in two stages,
//! exactly: each activation row's greedy token is the one the full product gives, bit for
//! bit.
//!
//! 1. Every weight row's value is estimated with `x` rounded to 8-bit integers (one scale
//!    per activation row) and integer dot products with the blocks' 8-bit values
//!    (AVX-512 VNNI, exact in 32-bit integers): `A_r = s · Σ_b d_b · Σ_i q_i · round(x_i / s)`.
//!    A bound `B_r` covers every difference between `A_r` and the value `e_r` the f32
//!    kernels compute: `|s·round(x_i/s) − x_i| ≤ s/2`, so rounding x moves the real value
//!    by at most `s/2 · ‖w_r‖₁`; the f32 sums of both round by less than
//!    `1e-4 · ‖w_r‖₁ · max|x|` (the exact kernel sums `in/16` terms a lane, then 16 lanes;
//!    stage 1 `in/64` a lane, then the offset: together under 3e-5 relative for
//!    `in ≤ MAX_IN`). `B_r = 1.01 · ‖w_r‖₁ · (0.51·s + 1e-4·max|x|)`.
//! 2. With `L = max_r (A_r − B_r)`, a lower bound of the maximum, every row with
//!    `A_r + B_r < L` has `e_r < L ≤ max e`: it is neither the arg-max nor tied with it.
//!    The rest (the candidates, usually 1-20) get their exact values from the same kernels
//!    as the full product (a row's value does not depend on the rows around it), and the
//!    first of the largest wins, as in the full product.
//!
//! Stage 1 reads the same bytes as the exact product but does not decode the blocks to f32:
//! per 64 weights and activation row it takes one VNNI dot product of two blocks, one
//! conversion and one multiply-add, where the exact kernel takes four multiply-adds after
//! decoding (`benches/results/2026-12-05-cpu-two-stage-argmax-ab/` has the A/Bs, the
//! first of which, with a slower stage 1, served one row only). Where `x` is not finite or
//! is all zeros, or too many rows are candidates, the caller takes the full product for
//! that activation row.
//!
//! A sampler gets stage 1's bounds alone ([`Blocks::bounds`]), with `x` rounded once as
//! above or twice (what the first rounding misses rounded again, as one more activation
//! row of the same pass): some 40x tighter, for a top-k set rather than one arg-max.

use super::{Blocks, Q8};
use crate::kernels::{Rounding, pool};
use rayon::prelude::*;
use std::arch::x86_64::*;

/// The widest activation row the bound above covers.
const MAX_IN: usize = 4096;
/// Activation rows estimated together in one pass over the weights.
const GROUP: usize = 8;

/// Whether the CPU can run stage 1 (AVX-512F/VL/BW and VNNI, AVX2, FMA).
pub(in crate::kernels) fn available() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::env::var_os("TOKI_NO_TWO_STAGE").is_none()
            && std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
    })
}

/// What stage 1 needs of each weight row, computed once when the weights load.
pub(in crate::kernels) struct RowStats {
    /// `‖w_r‖₁`, rounded up (an upper bound in f32).
    l1: Vec<f32>,
    /// `128 · Σ_b d_b · Σ_i q_i`: what the activations' offset adds to a row's sum.
    offset: Vec<f32>,
}

/// [`RowStats`] of each row of Q8 blocks; `None` where a scale is not finite or the rows
/// are wider than the bound covers.
pub(in crate::kernels) fn row_stats(blocks: &Blocks, inn: usize) -> Option<RowStats> {
    let Blocks::Q8(b) = blocks else { return None };
    if inn > MAX_IN {
        return None;
    }
    let rows: Vec<(f32, f32)> = b
        .par_chunks(inn / 32)
        .map(|row| {
            let (mut l1, mut sum) = (0.0f64, 0.0f64);
            for blk in row {
                if !blk.d.is_finite() {
                    return None;
                }
                let abs: i64 = blk.qs.iter().map(|&q| i64::from(q).abs()).sum();
                let q: i64 = blk.qs.iter().map(|&q| i64::from(q)).sum();
                l1 += f64::from(blk.d).abs() * abs as f64;
                sum += f64::from(blk.d) * q as f64;
            }
            Some(((l1 as f32).next_up(), (128.0 * sum) as f32))
        })
        .collect::<Option<_>>()?;
    let (l1, offset) = rows.into_iter().unzip();
    Some(RowStats { l1, offset })
}

/// A row of activations as 8-bit integers `q_i = round(x_i / s)`, `s = max|x| / 127`,
/// stored offset as `q_i + 128` (unsigned, as VNNI's first operand is).
struct Quantized {
    q: Vec<u8>,
    scale: f32,
    max: f32,
}

fn quantize(x: &[f32]) -> Option<Quantized> {
    let max = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if !max.is_finite() || max == 0.0 || x.iter().any(|v| v.is_nan()) {
        return None;
    }
    let scale = max / 127.0;
    let q = x
        .iter()
        .map(|&v| ((v / scale).round().clamp(-127.0, 127.0) + 128.0) as u8)
        .collect();
    Some(Quantized { q, scale, max })
}

/// A row of activations rounded to 8 bits `parts` times ([`Blocks::bounds`]): the first
/// part as [`quantize`] makes it, each next the rounding of what the parts before it miss
/// (fewer parts where they miss nothing). `None` where `x` is not finite or all zeros.
fn rounded(x: &[f32], parts: usize) -> Option<Vec<Quantized>> {
    let mut out = vec![quantize(x)?];
    let mut rest = x.to_vec();
    while out.len() < parts {
        let q = &out[out.len() - 1];
        for (v, &c) in rest.iter_mut().zip(&q.q) {
            *v -= q.scale * (f32::from(c) - 128.0);
        }
        let Some(next) = quantize(&rest) else { break };
        out.push(next);
    }
    Some(out)
}

/// The largest `|x_i − Σ_p s_p·c_pi|` over the parts, computed in f64 (each product of
/// two f32 is exact there) and rounded up to f32.
fn error(x: &[f32], parts: &[Quantized]) -> f32 {
    let e = (0..x.len())
        .map(|i| {
            let sum: f64 = (parts.iter())
                .map(|q| f64::from(q.scale) * (f64::from(q.q[i]) - 128.0))
                .sum();
            (f64::from(x[i]) - sum).abs()
        })
        .fold(0.0f64, f64::max);
    // f64 sums of a few terms round by a few 2⁻⁵³ of their size: far below one f32 step.
    ((e * (1.0 + 1e-9)) as f32).next_up()
}

/// Activation rows that stage 1 takes (finite, not all zeros), in groups of up to
/// [`GROUP`] estimated together in one pass over the weights.
struct Group<'a> {
    /// Each row's index among the activation rows.
    rows: Vec<usize>,
    xq: Vec<&'a [u8]>,
    /// Per row: its value scale.
    scale: Vec<f32>,
}

fn groups(quantized: &[Option<Quantized>]) -> Vec<Group<'_>> {
    let live: Vec<(usize, &Quantized)> = quantized
        .iter()
        .enumerate()
        .filter_map(|(j, q)| Some((j, q.as_ref()?)))
        .collect();
    live.chunks(GROUP)
        .map(|group| Group {
            rows: group.iter().map(|&(j, _)| j).collect(),
            xq: group.iter().map(|(_, q)| q.q.as_slice()).collect(),
            scale: group.iter().map(|(_, q)| q.scale).collect(),
        })
        .collect()
}

/// For each weight row r of `rows` and activation row j < M:
/// `Σ_b d_b · Σ_k q_k · (xq_jk + 128)` into `out[(r - rows.start)·M + j]` (the offset is
/// taken off by the caller). Two blocks (64 weights) per VNNI instruction: lanes 0-7 hold
/// the first block's partial sums, 8-15 the second's, each scaled by its block's `d`.
///
/// # Safety
/// The CPU must pass [`available`].
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma")]
unsafe fn estimate<const M: usize>(
    b: &[Q8],
    per_row: usize,
    rows: std::ops::Range<usize>,
    xq: [&[u8]; M],
    out: &mut [f32],
) {
    assert!(xq.iter().all(|x| x.len() == 32 * per_row));
    assert_eq!(out.len(), rows.len() * M);
    let pairs = per_row / 2;
    for (k, r) in rows.enumerate() {
        let row = &b[r * per_row..(r + 1) * per_row];
        let mut acc = [_mm512_setzero_ps(); M];
        for p in 0..pairs {
            let (b0, b1) = (&row[2 * p], &row[2 * p + 1]);
            // SAFETY: `qs` holds 32 bytes; every xq row 64 from 64·p (asserted above).
            unsafe {
                let w = _mm512_inserti64x4::<1>(
                    _mm512_castsi256_si512(_mm256_loadu_si256(b0.qs.as_ptr() as *const __m256i)),
                    _mm256_loadu_si256(b1.qs.as_ptr() as *const __m256i),
                );
                let d = _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(b0.d), _mm512_set1_ps(b1.d));
                for j in 0..M {
                    let v = _mm512_loadu_si512(xq[j].as_ptr().add(64 * p) as *const __m512i);
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, w);
                    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, acc[j]);
                }
            }
        }
        if per_row % 2 == 1 {
            let last = &row[per_row - 1];
            // SAFETY: as above; the upper halves are zeros.
            unsafe {
                let w =
                    _mm512_zextsi256_si512(_mm256_loadu_si256(last.qs.as_ptr() as *const __m256i));
                let d = _mm512_set1_ps(last.d);
                for j in 0..M {
                    let v = _mm512_zextsi256_si512(_mm256_loadu_si256(
                        xq[j].as_ptr().add(64 * pairs) as *const __m256i,
                    ));
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), v, w);
                    acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), d, acc[j]);
                }
            }
        }
        for j in 0..M {
            out[k * M + j] = _mm512_reduce_add_ps(acc[j]);
        }
    }
}

/// [`estimate`] for a group of 1 to [`GROUP`] activation rows.
///
/// # Safety
/// The CPU must pass [`available`].
unsafe fn estimate_group(
    b: &[Q8],
    per_row: usize,
    rows: std::ops::Range<usize>,
    xq: &[&[u8]],
    out: &mut [f32],
) {
    macro_rules! m {
        ($m:literal) => {{
            let x: [&[u8]; $m] = std::array::from_fn(|j| xq[j]);
            // SAFETY: the caller checked `available`.
            unsafe { estimate::<$m>(b, per_row, rows, x, out) }
        }};
    }
    match xq.len() {
        1 => m!(1),
        2 => m!(2),
        3 => m!(3),
        4 => m!(4),
        5 => m!(5),
        6 => m!(6),
        7 => m!(7),
        _ => m!(8),
    }
}

impl Blocks {
    /// For each activation row of `x` [m, inn]: the arg-max of its row of `x Wᵀ` [out],
    /// exactly as the full product's (module doc), or `None` where the two stages do not
    /// apply to it: not Q8 blocks, the row not finite or all zeros, or more than an eighth
    /// of the weight rows left as candidates (a vocabulary-wide tie or a loose bound).
    /// `stats`: [`row_stats`] of these blocks. The CPU must pass [`available`].
    pub(in crate::kernels) fn argmax_two_stage(
        &self,
        stats: &RowStats,
        out: usize,
        x: &[f32],
        m: usize,
    ) -> Vec<Option<u32>> {
        let inn = x.len() / m.max(1);
        let Self::Q8(b) = self else {
            return vec![None; m];
        };
        let quantized: Vec<Option<Quantized>> = x.chunks(inn).map(quantize).collect();
        let mut picks = vec![None; m];
        for group in groups(&quantized) {
            let (g, xq, scale) = (group.rows.len(), &group.xq, &group.scale);
            // Per row (each row of a group was rounded): the bound per unit of ‖w_r‖₁
            // (module doc).
            let slack: Vec<f32> = (group.rows.iter())
                .filter_map(|&j| quantized[j].as_ref())
                .map(|q| 1.01 * (0.51 * q.scale + 1e-4 * q.max))
                .collect();
            // Stage 1, in parallel blocks of weight rows: each estimate's upper bound
            // `A_r + B_r` [out, g], and the largest lower bound `A_r − B_r` per row of x.
            let block = 256;
            let mut high = vec![0.0f32; out * g];
            // Per block of `high`: its largest lower bounds [g].
            let lows = pool::map_chunks(&mut high, block * g, |c, chunk| {
                let rows = c * block..c * block + chunk.len() / g;
                // SAFETY: the caller checked `available`.
                unsafe { estimate_group(b, inn / 32, rows.clone(), xq, chunk) };
                let mut low = vec![f32::NEG_INFINITY; g];
                for (r, est) in rows.zip(chunk.chunks_exact_mut(g)) {
                    for (i, e) in est.iter_mut().enumerate() {
                        let value = scale[i] * (*e - stats.offset[r]);
                        let bound = stats.l1[r] * slack[i];
                        low[i] = low[i].max(value - bound);
                        *e = value + bound;
                    }
                }
                low
            });
            let low = lows.iter().fold(vec![f32::NEG_INFINITY; g], |a, b| {
                a.iter().zip(b).map(|(x, y)| x.max(*y)).collect()
            });
            // Stage 2: the exact values of the rows that can reach the lower bound.
            for (i, &j) in group.rows.iter().enumerate() {
                let candidates = high
                    .iter()
                    .skip(i)
                    .step_by(g)
                    .enumerate()
                    .filter(|&(_, &h)| h >= low[i])
                    .map(|(r, _)| r);
                picks[j] = self.first_largest(&x[j * inn..(j + 1) * inn], out, candidates);
            }
        }
        picks
    }

    /// Stage 1 alone, for a sampler that needs more than the arg-max: for each activation
    /// row of `x` [m, inn], bounds `(low, high)` [out] on every value of its row of
    /// `x Wᵀ` (`low[r] ≤ value ≤ high[r]`, the value as the full product computes it), or
    /// `None` where they do not apply (the row not finite or all zeros). The CPU must pass
    /// [`available`].
    ///
    /// `rounding` says how finely: [`Rounding::Once`] rounds `x` to 8 bits as the
    /// arg-max's stage 1 does (module doc); [`Rounding::Twice`] also rounds what that
    /// misses, `x ≈ s₁·c₁ + s₂·c₂`, each part one more activation row of the same pass over
    /// the weights. Rounding moves a value by at most `ε·‖w_r‖₁`, `ε` the largest
    /// `|x_i − Σ s_p·c_pi|` (measured: at most `s₁/2 = max|x|/254` rounded once, `s₂/2 ≈
    /// max|x|/64,516` twice); the f32 sums' term `1e-4·‖w_r‖₁·max|x|` covers a second
    /// part's sums too (they are under 1/127 of the first's).
    pub(in crate::kernels) fn bounds(
        &self,
        stats: &RowStats,
        out: usize,
        x: &[f32],
        m: usize,
        rounding: Rounding,
    ) -> Vec<Option<(Vec<f32>, Vec<f32>)>> {
        let inn = x.len() / m.max(1);
        let Self::Q8(b) = self else {
            return vec![None; m];
        };
        let times = match rounding {
            Rounding::Once => 1,
            Rounding::Twice => 2,
        };
        let rows: Vec<Option<Vec<Quantized>>> = x.chunks(inn).map(|x| rounded(x, times)).collect();
        let slack: Vec<f32> = (rows.iter().zip(x.chunks(inn)))
            .map(|(parts, x)| {
                parts
                    .as_ref()
                    .map_or(0.0, |p| 1.01 * (error(x, p) + 1e-4 * p[0].max))
            })
            .collect();
        // The parts as activation rows, and the row of x each belongs to.
        let owner: Vec<usize> = (rows.iter().enumerate())
            .flat_map(|(j, p)| std::iter::repeat_n(j, p.as_ref().map_or(0, Vec::len)))
            .collect();
        let parts: Vec<Option<Quantized>> =
            rows.into_iter().flatten().flatten().map(Some).collect();
        // Per row of x: the sum of its parts' estimates [out].
        let mut sums: Vec<Option<Vec<f32>>> = vec![None; m];
        for group in groups(&parts) {
            let (g, xq, scale) = (group.rows.len(), &group.xq, &group.scale);
            // Stage 1 as in `argmax_two_stage`: each part's estimate [out, g].
            let block = 256;
            let mut est = vec![0.0f32; out * g];
            pool::for_each_chunk(&mut est, block * g, |c, chunk| {
                let rows = c * block..c * block + chunk.len() / g;
                // SAFETY: the caller checked `available`.
                unsafe { estimate_group(b, inn / 32, rows.clone(), xq, chunk) };
                for (r, e) in rows.zip(chunk.chunks_exact_mut(g)) {
                    for (i, e) in e.iter_mut().enumerate() {
                        *e = scale[i] * (*e - stats.offset[r]);
                    }
                }
            });
            for (i, &part) in group.rows.iter().enumerate() {
                let sum = sums[owner[part]].get_or_insert_with(|| vec![0.0; out]);
                for (s, &e) in sum.iter_mut().zip(est.iter().skip(i).step_by(g)) {
                    *s += e;
                }
            }
        }
        (sums.into_iter().zip(slack))
            .map(|(sum, slack)| {
                // The sum becomes the lower bound in place.
                let mut low = sum?;
                let bound = |r: usize| stats.l1[r] * slack;
                let high = low.iter().enumerate().map(|(r, &e)| e + bound(r)).collect();
                low.iter_mut().enumerate().for_each(|(r, e)| *e -= bound(r));
                Some((low, high))
            })
            .collect()
    }

    /// Stage 2 for one activation row `x`: the first of the largest exact values among
    /// `candidates` (ascending), or `None` where they are more than an eighth of the `out`
    /// rows, or a value is not finite.
    fn first_largest(
        &self,
        x: &[f32],
        out: usize,
        candidates: impl Iterator<Item = usize>,
    ) -> Option<u32> {
        let candidates: Vec<usize> = candidates.take(out / 8 + 1).collect();
        tracing::trace!(candidates = candidates.len(), "two-stage arg-max");
        if candidates.len() > out / 8 {
            return None;
        }
        let mut exact = [0.0f32; 1];
        let mut best: Option<(f32, u32)> = None;
        for &r in &candidates {
            self.rows_times_x(x.len(), r..r + 1, x, 1, &mut exact);
            if !exact[0].is_finite() {
                return None;
            }
            if best.is_none_or(|(v, _)| exact[0] > v) {
                best = Some((exact[0], r as u32));
            }
        }
        Some(best?.1)
    }
}

#[cfg(test)]
mod tests;
