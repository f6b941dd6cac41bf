//! Checkpoints: the output folder always holds loadable heads (`heads.safetensors` +
//! `heads.json`, what `toki generate --heads` reads) and `trainer.safetensors`, which holds
//! parameters, AdamW moments and the step in one file, so a resume never mixes two steps.
//! Every file is written to a temp name and renamed into place.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use crate::error::{Result, TrainError};
use crate::trainer::{EvalReport, TrainConfig, Trainer};
use toki_model::LlamaConfig;

const STATE: &str = "trainer.safetensors";

fn ck_err(path: &Path, msg: impl ToString) -> TrainError {
    TrainError::Checkpoint {
        path: path.to_path_buf(),
        msg: msg.to_string(),
    }
}

fn le_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Save heads and trainer state into `dir`.
pub fn save(t: &Trainer<'_>, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
    t.heads(&t.device())?.save(dir)?;
    let path = dir.join(STATE);
    let mut named: Vec<(String, Vec<usize>, Vec<u8>)> = vec![];
    for (i, (name, shape)) in t.names().iter().enumerate() {
        named.push((
            format!("param.{name}"),
            shape.clone(),
            le_bytes(&t.params[i]),
        ));
        named.push((format!("m.{name}"), shape.clone(), le_bytes(&t.opt.m[i])));
        named.push((format!("v.{name}"), shape.clone(), le_bytes(&t.opt.v[i])));
    }
    let views: Vec<(String, TensorView<'_>)> = named
        .iter()
        .map(|(n, s, b)| {
            TensorView::new(Dtype::F32, s.clone(), b)
                .map(|v| (n.clone(), v))
                .map_err(|e| ck_err(&path, e))
        })
        .collect::<Result<_>>()?;
    let meta = HashMap::from([
        ("step".to_string(), t.step().to_string()),
        ("adam_t".to_string(), t.opt.t.to_string()),
        (
            "heads".to_string(),
            serde_json::to_string(t.heads_config()).map_err(|e| ck_err(&path, e))?,
        ),
        (
            "config".to_string(),
            serde_json::to_string(&t.config).map_err(|e| ck_err(&path, e))?,
        ),
    ]);
    let tmp = dir.join(format!("{STATE}.tmp"));
    safetensors::serialize_to_file(views, Some(meta), &tmp).map_err(|e| ck_err(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| TrainError::io(&path, e))
}

/// The `__metadata__` entries of the safetensors file at `path`, read from its header
/// alone (a checkpoint's tensors are the heads' size three times over).
fn header_metadata(path: &Path) -> Result<HashMap<String, String>> {
    #[derive(serde::Deserialize)]
    struct Header {
        #[serde(rename = "__metadata__", default)]
        meta: HashMap<String, String>,
    }
    let mut f =
        std::fs::File::open(path).map_err(|e| ck_err(path, format!("cannot resume: {e}")))?;
    let len = f.metadata().map_err(|e| TrainError::io(path, e))?.len();
    let mut n = [0u8; 8];
    f.read_exact(&mut n)
        .map_err(|e| ck_err(path, format!("not a checkpoint: {e}")))?;
    let n = u64::from_le_bytes(n);
    if n > len.saturating_sub(8) {
        return Err(ck_err(
            path,
            "not a checkpoint: its header runs past the file",
        ));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header)
        .map_err(|e| ck_err(path, format!("not a checkpoint: {e}")))?;
    let h: Header = serde_json::from_slice(&header).map_err(|e| ck_err(path, e))?;
    Ok(h.meta)
}

/// Whether the run saved in `dir` can go on as `config` on `base`: the same head set
/// (shape and input) and the same draft vocabulary (the data gives it), read from the
/// checkpoint's header, nothing else loaded. A caller checks this before work that takes
/// long (the hidden states, and `draft-vocab.json`, which a run writes); [`restore`]
/// checks the same.
pub fn check_resume(dir: &Path, config: &TrainConfig, base: &LlamaConfig) -> Result<()> {
    let path = dir.join(STATE);
    let meta = header_metadata(&path)?;
    compare(&path, &meta, &config.heads_for(base), &config.draft_vocab)
}

/// The saved run (`meta`, a checkpoint's metadata) against the run that resumes it.
fn compare(
    path: &Path,
    meta: &HashMap<String, String>,
    want: &toki_model::HeadsConfig,
    draft: &[u32],
) -> Result<()> {
    let field = |k: &str| {
        meta.get(k)
            .ok_or_else(|| ck_err(path, format!("no `{k}` entry")))
    };
    let saved: toki_model::HeadsConfig =
        serde_json::from_str(field("heads")?).map_err(|e| ck_err(path, e))?;
    if saved.hidden_size != want.hidden_size {
        return Err(toki_model::ModelError::HeadsMismatch {
            what: "hidden size",
            heads: saved.hidden_size,
            base: want.hidden_size,
        }
        .into());
    }
    if (saved.shape(), saved.input) != (want.shape(), want.input) {
        return Err(ck_err(
            path,
            format!(
                "saved {} reading {:?}; this run asks for {} reading {:?}",
                saved.describe_shape(),
                saved.input,
                want.describe_shape(),
                want.input
            ),
        ));
    }
    #[derive(serde::Deserialize)]
    struct Saved {
        #[serde(default)]
        draft_vocab: Vec<u32>,
    }
    let run: Saved = serde_json::from_str(field("config")?).map_err(|e| ck_err(path, e))?;
    if run.draft_vocab != draft {
        return Err(ck_err(
            path,
            format!(
                "the run was saved with a draft vocabulary of {} tokens that this run's data \
                 and --draft-vocab do not give ({} tokens, {}): resume with the data it started \
                 with",
                run.draft_vocab.len(),
                draft.len(),
                if run.draft_vocab.len() == draft.len() {
                    "other tokens"
                } else {
                    "another size"
                }
            ),
        ));
    }
    Ok(())
}

/// Load the state saved in `dir` into a fresh trainer of the same head shape.
pub fn restore(t: &mut Trainer<'_>, dir: &Path) -> Result<()> {
    let path = dir.join(STATE);
    let bytes = std::fs::read(&path).map_err(|e| ck_err(&path, format!("cannot resume: {e}")))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| ck_err(&path, e))?;
    let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| ck_err(&path, e))?;
    let meta = meta.metadata().clone().unwrap_or_default();
    let field = |k: &str| {
        meta.get(k)
            .ok_or_else(|| ck_err(&path, format!("no `{k}` entry")))
    };
    compare(&path, &meta, t.heads_config(), &t.config.draft_vocab)?;
    let read = |name: &str, shape: &[usize]| -> Result<Vec<f32>> {
        let v = st
            .tensor(name)
            .map_err(|e| ck_err(&path, format!("{name}: {e}")))?;
        if v.dtype() != Dtype::F32 || v.shape() != shape {
            return Err(ck_err(
                &path,
                format!(
                    "{name}: {:?} {:?}, where this run needs F32 {shape:?}",
                    v.dtype(),
                    v.shape()
                ),
            ));
        }
        Ok(v.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    };
    let names: Vec<(String, Vec<usize>)> = t.names().to_vec();
    for (i, (name, shape)) in names.iter().enumerate() {
        t.params[i] = read(&format!("param.{name}"), shape)?;
        t.opt.m[i] = read(&format!("m.{name}"), shape)?;
        t.opt.v[i] = read(&format!("v.{name}"), shape)?;
    }
    t.step = field("step")?.parse().map_err(|e| ck_err(&path, e))?;
    t.opt.t = field("adam_t")?.parse().map_err(|e| ck_err(&path, e))?;
    Ok(())
}

/// Append one held-out evaluation to `dir/metrics.jsonl`.
pub fn append_metrics(dir: &Path, report: &EvalReport) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| TrainError::io(dir, e))?;
    let path = dir.join("metrics.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| TrainError::io(&path, e))?;
    let line = serde_json::to_string(report).map_err(|e| ck_err(&path, e))?;
    writeln!(f, "{line}").map_err(|e| TrainError::io(&path, e))
}
