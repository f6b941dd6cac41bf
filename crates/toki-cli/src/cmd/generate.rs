//! `toki generate`: plain decoding, streamed to stdout (or one JSON object with `--json`).

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::json;
use toki_decode::{Acceptance, Engine, EngineOptions, Prompt, Request, Sampling, TreePolicy};
use toki_model::Precision;
use toki_model::tokenizer::Message;

use crate::backend::{self, Backend};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum PrecisionArg {
    F32,
    F16,
    Bf16,
}

/// How sampled tree proposals are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AcceptanceArg {
    /// Accept iff the base's arg-max agrees (temperature 0).
    Greedy,
    /// Recursive rejection sampling: exactly the distribution of plain sampling.
    Lossless,
    /// Medusa's typical acceptance: faster, NOT distribution-preserving.
    Typical,
}

/// The sampling settings shared by `generate` and `bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct SamplingArgs {
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    /// 0 = no top-k filter.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1 = no top-p filter).
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Seeds the draw at every position: the same seed gives the same tokens, with or
    /// without heads (under lossless acceptance).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

impl SamplingArgs {
    pub fn sampling(&self) -> Result<Sampling> {
        Ok(Sampling::from_settings(
            self.temperature,
            self.top_k,
            self.top_p,
            self.seed,
        )?)
    }
}

/// The acceptance settings shared by `generate` and `bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct AcceptanceArgs {
    /// greedy (default at temperature 0) | lossless (default when sampling) | typical.
    #[arg(long, value_enum)]
    pub acceptance: Option<AcceptanceArg>,
    /// Typical acceptance: hard threshold epsilon.
    #[arg(long, default_value_t = 0.09)]
    pub typical_epsilon: f64,
    /// Typical acceptance: entropy factor delta (threshold min(epsilon, delta * exp(-H))).
    #[arg(long, default_value_t = 0.3)]
    pub typical_delta: f64,
}

impl AcceptanceArgs {
    /// The request's acceptance for `sampling`; a mode that does not fit it is an error.
    pub fn resolve(&self, sampling: &Sampling) -> Result<Acceptance> {
        let greedy = matches!(sampling, Sampling::Greedy);
        match (self.acceptance, greedy) {
            (None | Some(AcceptanceArg::Greedy), true) => Ok(Acceptance::Lossless),
            (Some(_), true) => bail!("--acceptance lossless|typical needs --temperature > 0"),
            (Some(AcceptanceArg::Greedy), false) => {
                bail!("--acceptance greedy needs --temperature 0")
            }
            (None | Some(AcceptanceArg::Lossless), false) => Ok(Acceptance::Lossless),
            (Some(AcceptanceArg::Typical), false) => {
                let typical = Acceptance::Typical {
                    epsilon: self.typical_epsilon,
                    delta: self.typical_delta,
                };
                typical
                    .check()
                    .context("--typical-epsilon / --typical-delta")?;
                Ok(typical)
            }
        }
    }
}

#[derive(clap::Args)]
pub struct Args {
    /// HF-style model folder (config.json, *.safetensors, tokenizer.json).
    #[arg(long)]
    model: PathBuf,
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt as one user message with the model's chat template.
    #[arg(long)]
    chat: bool,
    #[arg(long, default_value_t = 128, value_parser = super::at_least_one())]
    max_new_tokens: usize,
    /// End generation once the text contains this string (repeatable); the text before it
    /// is kept.
    #[arg(long = "stop", value_name = "STRING")]
    stop: Vec<String>,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Compute precision (f16/bf16 where the backend supports them).
    #[arg(long, value_enum, default_value_t = PrecisionArg::F32)]
    precision: PrecisionArg,
    /// Most tokens (prompt + output) a request may hold (the model's
    /// `max_position_embeddings` where that is fewer).
    #[arg(long, default_value_t = 4096, value_parser = super::at_least_one())]
    max_context: usize,
    /// Medusa heads folder (heads.json + heads.safetensors, or the reference
    /// medusa_lm_head.safetensors + config.json): decode speculatively.
    #[arg(long)]
    heads: Option<PathBuf>,
    #[command(flatten)]
    draft: crate::heads::DraftArg,
    #[command(flatten)]
    tree: crate::tree::TreeArgs,
    #[command(flatten)]
    acceptance: AcceptanceArgs,
    /// Verify the full tree every step: no fallback to plain steps where speculation does
    /// not pay (the adaptive policy is on by default).
    #[arg(long, requires = "heads")]
    no_adapt: bool,
    /// Print one JSON object (prompt_ids, output_ids, text, stats) instead of streaming.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    // A chat message may be empty: the template still gives the model a prompt.
    if !a.chat && a.prompt.trim().is_empty() {
        bail!("the prompt is empty (with --chat, an empty message is sent in the template)");
    }
    if a.stop.iter().any(String::is_empty) {
        bail!("--stop needs a non-empty string");
    }
    let sampling = a.sampling.sampling()?;
    let acceptance = a.acceptance.resolve(&sampling)?;
    let (backend, device) = backend::resolve(a.backend)?;
    let precision = match a.precision {
        PrecisionArg::F32 => Precision::F32,
        PrecisionArg::F16 => Precision::F16,
        PrecisionArg::Bf16 => Precision::BF16,
    };
    // flex 0.22.1 runs the model in f32 only (a half-precision run stops on a storage
    // dtype check inside flex); half precision is offered where the device reports it.
    let on_flex = format!("{device:?}").contains("Flex");
    if precision != Precision::F32 && (on_flex || !device.supports_dtype(precision.dtype())) {
        bail!(
            "--precision {:?} is not supported on this backend ({device:?}); use f32",
            a.precision
        );
    }
    let options = EngineOptions {
        max_context: a.max_context,
        precision,
    };
    let mut engine = Engine::load(&a.model, &device, &options)
        .with_context(|| format!("loading {}", a.model.display()))?;
    if let Some(dir) = &a.heads {
        let heads = crate::heads::load(dir, &engine, a.draft)?;
        let tree = a.tree.resolve(&engine, &heads, dir, backend, &[], 0)?;
        let datastore = a.tree.datastore(dir)?;
        tracing::info!(
            "tree: {}",
            tree.describe(
                heads.heads().num_heads(),
                a.tree.lookup(),
                datastore.as_ref()
            )
        );
        engine = tree.install(engine, heads, a.tree.lookup(), datastore)?;
    }
    let prompt = if a.chat {
        Prompt::Chat(vec![Message::user(a.prompt.clone())])
    } else {
        Prompt::Text(a.prompt.clone())
    };
    let request = Request {
        sampling,
        acceptance,
        stop_strings: a.stop.clone(),
        tree_policy: if a.no_adapt {
            TreePolicy::Always
        } else {
            TreePolicy::Adaptive
        },
        ..Request::greedy(prompt, a.max_new_tokens)
    };
    if a.json {
        let out = engine.generate(&request)?;
        let v = json!({
            "prompt_ids": out.prompt_ids,
            "output_ids": out.output_ids,
            "text": out.text,
            "finish_reason": out.finish_reason,
            "stats": out.stats,
        });
        println!("{v}");
        return Ok(());
    }
    // Stream: print the text decoded so far beyond what was printed, holding back an
    // incomplete UTF-8 sequence (shown as U+FFFD until its last byte arrives) and, with
    // stop strings, the last bytes that could begin one; the step that completes one
    // prints nothing here: the text before it comes back in `out.text`, printed below.
    let hold = a.stop.iter().map(|s| s.len() - 1).max().unwrap_or(0);
    let mut printed = 0;
    let mut stdout = std::io::stdout().lock();
    let out = engine.generate_with(&request, |e| {
        if let Ok(text) = engine.decode_text(e.all_tokens)
            && !text.ends_with('\u{FFFD}')
            && !a.stop.iter().any(|s| text.contains(s.as_str()))
        {
            let mut upto = text.len().saturating_sub(hold);
            while !text.is_char_boundary(upto) {
                upto -= 1;
            }
            if upto > printed && text.is_char_boundary(printed) {
                let _ = stdout.write_all(&text.as_bytes()[printed..upto]);
                let _ = stdout.flush();
                printed = upto;
            }
        }
        ControlFlow::Continue(())
    })?;
    if out.text.len() > printed && out.text.is_char_boundary(printed) {
        let _ = stdout.write_all(&out.text.as_bytes()[printed..]);
    }
    let _ = writeln!(stdout);
    let st = &out.stats;
    // With heads: τ (tokens per base pass), and how many passes verified more than the root.
    let spec = if a.heads.is_some() {
        format!(
            ", {:.2} tokens a step over {} steps ({} speculative)",
            st.mean_accepted, st.steps, st.speculative_steps
        )
    } else {
        String::new()
    };
    eprintln!(
        "[{} tokens, prefill {:.0} ms, {:.1} tokens/s{spec}, {:?}]",
        out.output_ids.len(),
        st.prefill_ms,
        st.tokens_per_s,
        out.finish_reason
    );
    Ok(())
}
