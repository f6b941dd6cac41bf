//! Choosing the next token from logits: greedy, or sampling with temperature, top-k and
//! top-p from a seeded generator. Pure functions over `&[f32]`, tested below.

use crate::bounds::Logits;
use crate::error::{DecodeError, Result};

/// How the next token is chosen.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// The arg-max token (ties: the lowest id).
    Greedy,
    /// A draw from the filtered, tempered distribution.
    Sample(SampleParams),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleParams {
    /// > 0
    pub temperature: f32,
    /// Keep the k most likely tokens (0 = all).
    pub top_k: usize,
    /// Keep the smallest set whose mass reaches p (1.0 = all).
    pub top_p: f32,
    pub seed: u64,
}

impl Sampling {
    /// Greedy for temperature 0, sampling otherwise; invalid values are an error.
    pub fn from_settings(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Result<Self> {
        if !(temperature >= 0.0 && temperature.is_finite()) {
            return Err(DecodeError::Sampling(format!(
                "temperature {temperature} must be a finite number >= 0"
            )));
        }
        let params = SampleParams {
            temperature,
            top_k,
            top_p,
            seed,
        };
        params.check()?;
        Ok(if temperature == 0.0 {
            Sampling::Greedy
        } else {
            Sampling::Sample(params)
        })
    }

    /// Whether the settings can be sampled from (a library caller may build them by hand).
    pub fn check(&self) -> Result<()> {
        match self {
            Sampling::Greedy => Ok(()),
            Sampling::Sample(p) if !(p.temperature > 0.0 && p.temperature.is_finite()) => {
                Err(DecodeError::Sampling(format!(
                    "temperature {} must be a finite number > 0 to sample (0: greedy)",
                    p.temperature
                )))
            }
            Sampling::Sample(p) => p.check(),
        }
    }
}

impl SampleParams {
    fn check(&self) -> Result<()> {
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(DecodeError::Sampling(format!(
                "top-p {} must be in (0, 1]",
                self.top_p
            )));
        }
        Ok(())
    }
}

/// A small seeded generator (SplitMix64): reproducible across platforms and versions.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }
    /// The generator of the token at `position` of a sequence (prompt tokens included):
    /// each position draws from its own stream of `seed`, so a sampled token depends on the
    /// seed, its position and its distribution alone, not on how many draws came before it.
    /// Plain decoding and speculative decoding, which reach a position after different
    /// numbers of draws, thereby sample the same token there ([`crate::acceptance`]).
    pub fn for_position(seed: u64, position: usize) -> Self {
        let key = Rng::new(seed).next_u64() ^ (position as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        Self(Rng::new(key).next_u64())
    }
    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// SplitMix64's output function: a well-mixed 64-bit hash of `z`.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Index of the largest value; the first on ties; NaN never wins.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}

/// The distribution plain sampling draws from: softmax(logits / T), restricted to the top-k
/// tokens and then to the top-p nucleus, renormalised. Sparse: (token, probability) pairs;
/// in descending probability when top-k or top-p cut the tail (ties: lower id first), in
/// token order when nothing is cut (sorting 49k entries every step cost more than the
/// rest of a sampled step's host work, and the distribution does not depend on it).
pub fn filtered_probs(logits: &[f32], p: &SampleParams) -> Vec<(usize, f64)> {
    let finite: Vec<(usize, f32)> = (logits.iter().copied().enumerate())
        .filter(|x| x.1.is_finite())
        .collect();
    let n = finite.len();
    filter(finite, p, n)
}

/// Most tokens a top-k filter may keep for [`top_k_probs`] to find them over bounds: each
/// candidate's logit is computed alone, so a large k costs more than the full product.
pub const BOUNDED_TOP_K_MAX: usize = 256;

/// [`filtered_probs`] under top-k (1 <= k <= [`BOUNDED_TOP_K_MAX`], fewer than the tokens)
/// from bounds on the logits and the exact logits of the few tokens that can be among the
/// k best, bit for bit. `None` where it does not apply (no such top-k, or a bound or a
/// needed logit is not finite): take the full logits then.
///
/// The k largest lower bounds put k tokens at or above the k-th of them, `L`; a token
/// whose upper bound is below `L` has k tokens strictly above it and is out. The others
/// (usually little more than k) get their exact logits, and the filter runs on them as on
/// the full row (which, every logit being finite, has `tokens()` of them):
///
/// ```text
///   k = 2      low   high   exact
///   a          5.0   5.2    5.1     L = 4.0 (2nd largest low)
///   b          4.0   4.3    4.2
///   c          3.8   4.1    4.05    high >= L: candidate, exact computed (not kept)
///   d          1.0   1.3    -       high < L: out without its logit
/// ```
pub fn top_k_probs(logits: &(impl Logits + ?Sized), p: &SampleParams) -> Option<Vec<(usize, f64)>> {
    let (n, k) = (logits.tokens(), p.top_k);
    if k == 0 || k > BOUNDED_TOP_K_MAX || k >= n {
        return None;
    }
    let mut lows: Vec<f32> = (0..n).map(|r| logits.bounds(r).0).collect();
    if !lows.iter().all(|l| l.is_finite()) {
        return None;
    }
    let (_, &mut bar, _) = lows.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
    let mut candidates = Vec::with_capacity(2 * k);
    for r in 0..n {
        // A NaN upper bound stays in (and its logit is then not finite: None).
        if logits.bounds(r).1 < bar {
            continue;
        }
        let l = logits.exact(r);
        if !l.is_finite() {
            return None;
        }
        candidates.push((r, l));
    }
    Some(filter(candidates, p, n))
}

/// The filter of [`filtered_probs`] over (token, finite logit) pairs, in any order, that
/// hold the top-k of a row of `finite` finite logits (all of them where top-k does not cut).
fn filter(mut idx: Vec<(usize, f32)>, p: &SampleParams, finite: usize) -> Vec<(usize, f64)> {
    let desc = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    if p.top_k > 0 && p.top_k < finite {
        // The k best first (O(V)), then only they are sorted.
        if p.top_k < idx.len() {
            idx.select_nth_unstable_by(p.top_k - 1, desc);
            idx.truncate(p.top_k);
        }
        idx.sort_unstable_by(desc);
    } else if p.top_p < 1.0 {
        idx.sort_unstable_by(desc);
    }
    let Some(max) = idx.iter().map(|x| x.1).max_by(f32::total_cmp) else {
        return vec![];
    };
    let (max, t) = (f64::from(max), f64::from(p.temperature));
    let mut probs: Vec<(usize, f64)> = idx
        .iter()
        .map(|&(i, l)| (i, ((f64::from(l) - max) / t).exp()))
        .collect();
    let z: f64 = probs.iter().map(|x| x.1).sum();
    probs.iter_mut().for_each(|x| x.1 /= z);
    if p.top_p < 1.0 {
        let mut mass = 0.0;
        let keep = probs
            .iter()
            .position(|x| {
                mass += x.1;
                mass >= p.top_p as f64
            })
            .map_or(probs.len(), |i| i + 1);
        probs.truncate(keep);
        let z: f64 = probs.iter().map(|x| x.1).sum();
        probs.iter_mut().for_each(|x| x.1 /= z);
    }
    probs
}

/// Draw from a sparse distribution with one uniform number.
pub fn draw(probs: &[(usize, f64)], rng: &mut Rng) -> usize {
    draw_at(probs, rng.uniform())
}

/// The token a uniform number `u` in [0, 1) draws: the first whose cumulative probability,
/// summed in `probs`' order, exceeds u (the last where rounding leaves u past the sum).
pub fn draw_at(probs: &[(usize, f64)], u: f64) -> usize {
    let mut acc = 0.0;
    for &(i, p) in probs {
        acc += p;
        if u < acc {
            return i;
        }
    }
    probs.last().map_or(0, |x| x.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(t: f32, k: usize, p: f32) -> SampleParams {
        SampleParams {
            temperature: t,
            top_k: k,
            top_p: p,
            seed: 0,
        }
    }

    #[test]
    fn argmax_first_on_ties_and_skips_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 0.1]), 1);
    }

    #[test]
    fn top_k_and_top_p_filter() {
        let l = [2.0f32, 1.0, 0.0, -1.0];
        let p = filtered_probs(&l, &params(1.0, 2, 1.0));
        assert_eq!(p.len(), 2);
        assert!((p[0].1 - 1.0 / (1.0 + (-1.0f64).exp())).abs() < 1e-12);
        // softmax([2,1,0,-1]) = .644, .237, .087, .032: top-p 0.8 keeps two.
        let p = filtered_probs(&l, &params(1.0, 0, 0.8));
        assert_eq!(p.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 1]);
        assert!((p.iter().map(|x| x.1).sum::<f64>() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn unfiltered_is_the_whole_softmax_and_top_k_sorts_only_its_k() {
        let l = [0.5f32, 2.0, f32::NEG_INFINITY, -1.0, 2.0];
        let all = filtered_probs(&l, &params(0.5, 0, 1.0));
        let z: f64 = [0.5f64, 2.0, -1.0, 2.0]
            .iter()
            .map(|x| (x / 0.5).exp())
            .sum();
        assert_eq!(
            all.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![0, 1, 3, 4]
        );
        for &(i, q) in &all {
            assert!((q - (f64::from(l[i]) / 0.5).exp() / z).abs() < 1e-12);
        }
        // Ties keep the lower id first.
        let top = filtered_probs(&l, &params(1.0, 3, 1.0));
        assert_eq!(top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 4, 0]);
    }

    /// Bounds around logits, and how many exact logits were asked for.
    struct Loose {
        low: Vec<f32>,
        high: Vec<f32>,
        exact: Vec<f32>,
        asked: std::cell::Cell<usize>,
    }

    impl Loose {
        fn new(exact: &[f32], slack: &[f32]) -> Self {
            Self {
                low: exact.iter().zip(slack).map(|(x, s)| x - s).collect(),
                high: exact.iter().zip(slack).map(|(x, s)| x + s).collect(),
                exact: exact.to_vec(),
                asked: 0.into(),
            }
        }
    }

    impl Logits for Loose {
        fn tokens(&self) -> usize {
            self.exact.len()
        }
        fn bounds(&self, r: usize) -> (f32, f32) {
            (self.low[r], self.high[r])
        }
        fn exact(&self, r: usize) -> f32 {
            self.asked.set(self.asked.get() + 1);
            self.exact[r]
        }
    }

    /// Top-k over bounds is the filter over the full logits, bit for bit: logits on a grid
    /// of 1/8 (many ties, some at the k-th value), bounds exact or loose by up to 0.6,
    /// every k up to the cap, with and without top-p, at three temperatures. Most tokens'
    /// logits are never computed.
    #[test]
    fn top_k_over_bounds_is_the_full_filter() {
        let mut rng = Rng::new(5);
        let (mut asked, mut tokens) = (0, 0);
        for case in 0..120 {
            let n = 20 + case * 37 % 600;
            let spread = [2.0, 8.0, 30.0][case % 3];
            let exact: Vec<f32> = (0..n)
                .map(|_| ((rng.uniform() * spread * 8.0).floor() / 8.0) as f32 - 5.0)
                .collect();
            let slack: Vec<f32> = (0..n)
                .map(|_| match rng.uniform() {
                    u if u < 0.3 => 0.0,
                    _ => rng.uniform() as f32 * 0.6,
                })
                .collect();
            for k in [1, 2, 5, 40, BOUNDED_TOP_K_MAX, n - 1] {
                if k >= n || k > BOUNDED_TOP_K_MAX {
                    continue;
                }
                for top_p in [1.0, 0.9, 0.3] {
                    for t in [0.7, 1.0, 2.0] {
                        let p = params(t, k, top_p);
                        let loose = Loose::new(&exact, &slack);
                        let want = filtered_probs(&exact, &p);
                        assert_eq!(top_k_probs(&loose, &p), Some(want), "n {n} k {k} p {top_p}");
                        assert_eq!(
                            top_k_probs(&exact[..], &p),
                            Some(filtered_probs(&exact, &p))
                        );
                        if k == 5 {
                            (asked, tokens) = (asked + loose.asked.get(), tokens + n);
                        }
                    }
                }
            }
        }
        assert!(
            asked * 4 < tokens,
            "top-5 asked for {asked} of {tokens} logits"
        );
    }

    #[test]
    fn top_k_over_bounds_declines_what_it_cannot_do() {
        let l = [1.0f32, 3.0, 2.0, 0.5];
        let z = [0.0f32; 4];
        let top = |k, low: f32, exact: f32| {
            let mut b = Loose::new(&l, &z);
            (b.low[1], b.exact[1]) = (low, exact);
            top_k_probs(&b, &params(1.0, k, 1.0))
        };
        assert!(top(2, 3.0, 3.0).is_some());
        // No top-k, k of every token, k past the cap.
        assert_eq!(top(0, 3.0, 3.0), None);
        assert_eq!(top(4, 3.0, 3.0), None);
        let many = vec![0.0f32; BOUNDED_TOP_K_MAX + 2];
        assert_eq!(
            top_k_probs(&many[..], &params(1.0, BOUNDED_TOP_K_MAX + 1, 1.0)),
            None
        );
        // A bound or a needed logit not finite.
        assert_eq!(top(2, f32::NAN, 3.0), None);
        assert_eq!(top(2, f32::NEG_INFINITY, 3.0), None);
        assert_eq!(top(2, 3.0, f32::INFINITY), None);
        assert_eq!(top(2, 3.0, f32::NAN), None);
    }

    #[test]
    fn low_temperature_concentrates() {
        let p = filtered_probs(&[1.0, 0.9], &params(0.01, 0, 1.0));
        assert!(p[0].1 > 0.9999);
    }

    #[test]
    fn draws_follow_distribution() {
        let probs = vec![(0, 0.25), (1, 0.75)];
        let mut rng = Rng::new(7);
        let n = 40_000;
        let ones = (0..n).filter(|_| draw(&probs, &mut rng) == 1).count();
        assert!((ones as f64 / n as f64 - 0.75).abs() < 0.01);
    }

    #[test]
    fn settings_validated() {
        assert_eq!(
            Sampling::from_settings(0.0, 0, 1.0, 0).unwrap(),
            Sampling::Greedy
        );
        assert!(Sampling::from_settings(-1.0, 0, 1.0, 0).is_err());
        assert!(Sampling::from_settings(1.0, 0, 0.0, 0).is_err());
    }
}
