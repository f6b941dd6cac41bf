//! A draft vocabulary: the heads score only the N most frequent tokens of their training
//! data instead of the whole vocabulary.
//!
//! Scoring a head's hidden state against all 49,152 rows of the demo model's lm_head reads
//! 113 MB per step, about a sixth of a base-model step on a CPU. The heads' right guesses
//! are mostly frequent tokens, so projecting onto the 4,096 most frequent ones keeps
//! nearly all of them for a twelfth of the reads. Output is unchanged: proposals are only
//! proposals, the base verifies every one; a token outside the set just cannot be
//! proposed.
//!
//! ```text
//! draft-vocab.json  {"source": "...", "tokens": [[id, count], ...]}   most frequent first
//! ids  = first N ids                         [N]
//! W_d  = lm_head[:, ids]                     [D, N]   (the base's, or each own head's)
//! logits_d = features · W_d                  [R, N];  column j is token ids[j]
//! ```

use std::path::Path;

use burn::tensor::{DType, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};
use crate::heads::{HeadKind, HeadPath, HostScore, MedusaHeads, Scoring};
use crate::kernels::{HostPrecision, HostWeight};
use crate::llama::{LlamaModel, host_matmul, host_path, transpose};

/// The file: token ids with their counts in the heads' training data, most frequent first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenCounts {
    /// What the counts were taken from (free-form).
    #[serde(default)]
    pub source: String,
    pub tokens: Vec<(u32, u64)>,
}

impl TokenCounts {
    /// Count `tokens` and order by count (ties: lower id first).
    pub fn count(source: impl Into<String>, tokens: impl IntoIterator<Item = u32>) -> Self {
        let mut counts = std::collections::HashMap::<u32, u64>::new();
        for t in tokens {
            *counts.entry(t).or_default() += 1;
        }
        let mut tokens: Vec<(u32, u64)> = counts.into_iter().collect();
        tokens.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Self {
            source: source.into(),
            tokens,
        }
    }

    /// Share of all counted tokens that the first `n` ids cover.
    pub fn coverage(&self, n: usize) -> f64 {
        let total: u64 = self.tokens.iter().map(|t| t.1).sum();
        let top: u64 = self.tokens.iter().take(n).map(|t| t.1).sum();
        top as f64 / total.max(1) as f64
    }

    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
        serde_json::from_str(&text).map_err(|e| draft_err(path, e))
    }

    /// Write via a temp file + rename.
    pub fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string(self).map_err(|e| draft_err(path, e))?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(|e| ModelError::io(&tmp, e))?;
        std::fs::rename(&tmp, path).map_err(|e| ModelError::io(path, e))
    }

    /// The first `size` ids, checked against a vocabulary of `vocab` tokens (`path` names
    /// the file in errors).
    pub fn top(&self, size: usize, vocab: usize, path: &Path) -> Result<Vec<u32>> {
        if size == 0 || self.tokens.is_empty() {
            return Err(draft_err(
                path,
                "a draft vocabulary needs at least one token",
            ));
        }
        let ids: Vec<u32> = self.tokens.iter().take(size).map(|t| t.0).collect();
        let mut seen = vec![false; vocab];
        for &id in &ids {
            match seen.get_mut(id as usize) {
                None => {
                    return Err(draft_err(
                        path,
                        format!("token id {id} is outside the model's vocabulary of {vocab}"),
                    ));
                }
                Some(true) => {
                    return Err(draft_err(path, format!("token id {id} is listed twice")));
                }
                Some(s) => *s = true,
            }
        }
        Ok(ids)
    }
}

fn draft_err(path: &Path, msg: impl ToString) -> ModelError {
    ModelError::Heads {
        path: path.to_path_buf(),
        msg: format!("draft vocabulary: {}", msg.to_string()),
    }
}

/// One vocabulary projection cut down to the draft ids.
#[derive(Debug, Clone)]
struct Projection {
    /// [D, N]
    weight: Tensor<2>,
    /// [N, D] host copy for the CPU fast path (where the base has one), in the heads'
    /// host precision.
    host: Option<HostWeight>,
}

impl Projection {
    /// `full` [D, V] -> the columns `ids`.
    fn select(
        full: Tensor<2>,
        ids: &Tensor<1, Int>,
        n: usize,
        host: bool,
        precision: HostPrecision,
    ) -> Result<Self> {
        let [d, _] = full.dims();
        let weight = full.select(1, ids.clone()); // [D, N]
        let host = if host {
            let w: Vec<f32> = weight
                .clone()
                .cast(DType::F32)
                .try_into_vec_as()
                .map_err(|e| ModelError::Heads {
                    path: Default::default(),
                    msg: format!("draft vocabulary: {e}"),
                })?;
            Some(HostWeight::with_precision(
                transpose(&w, d, n),
                n,
                d,
                precision,
            ))
        } else {
            None
        };
        Ok(Self { weight, host })
    }

    /// x [R, D] -> [R, N], f32.
    fn forward(&self, x: Tensor<2>) -> Tensor<2> {
        match &self.host {
            Some(w) if host_path(&x) => host_matmul(w, x),
            _ => x.matmul(self.weight.clone()).cast(DType::F32),
        }
    }
}

/// The heads' vocabulary projections restricted to a draft vocabulary.
#[derive(Debug, Clone)]
pub struct DraftVocab {
    ids: Vec<u32>,
    /// `ids` on the device [N] (path heads map their top-1 column to its token there).
    id_tensor: Tensor<1, Int>,
    /// One for the shared kind (the base's lm_head), one per head for the own kind.
    projections: Vec<Projection>,
}

impl DraftVocab {
    /// Cut `heads`' (or, for shared heads, `base`'s) vocabulary projection down to `ids`
    /// (checked: inside the vocabulary, no repeats). The host copy follows the heads'
    /// [`MedusaHeads::host_precision`]: build it after [`MedusaHeads::with_host_kernels`].
    pub fn new(ids: Vec<u32>, heads: &MedusaHeads, base: &LlamaModel) -> Result<Self> {
        let vocab = base.config().vocab_size;
        let counts = TokenCounts {
            source: String::new(),
            tokens: ids.iter().map(|&i| (i, 0)).collect(),
        };
        let ids = counts.top(ids.len(), vocab, Path::new("(draft ids)"))?;
        let n = ids.len();
        let device = base.device();
        let idx: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        let idx = Tensor::<1, Int>::from_data(TensorData::new(idx, [n]), &device);
        let host = base.uses_host_kernels();
        // Host copies as precise as the heads' own (half precision once they decode).
        let precision = heads.host_precision();
        let projections = match heads.config().kind {
            HeadKind::Shared => vec![Projection::select(
                base.lm_head().weight.val(),
                &idx,
                n,
                host,
                precision,
            )?],
            HeadKind::Own => (0..heads.num_heads())
                .map(|h| {
                    let lm = heads.own_lm_head(h).ok_or_else(|| ModelError::Heads {
                        path: Default::default(),
                        msg: format!("head {h} has no lm_head"),
                    })?;
                    Projection::select(lm.weight.val(), &idx, n, host, precision)
                })
                .collect::<Result<_>>()?,
        };
        Ok(Self {
            ids,
            id_tensor: idx,
            projections,
        })
    }

    /// Column j of the draft logits is token `ids()[j]`.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Draft logits of every head for hidden states [R, D] and the base's next tokens [R]
    /// (see [`MedusaHeads::forward`]): K tensors [R, N], f32.
    pub fn logits(
        &self,
        heads: &MedusaHeads,
        hidden: Tensor<2>,
        next: Tensor<1, Int>,
        base: &LlamaModel,
    ) -> Vec<Tensor<2>> {
        self.logits_on(heads, hidden, HeadPath::Root(next), base)
    }

    /// [`DraftVocab::logits`] on a [`HeadPath`] (see [`MedusaHeads::forward_on`]).
    pub fn logits_on(
        &self,
        heads: &MedusaHeads,
        hidden: Tensor<2>,
        path: HeadPath,
        base: &LlamaModel,
    ) -> Vec<Tensor<2>> {
        self.logits_until(heads, hidden, path, base, &mut |_, _| false)
    }

    /// [`DraftVocab::logits_on`] that stops after the first head h whose draft logits [R,
    /// N] make `enough(h, ..)` true (see [`MedusaHeads::forward_until`]).
    pub fn logits_until(
        &self,
        heads: &MedusaHeads,
        hidden: Tensor<2>,
        path: HeadPath,
        base: &LlamaModel,
        enough: &mut dyn FnMut(usize, &Tensor<2>) -> bool,
    ) -> Vec<Tensor<2>> {
        // One projection for the shared kind (all heads' rows in one product where the heads
        // read no proposals: the matrix is read once), one per head for the own kind.
        let last = self.projections.len() - 1;
        let score = |h: usize, x: Tensor<2>| self.projections[h.min(last)].forward(x);
        let hosts: Option<Vec<&HostWeight>> =
            self.projections.iter().map(|p| p.host.as_ref()).collect();
        let host_score =
            hosts.map(|ws| move |h: usize, x: &[f32], m: usize| ws[h.min(last)].matmul(x, m));
        let scoring = Scoring {
            tensor: &score,
            host: host_score.as_ref().map(|f| f as HostScore<'_>),
            ids: Some((&self.id_tensor, &self.ids)),
        };
        heads.run(hidden, path, base, &scoring, enough)
    }
}
