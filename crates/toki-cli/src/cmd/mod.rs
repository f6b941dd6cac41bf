pub mod bench;
pub mod bench_report;
pub mod calibrate;
pub mod convert_gguf;
pub mod corpus;
pub mod datastore;
pub mod distill;
pub mod draft_vocab;
pub mod generate;
pub mod train;

use std::path::Path;

use anyhow::{Context, Result, bail};

/// A count that must be at least 1 (`--repeat`, `--limit`, `--batch`, `--max-new-tokens`
/// where no token would leave nothing to measure or learn from), refused by clap with its
/// range.
pub fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

/// Refuses an output file path before long work rather than after it: not a folder, and
/// its folder must exist.
pub fn check_out_file(path: &Path, flag: &str) -> Result<()> {
    if path.is_dir() {
        bail!("{flag} {} is a folder; name a file", path.display());
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(dir) = parent.filter(|d| !d.is_dir()) {
        bail!("{flag}: the folder {} does not exist", dir.display());
    }
    Ok(())
}

/// Writes `bytes` to a temporary file beside `path` and renames it into place, so an
/// interrupted or failed write leaves the file that was there whole.
pub fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
