//! Elementwise math for the host paths: the exponential of softmax and SiLU(gate)·up.

/// e^x for x <= 0 (softmax after subtracting the row's maximum), branch-free so that loops
/// over it vectorise: x = n ln 2 + r, |r| <= ln 2 / 2, e^r by its degree-6 Taylor polynomial
/// (relative error under 3e-7), 2^n from the exponent bits. Below -87, 0 (as e^-inf is).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let xc = x.max(-87.0);
    // Round to nearest by the 1.5 * 2^23 trick (no SSE4.1 round needed).
    let n = (xc * std::f32::consts::LOG2_E + 12_582_912.0) - 12_582_912.0;
    let r = xc - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r / 720.0)))));
    let two_n = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if x < -87.0 { 0.0 } else { p * two_n }
}

/// `silu(gate[i]) · up[i]` (SiLU: x·σ(x)), the MLP's gate of the few rows of a step on
/// the host: one pass instead of Burn's SiLU (a libm `expf` per value) and product. σ is
/// taken from e^(−|x|) so that the exponential ([`exp`], relative error
/// under 3e-7, vectorised) never sees a positive argument.
pub fn silu_times(gate: &[f32], up: &[f32]) -> Vec<f32> {
    assert_eq!(gate.len(), up.len(), "gate and up differ in length");
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2 (checked just above); the code is safe Rust.
        return unsafe { silu_times_avx2(gate, up) };
    }
    silu_times_in(gate, up)
}

/// [`silu_times`] compiled for AVX2 (the same operations: no contraction into FMAs).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn silu_times_avx2(gate: &[f32], up: &[f32]) -> Vec<f32> {
    silu_times_in(gate, up)
}

#[inline(always)]
fn silu_times_in(gate: &[f32], up: &[f32]) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&x, &u)| {
            let e = exp(-x.abs());
            let sigmoid = if x >= 0.0 {
                1.0 / (1.0 + e)
            } else {
                e / (1.0 + e)
            };
            x * sigmoid * u
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_within_a_few_ulps() {
        for i in 0..=20_000 {
            let x = -(i as f32) * 0.005; // 0 .. -100
            let (got, want) = (exp(x), f64::from(x).exp());
            if x < -87.0 {
                assert_eq!(got, 0.0);
            } else {
                let rel = ((f64::from(got) - want) / want).abs();
                assert!(rel < 1e-6, "exp({x}) = {got}, want {want}");
            }
        }
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn silu_times_is_the_formula() {
        // Both signs, large magnitudes (e^(-|x|) underflows), zero, and NaN.
        let mut gate: Vec<f32> = (-2000..=2000).map(|i| i as f32 * 0.05).collect();
        gate.extend([0.0, -0.0, 1e-8, -1e-8, 88.0, -88.0, 200.0, -200.0]);
        let up: Vec<f32> = (0..gate.len())
            .map(|i| 1.0 + (i % 7) as f32 * 0.25)
            .collect();
        let got = silu_times(&gate, &up);
        for ((&x, &u), &g) in gate.iter().zip(&up).zip(&got) {
            let x64 = f64::from(x);
            let want = x64 / (1.0 + (-x64).exp()) * f64::from(u);
            let err = (f64::from(g) - want).abs();
            assert!(
                err <= 1e-6 * want.abs() + 1e-30,
                "silu({x}) * {u} = {g}, want {want}"
            );
        }
        assert!(silu_times(&[f32::NAN], &[1.0])[0].is_nan());
    }
}
