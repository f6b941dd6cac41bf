//! Which cached and new tokens each new token of a forward pass may attend to.

use burn::tensor::{Device, Tensor, TensorData};

/// Which of the cached and new tokens each new token may attend to.
#[derive(Debug, Clone)]
pub enum AttnMask {
    /// Every new token sees the whole cached prefix and the new tokens up to itself.
    Causal,
    /// Every new token sees the whole cached prefix; among the T new tokens, visibility is
    /// given by this additive bias [T, T] (0 = visible, -inf = hidden). A tree mask.
    Tree(Tensor<2>),
    /// Visibility of every cached and new token, given by this additive bias
    /// [T, prefix + T]. Several independent sequences can share one cache this way
    /// (batched generation): each row sees only its own sequence's rows.
    Full(Tensor<2>),
}

impl AttnMask {
    /// The additive bias [T, T] of a causal mask.
    pub fn causal_bias(t: usize, device: &Device) -> Tensor<2> {
        let v: Vec<f32> = (0..t * t)
            .map(|i| {
                if i % t <= i / t {
                    0.0
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        Tensor::from_data(TensorData::new(v, [t, t]), device)
    }
}
