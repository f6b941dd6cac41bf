//! What shapes a training run ([`TrainConfig`]), its defaults and the checks of its rates.

use serde::{Deserialize, Serialize};
use toki_model::{HeadInput, HeadKind, HeadsConfig, LlamaConfig, StoreDtype};

use crate::error::{Result, TrainError};

/// Everything that shapes a training run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainConfig {
    pub num_heads: usize,
    pub num_layers: usize,
    pub kind: HeadKind,
    /// Optimizer updates.
    pub steps: usize,
    /// Rows (positions) per micro-batch.
    pub batch: usize,
    /// Micro-batches per update (gradient accumulation).
    pub accum: usize,
    pub lr: f32,
    pub warmup: usize,
    /// The cosine schedule ends at `lr * lr_floor`.
    pub lr_floor: f32,
    pub weight_decay: f32,
    /// Global gradient-norm bound (0 = none).
    pub max_grad_norm: f32,
    /// λ_k = head_decay^k.
    pub head_decay: f32,
    pub seed: u64,
    /// Save a checkpoint every this many updates (0 = only at the end).
    pub checkpoint_every: usize,
    /// Held-out metrics every this many updates (0 = only at the end).
    pub eval_every: usize,
    /// Most held-out rows an evaluation reads, spread evenly over the held-out split.
    pub eval_rows: usize,
    /// Score only these tokens (a draft vocabulary, most frequent first); empty: the whole
    /// vocabulary. Targets outside it are skipped in the loss and count as misses in the
    /// held-out metrics: decoding cannot propose them.
    #[serde(default)]
    pub draft_vocab: Vec<u32>,
    /// What each head reads.
    #[serde(default)]
    pub input: HeadInput,
    /// How `heads.safetensors` stores the heads (`trainer.safetensors`, the state a resume
    /// reads, is always f32).
    #[serde(default)]
    pub dtype: StoreDtype,
    /// Weight α in [0, 1] of the soft targets (the base's distribution at the target's
    /// position) against 1 - α for the data's token; 0: the data's token alone.
    #[serde(default)]
    pub teacher_weight: f32,
}

/// Most heads, and most blocks per head, a run may train: far more than any tree uses,
/// and a bound that keeps a mistyped count from reserving memory it cannot have.
pub const MAX_HEADS: usize = 32;

impl TrainConfig {
    /// The head set this run trains on `base`.
    pub fn heads_for(&self, base: &LlamaConfig) -> HeadsConfig {
        HeadsConfig {
            base_model: base.model_type.clone(),
            draft_vocab: self.draft_vocab.len(),
            input: self.input,
            dtype: self.dtype,
            ..HeadsConfig::for_model(self.kind, self.num_heads, self.num_layers, base)
        }
    }

    /// Every setting a run can be refused for before it reads data or computes anything:
    /// counts, sizes and rates. `Trainer::new` checks it too; a caller that writes files or
    /// computes hidden states first calls it before that.
    pub fn check(&self) -> Result<()> {
        if self.num_heads == 0 || self.num_layers == 0 || self.batch == 0 || self.accum == 0 {
            return Err(TrainError::Config(
                "heads, layers, batch and accumulation must all be at least 1".into(),
            ));
        }
        if self.num_heads > MAX_HEADS || self.num_layers > MAX_HEADS {
            return Err(TrainError::Config(format!(
                "{} heads x {} blocks: at most {MAX_HEADS} of each (head k guesses the token \
                 k + 2 ahead; Medusa trains 1-5 heads of 1 block)",
                self.num_heads, self.num_layers
            )));
        }
        self.check_rates()
    }

    /// The optimizer's and the loss's numbers: a NaN or a negative one would train (to NaN
    /// heads, or away from the data) without a word.
    pub(super) fn check_rates(&self) -> Result<()> {
        let bad = |what: &str, v: f32, rule: &str| {
            Err(TrainError::Config(format!(
                "{what} must be {rule}, not {v}"
            )))
        };
        let c = self;
        if !(c.lr.is_finite() && c.lr > 0.0) {
            return bad("the learning rate", c.lr, "a finite number > 0");
        }
        if !(0.0..=1.0).contains(&c.lr_floor) {
            return bad("the learning-rate floor", c.lr_floor, "in [0, 1]");
        }
        if !(c.weight_decay.is_finite() && c.weight_decay >= 0.0) {
            return bad("the weight decay", c.weight_decay, "a finite number >= 0");
        }
        if !(c.max_grad_norm.is_finite() && c.max_grad_norm >= 0.0) {
            return bad(
                "the gradient-norm bound",
                c.max_grad_norm,
                "a finite number >= 0 (0: none)",
            );
        }
        if !(c.head_decay.is_finite() && c.head_decay > 0.0) {
            return bad("the head decay", c.head_decay, "a finite number > 0");
        }
        if !(0.0..=1.0).contains(&c.teacher_weight) {
            return bad("the teacher weight", c.teacher_weight, "in [0, 1]");
        }
        Ok(())
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            num_heads: 4,
            num_layers: 1,
            kind: HeadKind::Shared,
            steps: 1000,
            batch: 64,
            accum: 1,
            lr: 1e-3,
            warmup: 50,
            lr_floor: 0.1,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            head_decay: 0.8,
            seed: 0,
            checkpoint_every: 100,
            eval_every: 200,
            eval_rows: 2048,
            draft_vocab: vec![],
            input: HeadInput::Hidden,
            dtype: StoreDtype::F32,
            teacher_weight: 0.0,
        }
    }
}
