//! Batched plain greedy decoding of independent prompts (self-distillation).
//!
//! All sequences share one KV cache; an [`AttnMask::Full`] lets each new token see only its
//! own sequence's rows. Each step runs one base pass over one token per unfinished
//! sequence, so the weights are read once for the whole batch:
//!
//! ```text
//! cache rows:  a a a b b a b a b      (a, b: rows of sequences A and B, interleaved)
//! new A token: 0 0 0 - - 0 - 0 -  0 -
//! new B token: - - - 0 0 - 0 - 0  - 0
//! ```
//!
//! The tokens are those of running each prompt alone with greedy [`Engine::generate`]
//! (up to floating-point ties), which `tests/` checks.

use burn::tensor::{Tensor, TensorData};
use toki_model::AttnMask;

use crate::driver::greedy_tokens;
use crate::engine::Engine;
use crate::error::{DecodeError, Result};

impl Engine {
    /// Greedy continuations of `prompts` (token ids), each up to `max_new_tokens` or an end
    /// token (kept), computed together.
    pub fn generate_batch(
        &self,
        prompts: &[Vec<u32>],
        max_new_tokens: usize,
    ) -> Result<Vec<Vec<u32>>> {
        let mut outputs: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
        if prompts.is_empty() || max_new_tokens == 0 {
            return Ok(outputs);
        }
        for p in prompts {
            if p.is_empty() {
                return Err(DecodeError::EmptyPrompt);
            }
            if p.len().saturating_add(max_new_tokens) > self.context {
                return Err(DecodeError::AnswerTooLong {
                    prompt: p.len(),
                    new: max_new_tokens,
                    context: self.context,
                });
            }
        }
        let model = &self.model;
        let device = self.device();
        let capacity: usize = prompts.iter().map(|p| p.len() + max_new_tokens).sum();
        let mut cache = model.new_cache(capacity);
        // owner[r]: the sequence cache row r belongs to.
        let mut owner: Vec<usize> = Vec::with_capacity(capacity);
        let mut next = Vec::with_capacity(prompts.len());

        // Prefill each prompt alone: causal among its tokens, blind to the other prompts.
        for (b, p) in prompts.iter().enumerate() {
            let t = p.len();
            let s = owner.len();
            let mut bias = vec![f32::NEG_INFINITY; t * (s + t)];
            for i in 0..t {
                bias[i * (s + t) + s..i * (s + t) + s + i + 1].fill(0.0);
            }
            let mask = AttnMask::Full(Tensor::from_data(
                TensorData::new(bias, [t, s + t]),
                &device,
            ));
            let hidden = model.forward(
                self.ids_tensor(p),
                self.positions(0, t),
                &mask,
                &mut cache,
                &self.rope,
            ); // [t, D]
            owner.extend(std::iter::repeat_n(b, t));
            next.push(greedy_tokens(model, hidden.slice([t - 1..t]))?[0]);
        }
        for (b, &t) in next.iter().enumerate() {
            outputs[b].push(t);
        }
        let done = |out: &Vec<u32>| {
            out.len() >= max_new_tokens || out.last().is_some_and(|t| self.eos.contains(t))
        };

        loop {
            let active: Vec<usize> = (0..prompts.len()).filter(|&b| !done(&outputs[b])).collect();
            if active.is_empty() {
                break;
            }
            let (s, t) = (owner.len(), active.len());
            let mut bias = vec![f32::NEG_INFINITY; t * (s + t)];
            for (i, &b) in active.iter().enumerate() {
                let row = &mut bias[i * (s + t)..(i + 1) * (s + t)];
                for (r, &o) in owner.iter().enumerate() {
                    if o == b {
                        row[r] = 0.0;
                    }
                }
                row[s + i] = 0.0;
            }
            let tokens: Vec<u32> = active
                .iter()
                .map(|&b| *outputs[b].last().unwrap_or(&0))
                .collect();
            // The newest token of sequence b sits at position prompt + generated - 1.
            let positions: Vec<u32> = active
                .iter()
                .map(|&b| (prompts[b].len() + outputs[b].len() - 1) as u32)
                .collect();
            let mask = AttnMask::Full(Tensor::from_data(
                TensorData::new(bias, [t, s + t]),
                &device,
            ));
            let hidden = model.forward(
                self.ids_tensor(&tokens),
                self.ids_tensor(&positions),
                &mask,
                &mut cache,
                &self.rope,
            ); // [t, D]
            owner.extend(active.iter().copied());
            let picked = greedy_tokens(model, hidden)?;
            for (&b, &tok) in active.iter().zip(&picked) {
                outputs[b].push(tok);
            }
        }
        Ok(outputs)
    }
}
