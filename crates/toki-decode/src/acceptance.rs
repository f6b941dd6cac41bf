//! Accepting sampled tree proposals: pure functions over sparse distributions.
//!
//! **Lossless** (the default when sampling): at a node with base distribution p (after
//! temperature, top-k and top-p, exactly as plain sampling applies them) the token after
//! the node is drawn from p, as plain sampling would draw it, and the child holding that
//! token (if any) continues the path; otherwise the walk ends and the drawn token is the
//! step's next token. This is SpecInfer's multi-draft recursive rejection sampling with
//! deterministic drafts in another form: with one-hot drafts q = δ(x) the recursive rule
//! accepts child xᵢ with probability min(1, p(xᵢ)/q(xᵢ)) = p(xᵢ) of what is left, moves
//! to the residual norm(max(0, p − q)) = p without xᵢ on a rejection, and draws from the
//! last residual: every outcome (child x accepted, or token y drawn after the children)
//! has probability p(x) or p(y), as one draw from p does (tested outcome by outcome
//! against the recursive rule). Each emitted token is an exact draw from p: the output
//! distribution equals plain sampling. Drawing first gives more: the draw for a position
//! comes from that position's generator ([`Rng::for_position`]), so speculative sampling
//! emits the very tokens plain sampling emits with the same seed.
//!
//! ```text
//!   node's p     a .5   b .3   c .2        children  b, c
//!   u = 0.62 ->  b (in [.5, .8))           child b accepted: the path goes on from b
//!   u = 0.31 ->  a                         no child holds a: the step ends, a is next
//! ```
//!
//! **Typical** (the reference Medusa's mode) accepts a child x when
//! p(x) > min(ε, δ·exp(−H(p))) and keeps the longest such path; the token after it is drawn
//! from p. It is *not* distribution-preserving: it trades exactness for longer accepts.

use crate::sampling::{Rng, draw};

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
    /// No child continues the path: `token` is the token after the node (drawn from the
    /// node's distribution), the step's last.
    Next(usize),
}

impl Choice {
    /// The child holding `token` (the first, should two hold it), else `token` next.
    pub fn following(token: usize, children: &[u32]) -> Self {
        match children.iter().position(|&x| x as usize == token) {
            Some(i) => Choice::Accept(i),
            None => Choice::Next(token),
        }
    }
}

/// What decides, at one tree node, which child (if any) continues the path.
pub trait AcceptRule {
    /// `p`: the base distribution at the node; `children`: the child tokens, in rank order.
    fn choose(&self, p: &Dist, children: &[u32], rng: &mut Rng) -> Choice;

    /// Whether the rule is "draw the token after the node as plain sampling draws it, and
    /// follow the child holding it" ([`Lossless`]): decoding may then draw with the sampler
    /// plain decoding uses, without building `p` ([`crate::verifier::verify_drawn`]).
    fn follows_the_draw(&self) -> bool {
        false
    }
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

/// Lossless: draw the token after the node from p, follow the child that holds it (see the
/// module docs for why this is the recursive rejection rule).
pub struct Lossless;

impl AcceptRule for Lossless {
    fn follows_the_draw(&self) -> bool {
        true
    }

    fn choose(&self, p: &Dist, children: &[u32], rng: &mut Rng) -> Choice {
        Choice::following(draw(p, rng), children)
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
    fn choose(&self, p: &Dist, children: &[u32], rng: &mut Rng) -> Choice {
        let t = self.threshold(p);
        match children.iter().position(|&x| prob(p, x as usize) > t) {
            Some(i) => Choice::Accept(i),
            None => Choice::Next(draw(p, rng)),
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
                Choice::Next(x) => {
                    assert!(x != 5 && x != 4, "a child's token ended the walk");
                    x
                }
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

    /// The probability of each outcome of the recursive rule as written (try each child
    /// against the current residual, rebuild the residual after each rejection, draw from
    /// the last one): `accept[i]` for child i, `next[x]` for token x drawn at the end.
    fn recursive_outcomes(p: &Dist, children: &[u32], tokens: usize) -> (Vec<f64>, Vec<f64>) {
        let (mut accept, mut next) = (vec![0.0; children.len()], vec![0.0; tokens]);
        let mut cur = p.clone();
        let mut reach = 1.0;
        for (i, &x) in children.iter().enumerate() {
            let q = vec![(x as usize, 1.0)];
            let a = accept_probability(&cur, &q, x as usize);
            accept[i] += reach * a;
            reach *= 1.0 - a;
            match residual(&cur, &q) {
                Some(r) => cur = r,
                None => {
                    reach = 0.0;
                    break;
                }
            }
        }
        for &(x, px) in &cur {
            next[x] += reach * px;
        }
        (accept, next)
    }

    /// The same for a rule that decides from one uniform number u (`rule(p, children, u)`),
    /// exactly: [`crate::sampling::draw_at`] maps u to token x on an interval of length
    /// p(x) (walking p in its own order), so each outcome's probability is the length of the
    /// interval that gives it. The rule is run once inside each interval.
    fn outcomes_by_u(
        p: &Dist,
        children: &[u32],
        tokens: usize,
        rule: impl Fn(&Dist, &[u32], f64) -> Choice,
    ) -> (Vec<f64>, Vec<f64>) {
        let (mut accept, mut next) = (vec![0.0; children.len()], vec![0.0; tokens]);
        let mut lo = 0.0;
        for &(_, px) in p {
            if px > 0.0 {
                match rule(p, children, lo + px / 2.0) {
                    Choice::Accept(i) => accept[i] += px,
                    Choice::Next(x) => next[x] += px,
                }
            }
            lo += px;
        }
        (accept, next)
    }

    /// [`Lossless::choose`] with its one uniform number given (what its generator yields;
    /// `lossless_draws_then_follows_the_child` checks the rule against this).
    fn lossless_at(p: &Dist, children: &[u32], u: f64) -> Choice {
        Choice::following(crate::sampling::draw_at(p, u), children)
    }

    #[test]
    fn lossless_draws_then_follows_the_child() {
        let p: Dist = vec![(3, 0.1), (0, 0.4), (2, 0.2), (1, 0.3)];
        for seed in 0..2_000 {
            let u = Rng::new(seed).uniform();
            let want = lossless_at(&p, &[2, 0, 2], u);
            assert_eq!(Lossless.choose(&p, &[2, 0, 2], &mut Rng::new(seed)), want);
        }
    }

    /// [`Lossless`] and the recursive rule give every outcome (which child is accepted,
    /// or which token is drawn when none is) the same probability: children in p or not,
    /// repeated, p's mass spread or on one token, p's entries in any order.
    #[test]
    fn lossless_has_the_recursive_rules_outcome_probabilities() {
        let mut cases_rng = Rng::new(5);
        for case in 0..3_000 {
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
            let tokens = 3 * n + 3;
            let (ra, rn) = recursive_outcomes(&p, &children, tokens);
            let (la, ln) = outcomes_by_u(&p, &children, tokens, lossless_at);
            let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9);
            assert!(
                close(&ra, &la) && close(&rn, &ln),
                "p {p:?}, children {children:?}: recursive {ra:?} {rn:?}, lossless {la:?} {ln:?}"
            );
        }
    }

    /// The check above can fail: a rule that draws from p but accepts the first child
    /// whenever the draw is not another child's (plausible-looking, wrong) gives the first
    /// child more than p's share.
    #[test]
    fn the_outcome_check_tells_a_wrong_rule() {
        let p: Dist = vec![(0, 0.5), (1, 0.3), (2, 0.2)];
        let wrong = |p: &Dist, children: &[u32], u: f64| {
            let y = crate::sampling::draw_at(p, u);
            match children.iter().position(|&x| x as usize == y) {
                Some(i) => Choice::Accept(i),
                None => Choice::Accept(0),
            }
        };
        let (ra, rn) = recursive_outcomes(&p, &[1, 2], 3);
        let (wa, wn) = outcomes_by_u(&p, &[1, 2], 3, wrong);
        assert!((ra[0] - 0.3).abs() < 1e-12 && (rn[0] - 0.5).abs() < 1e-12);
        assert!((wa[0] - 0.8).abs() < 1e-12 && wn[0] == 0.0);
        let (la, ln) = outcomes_by_u(&p, &[1, 2], 3, lossless_at);
        let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-12);
        assert!(close(&la, &ra) && close(&ln, &rn), "{la:?} {ln:?}");
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
        assert!(matches!(t.choose(&p, &[1], &mut rng), Choice::Next(0 | 1)));
    }
}
