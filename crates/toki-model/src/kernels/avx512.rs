//! The AVX-512 kernel for 2+ activation rows, chosen at run time by `kernels::rows_times_x`.

use super::avx2::{dot4x1, hsum, prefetch};
use std::arch::x86_64::*;

/// `yt[(o - rows.start) * m + i] = W[o] · x[i]` for 2+ activation rows: each weight
/// row is read from memory once, in order, while up to eight activation rows (in L1)
/// meet it, so the arithmetic is spread evenly over the memory stream (the AVX2 kernel
/// meets the second group of rows from L1 with no memory traffic under it). Blocks of
/// two weight rows for 5-8 activation rows (16 accumulators), four for 2-4; more than
/// eight rows go in groups of eight, the first prefetching.
///
/// Each dot product sums the products of lane `k mod 16` in order and then adds the
/// lanes as the one-row kernel does, so a row's result does not depend on how many
/// rows share the step (bit-identical to [`dot4x1`], tested).
///
/// Measured (`examples/kern.rs`, one model pass, medians of 10 rounds, this 2-core
/// AMD EPYC): 6 / 8 rows cost 1.17-1.20 / 1.18-1.27x one row in three runs, against
/// 1.29-1.36 / 1.38-1.49x for the AVX2 kernel in two; 2-4 rows cost 0.97-1.17x
/// on four-row blocks (two-row blocks there cost 1.13-1.24x).
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
pub(super) unsafe fn rows_times_x(
    w: &[f32],
    inn: usize,
    rows: std::ops::Range<usize>,
    x: &[f32],
    m: usize,
    yt: &mut [f32],
    prefetch: usize,
) {
    let xrow = |i: usize| &x[i * inn..(i + 1) * inn];
    let wide = m.min(8) > 4;
    let step = if wide { 2 } else { 4 };
    super::walk_blocks(
        w,
        inn,
        rows,
        m,
        yt,
        step,
        |left| left.min(8),
        |wr, i, g, out| {
            let pf = if i == 0 { prefetch } else { 0 };
            macro_rules! run {
                ($r:literal, $g:literal) => {{
                    let xr: [&[f32]; $g] = std::array::from_fn(|j| xrow(i + j));
                    let s = dot::<$r, $g>(std::array::from_fn(|j| wr[j]), xr, inn, pf);
                    (0..$r).for_each(|j| out[j][..$g].copy_from_slice(&s[j]));
                }};
            }
            match (wide, g) {
                (false, 1) => {
                    let s = dot4x1(wr, xrow(i), inn, pf);
                    (0..4).for_each(|j| out[j][0] = s[j]);
                }
                (false, 2) => run!(4, 2),
                (false, 3) => run!(4, 3),
                (false, _) => run!(4, 4),
                (true, 1) => run!(2, 1),
                (true, 2) => run!(2, 2),
                (true, 3) => run!(2, 3),
                (true, 4) => run!(2, 4),
                (true, 5) => run!(2, 5),
                (true, 6) => run!(2, 6),
                (true, 7) => run!(2, 7),
                (true, _) => run!(2, 8),
            }
        },
    );
}

/// `R` weight rows times `M` activation rows, 16 floats a step: `R·M` accumulators.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
fn dot<const R: usize, const M: usize>(
    w: [&[f32]; R],
    x: [&[f32]; M],
    inn: usize,
    pf: usize,
) -> [[f32; M]; R] {
    let n16 = inn / 16 * 16;
    let mut a = [[_mm512_setzero_ps(); M]; R];
    let mut k = 0;
    while k < n16 {
        // SAFETY: k + 16 <= n16 <= inn = every row's length.
        unsafe {
            // One 64-byte line per row per step.
            if pf > 0 {
                for row in &w {
                    prefetch(row.as_ptr().wrapping_add(k + pf));
                }
            }
            let mut xv = [_mm512_setzero_ps(); M];
            for j in 0..M {
                xv[j] = _mm512_loadu_ps(x[j].as_ptr().add(k));
            }
            for r in 0..R {
                let v = _mm512_loadu_ps(w[r].as_ptr().add(k));
                for j in 0..M {
                    a[r][j] = _mm512_fmadd_ps(v, xv[j], a[r][j]);
                }
            }
        }
        k += 16;
    }
    let mut out = [[0.0; M]; R];
    for r in 0..R {
        for j in 0..M {
            // Lanes 0-7 plus lanes 8-15, then across: the one-row kernel's order.
            let lo = _mm512_castps512_ps256(a[r][j]);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a[r][j])));
            let tail: f32 = (n16..inn).map(|kk| w[r][kk] * x[j][kk]).sum();
            out[r][j] = hsum(_mm256_add_ps(lo, hi)) + tail;
        }
    }
    out
}
