//! Accepting sampled tree proposals: pure functions over sparse distributions.
//!
//! **Lossless** (the default when sampling) is SpecInfer's multi-draft recursive rejection
//! sampling with deterministic drafts. The heads' top-k tokens are used as drafts with a
//! one-hot draft distribution q = δ(x): at a node with base distribution p (after
//! temperature, top-k and top-p, exactly as plain sampling applies them), the children
//! x₁, x₂, … are tried in order; child xᵢ is accepted with probability
//! min(1, p(xᵢ)/q(xᵢ)) = p(xᵢ); on rejection p becomes the residual norm(max(0, p − q)),
//! which for a one-hot q is p with xᵢ removed and renormalised. When every child is
//! rejected, the next token is drawn from the last residual. Each emitted token is thus an
//! exact draw from p: the output distribution equals plain sampling.
//!
//! **Typical** (the reference Medusa's mode) accepts a child x when
//! p(x) > min(ε, δ·exp(−H(p))) and keeps the longest such path; the token after it is drawn
//! from p. It is *not* distribution-preserving: it trades exactness for longer accepts.

use crate::sampling::Rng;

/// A sparse distribution: (token, probability) pairs, probabilities summing to 1.
pub type Dist = Vec<(usize, f64)>;

/// How sampled proposals are accepted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Acceptance {
    /// Recursive rejection sampling: output distribution identical to plain sampling.
    Lossless,
    /// Medusa's typical acceptance: lossy. Accept x when p(x) > min(epsilon, delta·e^−H(p)).
    Typical { epsilon: f64, delta: f64 },
}

impl Acceptance {
    /// The reference Medusa's typical defaults: hard threshold ε = 0.09, entropy factor
    /// δ = 0.3 (= √ε).
    pub const TYPICAL_DEFAULT: Acceptance = Acceptance::Typical {
        epsilon: 0.09,
        delta: 0.3,
    };

    /// Typical acceptance needs ε and δ finite and > 0.
    pub fn check(&self) -> crate::Result<()> {
        match *self {
            Acceptance::Typical { epsilon, delta }
                if !([epsilon, delta].iter().all(|x| x.is_finite() && *x > 0.0)) =>
            {
                Err(crate::DecodeError::Request(format!(
                    "typical acceptance needs epsilon and delta finite and > 0, not {epsilon} and {delta}"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// The outcome of trying one node's children.
#[derive(Debug, Clone, PartialEq)]
pub enum Choice {
    /// Child `i` (index into the children given) is accepted.
    Accept(usize),
    /// Every child was rejected: draw the next token from this distribution.
    Reject(Dist),
}

/// What decides, at one tree node, which child (if any) continues the path.
pub trait AcceptRule {
    /// `p`: the base distribution at the node; `children`: the child tokens, in rank order.
    fn choose(&self, p: &Dist, children: &[u32], rng: &mut Rng) -> Choice;
}

/// Probability of `x` under `p` (0 when absent).
pub fn prob(p: &Dist, x: usize) -> f64 {
    p.iter().find(|e| e.0 == x).map_or(0.0, |e| e.1)
}

/// norm(max(0, p − q)); `None` when nothing is left (p ≤ q everywhere).
pub fn residual(p: &Dist, q: &Dist) -> Option<Dist> {
    let r: Dist = p
        .iter()
        .map(|&(x, px)| (x, (px - prob(q, x)).max(0.0)))
        .filter(|e| e.1 > 0.0)
        .collect();
    let z: f64 = r.iter().map(|e| e.1).sum();
    (z > 0.0).then(|| r.into_iter().map(|(x, v)| (x, v / z)).collect())
}

/// Acceptance probability of a draft x drawn from q: min(1, p(x)/q(x)); 0 when p(x) = 0.
/// q(x) = 0 cannot be drawn, and accepting it would add mass p never had: 0 as well.
pub fn accept_probability(p: &Dist, q: &Dist, x: usize) -> f64 {
    let (px, qx) = (prob(p, x), prob(q, x));
    if px <= 0.0 || qx <= 0.0 {
        0.0
    } else {
        (px / qx).min(1.0)
    }
}

/// Lossless: recursive rejection with one-hot drafts.
pub struct Lossless;

impl AcceptRule for Lossless {
    fn choose(&self, p: &Dist, children: &[u32], rng: &mut Rng) -> Choice {
        let mut cur = p.clone();
        for (i, &x) in children.iter().enumerate() {
            let q = vec![(x as usize, 1.0)];
            if rng.uniform() < accept_probability(&cur, &q, x as usize) {
                return Choice::Accept(i);
            }
            match residual(&cur, &q) {
                Some(r) => cur = r,
                // p was all on x, so x was accepted with probability 1: unreachable but
                // keep p rather than an empty distribution.
                None => return Choice::Reject(cur),
            }
        }
        Choice::Reject(cur)
    }
}

/// Medusa's typical acceptance (lossy).
pub struct Typical {
    pub epsilon: f64,
    pub delta: f64,
}

impl Typical {
    /// min(ε, δ·exp(−H(p))).
    pub fn threshold(&self, p: &Dist) -> f64 {
        let h: f64 = p
            .iter()
            .filter(|e| e.1 > 0.0)
            .map(|e| -e.1 * e.1.ln())
            .sum();
        self.epsilon.min(self.delta * (-h).exp())
    }
}

impl AcceptRule for Typical {
    fn choose(&self, p: &Dist, children: &[u32], _rng: &mut Rng) -> Choice {
        let t = self.threshold(p);
        match children.iter().position(|&x| prob(p, x as usize) > t) {
            Some(i) => Choice::Accept(i),
            None => Choice::Reject(p.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &Dist, b: &Dist) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.0 == y.0 && (x.1 - y.1).abs() < 1e-12)
    }

    #[test]
    fn residual_of_a_one_hot_draft_removes_it_and_renormalises() {
        let p = vec![(3, 0.5), (1, 0.3), (7, 0.2)];
        let r = residual(&p, &vec![(3, 1.0)]).unwrap();
        assert!(close(&r, &vec![(1, 0.6), (7, 0.4)]));
    }

    #[test]
    fn residual_of_a_spread_draft_is_the_positive_part() {
        let p = vec![(0, 0.5), (1, 0.5)];
        let q = vec![(0, 0.8), (1, 0.1), (2, 0.1)];
        // max(0, p - q) = [0, 0.4, 0] -> all on token 1
        assert!(close(&residual(&p, &q).unwrap(), &vec![(1, 1.0)]));
        // p == q: nothing left
        assert_eq!(residual(&p, &p), None);
    }

    #[test]
    fn acceptance_probability_edge_cases() {
        let p = vec![(0, 0.6), (1, 0.4)];
        assert_eq!(accept_probability(&p, &vec![(0, 0.3), (2, 0.7)], 0), 1.0);
        assert!((accept_probability(&p, &vec![(1, 0.8), (0, 0.2)], 1) - 0.5).abs() < 1e-12);
        // p(x) = 0: never accepted
        assert_eq!(accept_probability(&p, &vec![(5, 1.0)], 5), 0.0);
        // q(x) = 0: never accepted
        assert_eq!(accept_probability(&p, &vec![(1, 1.0)], 0), 0.0);
    }

    /// Exhaustive check of one node: the probability that Lossless ends on token x
    /// (accepting it as a child, or drawing it after every rejection) equals p(x).
    #[test]
    fn lossless_node_outcome_is_exactly_p() {
        let p: Dist = vec![(0, 0.4), (1, 0.3), (2, 0.2), (3, 0.1)];
        for children in [
            vec![1u32],
            vec![2, 0],
            vec![3, 2, 1],
            vec![0, 1, 2, 3],
            vec![9, 0],
        ] {
            // P(path reaches child i and accepts) analytically, following the rule.
            let mut out = [0.0f64; 10];
            let mut cur = p.clone();
            let mut reach = 1.0;
            for &x in &children {
                let a = prob(&cur, x as usize);
                out[x as usize] += reach * a;
                reach *= 1.0 - a;
                cur = residual(&cur, &vec![(x as usize, 1.0)]).unwrap_or(cur);
            }
            for &(x, px) in &cur {
                out[x] += reach * px;
            }
            for &(x, px) in &p {
                assert!((out[x] - px).abs() < 1e-12, "{children:?}: {out:?}");
            }
        }
    }

    #[test]
    fn lossless_draws_match_p_with_ties() {
        let p: Dist = vec![(4, 0.25), (5, 0.25), (6, 0.25), (7, 0.25)];
        let mut rng = Rng::new(11);
        let mut counts = [0usize; 8];
        let n = 40_000;
        for _ in 0..n {
            let x = match Lossless.choose(&p, &[5, 4], &mut rng) {
                Choice::Accept(i) => [5, 4][i],
                Choice::Reject(r) => crate::sampling::draw(&r, &mut rng),
            };
            counts[x] += 1;
        }
        for x in 4..8 {
            assert!(
                (counts[x] as f64 / n as f64 - 0.25).abs() < 0.01,
                "{counts:?}"
            );
        }
    }

    #[test]
    fn typical_threshold_follows_entropy() {
        let t = Typical {
            epsilon: 0.09,
            delta: 0.3,
        };
        // A one-hot p has zero entropy: threshold min(0.09, 0.3) = 0.09.
        assert!((t.threshold(&vec![(0, 1.0)]) - 0.09).abs() < 1e-12);
        // Uniform over 100: H = ln 100, 0.3 / 100 = 0.003.
        let u: Dist = (0..100).map(|i| (i, 0.01)).collect();
        assert!((t.threshold(&u) - 0.003).abs() < 1e-12);
        let mut rng = Rng::new(0);
        assert_eq!(t.choose(&u, &[3], &mut rng), Choice::Accept(0));
        let p = vec![(0, 0.95), (1, 0.05)];
        assert!(matches!(t.choose(&p, &[1], &mut rng), Choice::Reject(_)));
    }
}
