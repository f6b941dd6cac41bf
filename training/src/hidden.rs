//! The frozen base's final hidden states of the training sequences, computed once with no
//! autodiff (the base forward dominates training cost on a CPU) and kept in host memory;
//! optionally cached in a safetensors file so later runs (more epochs, a resume) skip it.

use std::path::Path;

use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use toki_model::{LlamaModel, RopeTables};

use crate::data::Sequence;
use crate::error::{Result, TrainError};

/// Hidden states [N, D] of N tokens laid end to end, sequence by sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct HiddenSet {
    pub hidden_size: usize,
    /// [N * D], row r = the hidden state at token r (after the final norm).
    pub hidden: Vec<f32>,
    pub tokens: Vec<u32>,
    pub target: Vec<bool>,
    /// Start offset of each sequence, then N.
    pub starts: Vec<usize>,
}

impl HiddenSet {
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
    pub fn num_sequences(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    /// Run the base over every sequence. `on_sequence(done, total)` reports progress.
    pub fn compute(
        base: &LlamaModel,
        seqs: &[Sequence],
        mut on_sequence: impl FnMut(usize, usize),
    ) -> Result<Self> {
        let d = base.config().hidden_size;
        let longest = seqs.iter().map(|s| s.tokens.len()).max().unwrap_or(0);
        if longest > base.config().max_position_embeddings {
            return Err(TrainError::Config(format!(
                "sequences of {longest} tokens exceed the model's {} positions",
                base.config().max_position_embeddings
            )));
        }
        let device = base.device();
        let rope = RopeTables::new(base.config(), longest.max(1), &device);
        let mut set = HiddenSet {
            hidden_size: d,
            hidden: Vec::with_capacity(seqs.iter().map(|s| s.tokens.len()).sum::<usize>() * d),
            tokens: vec![],
            target: vec![],
            starts: vec![0],
        };
        for (i, s) in seqs.iter().enumerate() {
            let h = base.sequence_hidden(&s.tokens, &rope); // [t, D]
            let h: Vec<f32> = h
                .cast(burn::tensor::DType::F32)
                .try_into_vec_as()
                .map_err(TrainError::device)?;
            set.hidden.extend_from_slice(&h);
            set.tokens.extend_from_slice(&s.tokens);
            set.target.extend_from_slice(&s.target);
            set.starts.push(set.tokens.len());
            on_sequence(i + 1, seqs.len());
        }
        Ok(set)
    }

    /// Write to `path` (temp file + rename), tagged with `key` (what it was computed from).
    pub fn save(&self, path: &Path, key: &str) -> Result<()> {
        let bytes_f32: Vec<u8> = self.hidden.iter().flat_map(|x| x.to_le_bytes()).collect();
        let bytes_tok: Vec<u8> = self.tokens.iter().flat_map(|x| x.to_le_bytes()).collect();
        let bytes_tgt: Vec<u8> = self.target.iter().map(|&x| x as u8).collect();
        let bytes_st: Vec<u8> = self
            .starts
            .iter()
            .flat_map(|&x| (x as u64).to_le_bytes())
            .collect();
        let n = self.len();
        let err = |e: safetensors::SafeTensorError| TrainError::Checkpoint {
            path: path.to_path_buf(),
            msg: e.to_string(),
        };
        let views = vec![
            (
                "hidden",
                TensorView::new(Dtype::F32, vec![n, self.hidden_size], &bytes_f32).map_err(err)?,
            ),
            (
                "tokens",
                TensorView::new(Dtype::U32, vec![n], &bytes_tok).map_err(err)?,
            ),
            (
                "target",
                TensorView::new(Dtype::U8, vec![n], &bytes_tgt).map_err(err)?,
            ),
            (
                "starts",
                TensorView::new(Dtype::U64, vec![self.starts.len()], &bytes_st).map_err(err)?,
            ),
        ];
        let meta = std::collections::HashMap::from([("key".to_string(), key.to_string())]);
        let tmp = path.with_extension("tmp");
        safetensors::serialize_to_file(views, Some(meta), &tmp).map_err(err)?;
        std::fs::rename(&tmp, path).map_err(|e| TrainError::io(path, e))
    }

    /// Read a cache written by [`HiddenSet::save`]; `None` when it is absent or was
    /// computed from something else (another `key`).
    pub fn load(path: &Path, key: &str) -> Result<Option<Self>> {
        let Ok(bytes) = std::fs::read(path) else {
            return Ok(None);
        };
        let err = |msg: String| TrainError::Checkpoint {
            path: path.to_path_buf(),
            msg,
        };
        let (_, meta) = SafeTensors::read_metadata(&bytes).map_err(|e| err(e.to_string()))?;
        if meta.metadata().as_ref().and_then(|m| m.get("key")) != Some(&key.to_string()) {
            return Ok(None);
        }
        let st = SafeTensors::deserialize(&bytes).map_err(|e| err(e.to_string()))?;
        let get = |name: &str| st.tensor(name).map_err(|e| err(format!("{name}: {e}")));
        let hidden_view = get("hidden")?;
        let hidden_size = *hidden_view
            .shape()
            .get(1)
            .ok_or_else(|| err("hidden is not 2-D".into()))?;
        // Straight from the bytes: no per-element allocation (the cache is ~1.6 GB).
        let hidden = words(hidden_view.data()).map(f32::from_le_bytes).collect();
        let tokens = words(get("tokens")?.data())
            .map(u32::from_le_bytes)
            .collect();
        let target = get("target")?.data().iter().map(|&b| b != 0).collect();
        let starts = words(get("starts")?.data())
            .map(|w| u64::from_le_bytes(w) as usize)
            .collect();
        Ok(Some(HiddenSet {
            hidden_size,
            hidden,
            tokens,
            target,
            starts,
        }))
    }
}

/// The N-byte words of `b`, in order (a tail shorter than N is dropped).
fn words<const N: usize>(b: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    b.chunks_exact(N).map(|c| c.try_into().unwrap_or([0; N]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_round_trips_and_is_keyed() {
        let set = HiddenSet {
            hidden_size: 3,
            hidden: (0..15).map(|i| i as f32 * 0.5 - 2.0).collect(),
            tokens: vec![7, 8, 9, 10, 49_151],
            target: vec![false, true, true, false, true],
            starts: vec![0, 2, 5],
        };
        let dir = toki_model::testing::ScratchDir::new("hidden").unwrap();
        let path = dir.join("hidden-cache.safetensors");
        set.save(&path, "key-a").unwrap();
        assert_eq!(HiddenSet::load(&path, "key-a").unwrap(), Some(set));
        assert_eq!(HiddenSet::load(&path, "key-b").unwrap(), None);
        assert_eq!(HiddenSet::load(&dir.join("absent"), "key-a").unwrap(), None);
    }
}
