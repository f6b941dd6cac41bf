//! Dynamic trees: each step sizes its tree from the heads' own confidence and the measured
//! cost of verifying it (EAGLE-2's dynamic tree, with a cost model of this hardware).
//!
//! A static tree verifies the same nodes every step, whether the heads are sure or
//! guessing. Here each step:
//!
//! 1. the heads rank their `max_rank` best tokens, with probabilities p_k(r);
//! 2. node (r_1, .., r_k) is accepted with an estimated chance Π_j a_j(p_j(r_j)), where a_j
//!    is head j's calibration: how often a proposal it gives probability p is right when
//!    the path before it is (measured by `toki calibrate`; p itself without one);
//! 3. nodes are added best first (Medusa's greedy construction on this step's estimates):
//!    E(n), 1 + the n − 1 best estimates, is the expected tokens of an n-node tree;
//! 4. with c(n) the measured cost of verifying n nodes relative to one, the step verifies
//!    the n that maximises E(n) − λ·c(n), λ being the tokens per unit of cost the request
//!    has been getting (the rule for maximising a ratio: a node is worth verifying when it
//!    brings at least λ tokens per unit of the cost it adds). n = 1 is a plain step.
//!    c(n) depends on the cache length (every node attends to the whole cache): it is
//!    measured at a few lengths and interpolated at the step's own ([`DynamicTree::costs_at`]).
//! 5. the request keeps score ([`Feedback`]): per depth, how often its accepted paths
//!    reached it against how often the estimates said they would. The ratios correct the
//!    next steps' estimates head by head, so a text the heads guess worse than the
//!    calibration prompts did gets smaller trees, and a better one larger.
//!
//! ```text
//!   heads say      head 1: "(" .92, "[" .03    head 2: "x" .82    head 3: ")" .12
//!   estimates      [0] .92   [0,0] .75   [0,0,0] .09   [1] .03
//!   E(n)           1.00  1.92  2.67  2.77  2.80
//!   c(n)           1.00  1.04  1.09  1.20  1.30      (measured on this CPU)
//!   E(n) − 1.3 c   -0.30 0.57  1.26  1.21  1.11      -> 3 nodes: root, [0], [0,0]
//! ```
//!
//! The output is unchanged: the tree only decides what is verified, and greedy and lossless
//! verification emit the base's own tokens (or its exact distribution) whatever the tree.

use serde::{Deserialize, Serialize};

use crate::error::{DecodeError, Result};
use crate::proposer::{Conditioning, Ranked};

/// The most speculation could gain at these costs if every proposal were right: a chain
/// of n nodes (the root and n - 1 heads' top tokens, n ≤ heads + 1) then yields n tokens a
/// step for a pass of n nodes and the heads' pass (counted whole for any chain). `cost[i]`:
/// the pass of i + 1 nodes, relative to one; `heads`: the heads' pass in the same unit.
/// Returns the speed-up over plain decoding and that n (1: plain decoding itself, the
/// start, since c(1) = 1). A tree of n nodes yields at most n tokens, so no tree of the
/// heads' proposals beats the best chain; real heads come near it only as their
/// acceptance nears 1. Lookup chains, which can go deeper than the heads, are not bounded
/// by it.
pub fn ceiling(cost: &[f64], heads: f64, num_heads: usize) -> (f64, usize) {
    (2..=num_heads + 1)
        .zip(cost.iter().skip(1))
        .map(|(n, &c)| (n as f64 / (c + heads), n))
        .filter(|(s, _)| s.is_finite())
        .fold((1.0, 1), |best, x| if x.0 > best.0 { x } else { best })
}

/// How a dynamic tree is sized (see the module docs). Built by `toki calibrate` from
/// measurements on the backend it will run on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DynamicTree {
    /// c(n), n = 1..=len: verification cost of n nodes relative to one node (c(1) = 1).
    pub cost: Vec<f64>,
    /// One pass of the heads, relative to one node's verification.
    pub heads_cost: f64,
    /// Proposals per head considered.
    pub max_rank: usize,
    /// Per head, per probability bin (equal bins over [0, 1]): how often a proposal of that
    /// probability was right when its parent path was. Empty: probabilities as they are.
    #[serde(default)]
    pub accuracy: Vec<Vec<f64>>,
    /// Cache length (tokens) `cost` and `heads_cost` were measured over.
    #[serde(default = "base_context")]
    pub context: usize,
    /// c(n) measured over longer caches, by ascending length, in units of one node over
    /// `context` tokens. Empty: `cost` at every length.
    #[serde(default)]
    pub longer: Vec<ContextCost>,
}

fn base_context() -> usize {
    128
}

/// A cost curve measured over a cache of `context` tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextCost {
    pub context: usize,
    /// c(n), n = 1..: as long as [`DynamicTree::cost`].
    pub cost: Vec<f64>,
}

/// Costs at one cache length, relative to verifying one node at that length.
#[derive(Debug, Clone, PartialEq)]
pub struct Costs {
    /// c(n), n = 1..=max_nodes, c(1) = 1.
    pub cost: Vec<f64>,
    /// One pass of the heads.
    pub heads: f64,
}

impl DynamicTree {
    /// Checked: costs finite and positive (rescaled so that c(1) = 1), a rank, accuracies
    /// in [0, 1].
    pub fn new(
        cost: Vec<f64>,
        heads_cost: f64,
        max_rank: usize,
        accuracy: Vec<Vec<f64>>,
    ) -> Result<Self> {
        let bad = |what: String| Err(DecodeError::Tree(format!("dynamic tree: {what}")));
        if cost.is_empty() || cost.iter().any(|c| !c.is_finite() || *c <= 0.0) {
            return bad(format!("costs must be positive numbers, got {cost:?}"));
        }
        if !heads_cost.is_finite() || heads_cost < 0.0 {
            return bad(format!("heads cost {heads_cost} is not a cost"));
        }
        if max_rank == 0 {
            return bad("max_rank must be at least 1".into());
        }
        if accuracy.iter().flatten().any(|a| !(0.0..=1.0).contains(a))
            || accuracy.iter().any(|bins| bins.is_empty())
        {
            return bad("accuracies must be non-empty lists of numbers in [0, 1]".into());
        }
        let c1 = cost[0];
        Ok(Self {
            cost: cost.iter().map(|c| c / c1).collect(),
            heads_cost: heads_cost / c1,
            max_rank,
            accuracy,
            context: base_context(),
            longer: vec![],
        })
    }

    /// The same tree with its cost measured over `context` tokens, and over the longer
    /// caches of `longer` (relative to one node over `context`). Checked: lengths ascending
    /// past `context`, curves as long as `cost`, costs positive.
    pub fn with_contexts(mut self, context: usize, longer: Vec<ContextCost>) -> Result<Self> {
        let mut last = context;
        for l in &longer {
            if l.context <= last {
                return Err(DecodeError::Tree(format!(
                    "dynamic tree: cost contexts must ascend, got {} after {last}",
                    l.context
                )));
            }
            if l.cost.len() != self.cost.len() || l.cost.iter().any(|c| !c.is_finite() || *c <= 0.0)
            {
                return Err(DecodeError::Tree(format!(
                    "dynamic tree: the cost curve over {} tokens must hold {} positive numbers",
                    l.context,
                    self.cost.len()
                )));
            }
            last = l.context;
        }
        self.context = context;
        self.longer = longer;
        Ok(self)
    }

    /// The costs at a cache of `context` tokens: linear between the measured lengths, the
    /// nearest curve outside them.
    pub fn costs_at(&self, context: usize) -> Costs {
        // (length, curve), ascending: the base curve, then the longer ones.
        let curves: Vec<(usize, &[f64])> = std::iter::once((self.context, &self.cost[..]))
            .chain(self.longer.iter().map(|c| (c.context, &c.cost[..])))
            .collect();
        let i = curves.partition_point(|c| c.0 <= context);
        let absolute: Vec<f64> = match (i.checked_sub(1).map(|j| curves[j]), curves.get(i)) {
            (Some((lo, a)), Some(&(hi, b))) => {
                let w = (context - lo) as f64 / (hi - lo) as f64;
                a.iter()
                    .zip(b)
                    .map(|(a, b)| a * (1.0 - w) + b * w)
                    .collect()
            }
            (Some((_, c)), None) | (None, Some(&(_, c))) => c.to_vec(),
            (None, None) => self.cost.clone(),
        };
        let one = absolute[0];
        Costs {
            cost: absolute.iter().map(|c| c / one).collect(),
            heads: self.heads_cost / one,
        }
    }

    /// The largest tree it may choose, root included.
    pub fn max_nodes(&self) -> usize {
        self.cost.len()
    }

    /// The most speculation could gain at these costs with `num_heads` heads if every
    /// proposal were right ([`ceiling`]), over the cache length the curve was measured at
    /// (`context`).
    pub fn ceiling(&self, num_heads: usize) -> (f64, usize) {
        ceiling(&self.cost, self.heads_cost, num_heads)
    }

    /// Estimated chance that head `head`'s proposal of probability `p` is right, given that
    /// its parent path is.
    pub fn estimate(&self, head: usize, p: f32) -> f64 {
        let p = f64::from(p).clamp(0.0, 1.0);
        match self.accuracy.get(head) {
            Some(bins) => bins[((p * bins.len() as f64) as usize).min(bins.len() - 1)],
            None => p,
        }
    }

    /// This step's tree from the heads' ranked proposals, what the request has learnt so
    /// far ([`Feedback`]) and the costs at its cache length ([`DynamicTree::costs_at`]).
    pub fn choose(&self, ranked: &[Ranked], fb: &Feedback, costs: &Costs) -> Choice {
        self.choose_for(ranked, fb, costs, Conditioning::Independent)
    }

    /// [`DynamicTree::choose`] for proposals of the given [`Conditioning`].
    pub fn choose_for(
        &self,
        ranked: &[Ranked],
        fb: &Feedback,
        costs: &Costs,
        conditioning: Conditioning,
    ) -> Choice {
        let acc = self.accuracies(ranked, fb);
        let (paths, expected) = greedy_tree(&acc, self.max_nodes(), conditioning);
        let best = (0..self.max_nodes())
            .max_by(|&a, &b| {
                let gain = |n: usize| expected[n] - fb.lambda * costs.cost[n];
                // Ties go to the smaller tree.
                gain(a).total_cmp(&gain(b)).then(b.cmp(&a))
            })
            .unwrap_or(0);
        let paths = paths[..best.min(paths.len())].to_vec();
        // Nodes of one depth exclude each other: their estimates add up to the chance that
        // the accepted path reaches that depth.
        let mut reach = vec![0.0; ranked.len()];
        for path in &paths {
            let p: f64 = path.iter().enumerate().map(|(h, &r)| acc[h][r]).product();
            reach[path.len() - 1] += p;
        }
        Choice { paths, reach }
    }

    /// Each proposal's chance of being accepted given its parent: the calibrated estimate
    /// of the head's probability, corrected by the request's feedback, at most 1.
    fn accuracies(&self, ranked: &[Ranked], fb: &Feedback) -> Vec<Vec<f64>> {
        ranked
            .iter()
            .enumerate()
            .map(|(h, r)| {
                let f = fb.factor(h);
                r.iter()
                    .map(|&(_, p)| (f * self.estimate(h, p)).min(1.0))
                    .collect()
            })
            .collect()
    }

    /// Whether the heads that ran (`ranked`: heads 0..=h, best first) already decide this
    /// step's tree, whatever the deeper heads would say (which then need not run; after
    /// head 0 this is often the root alone, a plain step). A node below head h's has an
    /// estimate of at most u, the best path's through heads 0..=h (estimates are products
    /// of values in [0, 1], each head's best first). A tree with s nodes from these heads
    /// and j ≥ 1 deeper ones expects at most E(s) + j·u tokens, E(s) being the best s-node
    /// tree of these heads ([`greedy_tree`]'s). When that, less its cost, stays below the
    /// gain of the tree these heads choose for every s and j, no deeper node can pay.
    pub fn settled(
        &self,
        ranked: &[Ranked],
        fb: &Feedback,
        costs: &Costs,
        conditioning: Conditioning,
    ) -> bool {
        let n = self.max_nodes().min(costs.cost.len());
        let acc = self.accuracies(ranked, fb);
        let u: f64 = acc
            .iter()
            .map(|a| a.first().copied().unwrap_or(0.0))
            .product();
        let (_, expected) = greedy_tree(&acc, n, conditioning);
        let gain = |nodes: usize, tokens: f64| tokens - fb.lambda * costs.cost[nodes - 1];
        let best = (1..=n)
            .map(|k| gain(k, expected[k - 1]))
            .fold(f64::NEG_INFINITY, f64::max);
        (1..n).all(|s| (1..=n - s).all(|j| gain(s + j, expected[s - 1] + j as f64 * u) < best))
    }
}

/// A step's tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// Medusa paths (empty: verify the root alone, a plain step).
    pub paths: Vec<Vec<usize>>,
    /// `reach[d]`: estimated chance that the accepted path reaches depth d + 1.
    pub reach: Vec<f64>,
}

impl Choice {
    /// The root alone (no paths): nothing expected beyond it.
    pub fn root() -> Self {
        Self {
            paths: vec![],
            reach: vec![],
        }
    }

    /// Tokens it is expected to accept beyond the root.
    pub fn expected(&self) -> f64 {
        self.reach.iter().sum()
    }
}

/// What a request has learnt about its own text, step by step:
/// - λ, a moving average of the tokens per unit of cost its steps yield (at least 1,
///   plain decoding's);
/// - per depth d, how often its accepted paths reached d against how often the estimates
///   said they would (decaying sums, starting from agreement). Their ratio t_d corrects
///   the estimates: head d's by t_d / t_(d−1), so a text whose head 2 does worse than in
///   calibration gets fewer depth-2 nodes while its head 1 keeps its nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct Feedback {
    pub lambda: f64,
    reached: Vec<f64>,
    expected: Vec<f64>,
}

impl Default for Feedback {
    fn default() -> Self {
        Self {
            lambda: 1.0,
            reached: vec![],
            expected: vec![],
        }
    }
}

impl Feedback {
    /// Weight of the starting agreement, in expected tokens, per depth.
    const PRIOR: f64 = 1.0;
    const DECAY: f64 = 0.9;
    const ALPHA: f64 = 0.25;

    /// t_d for depth `d` + 1.
    fn ratio(&self, d: usize) -> f64 {
        let (r, e) = (
            self.reached.get(d).copied().unwrap_or(0.0),
            self.expected.get(d).copied().unwrap_or(0.0),
        );
        (r + Self::PRIOR) / (e + Self::PRIOR)
    }

    /// What the next request starts from: the same λ and ratios, its evidence halved (a
    /// new text may differ; it confirms or overturns them twice as fast).
    pub fn carried(&self) -> Self {
        let half = |v: &[f64]| v.iter().map(|x| x / 2.0).collect();
        Self {
            lambda: self.lambda,
            reached: half(&self.reached),
            expected: half(&self.expected),
        }
    }

    /// Factor on head `h`'s estimates, in [0.1, 2].
    pub fn factor(&self, h: usize) -> f64 {
        let before = if h == 0 { 1.0 } else { self.ratio(h - 1) };
        (self.ratio(h) / before).clamp(0.1, 2.0)
    }

    /// After a step that verified `nodes` nodes chosen as `choice` at `costs` and emitted
    /// `tokens` (its accepted depth + 1), `by_heads` of them along the heads' own nodes
    /// (the rest along nodes prompt lookup added, [`crate::lookup`]): λ counts every
    /// token, the estimates' scores only the heads'.
    pub fn observe(
        &mut self,
        costs: &Costs,
        nodes: usize,
        choice: &Choice,
        tokens: usize,
        by_heads: usize,
    ) {
        let c = costs.cost[nodes.clamp(1, costs.cost.len()) - 1] + costs.heads;
        self.lambda =
            ((1.0 - Self::ALPHA) * self.lambda + Self::ALPHA * tokens as f64 / c).max(1.0);
        if self.reached.len() < choice.reach.len() {
            self.reached.resize(choice.reach.len(), 0.0);
            self.expected.resize(choice.reach.len(), 0.0);
        }
        for (d, &p) in choice.reach.iter().enumerate().filter(|(_, p)| **p > 0.0) {
            let hit = f64::from(u8::from(by_heads > d + 1));
            self.reached[d] = Self::DECAY * self.reached[d] + hit;
            self.expected[d] = Self::DECAY * self.expected[d] + p;
        }
    }
}

/// Medusa's greedy tree: paths in the order they are added, best expected acceptance first
/// (a path's is the product of `acc[k][r_k]` along it), and the expected tokens per step
/// 1 + Σ P(path) of the trees of the first n − 1 paths, n = 1..=max_nodes. With
/// [`Conditioning::Chain`] only the root and the top-1 chain ([0], [0, 0], ..) get children.
pub fn greedy_tree(
    acc: &[Vec<f64>],
    max_nodes: usize,
    conditioning: Conditioning,
) -> (Vec<Vec<usize>>, Vec<f64>) {
    let mut paths: Vec<(Vec<usize>, f64)> = vec![];
    let mut expected = vec![1.0];
    while expected.len() < max_nodes {
        // Candidates: the next unused rank under the root and under every path.
        let mut best: Option<(Vec<usize>, f64)> = None;
        let parents = std::iter::once((vec![], 1.0)).chain(paths.iter().cloned());
        for (parent, p) in parents {
            let depth = parent.len();
            let off_chain = parent.iter().any(|&r| r != 0);
            if depth >= acc.len() || (conditioning == Conditioning::Chain && off_chain) {
                continue;
            }
            let used = paths
                .iter()
                .filter(|(q, _)| q.len() == depth + 1 && q[..depth] == parent[..])
                .count();
            if used >= acc[depth].len() {
                continue;
            }
            let mut child = parent.clone();
            child.push(used);
            let pc = p * acc[depth][used];
            if best.as_ref().is_none_or(|b| pc > b.1) {
                best = Some((child, pc));
            }
        }
        let Some((child, p)) = best else { break };
        expected.push(expected.last().copied().unwrap_or(1.0) + p);
        paths.push((child, p));
    }
    while expected.len() < max_nodes {
        expected.push(*expected.last().unwrap_or(&1.0));
    }
    (paths.into_iter().map(|(p, _)| p).collect(), expected)
}

#[cfg(test)]
mod tests;
