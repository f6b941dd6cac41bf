//! Training data: files → token documents with a loss mask → fixed-length sequences.
//!
//! Accepted inputs (a folder is read recursively, its `.jsonl`, `.txt` and `.md` files in
//! name order):
//! - `.jsonl`: one object per line, `{"text": "..."}` (every token is a target) or
//!   `{"messages": [{"role", "content"}, ...]}` (rendered with the model's chat template;
//!   only assistant tokens are targets);
//! - any other file: plain text, the whole file one document.

use std::path::PathBuf;

use serde::Deserialize;
use toki_model::TokenCounts;
use toki_model::tokenizer::{Message, Tokenizer};

use crate::error::{Result, TrainError};

/// One tokenized document. `target[i]`: token i may be predicted (loss is taken on it).
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    pub tokens: Vec<u32>,
    pub target: Vec<bool>,
}

/// Counts of the target tokens of `docs`, most frequent first: the heads' draft
/// vocabulary (`toki train` writes it next to the heads as `draft-vocab.json`).
pub fn target_counts(docs: &[Document], source: impl Into<String>) -> TokenCounts {
    let targets = docs.iter().flat_map(|d| {
        d.tokens
            .iter()
            .zip(&d.target)
            .filter(|(_, t)| **t)
            .map(|(&tok, _)| tok)
    });
    TokenCounts::count(source, targets)
}

/// A packed training sequence (the base runs each one from position 0).
pub type Sequence = Document;

#[derive(Deserialize)]
#[serde(untagged)]
enum Line {
    Text { text: String },
    Chat { messages: Vec<Message> },
}

/// Every data file under `paths`, in order.
fn files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = vec![];
    for p in paths {
        if p.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| TrainError::io(p, e))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            entries.sort();
            let (dirs, plain): (Vec<_>, Vec<_>) = entries.into_iter().partition(|e| e.is_dir());
            out.extend(plain.into_iter().filter(|f| {
                f.extension()
                    .is_some_and(|x| x == "jsonl" || x == "txt" || x == "md")
            }));
            out.extend(files(&dirs)?);
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            return Err(TrainError::data(p, None, "no such file or folder"));
        }
    }
    Ok(out)
}

/// Tokenize every document of `paths`. A missing, empty or malformed file is an error
/// naming the file (and line).
pub fn load_documents(paths: &[PathBuf], tok: &Tokenizer) -> Result<Vec<Document>> {
    let files = files(paths)?;
    if files.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(TrainError::Config(format!(
            "no data files (.jsonl, .txt, .md) in {}",
            shown.join(", ")
        )));
    }
    let mut docs = vec![];
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|e| TrainError::io(f, e))?;
        // A byte-order mark is not text to train on (nor the start of a JSON line).
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        if text.trim().is_empty() {
            return Err(TrainError::data(f, None, "the file is empty"));
        }
        if f.extension().is_some_and(|x| x == "jsonl") {
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let parsed: Line = serde_json::from_str(line).map_err(|e| {
                    TrainError::data(
                        f,
                        Some(i + 1),
                        format!("expected {{\"text\": ...}} or {{\"messages\": [...]}} ({e})"),
                    )
                })?;
                let doc = match parsed {
                    Line::Text { text } => plain(&text, tok),
                    Line::Chat { messages } => chat(&messages, tok),
                }
                .map_err(|e| TrainError::data(f, Some(i + 1), e))?;
                docs.push(doc);
            }
        } else {
            docs.push(plain(text, tok).map_err(|e| TrainError::data(f, None, e))?);
        }
    }
    if docs.iter().all(|d| d.target.iter().all(|t| !t)) {
        return Err(TrainError::Config("the data holds no target tokens".into()));
    }
    Ok(docs)
}

fn plain(text: &str, tok: &Tokenizer) -> std::result::Result<Document, String> {
    let tokens = tok.encode(text).map_err(|e| e.to_string())?;
    Ok(Document {
        target: vec![true; tokens.len()],
        tokens,
    })
}

/// A conversation through the chat template; the tokens each assistant message adds
/// (its content and closing tokens) are targets.
fn chat(messages: &[Message], tok: &Tokenizer) -> std::result::Result<Document, String> {
    if messages.is_empty() {
        return Err("`messages` is empty".into());
    }
    let count = |msgs: &[Message], gen_prompt: bool| -> std::result::Result<usize, String> {
        let text = tok
            .apply_chat_template(msgs, gen_prompt)
            .map_err(|e| e.to_string())?;
        Ok(tok.encode(&text).map_err(|e| e.to_string())?.len())
    };
    let full = tok
        .apply_chat_template(messages, false)
        .map_err(|e| e.to_string())?;
    let tokens = tok.encode(&full).map_err(|e| e.to_string())?;
    let mut target = vec![false; tokens.len()];
    for (i, m) in messages.iter().enumerate() {
        if m.role == "assistant" {
            let start = count(&messages[..i], true)?.min(tokens.len());
            let end = count(&messages[..=i], false)?.min(tokens.len());
            target[start..end.max(start)].fill(true);
        }
    }
    Ok(Document { tokens, target })
}

/// Concatenate documents and cut the stream into sequences of `seq_len` tokens (the last,
/// shorter one is kept when it has at least `min_len` tokens).
pub fn pack(docs: &[Document], seq_len: usize, min_len: usize) -> Vec<Sequence> {
    let tokens: Vec<u32> = docs.iter().flat_map(|d| d.tokens.iter().copied()).collect();
    let target: Vec<bool> = docs.iter().flat_map(|d| d.target.iter().copied()).collect();
    tokens
        .chunks(seq_len.max(1))
        .zip(target.chunks(seq_len.max(1)))
        .filter(|(t, _)| t.len() >= min_len)
        .map(|(t, m)| Sequence {
            tokens: t.to_vec(),
            target: m.to_vec(),
        })
        .collect()
}

/// Split sequences for held-out metrics: every `every`-th sequence (from the first) is
/// held out. Returns (train, held_out).
pub fn split(seqs: Vec<Sequence>, every: usize) -> (Vec<Sequence>, Vec<Sequence>) {
    let (mut train, mut held) = (vec![], vec![]);
    for (i, s) in seqs.into_iter().enumerate() {
        if every > 0 && i % every == every - 1 {
            held.push(s);
        } else {
            train.push(s);
        }
    }
    (train, held)
}
