//! The AVX2 + FMA kernel of the projections (rows times a block of weight rows, where the
//! CPU has no AVX-512), and the dot products, prefetch and sums the AVX-512 kernel shares.

use std::arch::x86_64::*;

/// Floats ahead of the current read at which the weights are prefetched (8 KiB): the
/// next block's rows are on their way while this block is computed.
pub(super) const PREFETCH: usize = 2048;

/// `yt[(o - rows.start) * m + i] = W[o] · x[i]`, four weight rows at a time. The four
/// rows are read from memory once; every activation row then meets them in L1, by
/// micro-kernels that compute no padding:
/// - 1 row: four weight rows ([`dot4x1`]);
/// - groups of 2 or 3 rows: two weight rows times the group, twice (8 or 12
///   accumulators); more rows go in such groups (4 = 2 + 2, 5 = 3 + 2, ...).
///
/// Every dot product sums lane `k mod 16` in order over two 8-lane accumulators and
/// adds them as [`dot4x1`] does (and the AVX-512 kernel), so a row's result does not
/// depend on how many rows share the step: a tree node's projections are bit for bit
/// the ones plain decoding computes (tested).
///
/// The first group prefetches the weights `prefetch` floats ahead ([`PREFETCH`] for
/// weights streamed from memory, 0 for a scratch in L1). Without it the
/// loads stall the arithmetic instead of overlapping it, and every extra row added its
/// arithmetic to the memory time (benches/README.md, "Past four rows").
///
/// A block of fewer than four weight rows repeats its last row (results discarded).
#[target_feature(enable = "avx2,fma")]
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
    // Groups of 3 and 2 (no lone row after the first group).
    let group = |left: usize| {
        if left % 3 == 1 && left > 1 {
            2
        } else {
            left.min(3)
        }
    };
    super::walk_blocks(w, inn, rows, m, yt, 4, group, |wr, i, g, out| {
        // Later groups find the block's weights in L1.
        let pf = if i == 0 { prefetch } else { 0 };
        let mut put = |j: usize, s: &[f32]| out[j][..s.len()].copy_from_slice(s);
        match g {
            1 => {
                let s = dot4x1(wr, xrow(i), inn, pf);
                (0..4).for_each(|j| put(j, &s[j..j + 1]));
            }
            2 => {
                for half in 0..2 {
                    let wh = [wr[2 * half], wr[2 * half + 1]];
                    let s = dot::<2, 2>(wh, [xrow(i), xrow(i + 1)], inn, pf);
                    (0..2).for_each(|j| put(2 * half + j, &s[j]));
                }
            }
            _ => {
                let xr = [xrow(i), xrow(i + 1), xrow(i + 2)];
                for half in 0..2 {
                    let s = dot::<2, 3>([wr[2 * half], wr[2 * half + 1]], xr, inn, pf);
                    (0..2).for_each(|j| put(2 * half + j, &s[j]));
                }
            }
        }
    });
}

/// `R` weight rows times `M` activation rows, 16 floats a step in two 8-lane halves:
/// `2·R·M` accumulators, summed in [`dot4x1`]'s order.
// The half's index addresses several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx2,fma")]
fn dot<const R: usize, const M: usize>(
    w: [&[f32]; R],
    x: [&[f32]; M],
    inn: usize,
    pf: usize,
) -> [[f32; M]; R] {
    let n16 = inn / 16 * 16;
    let mut a = [[[_mm256_setzero_ps(); 2]; M]; R];
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
            for h in 0..2 {
                let mut xv = [_mm256_setzero_ps(); M];
                for j in 0..M {
                    xv[j] = _mm256_loadu_ps(x[j].as_ptr().add(k + 8 * h));
                }
                for r in 0..R {
                    let v = _mm256_loadu_ps(w[r].as_ptr().add(k + 8 * h));
                    for j in 0..M {
                        a[r][j][h] = _mm256_fmadd_ps(v, xv[j], a[r][j][h]);
                    }
                }
            }
        }
        k += 16;
    }
    let mut out = [[0.0; M]; R];
    for r in 0..R {
        for j in 0..M {
            let tail: f32 = (n16..inn).map(|kk| w[r][kk] * x[j][kk]).sum();
            out[r][j] = hsum(_mm256_add_ps(a[r][j][0], a[r][j][1])) + tail;
        }
    }
    out
}

/// Four weight rows times one activation row.
#[target_feature(enable = "avx2,fma")]
pub(super) fn dot4x1(w: [&[f32]; 4], x: &[f32], inn: usize, pf: usize) -> [f32; 4] {
    let n16 = inn / 16 * 16;
    let mut a = [_mm256_setzero_ps(); 8];
    let mut k = 0;
    while k < n16 {
        // SAFETY: k + 16 <= n16 <= inn = every row's length.
        unsafe {
            // One 64-byte line per row per iteration.
            if pf > 0 {
                for row in &w {
                    prefetch(row.as_ptr().wrapping_add(k + pf));
                }
            }
            let x0 = _mm256_loadu_ps(x.as_ptr().add(k));
            let x1 = _mm256_loadu_ps(x.as_ptr().add(k + 8));
            for j in 0..4 {
                let p = w[j].as_ptr().add(k);
                a[2 * j] = _mm256_fmadd_ps(_mm256_loadu_ps(p), x0, a[2 * j]);
                a[2 * j + 1] = _mm256_fmadd_ps(_mm256_loadu_ps(p.add(8)), x1, a[2 * j + 1]);
            }
        }
        k += 16;
    }
    let mut out = [0.0; 4];
    for j in 0..4 {
        let tail: f32 = (n16..inn).map(|kk| w[j][kk] * x[kk]).sum();
        out[j] = hsum(_mm256_add_ps(a[2 * j], a[2 * j + 1])) + tail;
    }
    out
}

/// Ask for the cache line at `p` ahead of its use (no fault if `p` is past the end).
#[target_feature(enable = "avx2,fma")]
pub(super) fn prefetch(p: *const f32) {
    // A prefetch is a hint: it never faults, whatever the address.
    _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
}

#[target_feature(enable = "avx2,fma")]
pub(super) fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)))
}
