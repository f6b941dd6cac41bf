//! The training loop over cached hidden states.
//!
//! Loss of one micro-batch of rows (positions t with hidden state h_t):
//! `Σ_k λ_k · CE(head_k(h_t[, token[t + 1]]), token[t + k + 2])`, k = 0..K, λ_k =
//! `head_decay`^k, each CE a mean over the rows whose target exists and is a target token.
//! With a teacher weight α > 0 each CE is `(1 - α) · CE(hard) + α · CE(soft)`: the soft
//! target is the base's own distribution over the (draft) vocabulary at the target's
//! position, softmax(lm_head(h[t + k + 1])), read from the cached hidden states (knowledge
//! distillation; the hard target is its arg-max in self-distilled data).
//! Heads that read the next token (`HeadInput::HiddenAndNext`) get the data's token t+1:
//! in self-distilled data that is the base's own greedy choice, the tree root at decoding.
//! Path heads (`HiddenAndPath`) get the data's tokens t+1..t+k+1 (teacher forcing): at
//! decoding they read the earlier heads' proposals, which count only where they were right.
//! Gradients flow into the heads' residual blocks (and their own lm_heads for the `own` kind); the base's lm_head
//! is a constant in the graph. Rows are visited in a seeded permutation per epoch, so the
//! rows of update n depend on n alone: a resumed run repeats an uninterrupted one exactly.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use burn::tensor::activation::{log_softmax, softmax};
use burn::tensor::{DType, Device, Int, Tensor, TensorData};
use serde::Serialize;
use toki_model::{HeadsConfig, LlamaModel, MedusaHeads, ModelError};

use crate::checkpoint;
use crate::data::Sequence;
use crate::error::{Result, TrainError};
use crate::hidden::HiddenSet;
use crate::optim::{AdamW, clip_global_norm, learning_rate};

// Held-out metrics.
mod eval;
// The parameters as heads: their training graph, as a weight source, a warm start.
mod params;
use params::{HostSource, head_logits};
// What shapes a run, and its checks.
mod config;
pub use config::{MAX_HEADS, TrainConfig};
pub use params::check_init;

/// Held-out metrics per head.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EvalReport {
    pub step: usize,
    pub rows: usize,
    /// Top-1 given the data's path tokens (for path heads: where the path before the
    /// target is right, the only place decoding can accept the proposal).
    pub top1: Vec<f64>,
    /// Top-1 with path heads reading the earlier heads' top-1 proposals, right or wrong,
    /// as decoding runs them: unconditional like the other heads' `top1` (equal to it
    /// for heads that read no proposals).
    pub top1_chain: Vec<f64>,
    pub top5: Vec<f64>,
    pub loss: Vec<f64>,
}

/// What the loop reports as it goes.
#[derive(Debug, Clone)]
pub enum Event {
    Step {
        step: usize,
        total: usize,
        loss: f32,
        head_loss: Vec<f32>,
        lr: f32,
        grad_norm: f32,
    },
    Eval(EvalReport),
    Checkpoint {
        step: usize,
        dir: PathBuf,
    },
}

/// One micro-batch as host data (see [`Trainer::batch`]).
struct Batch {
    x: Vec<f32>,
    /// Entry j: token t+1+j of each row [B] (0 past the data's end, where no target is
    /// read), as many as the last head reads.
    path: Vec<Vec<i64>>,
    /// The hidden states whose base logits are the soft targets [K * B, D], head-major
    /// (row h*B + i: h[t + h + 1] of row i; zeros where head h has no target); empty
    /// without a teacher weight.
    teacher_x: Vec<f32>,
    targets: Vec<i64>,
    weights: Vec<f32>,
    counts: Vec<f32>,
    outside: Vec<f32>,
}

/// A training row: the position whose hidden state is read, and its sequence's end.
#[derive(Debug, Clone, Copy)]
struct Row {
    at: u32,
    end: u32,
}

pub struct Trainer<'a> {
    base: &'a LlamaModel,
    data: &'a HiddenSet,
    pub config: TrainConfig,
    heads: HeadsConfig,
    names: Vec<(String, Vec<usize>)>,
    pub(crate) params: Vec<Vec<f32>>,
    pub(crate) opt: AdamW,
    /// Updates done.
    pub(crate) step: usize,
    train_rows: Vec<Row>,
    held_rows: Vec<Row>,
    perm: Option<(usize, Vec<u32>)>,
    /// Logits column of each vocabulary token (-1: outside the draft vocabulary).
    column: Vec<i64>,
}

impl<'a> Trainer<'a> {
    /// A fresh run: zero residual blocks, own lm_heads copied from the base's.
    /// Sequences whose index is `held_out_every - 1` modulo `held_out_every` are held out.
    pub fn new(
        base: &'a LlamaModel,
        data: &'a HiddenSet,
        config: TrainConfig,
        held_out_every: usize,
    ) -> Result<Self> {
        let c = base.config();
        if data.hidden_size != c.hidden_size {
            return Err(ModelError::HeadsMismatch {
                what: "hidden size",
                heads: data.hidden_size,
                base: c.hidden_size,
            }
            .into());
        }
        config.check()?;
        let heads = config.heads_for(c);
        let column: Vec<i64> = if config.draft_vocab.is_empty() {
            (0..c.vocab_size as i64).collect()
        } else {
            let mut col = vec![-1i64; c.vocab_size];
            for (j, &id) in config.draft_vocab.iter().enumerate() {
                match col.get_mut(id as usize) {
                    Some(x) if *x < 0 => *x = j as i64,
                    Some(_) => {
                        return Err(TrainError::Config(format!(
                            "draft vocabulary lists token {id} twice"
                        )));
                    }
                    None => {
                        return Err(TrainError::Config(format!(
                            "draft vocabulary token {id} is outside the vocabulary of {}",
                            c.vocab_size
                        )));
                    }
                }
            }
            col
        };
        let names = MedusaHeads::tensor_names(&heads);
        let lm_rows = lm_head_rows(base)?; // [V * D] as [V, D], only for the own kind
        let params = names
            .iter()
            .map(|(n, s)| {
                if n.ends_with("lm_head.weight") {
                    lm_rows.clone()
                } else {
                    vec![0.0; s.iter().product()]
                }
            })
            .collect();
        let sizes: Vec<usize> = names.iter().map(|(_, s)| s.iter().product()).collect();
        let (train_rows, held_rows) = rows(data, held_out_every);
        no_training_rows(train_rows.len(), held_rows.len(), held_out_every)?;
        Ok(Self {
            base,
            data,
            opt: AdamW::new(&sizes, config.weight_decay),
            config,
            heads,
            names,
            params,
            step: 0,
            train_rows,
            held_rows,
            perm: None,
            column,
        })
    }

    /// The draft vocabulary's ids as a tensor (`None`: the whole vocabulary).
    fn draft_ids(&self, device: &Device) -> Option<Tensor<1, Int>> {
        let ids = &self.config.draft_vocab;
        (!ids.is_empty()).then(|| {
            let v: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
            Tensor::from_data(TensorData::new(v, [ids.len()]), device)
        })
    }

    /// Continue the run saved in `dir` (see [`crate::checkpoint`]).
    pub fn resume(
        base: &'a LlamaModel,
        data: &'a HiddenSet,
        config: TrainConfig,
        held_out_every: usize,
        dir: &Path,
    ) -> Result<Self> {
        let mut t = Self::new(base, data, config, held_out_every)?;
        checkpoint::restore(&mut t, dir)?;
        Ok(t)
    }

    pub fn device(&self) -> Device {
        self.base.device()
    }
    pub fn step(&self) -> usize {
        self.step
    }
    pub fn heads_config(&self) -> &HeadsConfig {
        &self.heads
    }
    pub(crate) fn names(&self) -> &[(String, Vec<usize>)] {
        &self.names
    }
    pub fn train_rows(&self) -> usize {
        self.train_rows.len()
    }
    pub fn held_out_rows(&self) -> usize {
        self.held_rows.len()
    }

    /// The heads as they stand, ready for decoding.
    pub fn heads(&self, device: &Device) -> Result<MedusaHeads> {
        let mut src = HostSource { t: self };
        Ok(MedusaHeads::from_source(
            self.heads.clone(),
            &mut src,
            device,
        )?)
    }

    /// Train to `config.steps`, checkpointing into `out`. When `stop` turns true the loop
    /// saves a checkpoint and returns early.
    pub fn run(
        &mut self,
        out: &Path,
        stop: &AtomicBool,
        mut on_event: impl FnMut(&Event),
    ) -> Result<()> {
        let total = self.config.steps;
        while self.step < total {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let (loss, head_loss, lr, grad_norm) = self.update()?;
            on_event(&Event::Step {
                step: self.step,
                total,
                loss,
                head_loss,
                lr,
                grad_norm,
            });
            let every = |n: usize| n > 0 && self.step.is_multiple_of(n) && self.step < total;
            if every(self.config.eval_every) {
                let report = self.evaluate()?;
                checkpoint::append_metrics(out, &report)?;
                on_event(&Event::Eval(report));
            }
            if every(self.config.checkpoint_every) {
                checkpoint::save(self, out)?;
                on_event(&Event::Checkpoint {
                    step: self.step,
                    dir: out.to_path_buf(),
                });
            }
        }
        if self.step >= total {
            let report = self.evaluate()?;
            checkpoint::append_metrics(out, &report)?;
            on_event(&Event::Eval(report));
        }
        checkpoint::save(self, out)?;
        on_event(&Event::Checkpoint {
            step: self.step,
            dir: out.to_path_buf(),
        });
        Ok(())
    }

    /// One optimizer update: `accum` micro-batches, averaged, clipped, AdamW.
    fn update(&mut self) -> Result<(f32, Vec<f32>, f32, f32)> {
        let accum = self.config.accum;
        let mut grads: Vec<Vec<f32>> = self.params.iter().map(|p| vec![0.0; p.len()]).collect();
        let mut loss = 0.0;
        let mut head_loss = vec![0.0; self.config.num_heads];
        for a in 0..accum {
            let rows = self.micro_batch_rows(self.step * accum + a);
            let (l, hl, g) = self.loss_and_grads(&rows)?;
            loss += l / accum as f32;
            head_loss
                .iter_mut()
                .zip(&hl)
                .for_each(|(x, y)| *x += y / accum as f32);
            for (acc, g) in grads.iter_mut().zip(g) {
                acc.iter_mut()
                    .zip(g)
                    .for_each(|(x, y)| *x += y / accum as f32);
            }
        }
        let grad_norm = clip_global_norm(&mut grads, self.config.max_grad_norm);
        if !(loss.is_finite() && grad_norm.is_finite()) {
            // Before the optimizer step: the parameters and the checkpoints on disk stay
            // those of the last finite update.
            return Err(TrainError::Diverged {
                update: self.step + 1,
                loss,
                grad_norm,
            });
        }
        let c = &self.config;
        let lr = learning_rate(self.step, c.steps, c.warmup, c.lr, c.lr_floor);
        let decay: Vec<bool> = self
            .names
            .iter()
            .map(|(n, _)| n.ends_with("weight"))
            .collect();
        self.opt.step(&mut self.params, &grads, &decay, lr);
        self.step += 1;
        Ok((loss, head_loss, lr, grad_norm))
    }

    /// Rows of micro-batch `m`: positions m*B..(m+1)*B of the endless sequence of epoch
    /// permutations.
    fn micro_batch_rows(&mut self, m: usize) -> Vec<Row> {
        let n = self.train_rows.len();
        let b = self.config.batch;
        (m * b..(m + 1) * b)
            .map(|p| {
                let epoch = p / n;
                if self.perm.as_ref().is_none_or(|(e, _)| *e != epoch) {
                    self.perm = Some((epoch, permutation(n, self.config.seed, epoch)));
                }
                let perm = &self.perm.as_ref().map(|(_, v)| v).expect("set above");
                self.train_rows[perm[p % n] as usize]
            })
            .collect()
    }

    /// Hidden states [B, D] and, per head, targets [K * B] (logits columns) and weights
    /// [K * B] (1 where the target exists and can be scored), plus the count of targets per
    /// head and of the targets outside the draft vocabulary per head.
    fn batch(&self, rows: &[Row]) -> Batch {
        let d = self.data.hidden_size;
        let k = self.config.num_heads;
        let mut x = Vec::with_capacity(rows.len() * d);
        let reads = self.heads.input.path_len(k - 1);
        let mut path = vec![Vec::with_capacity(rows.len()); reads];
        let mut targets = vec![0i64; k * rows.len()];
        let mut weights = vec![0f32; k * rows.len()];
        let mut counts = vec![0f32; k];
        let mut outside = vec![0f32; k];
        let soft = self.config.teacher_weight > 0.0;
        let mut teacher_x = vec![0f32; if soft { k * rows.len() * d } else { 0 }];
        for (i, r) in rows.iter().enumerate() {
            let at = r.at as usize;
            x.extend_from_slice(&self.data.hidden[at * d..(at + 1) * d]);
            // A head's target at + h + 2 exists only if its path tokens do.
            for (j, p) in path.iter_mut().enumerate() {
                p.push(self.data.tokens.get(at + 1 + j).map_or(0, |&t| t as i64));
            }
            for h in 0..k {
                let j = at + h + 2;
                if j < r.end as usize && self.data.target[j] {
                    // Targets as logits columns; outside the draft vocabulary: no loss.
                    let col = self.column[self.data.tokens[j] as usize];
                    if col >= 0 {
                        targets[h * rows.len() + i] = col;
                        weights[h * rows.len() + i] = 1.0;
                        counts[h] += 1.0;
                        if soft {
                            // The base's logits for token j come from position j - 1.
                            let row = (h * rows.len() + i) * d;
                            teacher_x[row..row + d]
                                .copy_from_slice(&self.data.hidden[(j - 1) * d..j * d]);
                        }
                    } else {
                        outside[h] += 1.0;
                    }
                }
            }
        }
        Batch {
            x,
            path,
            teacher_x,
            targets,
            weights,
            counts,
            outside,
        }
    }

    /// Weighted loss, per-head losses and the gradient of every parameter.
    fn loss_and_grads(&self, rows: &[Row]) -> Result<(f32, Vec<f32>, Vec<Vec<f32>>)> {
        let ad = self.base.device().autodiff();
        let (b, d, k) = (rows.len(), self.data.hidden_size, self.config.num_heads);
        let Batch {
            x,
            path,
            teacher_x,
            targets,
            weights,
            counts,
            ..
        } = self.batch(rows);
        let params: Vec<Tensor<2>> = self
            .params
            .iter()
            .zip(&self.names)
            .map(|(p, (_, shape))| {
                let shape2 = [shape[0], shape.get(1).copied().unwrap_or(1)];
                Tensor::<2>::from_data(TensorData::new(p.clone(), shape2), &ad).require_grad()
            })
            .collect();
        let x = Tensor::<2>::from_data(TensorData::new(x, [b, d]), &ad); // [B, D]
        // Embeddings of the path tokens, each [B, D]: constants (the base is frozen).
        let path: Vec<Tensor<2>> = path
            .into_iter()
            .map(|ids| {
                let ids = Tensor::<1, Int>::from_data(TensorData::new(ids, [b]), &self.device());
                self.base.embed(ids).cast(DType::F32).autodiff()
            })
            .collect();
        let draft = self.draft_ids(&ad);
        let mut lm = self.base.lm_head().weight.val().cast(DType::F32).autodiff(); // [D, V]
        if let Some(ids) = &draft {
            lm = lm.select(1, ids.clone()); // [D, N]
        }
        let logits = head_logits(&params, &self.heads, x, &path, &lm, draft.as_ref()); // [K*B, V or N]
        let targets = Tensor::<1, Int>::from_data(TensorData::new(targets, [k * b]), &ad);
        let log_p = log_softmax(logits, 1); // [K*B, V or N]
        let picked = log_p
            .clone()
            .gather(1, targets.reshape([k * b, 1]))
            .reshape([k, b]); // log p(target), [K, B]
        let alpha = self.config.teacher_weight;
        let picked = if alpha > 0.0 {
            // The soft targets: the base's distribution over the same columns, from the
            // hidden states before each target; a constant (nothing in it needs grads).
            let teacher_x = Tensor::<2>::from_data(TensorData::new(teacher_x, [k * b, d]), &ad);
            let teacher = softmax(teacher_x.matmul(lm), 1); // [K*B, V or N]
            let soft = (teacher * log_p).sum_dim(1).reshape([k, b]); // Σ q log p, [K, B]
            picked * (1.0 - alpha) + soft * alpha
        } else {
            picked
        };
        let weights = Tensor::<2>::from_data(TensorData::new(weights, [k, b]), &ad);
        let scale: Vec<f32> = (0..k)
            .map(|h| self.config.head_decay.powi(h as i32) / counts[h].max(1.0))
            .collect();
        let per_head = (picked * weights).sum_dim(1).neg().reshape([k]); // Σ NLL, [K]
        let mean_nll = per_head * Tensor::<1>::from_data(TensorData::new(scale, [k]), &ad);
        let loss = mean_nll.clone().sum();
        let grads = loss.backward();
        let head_loss: Vec<f32> = mean_nll.try_into_vec_as().map_err(TrainError::device)?;
        let loss_value: f32 = head_loss.iter().sum();
        let head_loss = head_loss
            .iter()
            .enumerate()
            .map(|(h, &l)| l / self.config.head_decay.powi(h as i32))
            .collect();
        let g = params
            .iter()
            .map(|p| match p.grad(&grads) {
                Some(g) => g.try_into_vec_as::<f32>().map_err(TrainError::device),
                None => Ok(vec![0.0; p.dims().iter().product()]),
            })
            .collect::<Result<_>>()?;
        Ok((loss_value, head_loss, g))
    }
}

/// The base lm_head as [V, D] rows (the own kind starts from it).
fn lm_head_rows(base: &LlamaModel) -> Result<Vec<f32>> {
    let w = base.lm_head().weight.val().cast(DType::F32); // [D, V]
    w.transpose().try_into_vec_as().map_err(TrainError::device)
}

/// Rows of train and held-out sequences that have at least the first head's target.
fn rows(data: &HiddenSet, held_out_every: usize) -> (Vec<Row>, Vec<Row>) {
    rows_of(&data.starts, &data.target, held_out_every)
}

/// Rows of sequences laid end to end (`starts`: each one's offset, then the total), split
/// into training and held-out rows: a row is a position whose token two places on is a
/// target.
fn rows_of(starts: &[usize], target: &[bool], held_out_every: usize) -> (Vec<Row>, Vec<Row>) {
    let (mut train, mut held) = (vec![], vec![]);
    for (s, w) in starts.windows(2).enumerate() {
        let (start, end) = (w[0], w[1]);
        let held_out = held_out_every > 0 && s % held_out_every == held_out_every - 1;
        for at in start..end.saturating_sub(2) {
            if target[at + 2] {
                let row = Row {
                    at: at as u32,
                    end: end as u32,
                };
                if held_out {
                    held.push(row)
                } else {
                    train.push(row)
                }
            }
        }
    }
    (train, held)
}

/// The training and held-out rows (positions) a [`Trainer`] finds in packed `seqs`,
/// counted before their hidden states are computed (an hour for the demo model's data on
/// two cores): none to train on is an error naming why.
pub fn count_rows(seqs: &[Sequence], held_out_every: usize) -> Result<(usize, usize)> {
    let mut starts = vec![0];
    for s in seqs {
        starts.push(starts[starts.len() - 1] + s.tokens.len());
    }
    let target: Vec<bool> = seqs.iter().flat_map(|s| s.target.iter().copied()).collect();
    let (train, held) = rows_of(&starts, &target, held_out_every);
    no_training_rows(train.len(), held.len(), held_out_every)?;
    Ok((train.len(), held.len()))
}

/// The error for a split with no training rows.
fn no_training_rows(train: usize, held: usize, held_out_every: usize) -> Result<()> {
    match (train, held) {
        (0, 0) => Err(TrainError::Config(
            "no training rows: the data needs sequences of at least 3 tokens with targets".into(),
        )),
        (0, _) => Err(TrainError::Config(format!(
            "no training rows: every row with a target lies in a held-out sequence (one in \
             {held_out_every} is held out); give more data or hold out fewer sequences"
        ))),
        _ => Ok(()),
    }
}

/// A seeded Fisher-Yates permutation of 0..n for one epoch.
fn permutation(n: usize, seed: u64, epoch: usize) -> Vec<u32> {
    let mut state = seed ^ (epoch as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED;
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut v: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        let j = (next() % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}
