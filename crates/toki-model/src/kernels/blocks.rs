//! Lossless block storage for weights that are exactly the values of a block-quantized
//! format: a model converted from a Q4_1 or Q8_0 GGUF (the demo model) holds f32 weights
//! that are each `d·q + m` or `d·q` for a few constants per block of 32.
//!
//! One decoding step streams every weight once, and the f32 copy costs 4 bytes a weight:
//! the step is bound by memory. Where every block of a matrix reproduces its f32 values bit
//! for bit from (d, m, 4-bit q) or (d, 8-bit q), the host copy keeps those instead (24 or
//! 36 bytes per 32 weights, 0.75 or 1.125 a weight). Blocks decode with the GGUF decoder's
//! arithmetic (`gguf::dequantize`: a product, then a sum, each rounded; no fused
//! multiply-add), and the sums run in the f32 kernels' order, so every product is
//! bit-identical to the f32 copy's (tested): nothing is approximated. Three paths:
//! one activation row with AVX2+FMA, and 2+ rows with AVX-512, multiply blocks decoded in
//! registers ([`x86`], [`avx512`]); elsewhere four weight rows at a time are decoded into
//! an f32 scratch (in L1) for the f32 kernels.
//! Any block that does not round-trip leaves the whole matrix in f32.

/// 32 weights `x = d·q + m`, q in 0..16: elements 0..16 in the low nibbles of `qs`,
/// 16..32 in the high ones (GGUF's Q4_1 order).
#[derive(Clone, Copy, Debug)]
pub(super) struct Q4 {
    d: f32,
    m: f32,
    qs: [u8; 16],
}

/// 32 weights `x = d·q`, q in -128..128 (GGUF's Q8_0).
#[derive(Clone, Copy, Debug)]
pub(super) struct Q8 {
    d: f32,
    qs: [i8; 32],
}

/// The f16 values nearest `v` and one step either side: the candidates for a block's
/// scale, which the GGUF file stored as f16.
fn f16_near(v: f32) -> [f32; 3] {
    let h = half::f16::from_f32(v);
    let bits = h.to_bits();
    [
        h.to_f32(),
        half::f16::from_bits(bits.wrapping_add(1)).to_f32(),
        half::f16::from_bits(bits.wrapping_sub(1)).to_f32(),
    ]
}

impl Q4 {
    /// The block of `v` (32 values), if some (d, m, q) gives every value back exactly.
    fn encode(v: &[f32]) -> Option<Self> {
        // The quantizer maps the block's minimum to q = 0 (x = m exactly) and its maximum
        // to q = 15 (or less, where it fits the scale otherwise): d is (max - m) / k.
        let m = v.iter().copied().fold(f32::INFINITY, f32::min);
        let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        if !m.is_finite() || !max.is_finite() {
            return None;
        }
        let scales = (1..=15).rev().flat_map(|k| f16_near((max - m) / k as f32));
        scales.into_iter().find_map(|d| {
            let mut q = [0u8; 32];
            for (qi, &x) in q.iter_mut().zip(v) {
                let k = if d == 0.0 { 0.0 } else { ((x - m) / d).round() };
                if !(0.0..=15.0).contains(&k) || (d * k + m).to_bits() != x.to_bits() {
                    return None;
                }
                *qi = k as u8;
            }
            let qs = std::array::from_fn(|j| q[j] | (q[j + 16] << 4));
            Some(Self { d, m, qs })
        })
    }

    /// The 32 values, as the GGUF decoder computes them (the portable path).
    fn decode(&self, out: &mut [f32]) {
        for (j, &b) in self.qs.iter().enumerate() {
            out[j] = self.d * (b & 0x0f) as f32 + self.m;
            out[j + 16] = self.d * (b >> 4) as f32 + self.m;
        }
    }
}

impl Q8 {
    /// The block of `v` (32 values), if some (d, q) gives every value back exactly.
    fn encode(v: &[f32]) -> Option<Self> {
        // The quantizer maps the largest magnitude to |q| = 127 (or less; -128 fits too):
        // d is amax / k.
        let amax = v.iter().fold(0.0f32, |a, x| a.max(x.abs()));
        if !amax.is_finite() {
            return None;
        }
        let scales = (1..=128).rev().flat_map(|k| f16_near(amax / k as f32));
        scales.into_iter().find_map(|d| {
            let mut qs = [0i8; 32];
            for (qi, &x) in qs.iter_mut().zip(v) {
                let k = if d == 0.0 { 0.0 } else { (x / d).round() };
                if !(-128.0..=127.0).contains(&k) || (d * k).to_bits() != x.to_bits() {
                    return None;
                }
                *qi = k as i8;
            }
            Some(Self { d, qs })
        })
    }

    /// The block nearest `v` (32 values) in GGUF's Q8_0 form: the scale `d = amax / 127`
    /// rounded to f16 (as the file would store it), each `q = round(x / d)` against that
    /// stored scale. Lossy (each value within `d / 2`), for weights that only propose;
    /// `None` where a value is not finite or the scale does not fit f16.
    fn round(v: &[f32]) -> Option<Self> {
        // (`f32::max` passes over a NaN: check every value.)
        if !v.iter().all(|x| x.is_finite()) {
            return None;
        }
        let amax = v.iter().fold(0.0f32, |a, x| a.max(x.abs()));
        let d = half::f16::from_f32(amax / 127.0).to_f32();
        if d.is_infinite() {
            return None; // beyond f16's range
        }
        let qs = std::array::from_fn(|j| match d {
            0.0 => 0,
            _ => (v[j] / d).round().clamp(-128.0, 127.0) as i8,
        });
        Some(Self { d, qs })
    }

    /// The 32 values (the portable path).
    fn decode(&self, out: &mut [f32]) {
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = self.d * q as f32;
        }
    }
}

/// Blocks of one kind, row-major: row `o` is blocks `o·inn/32 .. (o+1)·inn/32`.
#[derive(Clone, Debug)]
pub(super) enum Blocks {
    Q4(std::sync::Arc<[Q4]>),
    Q8(std::sync::Arc<[Q8]>),
}

impl Blocks {
    /// `w` [rows, inn] as Q4 blocks if every block round-trips, else as Q8 blocks if every
    /// one does; `None` otherwise, or when rows are not whole blocks.
    pub(super) fn encode(w: &[f32], inn: usize) -> Option<Self> {
        use rayon::prelude::*;
        if inn == 0 || !inn.is_multiple_of(32) || w.is_empty() {
            return None;
        }
        let q4: Option<Vec<Q4>> = w.par_chunks(32).map(Q4::encode).collect();
        if let Some(b) = q4 {
            return Some(Self::Q4(b.into()));
        }
        let q8: Option<Vec<Q8>> = w.par_chunks(32).map(Q8::encode).collect();
        q8.map(|b| Self::Q8(b.into()))
    }

    /// `w` [rows, inn] rounded to the nearest Q8 blocks ([`Q8::round`]): lossy, for
    /// weights that only propose. `None` when rows are not whole blocks or a value is not
    /// finite.
    pub(super) fn round_q8(w: &[f32], inn: usize) -> Option<Self> {
        use rayon::prelude::*;
        if inn == 0 || !inn.is_multiple_of(32) || w.is_empty() {
            return None;
        }
        let q8: Option<Vec<Q8>> = w.par_chunks(32).map(Q8::round).collect();
        q8.map(|b| Self::Q8(b.into()))
    }

    /// Bytes per weight.
    pub(super) fn bytes_per_weight(&self) -> f64 {
        match self {
            Self::Q4(_) => std::mem::size_of::<Q4>() as f64 / 32.0,
            Self::Q8(_) => std::mem::size_of::<Q8>() as f64 / 32.0,
        }
    }

    /// Row `o` (`inn` values) into `out`.
    fn decode_row(&self, o: usize, inn: usize, out: &mut [f32]) {
        let per_row = inn / 32;
        let range = o * per_row..(o + 1) * per_row;
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present (checked just above); `out` holds the row's values.
            match self {
                Self::Q4(b) => unsafe { x86::decode(&b[range], out) },
                Self::Q8(b) => unsafe { x86::decode(&b[range], out) },
            }
            return;
        }
        let chunks = out.chunks_exact_mut(32);
        match self {
            Self::Q4(b) => b[range].iter().zip(chunks).for_each(|(b, o)| b.decode(o)),
            Self::Q8(b) => b[range].iter().zip(chunks).for_each(|(b, o)| b.decode(o)),
        }
    }

    /// `yt[(o - rows.start) * m + i] = W[o] · x[i]`: blocks decoded in registers where the
    /// CPU allows (AVX-512: any row count; else AVX2 and FMA: one row), else four rows at
    /// a time decoded into a scratch for the f32 kernels. The same sums either way.
    pub(super) fn rows_times_x(
        &self,
        inn: usize,
        rows: std::ops::Range<usize>,
        x: &[f32],
        m: usize,
        yt: &mut [f32],
    ) {
        // AVX-512 for any row count where the CPU has it (it decodes Q4 blocks with a
        // table lookup, `avx512.rs`); the AVX2 kernel sums a row in the same order.
        #[cfg(target_arch = "x86_64")]
        if super::has_avx512() {
            self.avx512_rows(inn, rows, x, m, yt);
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if m == 1
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
        {
            self.one_row_avx2(inn, rows, x, yt);
            return;
        }
        thread_local! {
            /// Each thread's scratch, kept between calls (a step makes hundreds of them).
            static SCRATCH: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.resize(4 * inn, 0.0); // [4, inn]
            self.via_scratch(scratch, inn, rows, x, m, yt);
        });
    }

    /// [`Blocks::rows_times_x`] through `scratch` [4, inn].
    fn via_scratch(
        &self,
        scratch: &mut [f32],
        inn: usize,
        rows: std::ops::Range<usize>,
        x: &[f32],
        m: usize,
        yt: &mut [f32],
    ) {
        let mut o = rows.start;
        while o < rows.end {
            let n = (rows.end - o).min(4);
            for (j, row) in scratch.chunks_exact_mut(inn).take(n).enumerate() {
                self.decode_row(o + j, inn, row);
            }
            let base = (o - rows.start) * m;
            super::rows_times_x(
                &scratch[..n * inn],
                inn,
                0..n,
                x,
                m,
                &mut yt[base..base + n * m],
                super::Source::Cache,
            );
            o += n;
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Blocks {
    /// One activation row (a plain decoding step) on a CPU with AVX2 but not AVX-512: four
    /// weight rows at a time, each block decoded in registers and multiplied in at once
    /// ([`x86::dot4x1`]), with no scratch to write and read back. The same values and the
    /// same sums as the scratch path, bit for bit (tested). Needs AVX2 and FMA.
    fn one_row_avx2(&self, inn: usize, rows: std::ops::Range<usize>, x: &[f32], yt: &mut [f32]) {
        let per_row = inn / 32;
        let mut o = rows.start;
        while o < rows.end {
            let n = (rows.end - o).min(4);
            let r = |j: usize| padded_row(o, n, j, per_row);
            // SAFETY: AVX2 and FMA are present (the caller checked); `x` holds `inn` values
            // and every row `per_row` blocks of 32.
            let s = match self {
                Self::Q4(b) => unsafe { x86::dot4x1(std::array::from_fn(|j| &b[r(j)]), x) },
                Self::Q8(b) => unsafe { x86::dot4x1(std::array::from_fn(|j| &b[r(j)]), x) },
            };
            yt[o - rows.start..][..n].copy_from_slice(&s[..n]);
            o += n;
        }
    }

    /// Any number of activation rows on AVX-512: blocks of four weight rows, each block
    /// decoded once in registers for a group of up to eight activation rows
    /// ([`avx512::dot`]: the four weight rows at once for 1-4 activation rows, two at a
    /// time for 5-8). The scratch path's sums, bit for bit (tested). Needs AVX-512F/VL,
    /// AVX2 and FMA.
    fn avx512_rows(
        &self,
        inn: usize,
        rows: std::ops::Range<usize>,
        x: &[f32],
        m: usize,
        yt: &mut [f32],
    ) {
        let per_row = inn / 32;
        let xrow = |i: usize| &x[i * inn..(i + 1) * inn];
        let mut o = rows.start;
        while o < rows.end {
            let n = (rows.end - o).min(4);
            let r = |j: usize| padded_row(o, n, j, per_row);
            let base = (o - rows.start) * m;
            for i0 in (0..m).step_by(8) {
                let g = (m - i0).min(8);
                // Weight rows `first..first + R` of the block times x rows i0..i0 + G.
                macro_rules! run {
                    ($b:expr, $r:literal, $g:literal, $first:expr) => {{
                        let w: [_; $r] = std::array::from_fn(|j| &$b[r($first + j)]);
                        let xr: [&[f32]; $g] = std::array::from_fn(|j| xrow(i0 + j));
                        // SAFETY: AVX-512F/VL, AVX2 and FMA are present (the caller
                        // checked `has_avx512`); rows are whole blocks, x rows `inn` values.
                        let s = unsafe { avx512::dot::<_, $r, $g>(w, xr) };
                        for (j, sj) in s.iter().enumerate().take(n.saturating_sub($first)) {
                            yt[base + ($first + j) * m + i0..][..$g].copy_from_slice(sj);
                        }
                    }};
                }
                macro_rules! kinds {
                    (4, $g:literal) => {
                        match self {
                            Self::Q4(b) => run!(b, 4, $g, 0),
                            Self::Q8(b) => run!(b, 4, $g, 0),
                        }
                    };
                    (2, $g:literal) => {
                        for first in [0, 2] {
                            match self {
                                Self::Q4(b) => run!(b, 2, $g, first),
                                Self::Q8(b) => run!(b, 2, $g, first),
                            }
                        }
                    };
                }
                match g {
                    1 => kinds!(4, 1),
                    2 => kinds!(4, 2),
                    3 => kinds!(4, 3),
                    4 => kinds!(4, 4),
                    5 => kinds!(2, 5),
                    6 => kinds!(2, 6),
                    7 => kinds!(2, 7),
                    _ => kinds!(2, 8),
                }
            }
            o += n;
        }
    }
}

/// The blocks of row `o + j` of a group of `n` rows from `o`, each of `per_row` blocks;
/// the group's last row stands in for `j >= n` (a short group's results are discarded).
#[cfg(target_arch = "x86_64")]
fn padded_row(o: usize, n: usize, j: usize, per_row: usize) -> std::ops::Range<usize> {
    let r = o + j.min(n - 1);
    r * per_row..(r + 1) * per_row
}

#[cfg(target_arch = "x86_64")]
pub(super) mod argmax;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
mod tests {
    use super::super::HostWeight;
    use crate::gguf::{GgmlType, dequantize};
    use crate::testing::lcg;

    /// Random GGUF blocks of `kind` for [out, inn] weights, decoded by the GGUF reader:
    /// what a converted model's safetensors hold.
    fn gguf_weights(kind: GgmlType, out: usize, inn: usize, seed: u64) -> Vec<f32> {
        let (bytes, scales) = match kind {
            GgmlType::Q4_1 => (20, 2),
            GgmlType::Q8_0 => (34, 1),
            _ => unreachable!(),
        };
        let n = out * inn;
        let noise = lcg(n / 32 * bytes, seed);
        let mut raw = Vec::with_capacity(n / 32 * bytes);
        for blk in noise.chunks(bytes) {
            for s in 0..scales {
                // d in (0, 0.01], m in [-0.02, 0.02]: f16, as GGUF stores them.
                let v = if s == 0 {
                    (blk[0] + 0.5) * 0.01
                } else {
                    blk[1] * 0.04
                };
                raw.extend(half::f16::from_f32(v).to_le_bytes());
            }
            let quants = &blk[scales..bytes - scales]; // 16 or 32 bytes
            let start = raw.len();
            raw.extend(quants.iter().map(|&u| ((u + 0.5) * 255.99) as u8));
            if kind == GgmlType::Q4_1 {
                raw[start] &= 0xf0; // a q = 0, at the block's minimum, as quantizers make
            }
        }
        dequantize(kind, &raw, n)
    }

    fn bit_identical(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    #[test]
    fn converted_q4_1_and_q8_0_weights_are_kept_as_blocks_with_identical_products() {
        for (kind, bytes) in [(GgmlType::Q4_1, 0.75), (GgmlType::Q8_0, 1.125)] {
            for &(out, inn) in &[(1, 32), (7, 64), (257, 576), (130, 1536)] {
                let w = gguf_weights(kind, out, inn, (out + inn) as u64);
                let blocks = HostWeight::compact(w.clone(), out, inn);
                assert_eq!(blocks.bytes_per_weight(), bytes, "{kind:?} {out}x{inn}");
                let plain = HostWeight::new(w, out, inn);
                for m in 1..=17 {
                    let x = lcg(m * inn, (m * 5 + inn) as u64);
                    assert!(
                        bit_identical(&blocks.matmul(&x, m), &plain.matmul(&x, m)),
                        "{kind:?} {out}x{inn} m={m}: products differ from the f32 copy's"
                    );
                    assert_eq!(blocks.matmul_argmax(&x, m), plain.matmul_argmax(&x, m));
                }
            }
        }
    }

    #[test]
    fn weights_that_are_not_exact_blocks_stay_f32() {
        // Arbitrary f32 values; rows that are not whole blocks; one value off by one ulp in
        // an otherwise exact matrix; a NaN.
        let cases: Vec<(Vec<f32>, usize, usize)> = vec![
            (lcg(4 * 64, 1), 4, 64),
            (
                gguf_weights(GgmlType::Q4_1, 3, 64, 2)[..3 * 48].to_vec(),
                3,
                48,
            ),
            (
                {
                    let mut w = gguf_weights(GgmlType::Q4_1, 5, 64, 3);
                    w[77] = f32::from_bits(w[77].to_bits() + 1);
                    w
                },
                5,
                64,
            ),
            (
                {
                    let mut w = gguf_weights(GgmlType::Q8_0, 2, 32, 4);
                    w[3] = f32::NAN;
                    w
                },
                2,
                32,
            ),
        ];
        for (i, (w, out, inn)) in cases.into_iter().enumerate() {
            let hw = HostWeight::compact(w, out, inn);
            assert_eq!(hw.bytes_per_weight(), 4.0, "case {i}");
        }
    }

    #[test]
    fn rounded_q8_blocks_keep_every_weight_within_half_a_step() {
        use super::super::HostPrecision;
        use super::Blocks;
        let (out, inn) = (9, 96);
        // Arbitrary f32 values, a block of zeros, and one with a large outlier.
        let mut w: Vec<f32> = lcg(out * inn, 21).iter().map(|v| v * 0.2).collect();
        w[32..64].fill(0.0);
        w[100] = 7.5;
        let hw = HostWeight::with_precision(w.clone(), out, inn, HostPrecision::Q8);
        assert_eq!(hw.precision(), HostPrecision::Q8);
        assert_eq!(hw.bytes_per_weight(), 1.125);
        let Some(ref b @ Blocks::Q8(ref q)) = Blocks::round_q8(&w, inn) else {
            panic!("finite whole blocks must round");
        };
        let mut row = vec![0.0; inn];
        for o in 0..out {
            b.decode_row(o, inn, &mut row);
            for (j, (&got, &want)) in row.iter().zip(&w[o * inn..]).enumerate() {
                let d = q[(o * inn + j) / 32].d;
                assert!((got - want).abs() <= d / 2.0 * 1.001, "row {o} col {j}");
            }
        }
        assert_eq!(q[1].d, 0.0, "a block of zeros");
        assert!(q[1].qs.iter().all(|&v| v == 0));
        // Products: each within the weights' rounding of the f32 copy's.
        let plain = HostWeight::new(w.clone(), out, inn);
        for m in [1, 3, 8] {
            let x = lcg(m * inn, m as u64);
            let (a, r) = (plain.matmul(&x, m), hw.matmul(&x, m));
            for (i, (a, r)) in a.iter().zip(&r).enumerate() {
                let bound: f32 = (0..inn)
                    .map(|j| x[(i / out) * inn + j].abs() * q[((i % out) * inn + j) / 32].d)
                    .sum::<f32>()
                    / 2.0;
                assert!((a - r).abs() <= bound * 1.01 + 1e-6, "m={m} out {i}");
            }
        }
        // Exact blocks stay exact; what cannot round stays f32.
        let exact = gguf_weights(GgmlType::Q8_0, 4, 64, 5);
        let hw = HostWeight::with_precision(exact, 4, 64, HostPrecision::Q8);
        assert_eq!(hw.precision(), HostPrecision::F32);
        assert_eq!(hw.bytes_per_weight(), 1.125);
        let mut nan = lcg(2 * 32, 6);
        nan[5] = f32::NAN;
        for (w, out, inn) in [(nan, 2, 32), (lcg(3 * 48, 7), 3, 48)] {
            let hw = HostWeight::with_precision(w, out, inn, HostPrecision::Q8);
            assert_eq!(hw.bytes_per_weight(), 4.0);
        }
    }

    #[test]
    fn block_decoding_matches_the_gguf_reader_bit_for_bit() {
        // The decoder this CPU runs (AVX2 on x86) and the portable one, against the
        // reader's own values.
        use super::Blocks;
        for kind in [GgmlType::Q4_1, GgmlType::Q8_0] {
            let w = gguf_weights(kind, 16, 128, 9);
            let b = Blocks::encode(&w, 128).unwrap();
            let mut row = vec![0.0; 128];
            for o in 0..16 {
                let want = &w[o * 128..(o + 1) * 128];
                b.decode_row(o, 128, &mut row);
                assert!(bit_identical(&row, want), "{kind:?} row {o}");
                row.fill(f32::NAN);
                let chunks = row.chunks_exact_mut(32);
                match &b {
                    Blocks::Q4(q) => q[o * 4..][..4]
                        .iter()
                        .zip(chunks)
                        .for_each(|(q, r)| q.decode(r)),
                    Blocks::Q8(q) => q[o * 4..][..4]
                        .iter()
                        .zip(chunks)
                        .for_each(|(q, r)| q.decode(r)),
                }
                assert!(bit_identical(&row, want), "{kind:?} row {o}, portable");
            }
        }
    }
}
