//! The proposer: Medusa heads read the last accepted hidden state and fill the tree.

use burn::tensor::{Int, Tensor, TensorData};
use toki_model::{DraftVocab, HeadInput, HeadPath, LlamaModel, MedusaHeads};

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

/// One head's proposals, best first: (token, the probability the head gives it).
pub type Ranked = Vec<(u32, f32)>;

/// What head k's proposals hold for, in a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Conditioning {
    /// The same proposals under every parent: the heads read nothing past the root
    /// (Medusa heads).
    #[default]
    Independent,
    /// Proposals conditioned on the top-1 proposals of heads 0..k-1 (path heads): they
    /// extend the top-1 chain; under any other parent they are out-of-context guesses.
    Chain,
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
    /// `ranked[h]` for h < `top_k.len()`: head h's `top_k[h]` best proposals, best first,
    /// with their probabilities (a static tree ignores them; a dynamic one sizes itself
    /// from them, [`crate::dynamic`]).
    fn rank(&self, input: StepInput<'_>, top_k: &[usize]) -> Result<Vec<Ranked>>;
    /// [`Proposer::rank`] that may stop early: after each head's proposals are ranked,
    /// `enough(ranked so far)` true ends it, and the deeper heads are not run (a step that
    /// cannot use them saves their cost). Returns at least one head's proposals. The
    /// default ranks every head.
    fn rank_until(
        &self,
        input: StepInput<'_>,
        top_k: &[usize],
        enough: &mut dyn FnMut(&[Ranked]) -> bool,
    ) -> Result<Vec<Ranked>> {
        let _ = enough;
        self.rank(input, top_k)
    }
    /// Which parents its proposals are meant for (a dynamic tree only extends those).
    fn conditioning(&self) -> Conditioning {
        Conditioning::Independent
    }
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

    /// One head's `k` best proposals from its logits row (columns of the draft vocabulary
    /// or the vocabulary), best first, with their probabilities.
    fn ranked(&self, row: &[f32], k: usize) -> Ranked {
        let best = top_k(row, k);
        let probs = softmax_at(row, &best);
        best.into_iter()
            .zip(probs)
            .map(|(c, p)| (self.token(c), p))
            .collect()
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

    fn conditioning(&self) -> Conditioning {
        match self.heads.config().input {
            HeadInput::HiddenAndPath => Conditioning::Chain,
            HeadInput::Hidden | HeadInput::HiddenAndNext => Conditioning::Independent,
        }
    }

    fn rank(&self, input: StepInput<'_>, k: &[usize]) -> Result<Vec<Ranked>> {
        let depth = k.len();
        let root = *input
            .history
            .last()
            .ok_or_else(|| DecodeError::Request("empty history".into()))?;
        let (flat, cols) = self.logits(input.hidden, &[root], input.base, depth)?; // [depth, C]
        Ok((0..depth)
            .map(|h| self.ranked(&flat[h * cols..(h + 1) * cols], k[h]))
            .collect())
    }

    /// On the host kernels, head by head: each head's logits are read back and ranked as
    /// they come, and the heads after the one that is `enough` are not run. Elsewhere (a
    /// GPU, where every read-back waits for the device) all heads in one read-back, as
    /// [`Proposer::rank`].
    fn rank_until(
        &self,
        input: StepInput<'_>,
        k: &[usize],
        enough: &mut dyn FnMut(&[Ranked]) -> bool,
    ) -> Result<Vec<Ranked>> {
        if k.is_empty() || !input.base.uses_host_kernels() {
            return self.rank(input, k);
        }
        let root = *input
            .history
            .last()
            .ok_or_else(|| DecodeError::Request("empty history".into()))?;
        let next = Tensor::<1, Int>::from_data(
            TensorData::new(vec![root as i64], [1]),
            &input.base.device(),
        );
        let path = HeadPath::Root(next);
        let (mut ranked, mut failed) = (Vec::<Ranked>::new(), None);
        let mut stop = |h: usize, logits: &Tensor<2>| -> bool {
            match logits.clone().try_into_vec_as::<f32>() {
                Ok(row) => {
                    // [1, C]
                    ranked.push(self.ranked(&row, k[h]));
                    h + 1 >= k.len() || enough(&ranked)
                }
                Err(e) => {
                    failed = Some(e);
                    true
                }
            }
        };
        let _ = match &self.draft {
            Some(d) => d.logits_until(&self.heads, input.hidden, path, input.base, &mut stop),
            None => self
                .heads
                .forward_until(input.hidden, path, input.base, &mut stop),
        };
        match failed {
            Some(e) => Err(DecodeError::device(e)),
            None => Ok(ranked),
        }
    }
}

/// Softmax probabilities of `logits` at the columns `at`.
pub fn softmax_at(logits: &[f32], at: &[usize]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = logits.iter().map(|&x| f64::from(x - max).exp()).sum();
    at.iter()
        .map(|&c| (f64::from(logits[c] - max).exp() / z) as f32)
        .collect()
}

/// Token of every tree node: node 0 is the root (the base's own next token, the last of
/// `history`), node i the proposal of rank r from head h, where (h, r) = `tree.source(i)`.
pub fn propose(proposer: &dyn Proposer, input: StepInput<'_>, tree: &Tree) -> Result<Vec<u32>> {
    let root = *input
        .history
        .last()
        .ok_or_else(|| DecodeError::Request("empty history".into()))?;
    if tree.len() == 1 {
        return Ok(vec![root]);
    }
    let ranked = proposer.rank(input, tree.top_k())?;
    node_tokens(root, &ranked, tree)
}

/// Tokens of `tree`'s nodes from the heads' ranked proposals (node 0: `root`).
pub fn node_tokens(root: u32, ranked: &[Ranked], tree: &Tree) -> Result<Vec<u32>> {
    let mut tokens = vec![root];
    for node in 1..tree.len() {
        let (h, r) = tree.source(node);
        let t = ranked.get(h).and_then(|x| x.get(r)).ok_or_else(|| {
            DecodeError::Tree(format!("proposer gave no rank-{r} token for head {h}"))
        })?;
        tokens.push(t.0);
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

    #[test]
    fn softmax_at_matches_the_full_softmax() {
        let l = [1.0f32, 3.0, 0.5, 3.0];
        let z: f32 = l.iter().map(|x| x.exp()).sum();
        let p = softmax_at(&l, &[1, 2]);
        assert!((p[0] - 3f32.exp() / z).abs() < 1e-6);
        assert!((p[1] - 0.5f32.exp() / z).abs() < 1e-6);
    }
}
