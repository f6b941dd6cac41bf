//! Half-precision host weights for what only proposes: the heads and their draft
//! vocabulary projection.
//!
//! A decoding step's heads read about 44 MB of f32 weights for the demo model (three
//! chained heads: their F_k,j and residual blocks, and three draft-vocabulary projections
//! of 4,096 x 576), and like the base's projections they are bound by memory, not
//! arithmetic. Stored as IEEE f16 they read half of that. The heads ship in f16, so their
//! own weights lose nothing; the base's lm_head rows cut down to the draft vocabulary are
//! rounded (relative error at most 2⁻¹¹). Nothing the base verifies is read from here:
//! proposals move, outputs cannot.
//!
//! The kernel converts eight halves at a time to f32 (F16C) and accumulates in f32, each
//! activation row against a block of four weight rows read from memory once.

/// `w` rounded to f16 (as raw bits), or `None` if a value would not survive: beyond f16's
/// range (it would become infinite) or not finite to begin with.
pub(super) fn to_f16(w: &[f32]) -> Option<Vec<u16>> {
    w.iter()
        .map(|&v| {
            let h = half::f16::from_f32(v);
            h.is_finite().then_some(h.to_bits())
        })
        .collect()
}

/// `yt[(o - rows.start) * m + i] = W[o] · x[i]` for o in `rows`, i < m, `W` as f16 bits.
pub(super) fn rows_times_x(
    w: &[u16],
    inn: usize,
    rows: std::ops::Range<usize>,
    x: &[f32],
    m: usize,
    yt: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
    {
        // SAFETY: the CPU supports AVX2, FMA and F16C (checked just above); the function
        // reads and writes only through slices' pointers within their lengths.
        unsafe { x86::rows_times_x(w, inn, rows, x, m, yt) };
        return;
    }
    portable_rows_times_x(w, inn, rows, x, m, yt);
}

fn portable_rows_times_x(
    w: &[u16],
    inn: usize,
    rows: std::ops::Range<usize>,
    x: &[f32],
    m: usize,
    yt: &mut [f32],
) {
    let start = rows.start;
    let mut wf = vec![0.0f32; inn];
    for o in rows {
        for (f, &b) in wf.iter_mut().zip(&w[o * inn..(o + 1) * inn]) {
            *f = half::f16::from_bits(b).to_f32();
        }
        for i in 0..m {
            let xr = &x[i * inn..(i + 1) * inn];
            yt[(o - start) * m + i] = wf.iter().zip(xr).map(|(a, b)| a * b).sum();
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::avx2::{hsum, prefetch};
    use std::arch::x86_64::*;

    /// Halves ahead of the current read at which the weights are prefetched (8 KiB).
    const PREFETCH: usize = 4096;

    /// Blocks of four weight rows (a short last block repeats its last row; those results
    /// are discarded); every activation row meets the block, the first from memory, the
    /// rest from L1.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn rows_times_x(
        w: &[u16],
        inn: usize,
        rows: std::ops::Range<usize>,
        x: &[f32],
        m: usize,
        yt: &mut [f32],
    ) {
        super::super::walk_blocks(
            w,
            inn,
            rows,
            m,
            yt,
            4,
            |_| 1,
            |wr, i, _, out| {
                let pf = if i == 0 { PREFETCH } else { 0 };
                let s = dot4x1(wr, &x[i * inn..(i + 1) * inn], inn, pf);
                (0..4).for_each(|j| out[j][0] = s[j]);
            },
        );
    }

    /// Four f16 weight rows times one f32 activation row, 16 values a step.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn dot4x1(w: [&[u16]; 4], x: &[f32], inn: usize, pf: usize) -> [f32; 4] {
        let n16 = inn / 16 * 16;
        let mut a = [_mm256_setzero_ps(); 8];
        let mut k = 0;
        while k < n16 {
            // SAFETY: k + 16 <= n16 <= inn = every row's length.
            unsafe {
                // One 64-byte line (32 halves) per row every other step.
                if pf > 0 && k.is_multiple_of(32) {
                    for row in &w {
                        prefetch(row.as_ptr().wrapping_add(k + pf) as *const f32);
                    }
                }
                let x0 = _mm256_loadu_ps(x.as_ptr().add(k));
                let x1 = _mm256_loadu_ps(x.as_ptr().add(k + 8));
                for j in 0..4 {
                    let h = _mm256_loadu_si256(w[j].as_ptr().add(k) as *const __m256i);
                    let lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
                    let hi = _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h));
                    a[2 * j] = _mm256_fmadd_ps(lo, x0, a[2 * j]);
                    a[2 * j + 1] = _mm256_fmadd_ps(hi, x1, a[2 * j + 1]);
                }
            }
            k += 16;
        }
        let mut out = [0.0; 4];
        for j in 0..4 {
            let tail: f32 = (n16..inn)
                .map(|kk| half::f16::from_bits(w[j][kk]).to_f32() * x[kk])
                .sum();
            out[j] = hsum(_mm256_add_ps(a[2 * j], a[2 * j + 1])) + tail;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::reference;
    use super::super::{HostPrecision, HostWeight};
    use super::*;
    use crate::testing::lcg;

    /// `w` rounded to f16 and back: the values a half-precision copy computes with.
    fn rounded(w: &[f32]) -> Vec<f32> {
        w.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect()
    }

    #[test]
    fn half_copies_compute_with_the_rounded_weights() {
        // Odd shapes (a short last block, `in` not a multiple of 16), every row count up
        // to 16: the product of the f16-rounded weights, to f32 summation order.
        for &(out, inn) in &[(1, 3), (7, 13), (33, 64), (257, 70), (1000, 576)] {
            let w = lcg(out * inn, out as u64 + 11);
            let hw = HostWeight::with_precision(w.clone(), out, inn, HostPrecision::F16);
            assert_eq!(hw.precision(), HostPrecision::F16);
            let wr = rounded(&w);
            for m in [1, 2, 3, 5, 8, 16] {
                let x = lcg(m * inn, (m * 13 + inn) as u64);
                let want = reference(&wr, out, inn, &x, m);
                for (g, r) in hw.matmul(&x, m).iter().zip(&want) {
                    assert!(
                        (g - r).abs() <= 1e-4 * (1.0 + r.abs()),
                        "{out}x{inn} m={m}: {g} vs {r}"
                    );
                }
                // The arg-max reads the same products.
                let y = hw.matmul(&x, m);
                let want: Vec<u32> = y
                    .chunks(out)
                    .map(|r| {
                        let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                        r.iter().position(|&v| v == max).unwrap() as u32
                    })
                    .collect();
                assert_eq!(hw.matmul_argmax(&x, m), want, "{out}x{inn} m={m}");
            }
        }
    }

    #[test]
    fn portable_half_path_matches_the_rounded_reference() {
        let (out, inn, m) = (19, 45, 5);
        let w = to_f16(&lcg(out * inn, 3)).unwrap();
        let wf: Vec<f32> = w
            .iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect();
        let x = lcg(m * inn, 4);
        let mut yt = vec![0.0; out * m];
        portable_rows_times_x(&w, inn, 0..out, &x, m, &mut yt);
        let want = reference(&wf, out, inn, &x, m);
        for o in 0..out {
            for i in 0..m {
                assert!((yt[o * m + i] - want[i * out + o]).abs() < 1e-4);
            }
        }
    }

    #[test]
    fn weights_beyond_half_range_stay_f32() {
        // 1e5 overflows f16 (max 65,504), and a NaN is kept as it is: the copy stays f32,
        // so its products equal the f32 kernel's.
        for bad in [1e5f32, -7e4, f32::NAN] {
            let mut w = lcg(4 * 16, 5);
            w[9] = bad;
            assert!(to_f16(&w).is_none());
            let hw = HostWeight::with_precision(w.clone(), 4, 16, HostPrecision::F16);
            assert_eq!(hw.precision(), HostPrecision::F32);
            let x = lcg(16, 6);
            let (a, b) = (hw.matmul(&x, 1), HostWeight::new(w, 4, 16).matmul(&x, 1));
            assert!(a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        // f32 asked for: f32 kept, whatever the values.
        let hw = HostWeight::with_precision(lcg(8, 1), 2, 4, HostPrecision::F32);
        assert_eq!(hw.precision(), HostPrecision::F32);
    }
}
