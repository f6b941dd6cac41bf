//! Checkpoints: the output folder always holds loadable heads (`heads.safetensors` +
//! `heads.json`, what `toki generate --heads` reads) and `trainer.safetensors`, which holds
//! parameters, AdamW moments and the step in one file, so a resume never mixes two steps.
//! Every file is written to a temp name and renamed into place.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use crate::error::{Result, TrainError};
use crate::trainer::{EvalReport, Trainer};

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
    let saved: toki_model::HeadsConfig =
        serde_json::from_str(field("heads")?).map_err(|e| ck_err(&path, e))?;
    let want = t.heads_config();
    if saved.hidden_size != want.hidden_size {
        return Err(toki_model::ModelError::HeadsMismatch {
            what: "hidden size",
            heads: saved.hidden_size,
            base: want.hidden_size,
        }
        .into());
    }
    if saved.shape() != want.shape() {
        return Err(ck_err(
            &path,
            format!(
                "saved {}; this run asks for {}",
                saved.describe_shape(),
                want.describe_shape()
            ),
        ));
    }
    let read = |name: &str| -> Result<Vec<f32>> {
        let v = st
            .tensor(name)
            .map_err(|e| ck_err(&path, format!("{name}: {e}")))?;
        Ok(v.data()
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    };
    let names: Vec<String> = t.names().iter().map(|(n, _)| n.clone()).collect();
    for (i, name) in names.iter().enumerate() {
        t.params[i] = read(&format!("param.{name}"))?;
        t.opt.m[i] = read(&format!("m.{name}"))?;
        t.opt.v[i] = read(&format!("v.{name}"))?;
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
