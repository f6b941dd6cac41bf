//! Sampling at a temperature without the full lm_head product: the Gumbel-max draw over
//! logits known within bounds.
//!
//! The token sampled at a position is `argmax_r (l_r / T + g_r)`, where `g_r = −ln(−ln u_r)`
//! is Gumbel noise and `u_r` a uniform number made from the seed, the position and the
//! token `r` alone ([`Noise`]): an exact draw from softmax(l / T), and the same token
//! wherever the same logits are sampled at the same position (plain or speculative
//! decoding). Where the lm_head can bound every logit cheaply (`low_r <= l_r <= high_r`,
//! the first stage of the two-stage arg-max), most tokens are ruled out without their
//! logit: a token whose best case `high_r / T + g_r` is below the score some token
//! certainly reaches cannot be the arg-max. Only the rest get their exact logit.
//!
//! Most tokens are ruled out without their noise's logarithms too: `g_r < t₀` exactly when
//! `u_r < exp(−exp(−t₀))`, so a token with `high_r / T + t₀` below that score and a small
//! `u_r` (all but a 1 − exp(−e^−t₀) ≈ e^−t₀ share of them) is out after one hash.
//!
//! ```text
//!   token     high/T   low/T    g       high/T + g
//!   a         12.1     11.9     0.3     12.4    <- a's exact score 12.3 is the bar
//!   b         11.6     11.4     1.9     13.5    candidate: exact logit needed
//!   c          2.0      1.8     (u small: g < 10)  out without its logarithms
//! ```
//!
//! The draw's definition, which both ways compute: the first token with the largest
//! `f64(l_r) · (1/T) + g_r` (f64 arithmetic, monotone in `l_r`, so a bound on `l_r` bounds
//! the score).

use std::cmp::Ordering;

use crate::bounds::Logits;
use crate::sampling::{Rng, mix64};

/// Noise above this is rare enough (a share e^−10 ≈ 4.5e-5 of tokens) to be computed only
/// where it occurs.
const T0: f64 = 10.0;

/// The Gumbel noise of every token at one position.
#[derive(Debug, Clone, Copy)]
pub struct Noise {
    key: u64,
}

impl Noise {
    /// The noise at sequence position `position` under `seed`.
    pub fn at(seed: u64, position: usize) -> Self {
        Self {
            key: Rng::for_position(seed, position).next_u64(),
        }
    }

    /// Token `r`'s uniform number, in (0, 1).
    fn uniform(self, r: usize) -> f64 {
        let z = mix64(self.key ^ (r as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        ((z >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// Token `r`'s Gumbel noise `−ln(−ln u_r)`.
    pub fn gumbel(self, r: usize) -> f64 {
        -(-self.uniform(r).ln()).ln()
    }
}

/// The token sampled from softmax(logits / T) with `noise` (`inv_t` = 1/T > 0): the first
/// with the largest score `f64(l_r) · inv_t + g_r` (module docs). `None` where a logit
/// the draw needs is not finite or there are no tokens (the caller then samples another
/// way).
pub fn sample(logits: &(impl Logits + ?Sized), inv_t: f64, noise: Noise) -> Option<usize> {
    let n = logits.tokens();
    // The bar: the exact score of the token with the best lower bound.
    let top = (0..n).max_by(|&a, &b| {
        let (la, lb) = (logits.bounds(a).0, logits.bounds(b).0);
        la.partial_cmp(&lb)
            .unwrap_or(Ordering::Equal)
            .then(b.cmp(&a))
    })?;
    let score = |r: usize| {
        let l = logits.exact(r);
        l.is_finite()
            .then(|| f64::from(l) * inv_t + noise.gumbel(r))
    };
    let bar = score(top)?;
    // u below this: g below T0 (by a margin far above the logarithms' rounding).
    let u0 = (-(-(T0 - 1e-3)).exp()).exp();
    let mut best: Option<(f64, usize)> = None;
    for r in 0..n {
        let high = f64::from(logits.bounds(r).1) * inv_t;
        // NaN bounds fall through to the exact logit (which is then not finite: None).
        if high + T0 < bar && noise.uniform(r) < u0 {
            continue;
        }
        if high + noise.gumbel(r) < bar {
            continue;
        }
        let s = score(r)?;
        if best.is_none_or(|(b, _)| s > b) {
            best = Some((s, r));
        }
    }
    best.map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bounds widened around exact logits by `slack` (random per token).
    struct Loose<'a> {
        exact: &'a [f32],
        slack: Vec<f32>,
    }

    impl Logits for Loose<'_> {
        fn tokens(&self) -> usize {
            self.exact.len()
        }
        fn bounds(&self, r: usize) -> (f32, f32) {
            (self.exact[r] - self.slack[r], self.exact[r] + self.slack[r])
        }
        fn exact(&self, r: usize) -> f32 {
            self.exact[r]
        }
    }

    /// The draw by its definition: every token's score.
    fn by_definition(logits: &[f32], inv_t: f64, noise: Noise) -> usize {
        let mut best = (f64::NEG_INFINITY, 0);
        for (r, &l) in logits.iter().enumerate() {
            let s = f64::from(l) * inv_t + noise.gumbel(r);
            if s > best.0 {
                best = (s, r);
            }
        }
        best.1
    }

    fn logits(n: usize, seed: u64, spread: f32) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        (0..n)
            .map(|_| (rng.uniform() as f32 - 0.5) * spread)
            .collect()
    }

    /// Exact logits and loose bounds give the token of the definition, at every position:
    /// ruling tokens out changes nothing.
    #[test]
    fn bounds_rule_out_only_tokens_that_cannot_win() {
        for (n, spread, t) in [(5000, 30.0, 0.7), (300, 4.0, 1.0), (2000, 60.0, 0.3)] {
            let l = logits(n, n as u64, spread);
            let mut rng = Rng::new(9);
            let slack: Vec<f32> = (0..n).map(|_| rng.uniform() as f32 * 0.5).collect();
            let loose = Loose { exact: &l, slack };
            for position in 0..300 {
                let noise = Noise::at(3, position);
                let want = by_definition(&l, 1.0 / t, noise);
                assert_eq!(
                    sample(&l[..], 1.0 / t, noise),
                    Some(want),
                    "exact, {position}"
                );
                assert_eq!(
                    sample(&loose, 1.0 / t, noise),
                    Some(want),
                    "loose, {position}"
                );
            }
        }
    }

    /// The draws follow softmax(l / T): counts over 40,000 positions within 5 standard
    /// deviations of the expected ones, per token.
    #[test]
    fn draws_follow_the_softmax() {
        let l = [1.0f32, 0.2, -0.5, 2.0, 0.0, -3.0];
        let t = 0.8;
        let z: f64 = l.iter().map(|&x| (f64::from(x) / t).exp()).sum();
        let n = 40_000;
        let mut counts = [0usize; 6];
        for position in 0..n {
            counts[sample(&l[..], 1.0 / t, Noise::at(1, position)).unwrap()] += 1;
        }
        for (r, &x) in l.iter().enumerate() {
            let p = (f64::from(x) / t).exp() / z;
            let (e, sd) = (p * n as f64, (n as f64 * p * (1.0 - p)).sqrt());
            assert!(
                (counts[r] as f64 - e).abs() < 5.0 * sd,
                "token {r}: {} against {e:.0}",
                counts[r]
            );
        }
    }

    #[test]
    fn ties_go_to_the_first_and_no_finite_logit_is_none() {
        // Two equal logits far above the rest: each wins about half the positions, and
        // equal logits under equal noise would go to the first (the scores differ by noise).
        let l = [50.0f32, -50.0, 50.0];
        let wins: usize = (0..1000)
            .filter(|&p| sample(&l[..], 1.0, Noise::at(0, p)) == Some(0))
            .count();
        assert!((400..600).contains(&wins), "{wins}");
        assert_eq!(sample(&[f32::NAN, 1.0][..], 1.0, Noise::at(0, 0)), None);
        assert_eq!(sample(&[0.0f32; 0][..], 1.0, Noise::at(0, 0)), None);
    }

    /// Different seeds and positions give different noise; the same give the same.
    #[test]
    fn noise_depends_on_seed_position_and_token() {
        let a = Noise::at(1, 5);
        assert_eq!(a.gumbel(7), Noise::at(1, 5).gumbel(7));
        assert_ne!(a.gumbel(7), Noise::at(2, 5).gumbel(7));
        assert_ne!(a.gumbel(7), Noise::at(1, 6).gumbel(7));
        assert_ne!(a.gumbel(7), a.gumbel(8));
        assert!((0..10_000).all(|r| a.uniform(r) > 0.0 && a.uniform(r) < 1.0));
    }
}
