//! Loading: [`LlamaModel::from_weights`] builds every module from a [`WeightSource`],
//! checking each tensor's presence and shape, with the host copies of the projections
//! where the CPU fast path applies ([`crate::kernels`]).

use burn::module::Param;
use burn::nn::{Embedding, Linear, RmsNorm};
use burn::tensor::{Device, Tensor, TensorData};

use super::{
    Attention, DecoderLayer, LlamaModel, Mlp, Precision, Proj, host_kernels_apply, transpose,
};
use crate::cache::host_vec;
use crate::config::LlamaConfig;
use crate::error::Result;
use crate::kernels::HostWeight;
use crate::weights::WeightSource;

/// Builds tensors from a weight source, on one device, in one precision.
struct Loader<'a> {
    src: &'a mut dyn WeightSource,
    device: &'a Device,
    precision: Precision,
    /// Keep host copies of the projections for the CPU fast path.
    host: bool,
}

impl Loader<'_> {
    fn tensor<const D: usize>(&mut self, name: &str, shape: [usize; D]) -> Result<Tensor<D>> {
        let data = self.src.tensor(name, &shape)?;
        Ok(self.on_device(data, shape))
    }

    /// An HF linear, weight kept as stored ([out, in]).
    fn proj(&mut self, prefix: &str, d_in: usize, d_out: usize, bias: bool) -> Result<Proj> {
        let w = self
            .src
            .tensor(&format!("{prefix}.weight"), &[d_out, d_in])?;
        let host = self
            .host
            .then(|| HostWeight::compact(w.clone(), d_out, d_in));
        let weight = self.on_device(w, [d_out, d_in]);
        let bias = if bias {
            Some(Param::from_tensor(
                self.tensor(&format!("{prefix}.bias"), [d_out])?,
            ))
        } else {
            None
        };
        Ok(Proj {
            weight: Param::from_tensor(weight),
            bias,
            host,
        })
    }

    /// A vocabulary projection from its HF weight `w` [out, in]: a Burn linear with a
    /// contiguous [in, out] weight, transposed once here (its matmul is fast in this
    /// orientation), and the host copy as stored.
    fn vocab_head(&self, w: Vec<f32>, d_in: usize, d_out: usize) -> (Linear, Option<HostWeight>) {
        let weight = self.on_device(transpose(&w, d_out, d_in), [d_in, d_out]);
        let host = self.host.then(|| HostWeight::compact(w, d_out, d_in));
        let linear = Linear {
            weight: Param::from_tensor(weight),
            bias: None,
        };
        (linear, host)
    }

    fn on_device<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Tensor<D> {
        let t = Tensor::<D>::from_data(TensorData::new(data, shape), self.device);
        match self.precision {
            Precision::F32 => t,
            p => t.cast(p.dtype()),
        }
    }

    fn norm(&mut self, name: &str, d: usize, eps: f64) -> Result<RmsNorm> {
        Ok(RmsNorm {
            gamma: Param::from_tensor(self.tensor(name, [d])?),
            epsilon: eps,
        })
    }
}

impl LlamaModel {
    /// Build the model from `src`, checking every tensor's presence and shape.
    pub fn from_weights(
        config: &LlamaConfig,
        src: &mut dyn WeightSource,
        device: &Device,
        precision: Precision,
    ) -> Result<Self> {
        let c = config;
        let (d, hd) = (c.hidden_size, c.head_dim);
        let mut ld = Loader {
            src,
            device,
            precision,
            host: host_kernels_apply(device, precision),
        };
        let embed_data = ld
            .src
            .tensor("model.embed_tokens.weight", &[c.vocab_size, d])?;
        // A tied lm_head gets its own contiguous [hidden, vocab] copy (see `vocab_head`).
        let tied_head = c
            .tie_word_embeddings
            .then(|| ld.vocab_head(embed_data.clone(), d, c.vocab_size));
        let embed_w = ld.on_device(embed_data, [c.vocab_size, d]);
        // Grown as layers load (not reserved from the config: a config that claims more
        // layers than the file holds fails at the first missing tensor).
        let mut layers = Vec::new();
        for i in 0..c.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let attn = Attention {
                q: ld.proj(
                    &format!("{p}.self_attn.q_proj"),
                    d,
                    c.num_attention_heads * hd,
                    c.qkv_bias,
                )?,
                k: ld.proj(
                    &format!("{p}.self_attn.k_proj"),
                    d,
                    c.num_key_value_heads * hd,
                    c.qkv_bias,
                )?,
                v: ld.proj(
                    &format!("{p}.self_attn.v_proj"),
                    d,
                    c.num_key_value_heads * hd,
                    c.qkv_bias,
                )?,
                o: ld.proj(
                    &format!("{p}.self_attn.o_proj"),
                    c.num_attention_heads * hd,
                    d,
                    c.o_bias,
                )?,
                n_heads: c.num_attention_heads,
                n_kv_heads: c.num_key_value_heads,
                head_dim: hd,
            };
            let mlp = Mlp {
                gate: ld.proj(
                    &format!("{p}.mlp.gate_proj"),
                    d,
                    c.intermediate_size,
                    c.mlp_bias,
                )?,
                up: ld.proj(
                    &format!("{p}.mlp.up_proj"),
                    d,
                    c.intermediate_size,
                    c.mlp_bias,
                )?,
                down: ld.proj(
                    &format!("{p}.mlp.down_proj"),
                    c.intermediate_size,
                    d,
                    c.mlp_bias,
                )?,
            };
            let attn_norm = ld.norm(&format!("{p}.input_layernorm.weight"), d, c.rms_norm_eps)?;
            let mlp_norm = ld.norm(
                &format!("{p}.post_attention_layernorm.weight"),
                d,
                c.rms_norm_eps,
            )?;
            let host_norms = ld
                .host
                .then(|| [&attn_norm, &mlp_norm].map(|n| host_vec(n.gamma.val())));
            layers.push(DecoderLayer {
                attn_norm,
                attn,
                mlp_norm,
                mlp,
                host_norms,
            });
        }
        let norm = ld.norm("model.norm.weight", d, c.rms_norm_eps)?;
        let (lm_head, lm_head_host) = match tied_head {
            Some(head) => head,
            None => {
                let w = ld.src.tensor("lm_head.weight", &[c.vocab_size, d])?;
                ld.vocab_head(w, d, c.vocab_size)
            }
        };
        let tied = c.tie_word_embeddings;
        ld.src.finish(&|n: &str| {
            n.ends_with("rotary_emb.inv_freq") || (tied && n == "lm_head.weight")
        })?;
        Ok(Self {
            embed: Embedding {
                weight: Param::from_tensor(embed_w),
            },
            layers,
            norm,
            lm_head,
            lm_head_host,
            config: config.clone(),
        })
    }

    /// The same model without the host copies: every projection on Burn's matmul (for
    /// side-by-side benchmarks of the CPU fast path, or to save the memory they take).
    pub fn without_host_kernels(mut self) -> Self {
        self.lm_head_host = None;
        for l in &mut self.layers {
            l.host_norms = None;
            for p in [
                &mut l.attn.q,
                &mut l.attn.k,
                &mut l.attn.v,
                &mut l.attn.o,
                &mut l.mlp.gate,
                &mut l.mlp.up,
                &mut l.mlp.down,
            ] {
                p.host = None;
            }
        }
        self
    }
}
