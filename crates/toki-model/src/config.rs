//! HuggingFace `config.json` → a resolved [`LlamaConfig`] with every default filled in.
//!
//! Covers the Llama family as transformers names it: `llama` (2 and 3, with `llama3` RoPE
//! scaling), `mistral`, `qwen2` (q/k/v bias) and SmolLM (a `llama`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};

/// How rotary frequencies are scaled beyond the trained context.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "rope_type", rename_all = "lowercase")]
pub enum RopeScaling {
    /// Plain RoPE: `inv_freq[i] = theta^(-2i/d)`.
    Default,
    /// Positions divided by `factor` (transformers' "linear").
    Linear { factor: f64 },
    /// Llama 3.1's piecewise frequency scaling.
    Llama3 {
        factor: f64,
        low_freq_factor: f64,
        high_freq_factor: f64,
        original_max_position_embeddings: usize,
    },
}

/// A fully resolved Llama-family configuration: nothing optional left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LlamaConfig {
    pub model_type: String,
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub rope_scaling: RopeScaling,
    pub max_position_embeddings: usize,
    pub tie_word_embeddings: bool,
    /// Bias on the q, k and v projections (Qwen2; Llama's `attention_bias`).
    pub qkv_bias: bool,
    /// Bias on the attention output projection (Llama's `attention_bias` only).
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
}

/// The raw file, as loose as transformers itself is about it.
#[derive(Debug, Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    vocab_size: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_scaling: Option<serde_json::Value>,
    rope_parameters: Option<serde_json::Value>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
    bos_token_id: Option<serde_json::Value>,
    eos_token_id: Option<serde_json::Value>,
}

fn token_ids(v: &Option<serde_json::Value>) -> Vec<u32> {
    match v {
        Some(serde_json::Value::Number(n)) => {
            n.as_u64().map(|x| vec![x as u32]).unwrap_or_default()
        }
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(|x| x.as_u64().map(|x| x as u32))
            .collect(),
        _ => vec![],
    }
}

impl LlamaConfig {
    /// Read and resolve `config.json`.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::io(path, e))?;
        Self::from_json(&text).map_err(|msg| ModelError::Config {
            path: path.to_path_buf(),
            msg,
        })
    }

    /// Resolve a config from its JSON text; the error says which field is wrong.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let model_type = raw.model_type.clone().unwrap_or_else(|| "llama".into());
        if !matches!(model_type.as_str(), "llama" | "mistral" | "qwen2") {
            return Err(format!(
                "model_type `{model_type}` is not supported (llama, mistral, qwen2)"
            ));
        }
        let req = |v: Option<usize>, name: &str| -> std::result::Result<usize, String> {
            match v {
                Some(0) => Err(format!("`{name}` must be positive")),
                Some(x) => Ok(x),
                None => Err(format!("required field `{name}` is missing")),
            }
        };
        let hidden_size = req(raw.hidden_size, "hidden_size")?;
        let num_attention_heads = req(raw.num_attention_heads, "num_attention_heads")?;
        let num_key_value_heads = raw.num_key_value_heads.unwrap_or(num_attention_heads);
        if num_key_value_heads == 0 || num_attention_heads % num_key_value_heads != 0 {
            return Err(format!(
                "num_attention_heads ({num_attention_heads}) is not a multiple of num_key_value_heads ({num_key_value_heads})"
            ));
        }
        let head_dim = raw.head_dim.unwrap_or(hidden_size / num_attention_heads);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(format!("head_dim {head_dim} must be positive and even"));
        }
        let params = raw.rope_parameters.as_ref().or(raw.rope_scaling.as_ref());
        let rope_theta = raw
            .rope_theta
            .or_else(|| {
                params
                    .and_then(|p| p.get("rope_theta"))
                    .and_then(|v| v.as_f64())
            })
            .unwrap_or(10_000.0);
        if !(rope_theta.is_finite() && rope_theta > 0.0) {
            return Err(format!(
                "`rope_theta` {rope_theta} must be a finite number > 0"
            ));
        }
        let rms_norm_eps = raw.rms_norm_eps.unwrap_or(1e-6);
        if !(rms_norm_eps.is_finite() && rms_norm_eps >= 0.0) {
            return Err(format!(
                "`rms_norm_eps` {rms_norm_eps} must be a finite number >= 0"
            ));
        }
        let max_position_embeddings = match raw.max_position_embeddings {
            None => 2048,
            v => req(v, "max_position_embeddings")?,
        };
        let rope_scaling = parse_rope(params)?;
        let qwen = model_type == "qwen2";
        let attention_bias = raw.attention_bias.unwrap_or(false);
        Ok(Self {
            vocab_size: req(raw.vocab_size, "vocab_size")?,
            intermediate_size: req(raw.intermediate_size, "intermediate_size")?,
            num_hidden_layers: req(raw.num_hidden_layers, "num_hidden_layers")?,
            hidden_size,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps,
            rope_theta,
            rope_scaling,
            max_position_embeddings,
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
            qkv_bias: qwen || attention_bias,
            o_bias: !qwen && attention_bias,
            mlp_bias: raw.mlp_bias.unwrap_or(false),
            bos_token_id: token_ids(&raw.bos_token_id).first().copied(),
            eos_token_ids: token_ids(&raw.eos_token_id),
            model_type,
        })
    }
}

fn parse_rope(params: Option<&serde_json::Value>) -> std::result::Result<RopeScaling, String> {
    let Some(p) = params.filter(|p| !p.is_null()) else {
        return Ok(RopeScaling::Default);
    };
    let ty = p
        .get("rope_type")
        .or_else(|| p.get("type"))
        .and_then(|v| v.as_str())
        .unwrap_or("default");
    let f = |k: &str| -> std::result::Result<f64, String> {
        p.get(k)
            .and_then(|v| v.as_f64())
            .ok_or_else(|| format!("rope scaling `{ty}` needs `{k}`"))
    };
    match ty {
        "default" => Ok(RopeScaling::Default),
        "linear" => Ok(RopeScaling::Linear {
            factor: f("factor")?,
        }),
        "llama3" => Ok(RopeScaling::Llama3 {
            factor: f("factor")?,
            low_freq_factor: f("low_freq_factor")?,
            high_freq_factor: f("high_freq_factor")?,
            original_max_position_embeddings: f("original_max_position_embeddings")? as usize,
        }),
        other => Err(format!(
            "rope_type `{other}` is not supported (default, linear, llama3)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm_config_resolves() {
        let c = LlamaConfig::from_json(
            r#"{"model_type":"llama","vocab_size":49152,"hidden_size":576,"intermediate_size":1536,
            "num_hidden_layers":30,"num_attention_heads":9,"num_key_value_heads":3,"rms_norm_eps":1e-5,
            "rope_parameters":{"rope_theta":100000.0,"rope_type":"default"},"tie_word_embeddings":true,
            "eos_token_id":2,"bos_token_id":1}"#,
        )
        .unwrap();
        assert_eq!(c.head_dim, 64);
        assert_eq!(c.rope_theta, 100000.0);
        assert_eq!(c.eos_token_ids, vec![2]);
        assert!(!c.qkv_bias);
    }

    #[test]
    fn missing_field_is_named() {
        let e = LlamaConfig::from_json(r#"{"hidden_size":8,"num_attention_heads":2}"#).unwrap_err();
        assert!(e.contains("vocab_size"), "{e}");
    }

    #[test]
    fn numbers_a_model_cannot_run_with_are_named() {
        let base = r#""vocab_size":10,"hidden_size":8,"intermediate_size":16,"num_hidden_layers":1,"num_attention_heads":2"#;
        assert!(LlamaConfig::from_json(&format!("{{{base}}}")).is_ok());
        for (extra, field) in [
            (r#""rope_theta":0"#, "rope_theta"),
            (r#""rope_theta":-10000.0"#, "rope_theta"),
            (r#""rms_norm_eps":-1e-5"#, "rms_norm_eps"),
            (r#""max_position_embeddings":0"#, "max_position_embeddings"),
        ] {
            let e = LlamaConfig::from_json(&format!("{{{base},{extra}}}")).unwrap_err();
            assert!(e.contains(field), "{extra}: {e}");
        }
    }

    #[test]
    fn llama3_and_qwen() {
        let c = LlamaConfig::from_json(
            r#"{"model_type":"qwen2","vocab_size":10,"hidden_size":8,"intermediate_size":16,
            "num_hidden_layers":1,"num_attention_heads":2,"eos_token_id":[3,4],
            "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
            "high_freq_factor":4.0,"original_max_position_embeddings":8192}}"#,
        )
        .unwrap();
        assert!(c.qkv_bias && !c.o_bias);
        assert_eq!(c.eos_token_ids, vec![3, 4]);
        assert!(matches!(c.rope_scaling, RopeScaling::Llama3 { .. }));
        let e = LlamaConfig::from_json(r#"{"model_type":"gpt2"}"#).unwrap_err();
        assert!(e.contains("gpt2"));
    }
}
