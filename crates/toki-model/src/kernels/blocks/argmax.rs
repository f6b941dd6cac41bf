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

use super::{Blocks, Q8};
use crate::kernels::pool;
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

/// Activation rows that stage 1 takes (finite, not all zeros), in groups of up to
/// [`GROUP`] estimated together in one pass over the weights.
struct Group<'a> {
    /// Each row's index among the activation rows.
    rows: Vec<usize>,
    xq: Vec<&'a [u8]>,
    /// Per row: its value scale and the bound per unit of ‖w_r‖₁ (module doc).
    scale: Vec<f32>,
    slack: Vec<f32>,
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
            slack: (group.iter())
                .map(|(_, q)| 1.01 * (0.51 * q.scale + 1e-4 * q.max))
                .collect(),
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
            let (g, xq, scale, slack) = (group.rows.len(), &group.xq, &group.scale, &group.slack);
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
    pub(in crate::kernels) fn bounds(
        &self,
        stats: &RowStats,
        out: usize,
        x: &[f32],
        m: usize,
    ) -> Vec<Option<(Vec<f32>, Vec<f32>)>> {
        let inn = x.len() / m.max(1);
        let Self::Q8(b) = self else {
            return vec![None; m];
        };
        let quantized: Vec<Option<Quantized>> = x.chunks(inn).map(quantize).collect();
        let mut bounds = vec![None; m];
        for group in groups(&quantized) {
            let (g, xq, scale, slack) = (group.rows.len(), &group.xq, &group.scale, &group.slack);
            // Stage 1 as in `argmax_two_stage`: each estimate [out, g], then its bound.
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
            for (i, &j) in group.rows.iter().enumerate() {
                let (low, high) = (est.iter().skip(i).step_by(g).enumerate())
                    .map(|(r, &e)| {
                        let bound = stats.l1[r] * slack[i];
                        (e - bound, e + bound)
                    })
                    .unzip();
                bounds[j] = Some((low, high));
            }
        }
        bounds
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
mod tests {
    use crate::kernels::{HostWeight, RowValues, Stored};
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
        let (Stored::Blocks(b), Some((stats, _))) = (&blocks.w, blocks.row_stats.as_deref()) else {
            panic!("the lm_head-sized Q8 weight takes the two stages");
        };
        let plain = HostWeight::new(w, out, inn);
        let (mut taken, mut taken_together) = (0, 0);
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
                // Each row alone, and all of them together (stage 1 in groups of 8).
                for (i, xi) in x.chunks(inn).enumerate() {
                    if let Some(got) = b.argmax_two_stage(stats, out, xi, 1)[0] {
                        assert_eq!(got, want[i], "m={m} seed={seed} row {i}");
                        taken += 1;
                    }
                }
                let together = b.argmax_two_stage(stats, out, &x, m);
                for (i, got) in together.into_iter().enumerate() {
                    if let Some(got) = got {
                        assert_eq!(got, want[i], "m={m} seed={seed} row {i} of {m}");
                        taken_together += 1;
                    }
                }
                assert_eq!(blocks.matmul_argmax(&x, m), want, "m={m} seed={seed}");
            }
        }
        assert!(taken >= 51, "the two stages ran for {taken} of 68 rows");
        assert_eq!(taken_together, taken, "rows alone and together");
        // Not finite, or all zeros: the full product, for that row only.
        let zeros = vec![0.0; inn];
        assert!(b.argmax_two_stage(stats, out, &zeros, 1)[0].is_none());
        let mut nan = lcg(3 * inn, 7);
        nan[inn + 5] = f32::NAN;
        let picks = b.argmax_two_stage(stats, out, &nan, 3);
        assert!(picks[0].is_some() && picks[1].is_none() && picks[2].is_some());
        assert_eq!(blocks.matmul_argmax(&nan, 3), plain.matmul_argmax(&nan, 3));
    }

    /// Stage 1's bounds hold every value of the full product, and `value` gives the full
    /// product's bits; a row the bounds do not apply to (all zeros) gets its values.
    #[test]
    fn bounds_hold_the_full_products_values() {
        if !super::available() {
            return;
        }
        let (out, inn) = (4096 + 7, 17 * 32);
        let blocks = HostWeight::compact(q8_weights(out, inn, 5), out, inn);
        for m in [1, 3, 9] {
            let x = lcg(m * inn, 70 + m as u64);
            let full = blocks.matmul(&x, m);
            for (j, row) in blocks.value_bounds(&x, m).iter().enumerate() {
                let (xj, y) = (&x[j * inn..][..inn], &full[j * out..][..out]);
                let RowValues::Bounds { low, high } = row else {
                    panic!("m={m}: no bounds for row {j}");
                };
                for r in 0..out {
                    assert!(low[r] <= y[r] && y[r] <= high[r], "m={m} row {j} value {r}");
                    assert!((high[r] - low[r]).is_finite(), "m={m} row {j} value {r}");
                }
                for r in [0, 1, 2000, out - 1] {
                    assert_eq!(blocks.value(xj, r).to_bits(), y[r].to_bits(), "value {r}");
                }
            }
        }
        let zeros = vec![0.0; inn];
        let rows = blocks.value_bounds(&zeros, 1);
        assert_eq!(rows, vec![RowValues::Exact(blocks.matmul(&zeros, 1))]);
    }

    /// Rows of an odd number of blocks (stage 1's last block alone), groups of 1-8
    /// activation rows and more than one group.
    #[test]
    fn two_stage_argmax_takes_odd_blocks_and_many_rows() {
        if !super::available() {
            return;
        }
        let (out, inn) = (4096, 17 * 32);
        let w = q8_weights(out, inn, 11);
        let blocks = HostWeight::compact(w.clone(), out, inn);
        let (Stored::Blocks(b), Some((stats, _))) = (&blocks.w, blocks.row_stats.as_deref()) else {
            panic!("the two stages apply");
        };
        let plain = HostWeight::new(w, out, inn);
        for m in [1, 3, 8, 11] {
            let x = lcg(m * inn, 40 + m as u64);
            let want = first_max(&plain.matmul(&x, m), out);
            let got = b.argmax_two_stage(stats, out, &x, m);
            assert!(got.iter().all(Option::is_some), "m={m}: {got:?}");
            let got: Vec<u32> = got.into_iter().flatten().collect();
            assert_eq!(got, want, "m={m}");
        }
    }
}
