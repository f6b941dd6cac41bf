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

use std::path::{Path, PathBuf};

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
/// interrupted or failed write leaves the file that was there whole (and no temporary
/// file). A symbolic link is written through: its target gets the bytes, the link stays.
pub fn write_file(path: &Path, bytes: impl AsRef<[u8]>) -> Result<()> {
    let path = &through_links(path);
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("writing {}", path.display())
    })
}

/// The file a path names once symbolic links are followed (a link whose target does not
/// exist yet names that target).
fn through_links(path: &Path) -> PathBuf {
    let mut at = path.to_path_buf();
    // A bounded walk: a cycle of links is left to the write to report.
    for _ in 0..40 {
        match std::fs::read_link(&at) {
            Ok(target) => {
                at = match at.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                }
            }
            Err(_) => return at,
        }
    }
    path.to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_replaces_the_old_whole_and_writes_through_links() {
        let dir = std::env::temp_dir().join(format!("toki-write-file-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("real")).unwrap();
        let file = dir.join("real/tree.json");
        write_file(&file, "one").unwrap();
        write_file(&file, "two").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "two");
        #[cfg(unix)]
        {
            // A link (relative, through a linked folder too) keeps being a link.
            std::os::unix::fs::symlink("real/tree.json", dir.join("link.json")).unwrap();
            write_file(&dir.join("link.json"), "three").unwrap();
            assert!(
                std::fs::symlink_metadata(dir.join("link.json"))
                    .unwrap()
                    .is_symlink()
            );
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "three");
            std::os::unix::fs::symlink(dir.join("real"), dir.join("alias")).unwrap();
            write_file(&dir.join("alias/tree.json"), "four").unwrap();
            assert_eq!(std::fs::read_to_string(&file).unwrap(), "four");
            // A dangling link names the file to create.
            std::os::unix::fs::symlink("real/new.json", dir.join("new.json")).unwrap();
            write_file(&dir.join("new.json"), "five").unwrap();
            assert_eq!(
                std::fs::read_to_string(dir.join("real/new.json")).unwrap(),
                "five"
            );
            assert!(
                std::fs::symlink_metadata(dir.join("new.json"))
                    .unwrap()
                    .is_symlink()
            );
        }
        // A rename that fails (onto a folder) leaves no temporary file.
        let err = write_file(&dir.join("real"), "six").unwrap_err();
        assert!(format!("{err:#}").contains("writing"), "{err:#}");
        assert!(!dir.join("real.tmp").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
