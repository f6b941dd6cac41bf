//! The proposer: Medusa heads read the last accepted hidden state and fill the tree.

use burn::tensor::{Int, Tensor, TensorData};
use toki_model::{DraftVocab, LlamaModel, MedusaHeads};

use crate::error::{DecodeError, Result};
use crate::tree::Tree;

/// Indices of the `k` largest values, best first (ties: lower index first).
pub fn top_k(values: &[f32], k: usize) -> Vec<usize> {
    let k = k.min(values.len());
    let mut idx: Vec<usize> = (0..values.len()).collect();
    let cmp = |a: &usize, b: &usize| values[*b].total_cmp(&values[*a]).then(a.cmp(b));
    if k < idx.len() && k > 0 {
        idx.select_nth_unstable_by(k - 1, cmp);
        idx.truncate(k);
    }
    idx.sort_by(cmp);
    idx
}

/// What a proposer sees at the start of a step.
pub struct StepInput<'a> {
    pub base: &'a LlamaModel,
    /// [1, D]: the base's final-norm hidden state at the last accepted token.
    pub hidden: Tensor<2>,
    /// Prompt and generated tokens so far; the last one is the root (not yet verified
    /// into the cache, but certain: it is the base's own choice).
    pub history: &'a [u32],
}

/// Fills a tree with draft tokens. Medusa heads are the proposer toki ships; tests use an
/// oracle that knows the answer.
pub trait Proposer: Send + Sync {
    /// How many heads (tree depth) it can fill.
    fn num_heads(&self) -> usize;
    /// How many proposals per head it can rank (a draft vocabulary's size).
    fn max_rank(&self) -> usize {
        usize::MAX
    }
    /// `ranked[h]`: head h's proposals, best first, at least `tree.top_k()[h]` of them.
    fn rank(&self, input: StepInput<'_>, tree: &Tree) -> Result<Vec<Vec<u32>>>;
}

/// Medusa heads as a proposer, scoring the whole vocabulary or a [`DraftVocab`].
pub struct HeadProposer {
    heads: MedusaHeads,
    draft: Option<DraftVocab>,
}

impl HeadProposer {
    /// Heads scoring the whole vocabulary.
    pub fn new(heads: MedusaHeads) -> Self {
        Self { heads, draft: None }
    }

    /// Heads scoring only `draft`'s tokens (built for these heads and this base).
    pub fn with_draft(heads: MedusaHeads, draft: DraftVocab) -> Self {
        Self {
            heads,
            draft: Some(draft),
        }
    }

    pub fn heads(&self) -> &MedusaHeads {
        &self.heads
    }

    pub fn draft(&self) -> Option<&DraftVocab> {
        self.draft.as_ref()
    }

    /// Token of logits column `col` (the identity without a draft vocabulary).
    pub fn token(&self, col: usize) -> u32 {
        match &self.draft {
            Some(d) => d.ids()[col],
            None => col as u32,
        }
    }

    /// Logits of the first `depth` heads for hidden states [R, D] whose base next tokens
    /// are `next` (R of them): [depth, R, C] flattened (C columns: the vocabulary or the
    /// draft vocabulary), read back in one transfer.
    pub fn logits(
        &self,
        hidden: Tensor<2>,
        next: &[u32],
        base: &LlamaModel,
        depth: usize,
    ) -> Result<(Vec<f32>, usize)> {
        let ids: Vec<i64> = next.iter().map(|&t| t as i64).collect();
        let next = Tensor::<1, Int>::from_data(TensorData::new(ids, [next.len()]), &base.device());
        let per_head = match &self.draft {
            Some(d) => d.logits(&self.heads, hidden, next, base),
            None => self.heads.forward(hidden, next, base),
        };
        let logits = Tensor::cat(per_head.into_iter().take(depth).collect(), 0); // [depth*R, C]
        let [_, cols] = logits.dims();
        let flat = logits.try_into_vec_as().map_err(DecodeError::device)?;
        Ok((flat, cols))
    }
}

impl Proposer for HeadProposer {
    fn num_heads(&self) -> usize {
        self.heads.num_heads()
    }

    fn max_rank(&self) -> usize {
        self.draft.as_ref().map_or(usize::MAX, |d| d.len())
    }

    fn rank(&self, input: StepInput<'_>, tree: &Tree) -> Result<Vec<Vec<u32>>> {
        let depth = tree.depth();
        let root = *input
            .history
            .last()
            .ok_or_else(|| DecodeError::Request("empty history".into()))?;
        let (flat, cols) = self.logits(input.hidden, &[root], input.base, depth)?; // [depth, C]
        Ok((0..depth)
            .map(|h| {
                top_k(&flat[h * cols..(h + 1) * cols], tree.top_k()[h])
                    .into_iter()
                    .map(|c| self.token(c))
                    .collect()
            })
            .collect())
    }
}

/// Token of every tree node: node 0 is the root (the base's own next token, the last of
/// `history`), node i the proposal of rank r from head h, where (h, r) = `tree.source(i)`.
pub fn propose(proposer: &dyn Proposer, input: StepInput<'_>, tree: &Tree) -> Result<Vec<u32>> {
    let root = *input
        .history
        .last()
        .ok_or_else(|| DecodeError::Request("empty history".into()))?;
    let mut tokens = vec![root];
    if tree.len() == 1 {
        return Ok(tokens);
    }
    let ranked = proposer.rank(input, tree)?;
    for node in 1..tree.len() {
        let (h, r) = tree.source(node);
        let t = ranked.get(h).and_then(|x| x.get(r)).ok_or_else(|| {
            DecodeError::Tree(format!("proposer gave no rank-{r} token for head {h}"))
        })?;
        tokens.push(*t);
    }
    Ok(tokens)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_and_breaks_ties_by_index() {
        assert_eq!(top_k(&[0.1, 0.9, 0.5, 0.9], 3), vec![1, 3, 2]);
        assert_eq!(top_k(&[1.0, 2.0], 5), vec![1, 0]);
    }
}
