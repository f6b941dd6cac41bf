//! Rotary position embeddings with explicit per-token positions.
//!
//! Burn's own RoPE takes a start offset only; tree verification needs every token at its
//! own position (prefix length + depth in the tree), so the tables are gathered by position.

use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::config::{LlamaConfig, RopeScaling};

/// Inverse frequencies `theta^(-2i/d)` for i in 0..d/2, after the configured scaling.
pub fn inv_freq(config: &LlamaConfig) -> Vec<f64> {
    let d = config.head_dim;
    let base: Vec<f64> = (0..d / 2)
        .map(|i| 1.0 / config.rope_theta.powf(2.0 * i as f64 / d as f64))
        .collect();
    match config.rope_scaling {
        RopeScaling::Default => base,
        RopeScaling::Linear { factor } => base.into_iter().map(|f| f / factor).collect(),
        RopeScaling::Llama3 {
            factor,
            low_freq_factor,
            high_freq_factor,
            original_max_position_embeddings,
        } => {
            let old = original_max_position_embeddings as f64;
            let low_wavelen = old / low_freq_factor;
            let high_wavelen = old / high_freq_factor;
            base.into_iter()
                .map(|f| {
                    let wavelen = 2.0 * std::f64::consts::PI / f;
                    if wavelen < high_wavelen {
                        f
                    } else if wavelen > low_wavelen {
                        f / factor
                    } else {
                        let s = (old / wavelen - low_freq_factor)
                            / (high_freq_factor - low_freq_factor);
                        (1.0 - s) * f / factor + s * f
                    }
                })
                .collect()
        }
    }
}

/// cos/sin tables for positions `0..max_positions`, on the device.
#[derive(Debug, Clone)]
pub struct RopeTables {
    /// [max_positions, head_dim / 2]
    cos: Tensor<2>,
    /// [max_positions, head_dim / 2]
    sin: Tensor<2>,
    max_positions: usize,
}

/// cos/sin gathered for the positions of one forward pass, shared by every layer.
#[derive(Debug, Clone)]
pub struct RopeAt {
    /// [1, 1, T, head_dim / 2]
    cos: Tensor<4>,
    /// [1, 1, T, head_dim / 2]
    sin: Tensor<4>,
}

impl RopeTables {
    pub fn new(config: &LlamaConfig, max_positions: usize, device: &Device) -> Self {
        let inv = inv_freq(config);
        let half = inv.len();
        let mut cos = Vec::with_capacity(max_positions * half);
        let mut sin = Vec::with_capacity(max_positions * half);
        for p in 0..max_positions {
            for &f in &inv {
                let a = p as f64 * f;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        let t =
            |v: Vec<f32>| Tensor::<2>::from_data(TensorData::new(v, [max_positions, half]), device);
        Self {
            cos: t(cos),
            sin: t(sin),
            max_positions,
        }
    }

    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Gather the tables at `positions` ([T]); every position must be < `max_positions`.
    pub fn at(&self, positions: Tensor<1, Int>) -> RopeAt {
        let [t] = positions.dims();
        let [_, half] = self.cos.dims();
        RopeAt {
            cos: self
                .cos
                .clone()
                .select(0, positions.clone())
                .reshape([1, 1, t, half]),
            sin: self
                .sin
                .clone()
                .select(0, positions)
                .reshape([1, 1, t, half]),
        }
    }
}

impl RopeAt {
    /// cos and sin [1, 1, T, head_dim / 2].
    pub(crate) fn tables(&self) -> (Tensor<4>, Tensor<4>) {
        (self.cos.clone(), self.sin.clone())
    }

    /// Rotate `x` [B, H, T, head_dim] (transformers' rotate_half convention: the first and
    /// second halves of each head form the pairs).
    pub fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let [b, h, t, d] = x.dims();
        let half = d / 2;
        let x1 = x.clone().slice([0..b, 0..h, 0..t, 0..half]);
        let x2 = x.slice([0..b, 0..h, 0..t, half..d]);
        // Tables are f32; computing in f16/bf16 casts the few rows gathered for this pass.
        let (cos, sin) = (
            self.cos.clone().cast(x1.dtype()),
            self.sin.clone().cast(x1.dtype()),
        );
        let r1 = x1.clone() * cos.clone() - x2.clone() * sin.clone();
        let r2 = x2 * cos + x1 * sin;
        Tensor::cat(vec![r1, r2], 3)
    }
}
