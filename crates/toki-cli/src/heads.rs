//! Loading Medusa heads as a proposer, with the draft vocabulary stored next to them.

use std::path::Path;

use anyhow::{Context, Result, bail};
use toki_decode::{Engine, HeadProposer};
use toki_model::{DraftVocab, HostPrecision, MedusaHeads, TokenCounts};

/// The file `toki train` and `toki draft-vocab` write into a heads folder.
pub const DRAFT_FILE: &str = "draft-vocab.json";
/// Draft vocabulary size used when the heads folder has a draft file and none is asked.
pub const DEFAULT_DRAFT: usize = 4096;

/// `--draft-vocab` and `--heads-precision`: what the heads score, and in what precision
/// their CPU copies are kept.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct DraftArg {
    /// Heads score only the N most frequent tokens of their training data (from
    /// `draft-vocab.json` in the heads folder; default: the size the heads were trained
    /// with, else 4096 when the file is there); 0 scores the whole vocabulary. Output is
    /// unchanged either way.
    #[arg(long = "draft-vocab")]
    pub size: Option<usize>,
    /// Precision of the heads' weights on the cpu backend (they only propose: output is
    /// unchanged, the proposals may differ where two are near-tied). GPUs keep the
    /// weights as loaded.
    #[arg(long = "heads-precision", value_enum, default_value_t = Precision::Q8)]
    pub heads_precision: Precision,
}

/// `--heads-precision`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precision {
    F32,
    /// Half precision: 2 bytes a weight.
    F16,
    /// 8-bit blocks of 32 with one scale (GGUF's Q8_0), rounded to nearest: 1.125 bytes.
    Q8,
}

impl From<Precision> for HostPrecision {
    fn from(p: Precision) -> Self {
        match p {
            Precision::F32 => HostPrecision::F32,
            Precision::F16 => HostPrecision::F16,
            Precision::Q8 => HostPrecision::Q8,
        }
    }
}

/// Heads from `dir` for `engine`'s model, with their draft vocabulary where there is one.
pub fn load(dir: &Path, engine: &Engine, draft: DraftArg) -> Result<HeadProposer> {
    let base = engine.model();
    let heads = MedusaHeads::load(dir, base)
        .with_context(|| format!("loading heads {}", dir.display()))?
        .with_host_kernels_in(base, draft.heads_precision.into());
    let file = dir.join(DRAFT_FILE);
    // Heads trained on a draft vocabulary use that size unless told otherwise.
    let trained = heads.config().draft_vocab;
    let size = match (draft.size, file.exists()) {
        (Some(0), _) => return Ok(HeadProposer::new(heads)),
        (None, false) if trained == 0 => return Ok(HeadProposer::new(heads)),
        (None, false) => bail!(
            "the heads were trained on a draft vocabulary of {trained} tokens but {} is missing (pass --draft-vocab 0 to score the whole vocabulary)",
            file.display()
        ),
        (Some(n), true) => n,
        (None, true) if trained > 0 => trained,
        (None, true) => DEFAULT_DRAFT,
        (Some(_), false) => bail!(
            "--draft-vocab: {} does not exist (write it with `toki draft-vocab`, or pass --draft-vocab 0)",
            file.display()
        ),
    };
    let counts = TokenCounts::read(&file)?;
    let ids = counts.top(size, base.config().vocab_size, &file)?;
    // Said so where the size was asked for or trained with, not for the default's cut.
    let wanted = match draft.size {
        Some(_) => Some(format!("--draft-vocab {size} asks for {size} tokens")),
        None if trained > 0 => Some(format!("the heads were trained on {size} draft tokens")),
        None => None,
    };
    if let Some(wanted) = wanted.filter(|_| ids.len() < size) {
        tracing::warn!(
            "{wanted}, but {} lists {}: the heads score those",
            file.display(),
            ids.len()
        );
    }
    tracing::info!(
        "draft vocabulary: {} tokens covering {:.1}% of {}",
        ids.len(),
        100.0 * counts.coverage(ids.len()),
        counts.source
    );
    let vocab = DraftVocab::new(ids, &heads, base)?;
    Ok(HeadProposer::with_draft(heads, vocab))
}
