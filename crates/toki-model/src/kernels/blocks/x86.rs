//! The x86 block decoder and the one-row kernel over blocks decoded in registers (AVX2,
//! FMA).

use super::{Q4, Q8};
use crate::kernels::avx2::hsum;
use std::arch::x86_64::*;

/// Bytes ahead of the block being decoded at which the blocks are prefetched.
const PREFETCH_BYTES: usize = 4096;

/// Ask for the line [`PREFETCH_BYTES`] past `blk` (a hint: no fault, whatever the
/// address).
#[inline(always)]
pub(super) fn prefetch_ahead<T>(blk: &T) {
    let p = (blk as *const T as *const i8).wrapping_add(PREFETCH_BYTES);
    // SAFETY: a prefetch is a hint and never faults; SSE is baseline on x86_64.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p) };
}

/// A block of 32 weights that decodes into four vectors of 8 (elements 0-7, 8-15, 16-23,
/// 24-31), with the GGUF decoder's arithmetic (a product, then a sum, each rounded).
pub(super) trait Block8 {
    /// # Safety
    /// The CPU must have AVX2.
    unsafe fn eighths(&self) -> [__m256; 4];
}

impl Block8 for Q4 {
    #[inline(always)]
    unsafe fn eighths(&self) -> [__m256; 4] {
        // SAFETY: the caller guarantees AVX2; `qs` holds 16 bytes.
        unsafe {
            let mask = _mm_set1_epi8(0x0f);
            let (d, m) = (_mm256_set1_ps(self.d), _mm256_set1_ps(self.m));
            let qs = _mm_loadu_si128(self.qs.as_ptr() as *const __m128i);
            let lo = _mm_and_si128(qs, mask);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(qs), mask);
            let w = |q: __m128i| {
                let f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q));
                _mm256_add_ps(_mm256_mul_ps(f, d), m)
            };
            [
                w(lo),
                w(_mm_srli_si128::<8>(lo)),
                w(hi),
                w(_mm_srli_si128::<8>(hi)),
            ]
        }
    }
}

impl Block8 for Q8 {
    #[inline(always)]
    unsafe fn eighths(&self) -> [__m256; 4] {
        // SAFETY: the caller guarantees AVX2; `qs` holds 32 bytes.
        unsafe {
            let d = _mm256_set1_ps(self.d);
            std::array::from_fn(|k| {
                let q = _mm_loadl_epi64(self.qs.as_ptr().add(8 * k) as *const __m128i);
                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d)
            })
        }
    }
}

/// Four rows of blocks times one activation row `x` (32 values a block): each block
/// decoded into registers ([`Block8`]) and summed in the order `kernels::avx2::dot4x1`
/// sums a decoded row (lanes k mod 16 in two accumulators, then across), so the result is
/// the scratch path's, bit for bit.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot4x1<B: Block8>(rows: [&[B]; 4], x: &[f32]) -> [f32; 4] {
    let nb = rows[0].len();
    assert!(rows.iter().all(|r| r.len() == nb) && x.len() == 32 * nb);
    let mut a = [_mm256_setzero_ps(); 8];
    for b in 0..nb {
        // SAFETY: x holds 32 values from 32·b (asserted above).
        let xv: [__m256; 4] =
            std::array::from_fn(|k| unsafe { _mm256_loadu_ps(x.as_ptr().add(32 * b + 8 * k)) });
        for (j, row) in rows.iter().enumerate() {
            let blk = &row[b];
            prefetch_ahead(blk);
            // SAFETY: AVX2 is enabled here.
            let w = unsafe { blk.eighths() };
            // Elements 0-7 and 16-23 go to the first accumulator, 8-15 and 24-31 to the
            // second: dot4x1's two steps of 16.
            for (k, (wk, xk)) in w.iter().zip(&xv).enumerate() {
                let acc = &mut a[2 * j + k % 2];
                *acc = _mm256_fmadd_ps(*wk, *xk, *acc);
            }
        }
    }
    // As dot4x1 adds them; its tail is empty here (whole blocks), and added too.
    let empty: f32 = std::iter::empty::<f32>().sum();
    std::array::from_fn(|j| hsum(_mm256_add_ps(a[2 * j], a[2 * j + 1])) + empty)
}

/// Blocks `b` into `out` (32 values each), as [`Block8::eighths`] decodes them: the
/// scratch path's rows.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn decode<B: Block8>(b: &[B], out: &mut [f32]) {
    assert!(out.len() >= 32 * b.len());
    for (blk, o) in b.iter().zip(out.chunks_exact_mut(32)) {
        prefetch_ahead(blk);
        // SAFETY: AVX2 is enabled here; `o` holds 32 floats.
        unsafe {
            for (k, v) in blk.eighths().iter().enumerate() {
                _mm256_storeu_ps(o.as_mut_ptr().add(8 * k), *v);
            }
        }
    }
}
