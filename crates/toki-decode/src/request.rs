//! What a caller asks for and what it gets back.

use serde::Serialize;
use toki_model::tokenizer::Message;

use crate::acceptance::Acceptance;
use crate::adapt::TreePolicy;
use crate::sampling::Sampling;

/// The prompt: raw text, a chat (rendered with the model's template, generation prompt
/// added), or token ids as they are.
#[derive(Debug, Clone)]
pub enum Prompt {
    Text(String),
    Chat(Vec<Message>),
    Ids(Vec<u32>),
}

/// One generation request.
#[derive(Debug, Clone)]
pub struct Request {
    pub prompt: Prompt,
    pub max_new_tokens: usize,
    /// Extra token ids that end generation (the model's EOS ids always do).
    pub stop_tokens: Vec<u32>,
    /// Generation ends once the text contains one of these: the text is cut before it,
    /// the ids end at the token that completed it (the same ids as plain decoding, however
    /// many tokens the last step accepted).
    pub stop_strings: Vec<String>,
    pub sampling: Sampling,
    /// How sampled tree proposals are accepted (greedy decoding ignores it: a proposal is
    /// accepted iff it is the base's arg-max).
    pub acceptance: Acceptance,
    /// Whether decoding may fall back to plain steps where speculation does not pay.
    pub tree_policy: TreePolicy,
}

impl Request {
    /// Settings no generation can run with: an empty stop string (it would match before
    /// the first token), sampling settings out of range, typical acceptance's ε or δ not
    /// a finite number > 0.
    pub fn check(&self) -> crate::Result<()> {
        if self.stop_strings.iter().any(String::is_empty) {
            return Err(crate::DecodeError::Request(
                "a stop string is empty (it would match before the first token)".into(),
            ));
        }
        self.sampling.check()?;
        self.acceptance.check()
    }

    /// Greedy decoding of `prompt` for up to `max_new_tokens` tokens.
    pub fn greedy(prompt: Prompt, max_new_tokens: usize) -> Self {
        Self {
            prompt,
            max_new_tokens,
            stop_tokens: vec![],
            stop_strings: vec![],
            sampling: Sampling::Greedy,
            acceptance: Acceptance::Lossless,
            tree_policy: TreePolicy::Adaptive,
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-sequence or stop token was produced (it is included in the output).
    Eos,
    /// `max_new_tokens` were produced.
    MaxTokens,
    /// The context (cache capacity) is full.
    ContextFull,
    /// A stop string appeared.
    StopString,
    /// The streaming callback asked to stop.
    Cancelled,
}

/// Timings and speculation figures of one request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    pub prefill_ms: f64,
    pub decode_ms: f64,
    /// Generated tokens per second of decode time (the prefill excluded).
    pub tokens_per_s: f64,
    /// Base-model forward passes after the prefill.
    pub steps: usize,
    /// Of those, the ones that verified a tree (the rest were plain steps the adaptive
    /// policy chose, or that the context end forced).
    pub speculative_steps: usize,
    /// Of the speculative steps, those the adaptive policy chose plain that verified only
    /// chain nodes (prompt lookup's, the datastore's) beside the root, without the heads'
    /// pass ([`crate::adapt::Policy::chains_next`]).
    pub chain_steps: usize,
    /// Tree nodes verified over all steps, roots included (`verified_nodes / steps`: the
    /// mean tree size; dynamic trees vary from step to step).
    pub verified_nodes: usize,
    /// Tokens produced by each step (1 for plain decoding).
    pub accept_lengths: Vec<usize>,
    /// Mean of `accept_lengths`: τ, tokens per base-model pass.
    pub mean_accepted: f64,
    /// Per depth k: the fraction of speculative steps whose accepted path reached depth k
    /// (head k's proposal, or a prompt lookup token at that depth).
    pub head_acceptance: Vec<f64>,
    /// Tokens accepted on nodes only a chain proposed (prompt lookup, [`crate::lookup`];
    /// the datastore, [`crate::datastore`]), not the heads.
    pub lookup_tokens: usize,
}

/// The result of a request.
#[derive(Debug, Clone, Serialize)]
pub struct Output {
    pub prompt_ids: Vec<u32>,
    pub output_ids: Vec<u32>,
    pub text: String,
    pub finish_reason: FinishReason,
    pub stats: Stats,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::SampleParams;

    /// Settings a library caller can build by hand, which the CLI's flags would refuse.
    #[test]
    fn requests_no_generation_can_run_are_errors() {
        let ok = Request::greedy(Prompt::Ids(vec![1]), 4);
        assert!(ok.check().is_ok());
        let sample = |temperature, top_p| {
            Sampling::Sample(SampleParams {
                temperature,
                top_k: 0,
                top_p,
                seed: 0,
            })
        };
        let bad = [
            Request {
                stop_strings: vec!["x".into(), String::new()],
                ..ok.clone()
            },
            Request {
                sampling: sample(-1.0, 1.0),
                ..ok.clone()
            },
            Request {
                sampling: sample(0.0, 1.0),
                ..ok.clone()
            },
            Request {
                sampling: sample(1.0, f32::NAN),
                ..ok.clone()
            },
            Request {
                acceptance: Acceptance::Typical {
                    epsilon: 0.0,
                    delta: 0.3,
                },
                ..ok.clone()
            },
        ];
        for r in bad {
            assert!(r.check().is_err(), "{r:?}");
        }
        let fine = Request {
            sampling: sample(0.7, 0.9),
            acceptance: Acceptance::TYPICAL_DEFAULT,
            stop_strings: vec!["\n\n".into()],
            ..ok
        };
        assert!(fine.check().is_ok());
    }
}
