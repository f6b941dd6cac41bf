//! The host kernels against a plain reference, and their bit-for-bit promises.

use super::*;
use crate::testing::lcg;

/// `x Wᵀ` [m, out] by the definition (also the reference of the other storages' tests).
pub(super) fn reference(w: &[f32], out: usize, inn: usize, x: &[f32], m: usize) -> Vec<f32> {
    let mut y = vec![0.0; m * out];
    for i in 0..m {
        for o in 0..out {
            y[i * out + o] = (0..inn).map(|k| x[i * inn + k] * w[o * inn + k]).sum();
        }
    }
    y
}

#[test]
fn matches_reference_on_odd_shapes() {
    // Odd row counts (a lone last weight row), `in` not a multiple of 8, every group
    // size of activation rows, and output blocks of uneven length.
    for &(out, inn) in &[(1, 3), (7, 13), (33, 64), (257, 70), (1000, 576)] {
        let w = lcg(out * inn, out as u64);
        let hw = HostWeight::new(w.clone(), out, inn);
        for m in [1, 2, 3, 4, 5, 6, 8, 9, 12, 16] {
            let x = lcg(m * inn, (m * 31 + inn) as u64);
            let got = hw.matmul(&x, m);
            let want = reference(&w, out, inn, &x, m);
            for (g, r) in got.iter().zip(&want) {
                assert!(
                    (g - r).abs() <= 1e-4 * (1.0 + r.abs()),
                    "{out}x{inn} m={m}: {g} vs {r}"
                );
            }
        }
    }
}

/// Each x86 kernel on its own (`matmul` picks one per row count), every group size.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_and_avx512_kernels_match_reference() {
    let avx2 =
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma");
    for &(out, inn) in &[(7, 13), (33, 64), (257, 70), (130, 576)] {
        let w = lcg(out * inn, out as u64 + 7);
        for m in 1..=17 {
            let x = lcg(m * inn, (m * 17 + inn) as u64);
            let want = reference(&w, out, inn, &x, m);
            let mut kernels: Vec<(&str, Vec<f32>)> = vec![];
            if avx2 {
                let mut yt = vec![0.0; out * m];
                // SAFETY: AVX2 and FMA are present (checked just above).
                unsafe { avx2::rows_times_x(&w, inn, 0..out, &x, m, &mut yt, avx2::PREFETCH) };
                kernels.push(("avx2", yt));
            }
            if has_avx512() {
                let mut yt = vec![0.0; out * m];
                // SAFETY: AVX-512F/VL, AVX2 and FMA are present (has_avx512).
                unsafe { avx512::rows_times_x(&w, inn, 0..out, &x, m, &mut yt, avx2::PREFETCH) };
                kernels.push(("avx512", yt));
            }
            for (name, yt) in kernels {
                for o in 0..out {
                    for i in 0..m {
                        let (g, r) = (yt[o * m + i], want[i * out + o]);
                        assert!(
                            (g - r).abs() <= 1e-4 * (1.0 + r.abs()),
                            "{name} {out}x{inn} m={m}: {g} vs {r}"
                        );
                    }
                }
            }
        }
    }
}

/// A row's result does not depend on how many rows share the step, on every kernel
/// (`matmul` runs one row on the AVX2 kernel, 2+ on the AVX-512 one where the CPU has it):
/// a tree node's projections are the ones plain decoding computes, bit for bit.
#[test]
fn a_row_is_bit_identical_alone_or_among_others() {
    type Kernel = fn(&[f32], usize, usize, &[f32], usize) -> Vec<f32>;
    let mut kernels: Vec<(&str, Kernel)> = vec![("portable", |w, out, inn, x, m| {
        let mut yt = vec![0.0; out * m];
        portable_rows_times_x(w, inn, 0..out, x, m, &mut yt);
        yt
    })];
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        kernels.push(("avx2", |w, out, inn, x, m| {
            let mut yt = vec![0.0; out * m];
            // SAFETY: AVX2 and FMA are present (checked above).
            unsafe { avx2::rows_times_x(w, inn, 0..out, x, m, &mut yt, avx2::PREFETCH) };
            yt
        }));
        if has_avx512() {
            kernels.push(("avx512", |w, out, inn, x, m| {
                let mut yt = vec![0.0; out * m];
                // SAFETY: AVX-512F/VL, AVX2 and FMA are present (has_avx512).
                unsafe { avx512::rows_times_x(w, inn, 0..out, x, m, &mut yt, avx2::PREFETCH) };
                yt
            }));
        }
    }
    for &(out, inn) in &[(33, 64), (257, 70), (130, 576), (64, 1536)] {
        let w = lcg(out * inn, inn as u64);
        for m in 1..=17 {
            let x = lcg(m * inn, (m + inn) as u64);
            // Each row alone through `matmul`'s one-row kernel.
            let alone: Vec<Vec<f32>> = (0..m)
                .map(|i| HostWeight::new(w.clone(), out, inn).matmul(&x[i * inn..][..inn], 1))
                .collect();
            for (name, kernel) in &kernels {
                let yt = kernel(&w, out, inn, &x, m); // [out, m]
                let portable_alone = |i: usize| kernel(&w, out, inn, &x[i * inn..][..inn], 1);
                for (i, want) in alone.iter().enumerate() {
                    // The portable kernel is compared with itself: it runs only where the
                    // x86 ones cannot, for one row and many alike.
                    let want = if *name == "portable" {
                        &portable_alone(i)
                    } else {
                        want
                    };
                    for o in 0..out {
                        assert_eq!(
                            yt[o * m + i].to_bits(),
                            want[o].to_bits(),
                            "{name} {out}x{inn}: row {i} of {m}, output {o} differs from the row alone"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_argmax_picks_what_matmul_would() {
    // Ties (a weight row repeated, within a block and across blocks), uneven blocks, every
    // row count up to 17 (two groups of eight and one), and a NaN row.
    for &(out, inn) in &[(5, 13), (300, 70), (49_152 / 16, 576)] {
        let mut w = lcg(out * inn, (out + inn) as u64);
        for (dst, src) in [(3, 1), (out - 1, 2), (out / 2, 2)] {
            let row = w[src * inn..(src + 1) * inn].to_vec();
            w[dst * inn..(dst + 1) * inn].copy_from_slice(&row);
        }
        let hw = HostWeight::new(w, out, inn);
        for m in 1..=17 {
            let mut x = lcg(m * inn, (m * 7 + out) as u64);
            if m == 3 {
                x[2 * inn + 5] = f32::NAN; // row 2: every value NaN
            }
            let y = hw.matmul(&x, m);
            let want: Vec<u32> = y
                .chunks(out)
                .map(|r| {
                    let first_nan = r.iter().position(|v| v.is_nan());
                    let max = r.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    first_nan.unwrap_or_else(|| r.iter().position(|&v| v == max).unwrap()) as u32
                })
                .collect();
            assert_eq!(hw.matmul_argmax(&x, m), want, "{out}x{inn} m={m}");
        }
    }
}
