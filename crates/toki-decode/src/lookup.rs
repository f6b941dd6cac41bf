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

/// A proposed chain: the tokens that followed the latest earlier occurrence of the
/// history's last `matched` tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    pub matched: usize,
    pub tokens: Vec<u32>,
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
                return Some(Continuation { matched: n, tokens });
            }
        }
        None
    }
}

/// Per match length (bucket) and depth j: how often a lookup token at depth j was right
/// given that the chain's tokens before it were (decaying counts over a prior of an even
/// chance). Carried from request to request by the engine.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LookupStats {
    /// `[bucket][j] = (hits, tries)`.
    counts: Vec<Vec<(f64, f64)>>,
}

impl LookupStats {
    const PRIOR_HITS: f64 = 1.0;
    const PRIOR_TRIES: f64 = 2.0;
    const DECAY: f64 = 0.98;

    fn bucket(matched: usize) -> usize {
        matched.saturating_sub(1).min(3)
    }

    /// Estimated chance that token j of a chain of match length `matched` is right when
    /// tokens 0..j are.
    pub fn rate(&self, matched: usize, j: usize) -> f64 {
        let (h, t) = self
            .counts
            .get(Self::bucket(matched))
            .and_then(|b| b.get(j))
            .copied()
            .unwrap_or((0.0, 0.0));
        (h + Self::PRIOR_HITS) / (t + Self::PRIOR_TRIES)
    }

    /// After a step that verified the first `verified` tokens of `chain` (match length
    /// `matched`) and emitted `emitted` (the accepted tokens and the bonus token).
    pub fn observe(&mut self, matched: usize, chain: &[u32], verified: usize, emitted: &[u32]) {
        let b = Self::bucket(matched);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, vec![]);
        }
        let row = &mut self.counts[b];
        for (j, &t) in chain.iter().enumerate().take(verified) {
            // Token j was tried only if tokens 0..j were right; emitted[j] is then the
            // base's token at that depth.
            let Some(&base) = emitted.get(j) else { break };
            if row.len() <= j {
                row.resize(j + 1, (0.0, 0.0));
            }
            let hit = t == base;
            let (h, n) = row[j];
            row[j] = (
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
/// an extra rank with probability 0. New nodes are added only while `worth(j, nodes)`
/// (chain token j, the tree's node count before adding it) says so, which also bounds the
/// tree's size;
/// nodes already in the tree cost nothing. Returns how many chain tokens the tree holds.
pub fn graft(
    ranked: &mut Vec<Ranked>,
    paths: &mut Vec<Vec<usize>>,
    chain: &[u32],
    mut worth: impl FnMut(usize, usize) -> bool,
) -> usize {
    let mut path: Vec<usize> = vec![];
    for (j, &token) in chain.iter().enumerate() {
        let at_depth = ranked.get(j).map_or(&[][..], |r| &r[..]);
        let known = at_depth.iter().position(|&(t, _)| t == token);
        path.push(known.unwrap_or(at_depth.len()));
        if paths.contains(&path) {
            continue;
        }
        if !worth(j, paths.len() + 1) {
            path.pop();
            break;
        }
        if known.is_none() {
            if ranked.len() <= j {
                ranked.push(vec![]);
            }
            ranked[j].push((token, 0.0));
        }
        paths.push(path.clone());
    }
    path.len()
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
                tokens: vec![4, 5, 6]
            })
        );
        // Only a 2-token match.
        let h = [8, 9, 1, 2, 5, 8, 9];
        assert_eq!(
            l.find(&h),
            Some(Continuation {
                matched: 2,
                tokens: vec![1, 2, 5]
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
        let mut s = LookupStats::default();
        assert_eq!(s.rate(3, 0), 0.5);
        // Chain [1, 2, 3] all verified; the base said [1, 2, 9]: two hits then a miss.
        s.observe(3, &[1, 2, 3], 3, &[1, 2, 9, 4]);
        assert!((s.rate(3, 0) - 2.0 / 3.0).abs() < 1e-12);
        assert!((s.rate(3, 2) - 1.0 / 3.0).abs() < 1e-12);
        // Other match lengths keep their own counts; unverified tokens count for nothing.
        assert_eq!(s.rate(2, 0), 0.5);
        s.observe(2, &[5, 6], 1, &[5, 6]);
        assert!((s.rate(2, 0) - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.rate(2, 1), 0.5);
    }

    #[test]
    fn graft_shares_ranked_nodes_and_stops_when_not_worth_it() {
        // Heads: depth 0 ranks [10, 11], depth 1 ranks [20]; tree [[0], [0, 0]].
        let mut ranked: Vec<Ranked> = vec![vec![(10, 0.6), (11, 0.2)], vec![(20, 0.5)]];
        let mut paths = vec![vec![0], vec![0, 0]];
        // Chain 10 21 30 31: shares [0], then adds [0, 1] (21 appended to depth 1) and
        // [0, 1, 0] (a new depth); the fourth token is not worth a node.
        let held = graft(&mut ranked, &mut paths, &[10, 21, 30, 31], |j, _| j < 3);
        assert_eq!(held, 3);
        assert_eq!(paths, vec![vec![0], vec![0, 0], vec![0, 1], vec![0, 1, 0]]);
        assert_eq!(ranked[1], vec![(20, 0.5), (21, 0.0)]);
        assert_eq!(ranked[2], vec![(30, 0.0)]);
        assert_eq!(ranked.len(), 3, "no depth for the token left out");
        // Room for one new node (a tree of at most two).
        let mut ranked: Vec<Ranked> = vec![vec![(10, 0.6)]];
        let mut paths = vec![];
        assert_eq!(graft(&mut ranked, &mut paths, &[11, 12], |_, n| n < 2), 1);
        assert_eq!(paths, vec![vec![1]]);
    }
}
