//! The decoding loop. Plain decoding: prefill the prompt, then one base-model pass per token.

use std::ops::ControlFlow;
use std::time::Instant;

use burn::tensor::Tensor;
use toki_model::AttnMask;

use crate::engine::{Emitted, Engine};
use crate::error::{DecodeError, Result};
use crate::request::{FinishReason, Output, Request, Stats};
use crate::sampling::{Rng, Sampling, draw, filtered_probs};

/// Next-token choice for every row of `logits` [R, vocab], read back in one transfer.
pub(crate) fn pick(logits: Tensor<2>, sampling: &Sampling, rng: &mut Rng) -> Result<Vec<u32>> {
    match sampling {
        Sampling::Greedy => {
            let ids: Vec<i64> = logits
                .argmax(1)
                .try_into_vec_as()
                .map_err(DecodeError::device)?;
            Ok(ids.into_iter().map(|x| x as u32).collect())
        }
        Sampling::Sample(p) => {
            let [rows, vocab] = logits.dims();
            let flat: Vec<f32> = logits.try_into_vec_as().map_err(DecodeError::device)?;
            Ok((0..rows)
                .map(|r| draw(&filtered_probs(&flat[r * vocab..(r + 1) * vocab], p), rng) as u32)
                .collect())
        }
    }
}

/// Tracks the generated tokens and decides when generation ends.
pub(crate) struct Progress<'a> {
    engine: &'a Engine,
    request: &'a Request,
    pub tokens: Vec<u32>,
    pub accept_lengths: Vec<usize>,
    text_cut: Option<String>,
}

impl<'a> Progress<'a> {
    pub fn new(engine: &'a Engine, request: &'a Request) -> Self {
        Self {
            engine,
            request,
            tokens: Vec::with_capacity(request.max_new_tokens),
            accept_lengths: vec![],
            text_cut: None,
        }
    }

    /// Add the tokens one step produced (cut at the first end token or the token budget),
    /// report them, and say whether generation is finished.
    pub fn push(
        &mut self,
        step: &[u32],
        on_tokens: &mut impl FnMut(Emitted<'_>) -> ControlFlow<()>,
    ) -> Result<Option<FinishReason>> {
        let start = self.tokens.len();
        let room = self.request.max_new_tokens - start;
        let mut finish = None;
        for &t in step.iter().take(room) {
            self.tokens.push(t);
            if self.engine.eos.contains(&t) || self.request.stop_tokens.contains(&t) {
                finish = Some(FinishReason::Eos);
                break;
            }
        }
        self.accept_lengths.push(self.tokens.len() - start);
        if finish.is_none() && self.tokens.len() >= self.request.max_new_tokens {
            finish = Some(FinishReason::MaxTokens);
        }
        if !self.request.stop_strings.is_empty() {
            let text = self.engine.decode_text(&self.tokens)?;
            if let Some(at) = self
                .request
                .stop_strings
                .iter()
                .filter_map(|s| text.find(s.as_str()))
                .min()
            {
                self.text_cut = Some(text[..at].to_string());
                finish = Some(FinishReason::StopString);
            }
        }
        let emitted = Emitted {
            new_tokens: &self.tokens[start..],
            all_tokens: &self.tokens,
        };
        if on_tokens(emitted).is_break() && finish.is_none() {
            finish = Some(FinishReason::Cancelled);
        }
        Ok(finish)
    }

    pub fn finish(
        self,
        prompt_ids: Vec<u32>,
        reason: FinishReason,
        mut stats: Stats,
    ) -> Result<Output> {
        let text = match self.text_cut {
            Some(t) => t,
            None => self.engine.decode_text(&self.tokens)?,
        };
        let n = self.tokens.len();
        stats.tokens_per_s = if stats.decode_ms > 0.0 {
            n as f64 / (stats.decode_ms / 1e3)
        } else {
            0.0
        };
        stats.mean_accepted = if self.accept_lengths.is_empty() {
            0.0
        } else {
            n as f64 / self.accept_lengths.len() as f64
        };
        stats.accept_lengths = self.accept_lengths;
        Ok(Output {
            prompt_ids,
            output_ids: self.tokens,
            text,
            finish_reason: reason,
            stats,
        })
    }
}

/// Plain autoregressive decoding.
pub(crate) fn run(
    engine: &Engine,
    prompt_ids: Vec<u32>,
    request: &Request,
    mut on_tokens: impl FnMut(Emitted<'_>) -> ControlFlow<()>,
) -> Result<Output> {
    let model = &engine.model;
    let n = prompt_ids.len();
    let mut rng = Rng::new(match request.sampling {
        Sampling::Sample(p) => p.seed,
        Sampling::Greedy => 0,
    });
    let mut progress = Progress::new(engine, request);
    let mut stats = Stats::default();
    if request.max_new_tokens == 0 {
        return progress.finish(prompt_ids, FinishReason::MaxTokens, stats);
    }
    let capacity = (n + request.max_new_tokens).min(engine.context);
    let mut cache = model.new_cache(capacity);

    let t0 = Instant::now();
    let hidden = model.forward(
        engine.ids_tensor(&prompt_ids),
        engine.positions(0, n),
        &AttnMask::Causal,
        &mut cache,
        &engine.rope,
    );
    let last = hidden.slice([n - 1..n]); // [1, D]
    let mut next = pick(model.logits(last), &request.sampling, &mut rng)?[0];
    stats.prefill_ms = t0.elapsed().as_secs_f64() * 1e3;

    let t1 = Instant::now();
    let reason = loop {
        if let Some(reason) = progress.push(&[next], &mut on_tokens)? {
            break reason;
        }
        if cache.len() >= capacity {
            break FinishReason::ContextFull;
        }
        let pos = cache.len();
        let hidden = model.forward(
            engine.ids_tensor(&[next]),
            engine.positions(pos, 1),
            &AttnMask::Causal,
            &mut cache,
            &engine.rope,
        );
        next = pick(model.logits(hidden), &request.sampling, &mut rng)?[0];
        stats.steps += 1;
    };
    stats.decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    progress.finish(prompt_ids, reason, stats)
}
