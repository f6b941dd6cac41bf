//! Blocks times 1-8 activation rows on AVX-512 (a decoding or verification step): each
//! block of a weight row is decoded once into two 16-value vectors (the decoders'
//! arithmetic: a product, then a sum, each rounded; Q4 blocks by a table lookup) and
//! multiplied into every activation row's sums, with no scratch to write and read back.
//! The sums run in the order of the f32 AVX-512 kernel (`kernels::avx512`): lanes k mod
//! 16 in order, then lanes 0-7 plus 8-15, then across; so the products are the scratch
//! path's, bit for bit (tested), and a row's product does not depend on how many rows
//! share the step.

use super::x86::prefetch_ahead;
use super::{Q4, Q8};
use crate::kernels::avx2::hsum;
use std::arch::x86_64::*;

/// A block of 32 weights that decodes into two vectors of 16 (elements 0-15, 16-31).
pub(super) trait Block {
    /// # Safety
    /// The CPU must have AVX-512F.
    unsafe fn halves(&self) -> [__m512; 2];
}

impl Block for Q4 {
    /// The block's 16 values `d·q + m` (q = 0..15, the decoder's arithmetic) in one
    /// register, then each weight's looked up by its nibble: byte i of `qs` holds weights
    /// i (low nibble) and i + 16 (high), and the lookup reads an index's low 4 bits only.
    #[inline(always)]
    unsafe fn halves(&self) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F (and so SSE2); `qs` holds 16 bytes.
        unsafe {
            let q = _mm_loadu_si128(self.qs.as_ptr() as *const __m128i);
            let iota = _mm512_setr_ps(
                0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0,
                15.0,
            );
            let (d, m) = (_mm512_set1_ps(self.d), _mm512_set1_ps(self.m));
            let table = _mm512_add_ps(_mm512_mul_ps(iota, d), m);
            let bytes = _mm512_cvtepu8_epi32(q);
            [
                _mm512_permutexvar_ps(bytes, table),
                _mm512_permutexvar_ps(_mm512_srli_epi32::<4>(bytes), table),
            ]
        }
    }
}

impl Block for Q8 {
    #[inline(always)]
    unsafe fn halves(&self) -> [__m512; 2] {
        // SAFETY: the caller guarantees AVX-512F; `qs` holds 32 bytes.
        unsafe {
            let d = _mm512_set1_ps(self.d);
            let w = |at: usize| {
                let q = _mm_loadu_si128(self.qs.as_ptr().add(at) as *const __m128i);
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d)
            };
            [w(0), w(16)]
        }
    }
}

/// `R` weight rows of blocks times `M` activation rows of `32 · blocks` values:
/// `R·M` accumulators of 16 lanes.
///
/// # Safety
/// The CPU must have AVX-512F/VL, AVX2 and FMA.
// Block and row indices address several arrays at once.
#[allow(clippy::needless_range_loop)]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
pub(super) unsafe fn dot<B: Block, const R: usize, const M: usize>(
    w: [&[B]; R],
    x: [&[f32]; M],
) -> [[f32; M]; R] {
    let nb = w[0].len();
    assert!(w.iter().all(|r| r.len() == nb) && x.iter().all(|r| r.len() == 32 * nb));
    let mut a = [[_mm512_setzero_ps(); M]; R];
    for b in 0..nb {
        let wv: [[__m512; 2]; R] = std::array::from_fn(|r| {
            prefetch_ahead(&w[r][b]);
            // SAFETY: AVX-512F is enabled here.
            unsafe { w[r][b].halves() }
        });
        for h in 0..2 {
            // SAFETY: every x row holds 32 values from 32·b (asserted above).
            let xv: [__m512; M] = std::array::from_fn(|j| unsafe {
                _mm512_loadu_ps(x[j].as_ptr().add(32 * b + 16 * h))
            });
            for r in 0..R {
                for j in 0..M {
                    a[r][j] = _mm512_fmadd_ps(wv[r][h], xv[j], a[r][j]);
                }
            }
        }
    }
    // As the f32 kernel adds them; its tail is empty here (whole blocks), and added too.
    let empty: f32 = std::iter::empty::<f32>().sum();
    // Plain loops, not closures: a closure the compiler does not inline would take the
    // accumulators' address, and the loop above would store them at every block.
    let mut out = [[0.0f32; M]; R];
    for r in 0..R {
        for j in 0..M {
            let lo = _mm512_castps512_ps256(a[r][j]);
            let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(a[r][j])));
            out[r][j] = hsum(_mm256_add_ps(lo, hi)) + empty;
        }
    }
    out
}
