//! Held-out metrics: per-head top-1 / top-5 accuracy and loss.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, TensorData};
use toki_model::{DraftVocab, HeadInput, HeadPath};

use super::{Batch, EvalReport, Row, Trainer};
use crate::error::{Result, TrainError};

impl Trainer<'_> {
    /// Per-head top-1 / top-5 accuracy and loss on the held-out rows, through the same
    /// head forward decoding uses (over the draft vocabulary where there is one; the loss
    /// then covers the targets inside it).
    pub fn evaluate(&self) -> Result<EvalReport> {
        let device = self.base.device();
        let heads = self.heads(&device)?;
        let draft = if self.config.draft_vocab.is_empty() {
            None
        } else {
            Some(DraftVocab::new(
                self.config.draft_vocab.clone(),
                &heads,
                self.base,
            )?)
        };
        let k = self.config.num_heads;
        let (mut hit1, mut hit5, mut nll, mut n) =
            (vec![0f64; k], vec![0f64; k], vec![0f64; k], vec![0f64; k]);
        let mut hit_chain = vec![0f64; k];
        let chained = self.heads.input == HeadInput::HiddenAndPath;
        let rows = spread(&self.held_rows, self.config.eval_rows);
        let d = self.data.hidden_size;
        for chunk in rows.chunks(self.config.batch.max(16)) {
            let b = chunk.len();
            let Batch {
                x,
                path,
                targets,
                weights,
                outside,
                ..
            } = self.batch(chunk);
            let x = Tensor::<2>::from_data(TensorData::new(x, [b, d]), &device);
            // The data's own path tokens: a path head is scored where the path before its
            // target is right, which is where decoding can accept its proposal.
            let path: Vec<Tensor<1, Int>> = path
                .into_iter()
                .map(|ids| Tensor::from_data(TensorData::new(ids, [b]), &device))
                .collect();
            let logits = |p: HeadPath| match &draft {
                Some(v) => v.logits_on(&heads, x.clone(), p, self.base),
                None => heads.forward_on(x.clone(), p, self.base),
            };
            // Path heads as decoding runs them: on the earlier heads' top-1, right or wrong.
            let chain = path
                .first()
                .filter(|_| chained)
                .map(|root| logits(HeadPath::Root(root.clone())));
            let per_head = logits(HeadPath::Given(path));
            let target = |h: usize| {
                let t: Vec<i64> = targets[h * b..(h + 1) * b].to_vec();
                Tensor::<1, Int>::from_data(TensorData::new(t, [b]), &device).reshape([b, 1])
            };
            // Per row, how many tokens score strictly above the target (not at or below
            // it: a NaN counts as above, so heads that output NaN score no hits).
            let ranks = |logits: Tensor<2>, t: Tensor<2, Int>| -> Result<Vec<i64>> {
                let target_logit = logits.clone().gather(1, t); // [B, 1]
                (logits - target_logit)
                    .lower_equal_elem(0.0)
                    .bool_not()
                    .int()
                    .sum_dim(1)
                    .try_into_vec_as()
                    .map_err(TrainError::device)
            };
            for (h, logits) in chain.into_iter().flatten().enumerate() {
                let rank = ranks(logits, target(h))?;
                for i in 0..b {
                    if weights[h * b + i] > 0.0 {
                        hit_chain[h] += (rank[i] == 0) as u8 as f64;
                    }
                }
            }
            for (h, logits) in per_head.into_iter().enumerate() {
                // Targets decoding cannot propose: misses.
                n[h] += outside[h] as f64;
                let t = target(h);
                let rank = ranks(logits.clone(), t.clone())?;
                let lp: Vec<f32> = log_softmax(logits, 1)
                    .gather(1, t)
                    .try_into_vec_as()
                    .map_err(TrainError::device)?;
                for i in 0..b {
                    if weights[h * b + i] > 0.0 {
                        n[h] += 1.0;
                        hit1[h] += (rank[i] == 0) as u8 as f64;
                        hit5[h] += (rank[i] < 5) as u8 as f64;
                        nll[h] -= lp[i] as f64;
                    }
                }
            }
        }
        let div = |v: Vec<f64>| v.iter().zip(&n).map(|(x, c)| x / c.max(1.0)).collect();
        let top1: Vec<f64> = div(hit1);
        Ok(EvalReport {
            step: self.step,
            rows: rows.len(),
            top1_chain: if chained {
                div(hit_chain)
            } else {
                top1.clone()
            },
            top1,
            top5: div(hit5),
            loss: div(nll),
        })
    }
}

/// At most `n` of `rows`, evenly spaced over all of them: the held-out split is in data
/// order (documents as the files list them), so its first rows are one kind of text.
fn spread(rows: &[Row], n: usize) -> Vec<Row> {
    if rows.len() <= n {
        return rows.to_vec();
    }
    (0..n).map(|i| rows[i * rows.len() / n]).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_rows_from_the_whole_split() {
        let rows: Vec<Row> = (0..100).map(|at| Row { at, end: 200 }).collect();
        let at = |v: Vec<Row>| v.iter().map(|r| r.at).collect::<Vec<_>>();
        assert_eq!(at(spread(&rows, 4)), [0, 25, 50, 75]);
        assert_eq!(at(spread(&rows, 1000)).len(), 100);
        assert_eq!(at(spread(&rows, 100)), (0..100).collect::<Vec<_>>());
    }
}
