//! Sampled tokens of a pass's hidden rows: at a temperature alone (no top-k, no top-p)
//! the Gumbel-max draw over the host's logit bounds ([`crate::gumbel`]), without the full
//! lm_head product; with top-k or top-p, the filtered distribution and one uniform
//! number. Either way a row's token depends on its logits, the seed and its position only.

use burn::tensor::Tensor;
use toki_model::{HostLogits, LlamaModel, RowValues};

use crate::error::{DecodeError, Result};
use crate::gumbel::{self, Logits, Noise};
use crate::sampling::{Rng, SampleParams, draw, filtered_probs};

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
    /// The full logits [R, vocab] (top-k or top-p, or off the host path).
    Full(Vec<f32>, usize),
}

/// Row `row` of [`HostLogits`] as the Gumbel draw reads it.
struct HostRow<'a> {
    logits: &'a HostLogits<'a>,
    row: usize,
    low: &'a [f32],
    high: &'a [f32],
}

impl Logits for HostRow<'_> {
    fn tokens(&self) -> usize {
        self.low.len()
    }
    fn bounds(&self, r: usize) -> (f32, f32) {
        (self.low[r], self.high[r])
    }
    fn exact(&self, r: usize) -> f32 {
        self.logits.exact(self.row, r)
    }
}

/// Whether `p` samples at a temperature alone: the Gumbel draw applies.
pub(crate) fn temperature_only(p: &SampleParams) -> bool {
    p.top_k == 0 && p.top_p >= 1.0
}

impl<'a> Draws<'a> {
    /// The logits of `hidden` [R, D] for sampling with `params`.
    pub fn new(model: &'a LlamaModel, hidden: Tensor<2>, params: SampleParams) -> Result<Self> {
        let host = temperature_only(&params)
            .then(|| model.host_logit_bounds(&hidden))
            .flatten();
        let logits = match host {
            Some(h) => Rows::Host(h),
            None => Rows::Full(full(model, hidden.clone())?, model.config().vocab_size),
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
                Rows::Host(h) => {
                    let (low, high) = match &h.rows[row] {
                        RowValues::Exact(v) => (&v[..], &v[..]),
                        RowValues::Bounds { low, high } => (&low[..], &high[..]),
                    };
                    let r = HostRow {
                        logits: h,
                        row,
                        low,
                        high,
                    };
                    gumbel::sample(&r, inv_t, noise)
                }
                Rows::Full(flat, vocab) => {
                    gumbel::sample(&flat[row * vocab..][..*vocab], inv_t, noise)
                }
            };
            if let Some(t) = drawn {
                return Ok(t as u32);
            }
        }
        // Top-k or top-p, or logits the Gumbel draw cannot take (not finite).
        let row_logits = match &self.logits {
            Rows::Full(flat, vocab) => flat[row * vocab..][..*vocab].to_vec(),
            Rows::Host(_) => full(self.model, self.hidden.clone().slice([row..row + 1]))?,
        };
        let probs = filtered_probs(&row_logits, p);
        Ok(draw(&probs, &mut Rng::for_position(p.seed, position)) as u32)
    }
}

/// The logits of `hidden` [R, D] on the host, row-major [R, vocab].
fn full(model: &LlamaModel, hidden: Tensor<2>) -> Result<Vec<f32>> {
    model
        .logits(hidden) // [R, vocab]
        .try_into_vec_as()
        .map_err(DecodeError::device)
}
