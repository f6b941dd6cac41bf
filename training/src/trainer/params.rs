//! The trainer's parameters as heads: the heads' training graph over them, a weight
//! source that builds decoding heads from them, and a warm start from saved heads.

use std::path::Path;

use burn::tensor::activation::silu;
use burn::tensor::{Int, Tensor};
use toki_model::weights::WeightSource;
use toki_model::{HeadKind, HeadsConfig, ModelError, StoreDtype};

use super::Trainer;
use crate::error::{Result, TrainError};

/// Whether the head set saved in `dir` can start a run of `heads` (see
/// [`Trainer::init_from`]): its `heads.json` read and its shape compared, nothing else
/// loaded. A caller checks this before work that takes long.
pub fn check_init(dir: &Path, heads: &HeadsConfig) -> Result<()> {
    let saved = HeadsConfig::read(dir)?;
    if saved.shape() != heads.shape() {
        return Err(TrainError::Config(format!(
            "{}: {} cannot start a run of {}",
            dir.join("heads.json").display(),
            saved.describe_shape(),
            heads.describe_shape()
        )));
    }
    Ok(())
}

impl Trainer<'_> {
    /// Start from the head set saved in `dir` (`heads.json` + `heads.safetensors`): every
    /// tensor it holds under this run's names, shapes checked; tensors it lacks keep their
    /// fresh values (zero), so heads that read the next token grow into path heads whose
    /// new projections start at zero, i.e. as the saved heads. Refused for another kind,
    /// head count, block count or hidden size. Returns how many tensors were taken.
    pub fn init_from(&mut self, dir: &Path) -> Result<usize> {
        check_init(dir, &self.heads)?;
        let mut src =
            toki_model::weights::SafetensorsWeights::open_file(&dir.join("heads.safetensors"))?;
        let mut taken = 0;
        for ((name, shape), p) in self.names.iter().zip(self.params.iter_mut()) {
            if src.contains(name) {
                *p = src.tensor(name, shape)?;
                taken += 1;
            }
        }
        Ok(taken)
    }
}

/// Logits [K * B, V] (or [K * B, N] over a draft vocabulary `draft` [N]) of every head
/// (head-major) for hidden states x [B, D] and the path tokens' embeddings `path` (entry
/// j [B, D]: token t+1+j; each head reads [`toki_model::HeadInput::path_len`] of them).
/// `params` in [`toki_model::MedusaHeads::tensor_names`] order; `lm` the base lm_head [D, V],
/// already cut to the draft columns (the shared kind).
pub(super) fn head_logits(
    params: &[Tensor<2>],
    cfg: &HeadsConfig,
    x: Tensor<2>,
    path: &[Tensor<2>],
    lm: &Tensor<2>,
    draft: Option<&Tensor<1, Int>>,
) -> Tensor<2> {
    let d = cfg.hidden_size;
    let mut p = params;
    let outs: Vec<Tensor<2>> = (0..cfg.num_heads)
        .map(|h| {
            let reads = cfg.input.path_len(h);
            // F [out, in]: x + e F^T
            let x = p[..reads].iter().zip(path).fold(x.clone(), |x, (f, e)| {
                x + e.clone().matmul(f.clone().transpose())
            });
            p = &p[reads..];
            let h = p[..2 * cfg.num_layers].chunks(2).fold(x, |h, wb| {
                // W [out, in], bias stored as [D, 1]
                let z = h.clone().matmul(wb[0].clone().transpose()) + wb[1].clone().reshape([1, d]);
                h + silu(z)
            }); // [B, D]
            p = &p[2 * cfg.num_layers..];
            match cfg.kind {
                HeadKind::Shared => h,
                HeadKind::Own => {
                    let w = p[0].clone(); // [V, D]
                    p = &p[1..];
                    let w = match draft {
                        Some(ids) => w.select(0, ids.clone()), // [N, D]
                        None => w,
                    };
                    h.matmul(w.transpose()) // [B, V or N]
                }
            }
        })
        .collect();
    let cat = Tensor::cat(outs, 0);
    match cfg.kind {
        HeadKind::Shared => cat.matmul(lm.clone()),
        HeadKind::Own => cat,
    }
}

/// The trainer's parameters as a weight source for [`MedusaHeads::from_source`].
pub(super) struct HostSource<'t, 'a> {
    pub(super) t: &'t Trainer<'a>,
}

impl WeightSource for HostSource<'_, '_> {
    fn tensor(&mut self, name: &str, shape: &[usize]) -> toki_model::Result<Vec<f32>> {
        let i = self
            .t
            .names
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| ModelError::Heads {
                path: Default::default(),
                msg: format!("no trained tensor {name} {shape:?}"),
            })?;
        let p = &self.t.params[i];
        // The heads as `heads.safetensors` will hold them (metrics included).
        Ok(match self.t.heads.dtype {
            StoreDtype::F32 => p.clone(),
            StoreDtype::F16 => p.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
        })
    }
    fn contains(&self, name: &str) -> bool {
        self.t.names.iter().any(|(n, _)| n == name)
    }
    fn finish(&self, _: &dyn Fn(&str) -> bool) -> toki_model::Result<()> {
        Ok(())
    }
}
