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
    /// Every child was rejected: draw the next token from the node's distribution p with
    /// these tokens taken out and the rest renormalised ([`draw_without`]): the residual
    /// that rejecting one-hot drafts leaves. Empty: draw from p itself.
    Reject { removed: Vec<usize> },
}

/// Draw from p with the tokens of `removed` taken out and the rest renormalised, with one
/// uniform number, walking p in its own order (what [`crate::sampling::draw`] does on that
/// residual, without building it: a 49,152-token p is 0.8 MB). Where nothing is left, the
/// last removal emptied the residual, which was then all on that token (a child rejected
/// only by rounding): it is drawn.
pub fn draw_without(p: &Dist, removed: &[usize], rng: &mut Rng) -> usize {
    if removed.is_empty() {
        return crate::sampling::draw(p, rng);
    }
    let kept = |x: usize| !removed.contains(&x);
    let total: f64 = p.iter().filter(|e| kept(e.0)).map(|e| e.1).sum();
    if total <= 0.0 {
        return removed[removed.len() - 1];
    }
    let u = rng.uniform() * total;
    let mut acc = 0.0;
    let mut last = None;
    for &(x, px) in p.iter().filter(|e| kept(e.0) && e.1 > 0.0) {
        acc += px;
        if u < acc {
            return x;
        }
        last = Some(x);
    }
    // Rounding: u fell past the last sum.
    last.unwrap_or(0)
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
    /// The residual after rejecting children x₁..xᵢ₋₁ is p without them, divided by the
    /// mass they leave, so child xᵢ is accepted with probability p(xᵢ) / (mass left): the
    /// recursive rule of [`residual`] and [`accept_probability`] in one pass over p, no
    /// residual built (tested draw for draw against them).
    fn choose(&self, p: &Dist, children: &[u32], rng: &mut Rng) -> Choice {
        if children.is_empty() {
            return Choice::Reject { removed: vec![] };
        }
        // One pass: the children's probabilities and p's total mass.
        let mut px = vec![0.0; children.len()];
        let mut left = 0.0;
        for &(x, v) in p {
            left += v;
            for (c, &child) in px.iter_mut().zip(children) {
                if child as usize == x {
                    *c = v;
                }
            }
        }
        let mut removed: Vec<usize> = Vec::with_capacity(children.len());
        for (i, &x) in children.iter().enumerate() {
            let x = x as usize;
            // A token already rejected has no mass left in the residual.
            let mass = if removed.contains(&x) { 0.0 } else { px[i] };
            let a = if mass > 0.0 && left > 0.0 {
                (mass / left).min(1.0)
            } else {
                0.0
            };
            if rng.uniform() < a {
                return Choice::Accept(i);
            }
            if mass > 0.0 {
                removed.push(x);
                left -= mass;
                if left <= 0.0 {
                    // The residual was all on x (rejected by rounding): nothing is left.
                    break;
                }
            }
        }
        Choice::Reject { removed }
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
            None => Choice::Reject { removed: vec![] },
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
                Choice::Reject { removed } => draw_without(&p, &removed, &mut rng),
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

    /// The recursive rule as written: try each child against the current residual,
    /// rebuild the residual after each rejection, draw from the last one.
    fn reference_outcome(p: &Dist, children: &[u32], rng: &mut Rng) -> usize {
        let mut cur = p.clone();
        for &x in children {
            let q = vec![(x as usize, 1.0)];
            if rng.uniform() < accept_probability(&cur, &q, x as usize) {
                return x as usize;
            }
            match residual(&cur, &q) {
                Some(r) => cur = r,
                None => break,
            }
        }
        crate::sampling::draw(&cur, rng)
    }

    /// [`Lossless`] without residuals takes the same decision as the recursive rule, draw
    /// for draw from the same seeds: children in p or not, repeated, p's mass spread or on
    /// one token, p's entries in any order.
    #[test]
    fn lossless_equals_the_recursive_rule_draw_for_draw() {
        let mut cases_rng = Rng::new(5);
        let mut cases = 0;
        for case in 0..300 {
            let n = 1 + (cases_rng.next_u64() % 12) as usize;
            let mut p: Dist = (0..n)
                .map(|i| (i * 3 + 1, cases_rng.uniform().powi(3)))
                .filter(|e| e.1 > 0.0)
                .collect();
            if case % 10 == 0 {
                p.iter_mut().for_each(|e| e.1 = 0.0);
                p[0].1 = 1.0;
            }
            p.reverse();
            let z: f64 = p.iter().map(|e| e.1).sum();
            p.iter_mut().for_each(|e| e.1 /= z);
            let k = 1 + (cases_rng.next_u64() % 4) as usize;
            let children: Vec<u32> = (0..k)
                .map(|_| (cases_rng.next_u64() % (3 * n as u64 + 3)) as u32)
                .collect();
            for seed in 0..50 {
                let (mut a, mut b) = (Rng::new(seed), Rng::new(seed));
                let fast = match Lossless.choose(&p, &children, &mut a) {
                    Choice::Accept(i) => children[i] as usize,
                    Choice::Reject { removed } => draw_without(&p, &removed, &mut a),
                };
                assert_eq!(
                    fast,
                    reference_outcome(&p, &children, &mut b),
                    "p {p:?}, children {children:?}, seed {seed}"
                );
                cases += 1;
            }
        }
        assert_eq!(cases, 15_000);
    }

    #[test]
    fn draw_without_takes_the_removed_out() {
        let p: Dist = vec![(2, 0.5), (4, 0.25), (6, 0.25)];
        let mut rng = Rng::new(1);
        for _ in 0..1_000 {
            assert_eq!(draw_without(&p, &[2, 6], &mut rng), 4);
            assert_ne!(draw_without(&p, &[4], &mut rng), 4);
        }
        // Nothing left: the last removed token (the residual before it was all on it).
        assert_eq!(draw_without(&vec![(2, 1.0)], &[2], &mut rng), 2);
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
        assert!(matches!(
            t.choose(&p, &[1], &mut rng),
            Choice::Reject { .. }
        ));
    }
}
