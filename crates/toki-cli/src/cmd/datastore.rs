//! `toki datastore`: the corpus that datastore lookup searches (`toki_decode::datastore`),
//! from the same data the heads train on: the target tokens of each document (a chat
//! line's assistant answers, a text line's whole text) become its documents.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use toki_decode::Datastore;

use super::corpus::CorpusArgs;

/// The file generate and bench pick up from a heads folder.
pub const FILE: &str = "datastore.safetensors";

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    corpus: CorpusArgs,
    /// Output file, e.g. HEADS_DIR/datastore.safetensors.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    super::check_out_file(&a.out, "--out")?;
    let docs = a.corpus.documents()?;
    // Each run of target tokens (an assistant answer) is one document; the datastore
    // skips the empty pieces between non-target tokens.
    let answers = docs.iter().flat_map(|d| {
        let pairs: Vec<(u32, bool)> = d
            .tokens
            .iter()
            .copied()
            .zip(d.target.iter().copied())
            .collect();
        (pairs.split(|&(_, target)| !target))
            .map(|run| run.iter().map(|&(t, _)| t).collect::<Vec<u32>>())
            .collect::<Vec<_>>()
    });
    let ds = Datastore::new(answers).context("building the datastore")?;
    if ds.is_empty() {
        bail!("the data holds no target tokens (assistant answers or text)");
    }
    ds.save(&a.out)
        .with_context(|| format!("writing {}", a.out.display()))?;
    let bytes = std::fs::metadata(&a.out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "{} tokens from {} documents; written to {} ({:.1} MB)",
        ds.len(),
        docs.len(),
        a.out.display(),
        bytes as f64 / 1e6
    );
    Ok(())
}
