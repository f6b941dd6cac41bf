//! `toki draft-vocab`: count the target tokens of head-training data into
//! `draft-vocab.json` (`toki train` writes the same file next to the heads it trains).

use std::path::PathBuf;

use anyhow::{Context, Result};
use toki_train::target_counts;

use super::corpus::CorpusArgs;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    corpus: CorpusArgs,
    /// Output file, e.g. HEADS_DIR/draft-vocab.json.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    super::check_out_file(&a.out, "--out")?;
    let docs = a.corpus.documents()?;
    let source: Vec<String> = a
        .corpus
        .data
        .iter()
        .map(|p| p.display().to_string())
        .collect();
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
