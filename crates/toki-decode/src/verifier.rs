//! The verifier: given the base model's choice at every tree node, keep the longest
//! candidate path the base would have produced itself.

use crate::acceptance::{AcceptRule, Choice, Dist};
use crate::sampling::Rng;
use crate::tree::TreeBuffers;

/// The outcome of one verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Accepted nodes from the root (always includes node 0), in tree order.
    pub accepted: Vec<usize>,
    /// The base's token after the last accepted node: emitted now, and the next root.
    pub bonus: u32,
}

/// Greedy verification. `tokens[i]` is node i's token, `base[i]` the base's choice for the
/// token after node i. A child is accepted iff its token equals the base's choice at its
/// parent; the longest accepted path wins (the first listed on ties).
pub fn verify_greedy(buffers: &TreeBuffers, tokens: &[u32], base: &[u32]) -> Verdict {
    let mut best: &[usize] = &[0];
    for path in &buffers.retrieve {
        let ok = 1 + path
            .windows(2)
            .take_while(|w| tokens[w[1]] == base[w[0]])
            .count();
        if ok > best.len() {
            best = &path[..ok];
        }
    }
    let last = best[best.len() - 1];
    Verdict {
        accepted: best.to_vec(),
        bonus: base[last],
    }
}

/// Verification on drawn tokens: `drawn(i)` is the token after node i, drawn from the
/// base's distribution there as plain sampling draws it (computed only for the nodes the
/// walk reaches). From the root, the child holding the drawn token continues the path (the
/// first, should two hold it); the walk ends at a node none of whose children does, and
/// its drawn token is the bonus. This is the lossless rule ([`crate::acceptance`]).
pub fn verify_drawn(
    buffers: &TreeBuffers,
    tokens: &[u32],
    mut drawn: impl FnMut(usize) -> crate::Result<u32>,
) -> crate::Result<Verdict> {
    let mut node = 0;
    let mut accepted = vec![0];
    loop {
        let token = drawn(node)?;
        match buffers.children[node].iter().find(|&&c| tokens[c] == token) {
            Some(&child) => {
                node = child;
                accepted.push(node);
            }
            None => {
                return Ok(Verdict {
                    accepted,
                    bonus: token,
                });
            }
        }
    }
}

/// Sampled verification. From the root, `rule` decides at each node which child (if any)
/// continues the path, given `dist(i)`, the base's distribution for the token after node i
/// (computed only for the nodes the walk reaches), and `draws(i)`, the generator of that
/// token's position. The walk ends when no child continues: the token the rule chose
/// then is the bonus.
pub fn verify_sampled(
    buffers: &TreeBuffers,
    tokens: &[u32],
    mut dist: impl FnMut(usize) -> Dist,
    rule: &dyn AcceptRule,
    draws: impl Fn(usize) -> Rng,
) -> Verdict {
    let mut node = 0;
    let mut accepted = vec![0];
    loop {
        let kids = &buffers.children[node];
        let kid_tokens: Vec<u32> = kids.iter().map(|&c| tokens[c]).collect();
        let p = dist(node);
        match rule.choose(&p, &kid_tokens, &mut draws(node)) {
            Choice::Accept(i) => {
                node = kids[i];
                accepted.push(node);
            }
            Choice::Next(token) => {
                return Verdict {
                    accepted,
                    bonus: token as u32,
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Tree;
    use burn::tensor::Device;

    fn buffers() -> TreeBuffers {
        // nodes: 0 root, 1 [0], 2 [1], 3 [0,0]
        Tree::from_paths(&[vec![0], vec![1], vec![0, 0]], 2, 2)
            .unwrap()
            .buffers(&Device::flex())
    }

    #[test]
    fn accepts_longest_matching_path() {
        // base after root says 20 (node 2 matches); after node 2 says 30.
        let v = verify_greedy(&buffers(), &[10, 21, 20, 31], &[20, 99, 30, 99]);
        assert_eq!(
            v,
            Verdict {
                accepted: vec![0, 2],
                bonus: 30
            }
        );
        // root -> node 1 (21) -> node 3 (31) all match.
        let v = verify_greedy(&buffers(), &[10, 21, 20, 31], &[21, 31, 0, 40]);
        assert_eq!(
            v,
            Verdict {
                accepted: vec![0, 1, 3],
                bonus: 40
            }
        );
    }

    #[test]
    fn drawn_tokens_walk_the_tree_drawing_only_where_it_goes() {
        let (b, tokens) = (buffers(), [10, 21, 20, 31]);
        // Root draws 21 (node 1), node 1 draws 31 (node 3), node 3 draws 40: the bonus.
        let v = verify_drawn(&b, &tokens, |i| Ok([21, 31, 0, 40][i])).unwrap();
        let want = Verdict {
            accepted: vec![0, 1, 3],
            bonus: 40,
        };
        assert_eq!(v, want);
        // The same draws as the base's greedy choices: the same verdict.
        assert_eq!(verify_greedy(&b, &tokens, &[21, 31, 0, 40]), want);
        let mut asked = vec![];
        let v = verify_drawn(&b, &tokens, |i| {
            asked.push(i);
            Ok([20, 99, 5, 99][i])
        });
        let want = Verdict {
            accepted: vec![0, 2],
            bonus: 5,
        };
        assert_eq!((v.unwrap(), asked), (want, vec![0, 2]));
        let failed = verify_drawn(&b, &tokens, |_| {
            Err(crate::DecodeError::Request("no logits".into()))
        });
        assert!(failed.is_err());
    }

    #[test]
    fn nothing_matches_still_yields_the_base_token() {
        let v = verify_greedy(&buffers(), &[10, 21, 20, 31], &[5, 6, 7, 8]);
        assert_eq!(
            v,
            Verdict {
                accepted: vec![0],
                bonus: 5
            }
        );
    }

    #[test]
    fn child_of_rejected_node_is_never_accepted() {
        // node 3 matches node 1's base choice, but node 1 itself is rejected.
        let v = verify_greedy(&buffers(), &[10, 21, 20, 31], &[7, 31, 0, 0]);
        assert_eq!(v.accepted, vec![0]);
    }
}
