//! Sampled tokens of a pass's hidden rows: at a temperature alone (no top-k, no top-p)
//! the Gumbel-max draw over the host's logit bounds ([`crate::gumbel`]); with top-k or
//! top-p, the filtered distribution and one uniform number, the top-k found over tighter
//! bounds ([`top_k_probs`]) made for each row when a draw first reads it (a tree's walk
//! reads the rows it reaches, usually one or two). Top-p alone and a top-k past
//! [`BOUNDED_TOP_K_MAX`] take the full lm_head product. Either way a row's token depends
//! on its logits, the seed and its position only.

use std::cell::OnceCell;

use burn::tensor::Tensor;
use toki_model::{HostLogits, LlamaModel, Rounding};

use crate::bounds::HostRow;
use crate::error::{DecodeError, Result};
use crate::gumbel::{self, Noise};
use crate::sampling::{BOUNDED_TOP_K_MAX, Rng, SampleParams, draw, filtered_probs, top_k_probs};

/// The logits of a pass's rows, as the draws read them.
pub(crate) struct Draws<'a> {
    model: &'a LlamaModel,
    hidden: Tensor<2>,
    params: SampleParams,
    logits: Rows<'a>,
}

enum Rows<'a> {
    /// Bounded or exact on the host (a temperature alone).
    Host(HostLogits<'a>),
    /// Per row, its tight bounds on the host once a draw has read it (a top-k); `None`
    /// where the row does not take the host path.
    Lazy(Vec<OnceCell<Option<HostLogits<'a>>>>),
    /// The full logits [R, vocab] (top-p alone, or off the host path).
    Full(Vec<f32>, usize),
}

/// Whether `p` samples at a temperature alone: the Gumbel draw applies.
pub(crate) fn temperature_only(p: &SampleParams) -> bool {
    p.top_k == 0 && p.top_p >= 1.0
}

/// Whether `p` keeps a top-k small enough to find over bounds ([`top_k_probs`]).
fn bounded_top_k(p: &SampleParams) -> bool {
    p.top_k > 0 && p.top_k <= BOUNDED_TOP_K_MAX
}

impl<'a> Draws<'a> {
    /// The logits of `hidden` [R, D] for sampling with `params`.
    pub fn new(model: &'a LlamaModel, hidden: Tensor<2>, params: SampleParams) -> Result<Self> {
        // A Gumbel draw wants one arg-max: the cheap bounds of every row, made at once,
        // rule out nearly every token. A top-k set needs tight ones (the cheap ones leave
        // about 1,900 candidates for a top-40 on the demo model, the tight ones 40-48),
        // which cost more than the full product from three rows on (`examples/lmhead.rs`
        // `--cold --twice` / `--full`: 1.14 / 1.54 / 2.02 / 2.43 / 4.71 ms for 1 / 2 / 3 /
        // 4 / 8 rows against 1.99 / 2.09 / 2.10 / 2.22 / 3.36 ms, 2-core AMD EPYC); a tree's
        // walk reads one row per depth it reaches, so they are made row by row.
        let [rows, _] = hidden.dims();
        let host = model.uses_host_kernels();
        let logits = if temperature_only(&params) && host {
            match model.host_logit_bounds(&hidden, Rounding::Once) {
                Some(h) => Rows::Host(h),
                None => Rows::Full(full(model, hidden.clone())?, model.config().vocab_size),
            }
        } else if bounded_top_k(&params) && host {
            Rows::Lazy((0..rows).map(|_| OnceCell::new()).collect())
        } else {
            Rows::Full(full(model, hidden.clone())?, model.config().vocab_size)
        };
        Ok(Self {
            model,
            hidden,
            params,
            logits,
        })
    }

    /// The token row `row` samples at sequence position `position`.
    pub fn token(&self, row: usize, position: usize) -> Result<u32> {
        let p = &self.params;
        if temperature_only(p) {
            let noise = Noise::at(p.seed, position);
            let inv_t = 1.0 / f64::from(p.temperature);
            let drawn = match &self.logits {
                Rows::Host(h) => gumbel::sample(&HostRow::new(h, row), inv_t, noise),
                Rows::Full(flat, vocab) => {
                    gumbel::sample(&flat[row * vocab..][..*vocab], inv_t, noise)
                }
                Rows::Lazy(_) => None,
            };
            if let Some(t) = drawn {
                return Ok(t as u32);
            }
        }
        // Top-k or top-p, or logits the Gumbel draw cannot take (not finite).
        let mut rng = Rng::for_position(p.seed, position);
        if let Rows::Lazy(cells) = &self.logits {
            let one = || self.hidden.clone().slice([row..row + 1]); // [1, D]
            let bounds =
                cells[row].get_or_init(|| (self.model).host_logit_bounds(&one(), Rounding::Twice));
            if let Some(probs) = bounds
                .as_ref()
                .and_then(|h| top_k_probs(&HostRow::new(h, 0), p))
            {
                return Ok(draw(&probs, &mut rng) as u32);
            }
        }
        let row_logits = match &self.logits {
            Rows::Full(flat, vocab) => flat[row * vocab..][..*vocab].to_vec(),
            Rows::Host(_) | Rows::Lazy(_) => {
                full(self.model, self.hidden.clone().slice([row..row + 1]))?
            }
        };
        let probs = filtered_probs(&row_logits, p);
        Ok(draw(&probs, &mut rng) as u32)
    }
}

/// The logits of `hidden` [R, D] on the host, row-major [R, vocab].
fn full(model: &LlamaModel, hidden: Tensor<2>) -> Result<Vec<f32>> {
    model
        .logits(hidden) // [R, vocab]
        .try_into_vec_as()
        .map_err(DecodeError::device)
}
