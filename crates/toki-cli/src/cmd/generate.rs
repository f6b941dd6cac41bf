//! `toki generate`: plain decoding, streamed to stdout (or one JSON object with `--json`).

use std::io::Write;
use std::ops::ControlFlow;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde_json::json;
use toki_decode::{Engine, EngineOptions, Prompt, Request, Sampling};
use toki_model::tokenizer::Message;

use crate::backend::{self, Backend};

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
    #[arg(long, default_value_t = 128)]
    max_new_tokens: usize,
    /// 0 = greedy.
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    /// 0 = no top-k filter.
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Most tokens (prompt + output) a request may hold.
    #[arg(long, default_value_t = 4096)]
    max_context: usize,
    /// Print one JSON object (prompt_ids, output_ids, text, stats) instead of streaming.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<()> {
    if a.prompt.trim().is_empty() {
        bail!("the prompt is empty");
    }
    let sampling = Sampling::from_settings(a.temperature, a.top_k, a.top_p, a.seed)?;
    let device = backend::device(a.backend)?;
    let options = EngineOptions {
        max_context: a.max_context,
        ..Default::default()
    };
    let engine = Engine::load(&a.model, &device, &options)
        .with_context(|| format!("loading {}", a.model.display()))?;
    let prompt = if a.chat {
        Prompt::Chat(vec![Message::user(a.prompt.clone())])
    } else {
        Prompt::Text(a.prompt.clone())
    };
    let request = Request {
        sampling,
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
    // incomplete UTF-8 sequence (shown as U+FFFD until its last byte arrives).
    let mut printed = 0;
    let mut stdout = std::io::stdout().lock();
    let out = engine.generate_with(&request, |e| {
        if let Ok(text) = engine.decode_text(e.all_tokens)
            && !text.ends_with('\u{FFFD}')
            && text.len() > printed
            && text.is_char_boundary(printed)
        {
            let _ = stdout.write_all(text[printed..].as_bytes());
            let _ = stdout.flush();
            printed = text.len();
        }
        ControlFlow::Continue(())
    })?;
    if out.text.len() > printed && out.text.is_char_boundary(printed) {
        let _ = stdout.write_all(out.text[printed..].as_bytes());
    }
    let _ = writeln!(stdout);
    eprintln!(
        "[{} tokens, prefill {:.0} ms, {:.1} tokens/s, {:?}]",
        out.output_ids.len(),
        out.stats.prefill_ms,
        out.stats.tokens_per_s,
        out.finish_reason
    );
    Ok(())
}
