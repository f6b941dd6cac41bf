//! Prompt lookup: a second, free proposer beside the heads. Where the last few tokens
//! (root included) already occurred earlier in the prompt or the answer, the tokens that
//! followed them then are proposed as a chain ("prompt lookup decoding", vLLM's `ngram`
//! speculator, llama.cpp's lookup decoding). Summaries copy their source, code repeats its
//! names, and a small model's greedy text repeats itself: there a chain of several tokens is
//! often right, deeper than the heads reach, and it costs no model pass to propose.
//!
//! The chain is grafted onto the step's dynamic tree ([`graft`]): a lookup token that one
//! of the heads already ranks at that depth reuses that rank (the node is shared), others
//! take an extra rank. How deep the chain goes is priced like every node
//! ([`crate::dynamic`]): its j-th token is worth verifying when the chance that the chain is
//! right that far is at least λ times the cost it adds. The chances are learnt as decoding
//! goes ([`LookupStats`]: per match length and depth, how often such a token was right
//! when the ones before it were), starting from an even guess.
//!
//! ```text
//!   history    def area ( r ) : return 3.14 * r * r \n x = area ( r
//!                  ^^^^^^^^                                ^^^^^^^^  the last 3 tokens,
//!                  their latest earlier occurrence         matched
//!   proposes   ) : return 3.14 * r * r      what followed it there (the base verifies:
//!                                           here ")" is right, ":" is not)
//! ```
//!
//! The output is unchanged: grafted nodes are verified by the base like any other.

use crate::proposer::Ranked;

/// How prompt lookup searches (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup {
    /// Shortest suffix of the history that counts as a match.
    pub min_match: usize,
    /// Longest suffix tried first (a longer match is a better predictor).
    pub max_match: usize,
    /// Most tokens proposed in one chain.
    pub max_len: usize,
}

impl Default for Lookup {
    fn default() -> Self {
        Self {
            min_match: 2,
            max_match: 4,
            max_len: 8,
        }
    }
}

/// Where a chain was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainSource {
    /// This request's prompt and answer so far ([`Lookup::find`]).
    Prompt,
    /// A corpus of the base's earlier answers ([`crate::datastore::Datastore`]).
    Datastore,
}

/// A proposed chain: the tokens that followed an occurrence of the history's last
/// `matched` tokens (prompt lookup: the latest one; the datastore: the most frequent
/// continuation of all of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    pub matched: usize,
    pub tokens: Vec<u32>,
    pub source: ChainSource,
    /// Per token of a datastore chain: of the occurrences of the match and the chain
    /// before it, how many continued with it (empty for prompt lookup).
    pub support: Vec<Support>,
}

/// `count` of `of` corpus occurrences continued with a datastore chain's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    pub count: u32,
    pub of: u32,
}

impl Support {
    /// Classes of support with their prior chance of being right, as measured on the demo
    /// model's bench answers against a datastore of its distilled answers (first tokens):
    /// one occurrence 0.43; a share under 0.2 0.04, 0.2-0.4 0.15, 0.4-0.6 0.30, 0.6-0.8
    /// 0.41, over 0.8 0.59-0.78, and 0.93 where that share is of 20 or more.
    const PRIORS: [f64; 7] = [0.45, 0.05, 0.15, 0.3, 0.45, 0.7, 0.9];

    fn class(self) -> usize {
        let share = f64::from(self.count) / f64::from(self.of.max(1));
        match self.of {
            0 | 1 => 0,
            _ if share >= 0.8 && self.of >= 20 => 6,
            _ => 1 + ((share * 5.0) as usize).min(4),
        }
    }
}

impl Lookup {
    /// The continuation of the longest suffix (`max_match` down to `min_match` tokens) of
    /// `history` that occurred before, at its latest occurrence; `None` without a match.
    pub fn find(&self, history: &[u32]) -> Option<Continuation> {
        let len = history.len();
        for n in (self.min_match.max(1)..=self.max_match).rev() {
            if len <= n {
                continue;
            }
            let suffix = &history[len - n..];
            // Latest start i < len - n whose n tokens equal the suffix (and so have at
            // least one token after them).
            let hit = (0..len - n).rev().find(|&i| &history[i..i + n] == suffix);
            if let Some(i) = hit {
                // What followed then, continued past the history's end by the proposal
                // itself: a text that repeats with period len - from goes on repeating.
                let from = i + n;
                let mut tokens: Vec<u32> = Vec::with_capacity(self.max_len);
                for k in from..from + self.max_len {
                    let t = if k < len { history[k] } else { tokens[k - len] };
                    tokens.push(t);
                }
                return Some(Continuation {
                    matched: n,
                    tokens,
                    source: ChainSource::Prompt,
                    support: vec![],
                });
            }
        }
        None
    }
}

/// How often chain tokens were right given that the chain's tokens before them were
/// (decaying counts over a prior). Prompt lookup's are kept per match length (1, 2, 3, 4+)
/// and depth j, with an even prior; the datastore's per class of support (the share of the
/// corpus occurrences that continued with the token, [`Support`]), whatever the depth,
/// with the class's measured prior. Each apart for tokens that took a node of their own
/// and tokens whose node the heads' tree already held: the second kind are right more
/// often (the heads chose them too), and only the first kind costs anything. Carried from
/// request to request by the engine.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LookupStats {
    /// `[bucket][j] = (hits, tries)`.
    counts: Vec<Vec<(f64, f64)>>,
}

impl LookupStats {
    const PRIOR_TRIES: f64 = 2.0;
    const DECAY: f64 = 0.98;

    /// Where token j of `chain` is counted, `fresh` if it took a node of its own:
    /// (bucket, depth slot, prior chance).
    fn slot(chain: &Continuation, j: usize, fresh: bool) -> (usize, usize, f64) {
        let (b, d, prior) = match chain.source {
            ChainSource::Prompt => (chain.matched.saturating_sub(1).min(3), j, 0.5),
            ChainSource::Datastore => {
                let class = chain.support.get(j).map_or(0, |s| s.class());
                (4 + class, 0, Support::PRIORS[class])
            }
        };
        (2 * b + usize::from(fresh), d, prior)
    }

    /// Estimated chance that token j of `chain` is right when tokens 0..j are, on a node
    /// of its own (`fresh`) or on one the tree already held.
    pub fn rate(&self, chain: &Continuation, j: usize, fresh: bool) -> f64 {
        let (b, d, prior) = Self::slot(chain, j, fresh);
        let (h, t) = self
            .counts
            .get(b)
            .and_then(|b| b.get(d))
            .copied()
            .unwrap_or((0.0, 0.0));
        (h + prior * Self::PRIOR_TRIES) / (t + Self::PRIOR_TRIES)
    }

    /// After a step that verified the first `fresh.len()` tokens of `chain` (`fresh[j]`:
    /// token j took a node of its own, [`graft`]) and emitted `emitted` (the accepted
    /// tokens and the bonus token).
    pub fn observe(&mut self, chain: &Continuation, fresh: &[bool], emitted: &[u32]) {
        for (j, (&t, &own)) in chain.tokens.iter().zip(fresh).enumerate() {
            // Token j was tried only if tokens 0..j were right; emitted[j] is then the
            // base's token at that depth.
            let Some(&base) = emitted.get(j) else { break };
            let (b, d, _) = Self::slot(chain, j, own);
            if self.counts.len() <= b {
                self.counts.resize(b + 1, vec![]);
            }
            let row = &mut self.counts[b];
            if row.len() <= d {
                row.resize(d + 1, (0.0, 0.0));
            }
            let hit = t == base;
            let (h, n) = row[d];
            row[d] = (
                Self::DECAY * h + f64::from(u8::from(hit)),
                Self::DECAY * n + 1.0,
            );
            if !hit {
                break;
            }
        }
    }
}

/// Add `chain` under the root of the tree `paths` over `ranked` (extended in place, depth
/// by depth): a token a head ranks at its depth reuses that rank, others are appended as
/// an extra rank with probability 0. A token whose node the tree already holds costs
/// nothing; a new node is added only while `worth(j, nodes, fresh)` (chain token j, the
/// tree's node count before adding it, which of tokens 0..j took new nodes) says so,
/// which also bounds the tree's size. Returns, per chain token the tree holds, whether it
/// took a new node.
pub fn graft(
    ranked: &mut Vec<Ranked>,
    paths: &mut Vec<Vec<usize>>,
    chain: &[u32],
    mut worth: impl FnMut(usize, usize, &[bool]) -> bool,
) -> Vec<bool> {
    let mut path: Vec<usize> = vec![];
    let mut fresh = vec![];
    for (j, &token) in chain.iter().enumerate() {
        let at_depth = ranked.get(j).map_or(&[][..], |r| &r[..]);
        let known = at_depth.iter().position(|&(t, _)| t == token);
        path.push(known.unwrap_or(at_depth.len()));
        if paths.contains(&path) {
            fresh.push(false);
            continue;
        }
        if !worth(j, paths.len() + 1, &fresh) {
            break;
        }
        if known.is_none() {
            if ranked.len() <= j {
                ranked.push(vec![]);
            }
            ranked[j].push((token, 0.0));
        }
        paths.push(path.clone());
        fresh.push(true);
    }
    fresh
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_latest_longest_match() {
        let l = Lookup {
            min_match: 2,
            max_match: 3,
            max_len: 3,
        };
        // Suffix [7, 8, 9] occurred at 1..4 (followed by 4 5 6); [8, 9] also at 6..8.
        let h = [0, 7, 8, 9, 4, 5, 6, 8, 9, 1, 7, 8, 9];
        assert_eq!(
            l.find(&h),
            Some(Continuation {
                matched: 3,
                tokens: vec![4, 5, 6],
                source: ChainSource::Prompt,
                support: vec![],
            })
        );
        // Only a 2-token match.
        let h = [8, 9, 1, 2, 5, 8, 9];
        assert_eq!(
            l.find(&h),
            Some(Continuation {
                matched: 2,
                tokens: vec![1, 2, 5],
                source: ChainSource::Prompt,
                support: vec![],
            })
        );
        assert_eq!(l.find(&[1, 2, 3, 4]), None);
        assert_eq!(l.find(&[1]), None);
        // Text that repeats: the continuation runs past the history's end and goes on
        // with the period it found.
        assert_eq!(l.find(&[5, 5, 5, 5]).map(|c| c.tokens), Some(vec![5, 5, 5]));
        let long = Lookup { max_len: 5, ..l };
        let h = [1, 2, 3, 1, 2, 3, 1, 2];
        assert_eq!(long.find(&h).map(|c| c.tokens), Some(vec![3, 1, 2, 3, 1]));
    }

    #[test]
    fn rates_learn_from_what_was_verified() {
        use ChainSource::{Datastore, Prompt};
        let chain = |source, matched, tokens: &[u32], support: Vec<Support>| Continuation {
            matched,
            tokens: tokens.to_vec(),
            source,
            support,
        };
        let mut s = LookupStats::default();
        let c3 = chain(Prompt, 3, &[1, 2, 3], vec![]);
        assert_eq!(s.rate(&c3, 0, true), 0.5);
        // Chain [1, 2, 3] all verified on new nodes; the base said [1, 2, 9]: two hits
        // then a miss.
        s.observe(&c3, &[true; 3], &[1, 2, 9, 4]);
        assert!((s.rate(&c3, 0, true) - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.rate(&c3, 2, true) - 1.0 / 3.0).abs() < 1e-12);
        // Tokens on nodes the heads' tree held are counted apart.
        assert_eq!(s.rate(&c3, 0, false), 0.5);
        s.observe(&c3, &[false], &[7]);
        assert!((s.rate(&c3, 0, false) - 1.0 / 3.0).abs() < 1e-12);
        assert!((s.rate(&c3, 0, true) - 2.0 / 3.0).abs() < 1e-12);
        // Other match lengths keep their own counts; unverified tokens count for nothing.
        let c2 = chain(Prompt, 2, &[5, 6], vec![]);
        assert_eq!(s.rate(&c2, 0, true), 0.5);
        s.observe(&c2, &[true], &[5, 6]);
        assert!((s.rate(&c2, 0, true) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.rate(&c2, 1, true), 0.5);
        // Datastore tokens start from their class's prior, whatever the depth, and learn
        // per class: a share of 9 in 10 (0.7), of 1 in 10 (0.05), of 30 in 30 (0.9).
        let sup = |count, of| Support { count, of };
        let d = chain(
            Datastore,
            2,
            &[7, 8, 9],
            vec![sup(9, 10), sup(1, 10), sup(30, 30)],
        );
        assert!((s.rate(&d, 0, true) - 0.7).abs() < 1e-12);
        assert!((s.rate(&d, 1, true) - 0.05).abs() < 1e-12);
        assert!((s.rate(&d, 2, true) - 0.9).abs() < 1e-12);
        s.observe(&d, &[true; 3], &[7, 6]);
        assert!((s.rate(&d, 0, true) - 2.4 / 3.0).abs() < 1e-12);
        assert!((s.rate(&d, 1, true) - 0.1 / 3.0).abs() < 1e-12);
        assert!((s.rate(&d, 2, true) - 0.9).abs() < 1e-12, "never tried");
        assert!(
            (s.rate(&c3, 0, true) - 2.0 / 3.0).abs() < 1e-12,
            "prompt lookup's own"
        );
    }

    #[test]
    fn graft_shares_ranked_nodes_and_stops_when_not_worth_it() {
        // Heads: depth 0 ranks [10, 11], depth 1 ranks [20]; tree [[0], [0, 0]].
        let mut ranked: Vec<Ranked> = vec![vec![(10, 0.6), (11, 0.2)], vec![(20, 0.5)]];
        let mut paths = vec![vec![0], vec![0, 0]];
        // Chain 10 21 30 31: shares [0], then adds [0, 1] (21 appended to depth 1) and
        // [0, 1, 0] (a new depth); the fourth token is not worth a node.
        let held = graft(&mut ranked, &mut paths, &[10, 21, 30, 31], |j, _, _| j < 3);
        assert_eq!(
            held,
            vec![false, true, true],
            "the first node was the heads'"
        );
        assert_eq!(paths, vec![vec![0], vec![0, 0], vec![0, 1], vec![0, 1, 0]]);
        assert_eq!(ranked[1], vec![(20, 0.5), (21, 0.0)]);
        assert_eq!(ranked[2], vec![(30, 0.0)]);
        assert_eq!(ranked.len(), 3, "no depth for the token left out");
        // Room for one new node (a tree of at most two).
        let mut ranked: Vec<Ranked> = vec![vec![(10, 0.6)]];
        let mut paths = vec![];
        assert_eq!(
            graft(&mut ranked, &mut paths, &[11, 12], |_, n, _| n < 2),
            vec![true]
        );
        assert_eq!(paths, vec![vec![1]]);
    }
}
