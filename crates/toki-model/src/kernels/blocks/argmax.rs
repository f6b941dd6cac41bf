//! The arg-max of `x Wᵀ` over Q8 blocks (the lm_head of a converted model) in two stages,
//! exactly: the greedy token is the one the full product gives, bit for bit.
//!
//! 1. Every row's value is estimated with `x` rounded to 8-bit integers (one scale) and
//!    integer dot products with the blocks' 8-bit values (AVX-512 VNNI, exact in 32-bit
//!    integers): `A_r = s · Σ_b d_b · Σ_i q_i · round(x_i / s)`. A bound `B_r` covers
//!    every difference between `A_r` and the value `e_r` the f32 kernels compute:
//!    `|s·round(x_i/s) − x_i| ≤ s/2`, so rounding x moves the real value by at most
//!    `s/2 · ‖w_r‖₁`; the f32 sums of both (at most 576 + 18 terms here) round by less
//!    than `1e-4 · ‖w_r‖₁ · max|x|`. `B_r = 1.01 · ‖w_r‖₁ · (0.51·s + 1e-4·max|x|)`.
//! 2. With `L = max_r (A_r − B_r)`, a lower bound of the maximum, every row with
//!    `A_r + B_r < L` has `e_r < L ≤ max e`: it is neither the arg-max nor tied with it.
//!    The rest (the candidates) get their exact values from the same kernels as the full
//!    product (a row's value does not depend on the rows around it), and the first of the
//!    largest wins, as in the full product.
//!
//! Stage 1 reads the same bytes as the exact product without decoding the blocks to f32,
//! which is what the exact product of one activation row is bound by. With 2+ rows the
//! exact kernel shares each block's decoding among them and stage 1 did not pay (A/B in
//! `benches/results/2026-12-05-cpu-two-stage-argmax-ab/`, of a version for any row count),
//! so this serves one activation row (`HostWeight::matmul_argmax`). Where `x` is not finite or is all zeros, or too
//! many rows are candidates, the caller takes the full product.

use super::{Blocks, Q8};
use rayon::prelude::*;
use std::arch::x86_64::*;

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

/// `‖w_r‖₁` of each row of Q8 blocks, rounded up (an upper bound in f32); `None` where a
/// scale is not finite.
pub(in crate::kernels) fn row_l1(blocks: &Blocks, inn: usize) -> Option<Vec<f32>> {
    let Blocks::Q8(b) = blocks else { return None };
    b.par_chunks(inn / 32)
        .map(|row| {
            let mut s = 0.0f64;
            for blk in row {
                if !blk.d.is_finite() {
                    return None;
                }
                let q: i64 = blk.qs.iter().map(|&q| i64::from(q).abs()).sum();
                s += f64::from(blk.d).abs() * q as f64;
            }
            Some((s as f32).next_up())
        })
        .collect()
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

/// For each row r of `rows`: `Σ_b d_b · Σ_k q_k · xq_k` into `out[r - rows.start]`.
///
/// # Safety
/// The CPU must pass [`available`].
#[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma")]
unsafe fn estimate(
    b: &[Q8],
    per_row: usize,
    rows: std::ops::Range<usize>,
    xq: &[u8],
    out: &mut [f32],
) {
    assert_eq!(xq.len(), 32 * per_row);
    let ones = _mm256_set1_epi8(1);
    for (e, r) in out.iter_mut().zip(rows) {
        let mut acc = _mm256_setzero_ps();
        for (j, blk) in b[r * per_row..(r + 1) * per_row].iter().enumerate() {
            // SAFETY: `qs` holds 32 bytes, xq 32 from 32·j (asserted above).
            unsafe {
                let w = _mm256_loadu_si256(blk.qs.as_ptr() as *const __m256i);
                let v = _mm256_loadu_si256(xq.as_ptr().add(32 * j) as *const __m256i);
                // x is stored as xq + 128: Σ (xq + 128)·w − 128·Σ w = Σ xq·w, exactly.
                let sum_w = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, w);
                let dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), v, w);
                let dot = _mm256_sub_epi32(dot, _mm256_slli_epi32::<7>(sum_w));
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(blk.d), acc);
            }
        }
        *e = super::super::avx2::hsum(acc);
    }
}

impl Blocks {
    /// The arg-max of `x Wᵀ` [out] for one row `x` [inn], exactly as the full product's
    /// (module doc), or `None` where the two stages do not apply: not Q8 blocks, `x` not
    /// finite or all zeros, or more than an eighth of the rows left as candidates (a
    /// vocabulary-wide tie or a loose bound). `l1`: [`row_l1`] of these blocks. The CPU
    /// must pass [`available`].
    pub(in crate::kernels) fn argmax_two_stage(
        &self,
        l1: &[f32],
        out: usize,
        x: &[f32],
    ) -> Option<u32> {
        let Self::Q8(b) = self else { return None };
        let q = quantize(x)?;
        let inn = x.len();
        let per_row = inn / 32;
        // Stage 1: estimates of every row, in parallel blocks of rows.
        let block = 256;
        let mut est = vec![0.0f32; out];
        est.par_chunks_mut(block)
            .enumerate()
            .for_each(|(c, chunk)| {
                let rows = c * block..c * block + chunk.len();
                // SAFETY: the caller checked `available`.
                unsafe { estimate(b, per_row, rows, &q.q, chunk) };
            });
        let slack = |r: usize| 1.01 * l1[r] * (0.51 * q.scale + 1e-4 * q.max);
        let value = |r: usize| q.scale * est[r];
        let low = (0..out)
            .map(|r| value(r) - slack(r))
            .fold(f32::NEG_INFINITY, f32::max);
        let candidates: Vec<usize> = (0..out).filter(|&r| value(r) + slack(r) >= low).collect();
        tracing::trace!(candidates = candidates.len(), "two-stage arg-max");
        if candidates.len() > out / 8 {
            return None;
        }
        // Stage 2: the candidates' exact values, the first of the largest.
        let mut exact = [0.0f32; 1];
        let mut best: Option<(f32, u32)> = None;
        for &r in &candidates {
            self.rows_times_x(inn, r..r + 1, x, 1, &mut exact);
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
mod tests {
    use crate::kernels::{HostWeight, Stored};
    use crate::testing::lcg;

    /// [out, inn] Q8-style weights `d·q`, q in -127..=127, d a power of two per block.
    fn q8_weights(out: usize, inn: usize, seed: u64) -> Vec<f32> {
        let noise = lcg(out * inn + out * inn / 32, seed);
        let (q, d) = noise.split_at(out * inn);
        q.iter()
            .enumerate()
            .map(|(i, &u)| {
                let scale =
                    [1.0 / 512.0, 1.0 / 1024.0, 1.0 / 2048.0][((d[i / 32] + 0.5) * 2.99) as usize];
                ((u * 254.0).round().clamp(-127.0, 127.0)) * scale
            })
            .collect()
    }

    /// The first index of the largest value of each row of `y` [m, out].
    fn first_max(y: &[f32], out: usize) -> Vec<u32> {
        y.chunks(out)
            .map(|r| {
                let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                r.iter().position(|&v| v == max).unwrap() as u32
            })
            .collect()
    }

    /// The two stages pick the full product's arg-max, ties to the first index included:
    /// a row repeated (an exact tie), a row one step of q away (a near tie), activations
    /// that point at those rows, and random ones; 68 activation rows in sets of 1-9 (the
    /// product of each set checked through `matmul_argmax` too).
    #[test]
    fn two_stage_argmax_is_the_full_products() {
        if !super::available() {
            return;
        }
        let (out, inn) = (4096 + 7, 576);
        let mut w = q8_weights(out, inn, 3);
        let row3 = w[3 * inn..4 * inn].to_vec();
        w[10 * inn..11 * inn].copy_from_slice(&row3); // an exact tie with row 3
        let mut near = row3.clone();
        near[100] += 1.0 / 2048.0 * if near[100] > 0.0 { -1.0 } else { 1.0 };
        w[4000 * inn..4001 * inn].copy_from_slice(&near); // a near tie
        // Row 5 starts with a block holding q = -128 (d = 1/1024): the offset arithmetic
        // of stage 1 must take it as the others.
        for (j, v) in w[5 * inn..5 * inn + 32].iter_mut().enumerate() {
            *v = if j == 0 {
                -128.0
            } else {
                ((j * 37) % 255) as f32 - 127.0
            } / 1024.0;
        }
        let row5 = w[5 * inn..6 * inn].to_vec();
        let blocks = HostWeight::compact(w.clone(), out, inn);
        let (Stored::Blocks(b), Some(l1)) = (&blocks.w, &blocks.row_l1) else {
            panic!("the lm_head-sized Q8 weight takes the two stages");
        };
        let plain = HostWeight::new(w, out, inn);
        let mut taken = 0;
        for m in [1, 2, 5, 9] {
            for seed in 0..4u64 {
                let mut x = lcg(m * inn, 100 + seed * 10 + m as u64);
                // Point every activation row at row 3 (and so at 10 and 4000), or at 5.
                let target = [Some(&row3), None, Some(&row5), None][seed as usize];
                if let Some(t) = target {
                    for xi in x.chunks_mut(inn) {
                        xi.iter_mut()
                            .zip(t)
                            .for_each(|(v, w)| *v = *v * 0.05 + w * 400.0);
                    }
                }
                let want = first_max(&plain.matmul(&x, m), out);
                match seed {
                    0 => assert!(want.iter().all(|&r| r == 3 || r == 4000), "{want:?}"),
                    2 => assert!(want.iter().all(|&r| r == 5), "{want:?}"),
                    _ => {}
                }
                for (i, xi) in x.chunks(inn).enumerate() {
                    if let Some(got) = b.argmax_two_stage(l1, out, xi) {
                        assert_eq!(got, want[i], "m={m} seed={seed} row {i}");
                        taken += 1;
                    }
                }
                assert_eq!(blocks.matmul_argmax(&x, m), want, "m={m} seed={seed}");
            }
        }
        assert!(taken >= 51, "the two stages ran for {taken} of 68 rows");
        // Not finite, or all zeros: the full product.
        let zeros = vec![0.0; inn];
        assert!(b.argmax_two_stage(l1, out, &zeros).is_none());
        let mut nan = lcg(inn, 7);
        nan[5] = f32::NAN;
        assert!(b.argmax_two_stage(l1, out, &nan).is_none());
        assert_eq!(blocks.matmul_argmax(&nan, 1), plain.matmul_argmax(&nan, 1));
    }
}
