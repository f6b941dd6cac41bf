//! `toki distill`: the base model answers a prompt file itself (self-distillation data for
//! head training). Appends one chat line per prompt to `--out` and skips prompts already
//! there, so an interrupted run resumes where it stopped.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use toki_decode::{Engine, EngineOptions, Prompt};
use toki_model::tokenizer::Message;

use crate::backend::{self, Backend};

#[derive(clap::Args)]
pub struct Args {
    /// HF-style model folder.
    #[arg(long)]
    model: PathBuf,
    /// Prompts: JSONL with `{"prompt": "..."}` per line, or plain text with one per line.
    #[arg(long)]
    prompts: PathBuf,
    /// Output JSONL (`{"messages": [user, assistant]}` per line); appended to.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 128, value_parser = super::at_least_one())]
    max_new_tokens: usize,
    /// Prompts decoded together in one pass per token.
    #[arg(long, default_value_t = 8, value_parser = super::at_least_one())]
    batch: usize,
    /// Stop after this many prompts (0 = all).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
}

/// Prompts of a file, in order: JSONL `{"prompt": ...}` lines, or plain lines.
pub fn read_prompts(path: &Path) -> Result<Vec<String>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let jsonl = path
        .extension()
        .is_some_and(|e| e == "jsonl" || e == "json");
    let mut prompts = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let mut line =
            line.with_context(|| format!("reading {} line {}", path.display(), i + 1))?;
        if i == 0 && line.starts_with('\u{feff}') {
            line.remove(0); // a byte-order mark, not part of the prompt
        }
        if line.trim().is_empty() {
            continue;
        }
        let prompt = if jsonl {
            let v: serde_json::Value = serde_json::from_str(&line)
                .with_context(|| format!("{} line {}: not JSON", path.display(), i + 1))?;
            match v.get("prompt").and_then(|p| p.as_str()) {
                Some(p) if !p.trim().is_empty() => p.to_string(),
                _ => bail!(
                    "{} line {}: expected {{\"prompt\": \"...\"}} with a non-empty prompt",
                    path.display(),
                    i + 1
                ),
            }
        } else {
            line
        };
        prompts.push(prompt);
    }
    if prompts.is_empty() {
        bail!("{} holds no prompts", path.display());
    }
    Ok(prompts)
}

/// User prompts already answered in `out`. A last line cut short by an interrupted write
/// (not JSON, no newline) is removed so that appending continues on a clean line; a last
/// line that is whole JSON without its newline (an editor's save) is kept and ended.
fn answered(out: &Path) -> Result<HashSet<String>> {
    let mut done = HashSet::new();
    let Ok(text) = std::fs::read_to_string(out) else {
        return Ok(done);
    };
    let mut good_len = 0;
    let mut end_last_line = false;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let parsed = serde_json::from_str::<serde_json::Value>(line);
        let v = match parsed {
            Ok(v) => v,
            Err(_) if !line.ends_with('\n') => break, // cut short by an interrupted write
            Err(e) => {
                return Err(e).with_context(|| {
                    format!(
                        "{} line {}: not JSON; not appending to it",
                        out.display(),
                        i + 1
                    )
                });
            }
        };
        if let Some(p) = v.pointer("/messages/0/content").and_then(|c| c.as_str()) {
            done.insert(p.to_string());
        }
        good_len += line.len();
        end_last_line = !line.ends_with('\n');
    }
    if good_len < text.len() {
        tracing::warn!(
            "dropping an incomplete last line of {} (an interrupted run)",
            out.display()
        );
        OpenOptions::new()
            .write(true)
            .open(out)
            .and_then(|f| f.set_len(good_len as u64))
            .with_context(|| format!("trimming {}", out.display()))?;
    } else if end_last_line {
        OpenOptions::new()
            .append(true)
            .open(out)
            .and_then(|mut f| f.write_all(b"\n"))
            .with_context(|| format!("ending the last line of {}", out.display()))?;
    }
    Ok(done)
}

pub fn run(a: Args) -> Result<()> {
    super::check_out_file(&a.out, "--out")?;
    let prompts = read_prompts(&a.prompts)?;
    let done = answered(&a.out)?;
    let mut todo: Vec<String> = prompts.into_iter().filter(|p| !done.contains(p)).collect();
    todo.dedup();
    if a.limit > 0 {
        todo.truncate(a.limit);
    }
    if todo.is_empty() {
        tracing::info!("every prompt is answered in {}", a.out.display());
        return Ok(());
    }
    let device = backend::device(a.backend)?;
    let engine = Engine::load(&a.model, &device, &EngineOptions::default())
        .with_context(|| format!("loading {}", a.model.display()))?;
    let tokenizer = engine.tokenizer().context("the model has no tokenizer")?;
    let mut out = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&a.out)
        .with_context(|| format!("opening {}", a.out.display()))?;

    let bar = ProgressBar::new(todo.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} prompts {per_sec} eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let start = std::time::Instant::now();
    let mut tokens = 0usize;
    for chunk in todo.chunks(a.batch) {
        let ids: Vec<Vec<u32>> = chunk
            .iter()
            .map(|p| engine.encode_prompt(&Prompt::Chat(vec![Message::user(p.clone())])))
            .collect::<Result<_, _>>()?;
        let answers = engine.generate_batch(&ids, a.max_new_tokens)?;
        for (prompt, answer) in chunk.iter().zip(&answers) {
            tokens += answer.len();
            let finished = answer.last().is_some_and(|&t| engine.is_eos(t));
            let text = tokenizer.decode(answer, true)?;
            let line = json!({
                "messages": [Message::user(prompt.clone()), Message::assistant(text)],
                "finish": if finished { "eos" } else { "length" },
            });
            writeln!(out, "{line}").with_context(|| format!("writing {}", a.out.display()))?;
        }
        out.flush()?;
        bar.inc(chunk.len() as u64);
        bar.set_message(format!(
            "{:.0} tokens/s",
            tokens as f64 / start.elapsed().as_secs_f64()
        ));
    }
    bar.finish();
    tracing::info!(
        "{} answers, {tokens} tokens in {:.0} s",
        todo.len(),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{answered, read_prompts};

    /// An interrupted write's last line is dropped; a whole last line without its newline
    /// is kept (and ended); a bad line before the last is an error, and the file is kept.
    #[test]
    fn an_existing_output_keeps_every_whole_line() {
        let dir = toki_model::testing::ScratchDir::new("distill-out").unwrap();
        let out = dir.join("a.jsonl");
        let line = |p: &str| format!(r#"{{"messages": [{{"role": "user", "content": "{p}"}}]}}"#);
        let (a, b) = (line("a"), line("b"));
        std::fs::write(&out, format!("{a}\n{}", &b[..20])).unwrap();
        assert_eq!(answered(&out).unwrap().len(), 1);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("{a}\n"));
        std::fs::write(&out, format!("{a}\n{b}")).unwrap();
        let done = answered(&out).unwrap();
        assert!(done.contains("a") && done.contains("b"), "{done:?}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            format!("{a}\n{b}\n")
        );
        let bad = format!("{a}\nnot json\n{b}\n");
        std::fs::write(&out, &bad).unwrap();
        assert!(answered(&out).unwrap_err().to_string().contains("line 2"));
        assert_eq!(std::fs::read_to_string(&out).unwrap(), bad);
    }

    /// A byte-order mark before the first line is not part of the first prompt, in plain
    /// text and in JSONL.
    #[test]
    fn a_byte_order_mark_is_not_part_of_the_first_prompt() {
        let dir = toki_model::testing::ScratchDir::new("distill-bom").unwrap();
        let txt = dir.join("p.txt");
        std::fs::write(&txt, "\u{feff}first\r\nsecond\n").unwrap();
        assert_eq!(read_prompts(&txt).unwrap(), ["first", "second"]);
        let jsonl = dir.join("p.jsonl");
        std::fs::write(&jsonl, "\u{feff}{\"prompt\": \"a\"}\n").unwrap();
        assert_eq!(read_prompts(&jsonl).unwrap(), ["a"]);
    }
}
