//! `toki convert-gguf FILE.gguf --out DIR`

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file (v2 or v3; F32, F16, BF16, Q8_0, Q4_0, Q4_1 tensors).
    file: PathBuf,
    /// Output folder (created; existing files of the same names are replaced).
    #[arg(long)]
    out: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let bar = indicatif::ProgressBar::new_spinner()
        .with_message(format!("converting {}", a.file.display()));
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    let report = toki_model::convert::convert_gguf(&a.file, &a.out)
        .with_context(|| format!("converting {}", a.file.display()))?;
    bar.finish_and_clear();
    eprintln!(
        "{}: {} tensors, {:.1}M parameters, vocabulary {} -> {}",
        report.architecture,
        report.tensors,
        report.parameters as f64 / 1e6,
        report.vocab_size,
        a.out.display()
    );
    Ok(())
}
