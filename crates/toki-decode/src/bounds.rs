//! One row of logits as the samplers read it ([`crate::gumbel::sample`],
//! [`crate::sampling::top_k_probs`]): bounds on every logit, and any logit exactly on
//! request, so that a draw computes only the logits that can matter. Exact logits (a
//! slice) bound themselves; a row of the host lm_head's [`HostLogits`] holds 8-bit bounds
//! from the first stage of the two-stage arg-max and computes a logit as the full product
//! does, bit for bit.

use toki_model::{HostLogits, RowValues};

/// What a sampler reads of one row of logits.
pub trait Logits {
    /// How many tokens (logits) there are.
    fn tokens(&self) -> usize;
    /// `(low, high)` bounds on logit `r` (both the logit where it is known).
    fn bounds(&self, r: usize) -> (f32, f32);
    /// Logit `r` exactly.
    fn exact(&self, r: usize) -> f32;
}

/// Logits known exactly.
impl Logits for [f32] {
    fn tokens(&self) -> usize {
        self.len()
    }
    fn bounds(&self, r: usize) -> (f32, f32) {
        (self[r], self[r])
    }
    fn exact(&self, r: usize) -> f32 {
        self[r]
    }
}

/// Row `row` of [`HostLogits`].
pub struct HostRow<'a> {
    logits: &'a HostLogits<'a>,
    row: usize,
    low: &'a [f32],
    high: &'a [f32],
}

impl<'a> HostRow<'a> {
    /// Row `row` of `logits` (panics past its rows, as slicing does).
    pub fn new(logits: &'a HostLogits<'a>, row: usize) -> Self {
        let (low, high) = match &logits.rows[row] {
            RowValues::Exact(v) => (&v[..], &v[..]),
            RowValues::Bounds { low, high } => (&low[..], &high[..]),
        };
        Self {
            logits,
            row,
            low,
            high,
        }
    }
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
