//! Datastore lookup: a third proposer beside the heads and prompt lookup, retrieval-based
//! drafting in the manner of REST (He et al., 2023). Prompt lookup finds the last few tokens
//! in this request's own text; the datastore finds them in a fixed corpus of the base
//! model's earlier answers (`toki datastore` builds it from self-distilled data, the data
//! the heads learn from), and proposes what most often followed them there. A small model's
//! answers are formulaic ("Here is a Python function that ...", "```python\ndef"), so a
//! chain of several tokens is often right where the heads see one token ahead at a time.
//!
//! ```text
//!   corpus     ... the list of numbers . \n ```python \n def sum_even ( numbers ) : ...
//!              ... a list of numbers . \n ```python \n def is_prime ( n ) : ...
//!              ... of numbers . \n ```python \n def sum_list ( numbers ) : ...
//!   history    ... a given list of numbers . \n ```python
//!                                        ^^^^^^^^^^^^^^^  the last 3 tokens, found 3 times
//!   proposes   \n def                 the most frequent next token (3 of 3), then the
//!                                     most frequent after it among those (3 of 3), ...
//! ```
//!
//! Every suffix of the corpus is sorted by its first [`KEY`] tokens once (a suffix array),
//! so the occurrences of a pattern are one range of it, found by binary search, and the
//! occurrences of the pattern followed by token t are a run within that range: each chain
//! token is the longest run at the next offset. Documents end with [`END`]; no match or
//! chain crosses it. The chain is grafted onto the tree like prompt lookup's, priced by
//! its own hit rates ([`crate::lookup::LookupStats`]); the base verifies every node, so the
//! output is unchanged.
//!
//! File: `datastore.safetensors`, one tensor `tokens` (U32, or U16 where every id fits),
//! the documents' tokens each followed by the end mark (`u32::MAX`, or `u16::MAX`).

use std::ops::Range;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

use crate::error::{DecodeError, Result};
use crate::lookup::{ChainSource, Continuation, Lookup, Support};

/// Marks a document's end in the token stream.
pub const END: u32 = u32::MAX;
/// Suffixes are ordered by at most this many tokens: a query is a match of up to
/// `max_match` tokens and a chain of up to `max_len` after it (4 + 8 by default).
pub const KEY: usize = 16;
/// The tensor's name in the file.
const TENSOR: &str = "tokens";

/// A corpus of token documents and its suffix array.
#[derive(Debug, Clone)]
pub struct Datastore {
    /// The documents' tokens, each document followed by [`END`].
    tokens: Vec<u32>,
    /// Every position that does not hold [`END`], ordered by the [`KEY`] tokens from it.
    sorted: Vec<u32>,
}

impl Datastore {
    /// The datastore of `docs` (token ids; empty documents are skipped). Token ids must be
    /// below `u32::MAX` (the end mark).
    pub fn new(docs: impl IntoIterator<Item = Vec<u32>>) -> Result<Self> {
        let mut tokens = vec![];
        for doc in docs.into_iter().filter(|d| !d.is_empty()) {
            if doc.contains(&END) {
                return Err(DecodeError::Request(format!(
                    "datastore: token id {END} is the end mark, not a token"
                )));
            }
            tokens.extend(doc);
            tokens.push(END);
        }
        Self::from_stream(tokens)
    }

    /// From the stream as stored (documents each followed by [`END`]).
    fn from_stream(tokens: Vec<u32>) -> Result<Self> {
        if tokens.len() >= u32::MAX as usize {
            return Err(DecodeError::Request(format!(
                "datastore: {} tokens is more than a u32 position holds",
                tokens.len()
            )));
        }
        if tokens.last().is_some_and(|&t| t != END) {
            return Err(DecodeError::Request(
                "datastore: the token stream does not end with the end mark".into(),
            ));
        }
        let mut sorted: Vec<u32> = (0..tokens.len() as u32)
            .filter(|&p| tokens[p as usize] != END)
            .collect();
        let key = |p: u32| &tokens[p as usize..(p as usize + KEY).min(tokens.len())];
        // Ties (equal first KEY tokens) by position, so the order is reproducible.
        sorted.sort_unstable_by(|&a, &b| key(a).cmp(key(b)).then(a.cmp(&b)));
        Ok(Self { tokens, sorted })
    }

    /// How many tokens the documents hold (end marks not counted).
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The largest token id in the corpus (to check it against a model's vocabulary).
    pub fn max_token(&self) -> Option<u32> {
        self.tokens.iter().copied().filter(|&t| t != END).max()
    }

    /// Token `off` places after position `p` ([`END`] past the stream's end).
    fn after(&self, p: u32, off: usize) -> u32 {
        self.tokens.get(p as usize + off).copied().unwrap_or(END)
    }

    /// Within `within` (suffixes that agree on their first `off` tokens, so ordered by the
    /// token at `off`), the run whose token at `off` is `t`.
    fn run(&self, within: Range<usize>, off: usize, t: u32) -> Range<usize> {
        let slice = &self.sorted[within.clone()];
        let lo = slice.partition_point(|&p| self.after(p, off) < t);
        let hi = slice.partition_point(|&p| self.after(p, off) <= t);
        within.start + lo..within.start + hi
    }

    /// The suffixes that start with `pattern` (at most [`KEY`] tokens).
    fn find_pattern(&self, pattern: &[u32]) -> Range<usize> {
        let mut r = 0..self.sorted.len();
        for (off, &t) in pattern.iter().enumerate().take(KEY) {
            if r.is_empty() {
                break;
            }
            r = self.run(r, off, t);
        }
        r
    }

    /// The most frequent next token (ties: the smaller id) among the suffixes `r`, which
    /// agree on their first `off` tokens, and its run.
    fn most_frequent(&self, r: Range<usize>, off: usize) -> (u32, Range<usize>) {
        let mut best = (END, r.start..r.start);
        let mut i = r.start;
        while i < r.end {
            let t = self.after(self.sorted[i], off);
            let run = self.run(i..r.end, off, t);
            if run.len() > best.1.len() {
                best = (t, run.clone());
            }
            i = run.end.max(i + 1);
        }
        best
    }

    /// The chain that most often followed the longest suffix (`max_match` down to
    /// `min_match` tokens) of `history` in the corpus: token by token, the most frequent
    /// continuation of the match and the chain so far, up to `max_len` tokens, ending where
    /// the documents do. `None` without a match.
    pub fn find(&self, lookup: &Lookup, history: &[u32]) -> Option<Continuation> {
        let longest = lookup.max_match.min(KEY.saturating_sub(1));
        for n in (lookup.min_match.max(1)..=longest).rev() {
            if history.len() < n {
                continue;
            }
            let mut r = self.find_pattern(&history[history.len() - n..]);
            if r.is_empty() {
                continue;
            }
            let (mut tokens, mut support) = (vec![], vec![]);
            for off in n..(n + lookup.max_len).min(KEY) {
                let (t, run) = self.most_frequent(r.clone(), off);
                if t == END || run.is_empty() {
                    break;
                }
                tokens.push(t);
                support.push(Support {
                    count: run.len() as u32,
                    of: r.len() as u32,
                });
                r = run;
            }
            if tokens.is_empty() {
                continue;
            }
            return Some(Continuation {
                matched: n,
                tokens,
                source: ChainSource::Datastore,
                support,
            });
        }
        None
    }

    /// Read `datastore.safetensors`.
    pub fn load(path: &Path) -> Result<Self> {
        let err = |msg: String| DecodeError::Datastore {
            path: path.to_path_buf(),
            msg,
        };
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| err(e.to_string()))?;
        let t = st
            .tensor(TENSOR)
            .map_err(|_| err(format!("no tensor `{TENSOR}`")))?;
        if t.shape().len() != 1 {
            return Err(err(format!(
                "`{TENSOR}` has shape {:?}, not [n]",
                t.shape()
            )));
        }
        let data = t.data();
        let tokens: Vec<u32> = match t.dtype() {
            Dtype::U32 => data
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::U16 => data
                .chunks_exact(2)
                .map(|b| match u16::from_le_bytes([b[0], b[1]]) {
                    u16::MAX => END,
                    v => u32::from(v),
                })
                .collect(),
            other => return Err(err(format!("`{TENSOR}` is {other:?}, not U32 or U16"))),
        };
        Self::from_stream(tokens).map_err(|e| err(e.to_string()))
    }

    /// Write `datastore.safetensors` (U16 where every id fits below the end mark), via a
    /// temp file and a rename.
    pub fn save(&self, path: &Path) -> Result<()> {
        let err = |msg: String| DecodeError::Datastore {
            path: path.to_path_buf(),
            msg,
        };
        let narrow = self.max_token().is_none_or(|t| t < u32::from(u16::MAX));
        let (dtype, bytes): (Dtype, Vec<u8>) = if narrow {
            let b = self.tokens.iter().flat_map(|&t| match t {
                END => u16::MAX.to_le_bytes(),
                v => (v as u16).to_le_bytes(),
            });
            (Dtype::U16, b.collect())
        } else {
            let b = self.tokens.iter().flat_map(|t| t.to_le_bytes());
            (Dtype::U32, b.collect())
        };
        let view = TensorView::new(dtype, vec![self.tokens.len()], &bytes)
            .map_err(|e| err(e.to_string()))?;
        let tmp = path.with_extension("safetensors.tmp");
        safetensors::serialize_to_file([(TENSOR, view)], None, &tmp)
            .map_err(|e| err(e.to_string()))?;
        std::fs::rename(&tmp, path).map_err(|e| err(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(max_len: usize) -> Lookup {
        Lookup {
            min_match: 2,
            max_match: 3,
            max_len,
        }
    }

    #[test]
    fn proposes_the_most_frequent_continuation_of_the_longest_match() {
        let ds = Datastore::new([
            vec![1, 2, 3, 4, 5, 6],
            vec![9, 2, 3, 4, 5, 7],
            vec![8, 2, 3, 4, 5, 7, 1],
            vec![2, 3, 9, 9],
        ])
        .unwrap();
        // [2, 3] is followed by 4 three times and 9 once; then 5, then 7 (2 of 3), then
        // the end of one document and 1 in the other: 1 (the end mark is never proposed).
        let c = ds.find(&lookup(8), &[0, 0, 2, 3]).unwrap();
        assert_eq!(c.matched, 2);
        assert_eq!(c.source, ChainSource::Datastore);
        assert_eq!(c.tokens, vec![4, 5, 7, 1]);
        let shares: Vec<(u32, u32)> = c.support.iter().map(|s| (s.count, s.of)).collect();
        assert_eq!(shares, vec![(3, 4), (3, 3), (2, 3), (1, 2)]);
        // The longer match [9, 2, 3] narrows it to one document.
        let c = ds.find(&lookup(8), &[9, 2, 3]).unwrap();
        assert_eq!((c.matched, c.tokens), (3, vec![4, 5, 7]));
        // Chains stop at max_len; no match of 2+ tokens, no chain.
        assert_eq!(ds.find(&lookup(2), &[2, 3]).unwrap().tokens, vec![4, 5]);
        assert_eq!(ds.find(&lookup(8), &[3, 2]), None);
        assert_eq!(ds.find(&lookup(8), &[3]), None);
        // A match at a document's end has nothing after it: the shorter match is tried.
        let ds = Datastore::new([vec![1, 2, 3], vec![0, 2, 3, 4]]).unwrap();
        let c = ds.find(&lookup(8), &[1, 2, 3]);
        assert_eq!(c.map(|c| (c.matched, c.tokens)), Some((2, vec![4])));
    }

    #[test]
    fn ties_go_to_the_smaller_token_and_matches_never_cross_documents() {
        let ds = Datastore::new([vec![5, 6, 8], vec![5, 6, 7], vec![1, 2], vec![3, 4]]).unwrap();
        assert_eq!(ds.find(&lookup(1), &[5, 6]).unwrap().tokens, vec![7]);
        // [2, 3] spans the end of one document and the start of the next.
        assert_eq!(ds.find(&lookup(4), &[2, 3]), None);
        assert_eq!(ds.len(), 10);
    }

    #[test]
    fn matches_the_search_of_every_occurrence_on_random_text() {
        // A small alphabet makes long runs of repeats and many ties.
        let mut x = 12345u64;
        let docs: Vec<Vec<u32>> = (0..20)
            .map(|_| {
                (0..50)
                    .map(|_| {
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        ((x >> 33) % 4) as u32
                    })
                    .collect()
            })
            .collect();
        let ds = Datastore::new(docs.clone()).unwrap();
        // The reference: scan every occurrence of the pattern and the chain so far.
        let reference = |pattern: &[u32], max_len: usize| -> Vec<u32> {
            let mut prefix = pattern.to_vec();
            let mut chain = vec![];
            for _ in 0..max_len {
                let mut counts = std::collections::BTreeMap::<u32, usize>::new();
                for d in &docs {
                    for w in d.windows(prefix.len() + 1) {
                        if w[..prefix.len()] == prefix[..] {
                            *counts.entry(w[prefix.len()]).or_default() += 1;
                        }
                    }
                }
                // Most frequent, ties to the smaller token.
                let Some((&t, _)) = counts.iter().rev().max_by_key(|(_, c)| **c) else {
                    break;
                };
                chain.push(t);
                prefix.push(t);
            }
            chain
        };
        for pattern in [[0u32, 1], [3, 3], [2, 0], [1, 1]] {
            let l = Lookup {
                min_match: 2,
                max_match: 2,
                max_len: 6,
            };
            let got = ds.find(&l, &pattern).map(|c| c.tokens).unwrap_or_default();
            assert_eq!(got, reference(&pattern, 6), "pattern {pattern:?}");
        }
    }

    #[test]
    fn saves_and_loads_and_names_the_file_of_a_bad_one() {
        let dir = toki_model::testing::ScratchDir::new("ds").unwrap();
        for docs in [
            vec![vec![1, 2, 3], vec![4, 2, 3, 5]],
            vec![vec![70_000, 2, 3]],
        ] {
            let ds = Datastore::new(docs).unwrap();
            let path = dir.join("datastore.safetensors");
            ds.save(&path).unwrap();
            let back = Datastore::load(&path).unwrap();
            assert_eq!(back.tokens, ds.tokens);
            assert_eq!(back.sorted, ds.sorted);
        }
        let bad = dir.join("bad.safetensors");
        std::fs::write(&bad, b"not a safetensors file").unwrap();
        let e = Datastore::load(&bad).unwrap_err().to_string();
        assert!(e.contains("bad.safetensors"), "{e}");
        let missing = Datastore::load(&dir.join("missing.safetensors")).unwrap_err();
        assert!(missing.to_string().contains("missing.safetensors"));
        assert!(Datastore::new([vec![1, END]]).is_err());
    }
}
