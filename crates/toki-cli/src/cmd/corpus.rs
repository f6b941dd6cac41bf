//! What `toki draft-vocab` and `toki datastore` read: a model's tokenizer and chat
//! template, and head-training data.

use std::path::PathBuf;

use anyhow::{Context, Result};
use toki_decode::{Engine, EngineOptions};
use toki_train::{Document, load_documents};

use crate::backend::{self, Backend};

#[derive(clap::Args)]
pub struct CorpusArgs {
    /// HF-style model folder (its tokenizer and chat template are used).
    #[arg(long)]
    model: PathBuf,
    /// Head-training data, e.g. `toki distill` output: .jsonl ({"text"} or {"messages"}),
    /// .txt, .md, or folders of them. Never the prompts you benchmark on.
    #[arg(long, required = true, num_args = 1..)]
    pub data: Vec<PathBuf>,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
}

impl CorpusArgs {
    /// The data's documents, tokenized (chat lines with the model's template; targets: the
    /// assistant's tokens, or a text line's every token).
    pub fn documents(&self) -> Result<Vec<Document>> {
        let device = backend::device(self.backend)?;
        let engine = Engine::load(&self.model, &device, &EngineOptions::default())
            .with_context(|| format!("loading {}", self.model.display()))?;
        let tok = engine.tokenizer().context("the model has no tokenizer")?;
        Ok(load_documents(&self.data, tok)?)
    }
}
