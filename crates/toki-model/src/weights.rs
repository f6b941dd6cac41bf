//! Where a model's tensors come from: HF safetensors folders (single file or sharded), or a
//! seeded random source for tiny test models. Every tensor is checked against the shape the
//! architecture expects, and tensors the architecture does not use are an error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use crate::error::{ModelError, Result};

/// A provider of named f32 tensors in row-major order.
pub trait WeightSource {
    /// The tensor `name`, which must have exactly `shape`.
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>>;
    /// Whether `name` is present (for optional tensors such as an untied lm_head).
    fn contains(&self, name: &str) -> bool;
    /// Called once every expected tensor was read: names never read are an error, except
    /// those `ignorable` (buffers transformers itself skips).
    fn finish(&self, ignorable: &dyn Fn(&str) -> bool) -> Result<()>;
}

/// Tensors of one or more memory-mapped safetensors files.
pub struct SafetensorsWeights {
    files: Vec<(PathBuf, Mmap)>,
    /// tensor name -> index into `files`
    index: BTreeMap<String, usize>,
    used: BTreeSet<String>,
}

fn st_err(path: &Path, msg: impl ToString) -> ModelError {
    ModelError::Safetensors {
        path: path.to_path_buf(),
        msg: msg.to_string(),
    }
}

impl SafetensorsWeights {
    /// Open `model.safetensors`, or the shards named by `model.safetensors.index.json`.
    pub fn open(dir: &Path) -> Result<Self> {
        let single = dir.join("model.safetensors");
        let index_path = dir.join("model.safetensors.index.json");
        let shard_names: Vec<String> = if index_path.exists() {
            let text =
                std::fs::read_to_string(&index_path).map_err(|e| ModelError::io(&index_path, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| st_err(&index_path, e))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| st_err(&index_path, "no `weight_map` object"))?;
            let set: BTreeSet<String> = map
                .values()
                .filter_map(|f| f.as_str().map(String::from))
                .collect();
            set.into_iter().collect()
        } else if single.exists() {
            vec!["model.safetensors".into()]
        } else {
            return Err(ModelError::Io {
                path: single,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no model.safetensors or model.safetensors.index.json",
                ),
            });
        };
        let mut files = Vec::new();
        let mut index = BTreeMap::new();
        for name in shard_names {
            let path = dir.join(&name);
            let file = std::fs::File::open(&path).map_err(|e| ModelError::io(&path, e))?;
            // SAFETY: the map is read-only and lives as long as `self`; a file changed
            // underneath a running program is outside what any loader can defend against.
            let mmap = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::io(&path, e))?;
            let st = SafeTensors::deserialize(&mmap).map_err(|e| st_err(&path, e))?;
            for n in st.names() {
                index.insert(n.to_string(), files.len());
            }
            files.push((path, mmap));
        }
        Ok(Self {
            files,
            index,
            used: BTreeSet::new(),
        })
    }

    /// One safetensors file on its own (head files).
    pub fn open_file(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| ModelError::io(path, e))?;
        // SAFETY: as in `open`.
        let mmap = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::io(path, e))?;
        let st = SafeTensors::deserialize(&mmap).map_err(|e| st_err(path, e))?;
        let index = st.names().into_iter().map(|n| (n.to_string(), 0)).collect();
        Ok(Self {
            files: vec![(path.to_path_buf(), mmap)],
            index,
            used: BTreeSet::new(),
        })
    }

    /// The stored shape of `name`, if present.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let (_, mmap) = &self.files[*self.index.get(name)?];
        let st = SafeTensors::deserialize(mmap).ok()?;
        st.tensor(name).ok().map(|t| t.shape().to_vec())
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(String::as_str)
    }
}

impl WeightSource for SafetensorsWeights {
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let &fi = self
            .index
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.into() })?;
        let (path, mmap) = &self.files[fi];
        let st = SafeTensors::deserialize(mmap).map_err(|e| st_err(path, e))?;
        let view = st.tensor(name).map_err(|e| st_err(path, e))?;
        if view.shape() != shape {
            return Err(ModelError::ShapeMismatch {
                name: name.into(),
                expected: shape.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let data = view.data();
        let out: Vec<f32> = match view.dtype() {
            Dtype::F32 => data
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
            Dtype::F16 => data
                .chunks_exact(2)
                .map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            Dtype::BF16 => data
                .chunks_exact(2)
                .map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())
                .collect(),
            other => {
                return Err(ModelError::UnsupportedDtype {
                    name: name.into(),
                    dtype: format!("{other:?}"),
                });
            }
        };
        self.used.insert(name.to_string());
        Ok(out)
    }

    fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    fn finish(&self, ignorable: &dyn Fn(&str) -> bool) -> Result<()> {
        match self
            .index
            .keys()
            .find(|n| !self.used.contains(*n) && !ignorable(n))
        {
            Some(extra) => Err(ModelError::ExtraTensor {
                name: extra.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// Seeded random weights for tiny test models: normal(0, std) from a SplitMix64 stream,
/// norms at 1 + noise. Deterministic for a given seed and tensor name.
pub struct RandomWeights {
    pub seed: u64,
    pub std: f32,
}

/// SplitMix64: a tiny, well-known generator; enough for test weights.
pub(crate) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl WeightSource for RandomWeights {
    fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let mut state = name
            .bytes()
            .fold(self.seed ^ 0xA076_1D64_78BD_642F, |h, b| {
                (h ^ b as u64).wrapping_mul(0x1000_0000_01B3)
            });
        let n: usize = shape.iter().product();
        let is_norm = name.ends_with("norm.weight");
        Ok((0..n)
            .map(|_| {
                // Box-Muller from two uniforms.
                let u1 = ((splitmix(&mut state) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
                let u2 = ((splitmix(&mut state) >> 11) as f64) / (1u64 << 53) as f64;
                let g = ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32;
                if is_norm { 1.0 + 0.1 * g } else { self.std * g }
            })
            .collect())
    }
    fn contains(&self, _name: &str) -> bool {
        true
    }
    fn finish(&self, _: &dyn Fn(&str) -> bool) -> Result<()> {
        Ok(())
    }
}
