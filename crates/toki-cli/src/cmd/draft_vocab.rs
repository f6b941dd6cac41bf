//! `toki draft-vocab`: count the target tokens of head-training data into
//! `draft-vocab.json` (`toki train` writes the same file next to the heads it trains).

use std::path::PathBuf;

use anyhow::{Context, Result};
use toki_decode::{Engine, EngineOptions};
use toki_train::{load_documents, target_counts};

use crate::backend::{self, Backend};

#[derive(clap::Args)]
pub struct Args {
    /// HF-style model folder (its tokenizer and chat template are used).
    #[arg(long)]
    model: PathBuf,
    /// The heads' training data: .jsonl ({"text"} or {"messages"}), .txt, .md.
    #[arg(long, required = true, num_args = 1..)]
    data: Vec<PathBuf>,
    /// Output file, e.g. HEADS_DIR/draft-vocab.json.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
}

pub fn run(a: Args) -> Result<()> {
    let device = backend::device(a.backend)?;
    let engine = Engine::load(&a.model, &device, &EngineOptions::default())
        .with_context(|| format!("loading {}", a.model.display()))?;
    let tok = engine.tokenizer().context("the model has no tokenizer")?;
    let docs = load_documents(&a.data, tok)?;
    let source: Vec<String> = a.data.iter().map(|p| p.display().to_string()).collect();
    let counts = target_counts(&docs, source.join(", "));
    counts
        .write(&a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    let total: u64 = counts.tokens.iter().map(|t| t.1).sum();
    let cover: Vec<String> = [1024, 2048, 4096, 8192, 16384]
        .iter()
        .map(|&n| format!("{n}: {:.1}%", 100.0 * counts.coverage(n)))
        .collect();
    eprintln!(
        "{} distinct tokens in {total} targets; coverage by the most frequent {}; written to {}",
        counts.tokens.len(),
        cover.join(", "),
        a.out.display()
    );
    Ok(())
}
