//! AVX-512 loops of [`super::Rows`]: up to [`ROWS`] query rows (the heads of a kv group
//! times the new tokens) meet each key or value vector once it is loaded, so a step that
//! attends more rows loads the cache no more often (the AVX2 loops load it once per row).
//!
//! Each lane's sum is the chain of fused multiply-adds that `super::x86::weighted_sum`
//! and `super::axpy` compute, in the same order, from the same zero: a row's result is the
//! same bits whichever loop computes it and however many rows share the call (tested in
//! `super::tests`).

use std::arch::x86_64::*;

/// Rows held in registers at once: 4 accumulators of 16 lanes each (64 keys or 64 value
/// columns), 24 of the 32 registers, 4 more for the loaded vectors.
pub(super) const ROWS: usize = 6;

/// Calls `f::<R>` for `R = rows.len()` rows, `1 <= R <= ROWS`.
macro_rules! by_rows {
    ($n:expr, $f:ident, $($arg:expr),*) => {
        match $n {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            4 => $f::<4>($($arg),*),
            5 => $f::<5>($($arg),*),
            _ => $f::<6>($($arg),*),
        }
    };
}

/// Scores of a block of 64 keys for R query rows:
/// `p[r * s + j0 + l] = scale · Σ_c q[r * hd + c] · keys[c * capacity + j0 + l]`, l < 64.
/// `q` [R, hd]; `keys` [hd, capacity] (transposed); `p` [R, s].
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn scores(
    q: &[f32],
    hd: usize,
    keys: &[f32],
    capacity: usize,
    j0: usize,
    scale: f32,
    p: &mut [f32],
    s: usize,
) {
    let rows = q.len() / hd;
    assert!(
        (1..=ROWS).contains(&rows) && j0 + 64 <= s && s <= capacity && p.len() >= rows * s,
        "a block of scores out of bounds"
    );
    assert!(hd > 0 && keys.len() >= (hd - 1) * capacity + j0 + 64);
    // SAFETY: the bounds are asserted above; AVX-512F is enabled for this function.
    unsafe { by_rows!(rows, scores_r, q, hd, keys, capacity, j0, scale, p, s) }
}

#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn scores_r<const R: usize>(
    q: &[f32],
    hd: usize,
    keys: &[f32],
    capacity: usize,
    j0: usize,
    scale: f32,
    p: &mut [f32],
    s: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    // SAFETY: q holds R rows of hd floats and row c < hd of the keys j0 + 64 <= capacity
    // (asserted by `scores`).
    unsafe { weighted_rows(q, hd, keys, capacity, j0, hd, &mut acc) };
    let sc = _mm512_set1_ps(scale);
    for (r, a) in acc.iter().enumerate() {
        for (l, v) in a.iter().enumerate() {
            // SAFETY: row r of p holds s >= j0 + 64 floats (asserted by `scores`).
            unsafe {
                _mm512_storeu_ps(
                    p.as_mut_ptr().add(r * s + j0 + 16 * l),
                    _mm512_mul_ps(*v, sc),
                )
            };
        }
    }
}

/// `acc[r][lane] += Σ_i w[r * w_stride + i] · rows[i * stride + at + lane]` for i < n, in
/// order of i, one fused multiply-add each: each loaded 64-float row meets all R rows.
/// Scores: w = queries (i = component), rows = transposed keys. Values: w = probabilities
/// (i = key), rows = values.
///
/// # Safety
/// `w` must hold R rows of `w_stride >= n` floats and `rows` n rows from `at` of 64 floats
/// `stride` apart; the CPU must have AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn weighted_rows<const R: usize>(
    w: &[f32],
    w_stride: usize,
    rows: &[f32],
    stride: usize,
    at: usize,
    n: usize,
    acc: &mut [[__m512; 4]; R],
) {
    for i in 0..n {
        // SAFETY: row i holds 64 floats from `at` (the caller's guarantee).
        let v: [__m512; 4] = std::array::from_fn(|l| unsafe {
            _mm512_loadu_ps(rows.as_ptr().add(i * stride + at + 16 * l))
        });
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: w holds R rows of w_stride > i floats (the caller's guarantee).
            let b = _mm512_set1_ps(unsafe { *w.as_ptr().add(r * w_stride + i) });
            for l in 0..4 {
                a[l] = _mm512_fmadd_ps(b, v[l], a[l]);
            }
        }
    }
}

/// Value columns `c0..c0 + 64` of R rows over all s keys, added in order onto `out`'s:
/// `out[r * hd + c0 + l] += Σ_j p[r * s + j] · values[j * hd + c0 + l]`, l < 64.
/// `p` [R, s] (probabilities); `values` [s, hd]; `out` [R, hd].
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn values(
    p: &[f32],
    s: usize,
    values: &[f32],
    hd: usize,
    c0: usize,
    out: &mut [f32],
) {
    let rows = out.len() / hd;
    assert!(
        (1..=ROWS).contains(&rows) && p.len() >= rows * s && c0 + 64 <= hd,
        "a block of values out of bounds"
    );
    assert!(values.len() >= s * hd);
    // SAFETY: the bounds are asserted above; AVX-512F is enabled for this function.
    unsafe { by_rows!(rows, values_r, p, s, values, hd, c0, out) }
}

#[target_feature(enable = "avx512f")]
unsafe fn values_r<const R: usize>(
    p: &[f32],
    s: usize,
    values: &[f32],
    hd: usize,
    c0: usize,
    out: &mut [f32],
) {
    // SAFETY (all loads and stores below): row r of `out` holds hd >= c0 + 64 floats and
    // value row j < s holds hd (asserted by `values`).
    let mut acc: [[__m512; 4]; R] = std::array::from_fn(|r| {
        std::array::from_fn(|l| unsafe { _mm512_loadu_ps(out.as_ptr().add(r * hd + c0 + 16 * l)) })
    });
    // SAFETY: p holds R rows of s floats (asserted by `values`).
    unsafe { weighted_rows(p, s, values, hd, c0, s, &mut acc) };
    for (r, a) in acc.iter().enumerate() {
        for (l, v) in a.iter().enumerate() {
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(r * hd + c0 + 16 * l), *v) };
        }
    }
}

/// Softmax of R rows of scores in place, `p` [R, s], after adding `bias` row `(first + r)
/// % t` ([T, s]) to row r: the same operations as the portable loop of `super::Rows::run`
/// (the exponential is [`exp16`], `kernels::math::exp` on 16 lanes; each row's sum runs in
/// key order, the rows' sums side by side), so the same bits.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn softmax(p: &mut [f32], s: usize, bias: Option<(&[f32], usize, usize)>) {
    let rows = p.len() / s;
    assert!(
        (1..=ROWS).contains(&rows) && p.len() == rows * s,
        "softmax rows out of bounds"
    );
    let mut sums = [0.0f32; ROWS];
    for (r, row) in p.chunks_exact_mut(s).enumerate() {
        if let Some((b, first, t)) = bias {
            let i = (first + r) % t;
            row.iter_mut()
                .zip(&b[i * s..(i + 1) * s])
                .for_each(|(x, b)| *x += b);
        }
        // The maximum is exact in any order.
        let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
        let whole = s / 16 * 16;
        for j in (0..whole).step_by(16) {
            // SAFETY: j + 16 <= s floats of the row.
            m = _mm512_max_ps(unsafe { _mm512_loadu_ps(row.as_ptr().add(j)) }, m);
        }
        let max = row[whole..]
            .iter()
            .fold(_mm512_reduce_max_ps(m), |a, &x| x.max(a));
        let mx = _mm512_set1_ps(max);
        for j in (0..whole).step_by(16) {
            // SAFETY: as above.
            unsafe {
                let x = _mm512_sub_ps(_mm512_loadu_ps(row.as_ptr().add(j)), mx);
                _mm512_storeu_ps(row.as_mut_ptr().add(j), exp16(x));
            }
        }
        row[whole..]
            .iter_mut()
            .for_each(|x| *x = crate::kernels::math::exp(*x - max));
    }
    // Each row's sum in key order (as `Iterator::sum`), the rows' chains interleaved.
    for j in 0..s {
        for (r, sum) in sums.iter_mut().enumerate().take(rows) {
            *sum += p[r * s + j];
        }
    }
    for (row, sum) in p.chunks_exact_mut(s).zip(sums) {
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|x| *x *= inv);
    }
}

/// `kernels::math::exp` on 16 lanes, operation for operation (no fused multiply-adds), so
/// each lane is the same bits as the scalar function.
#[target_feature(enable = "avx512f")]
fn exp16(x: __m512) -> __m512 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let c = |v: f32| _mm512_set1_ps(v);
    let (add, mul) = (_mm512_add_ps, _mm512_mul_ps);
    // `x.max(-87.0)`: a NaN lane takes -87 in both.
    let xc = _mm512_max_ps(x, c(-87.0));
    let big = c(12_582_912.0);
    let n = _mm512_sub_ps(add(mul(xc, c(std::f32::consts::LOG2_E)), big), big);
    let r = _mm512_sub_ps(_mm512_sub_ps(xc, mul(n, c(LN2_HI))), mul(n, c(LN2_LO)));
    let mut t = _mm512_div_ps(r, c(720.0));
    for k in [1.0f32 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0] {
        t = mul(r, add(c(k), t));
    }
    let p = add(c(1.0), t);
    let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(
        _mm512_cvttps_epi32(n),
        _mm512_set1_epi32(127),
    ));
    let y = mul(p, _mm512_castsi512_ps(bits));
    // `x < -87` (false for NaN) gives 0.
    let under = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, c(-87.0));
    _mm512_mask_blend_ps(under, y, _mm512_setzero_ps())
}
