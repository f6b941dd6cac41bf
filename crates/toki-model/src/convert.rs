//! GGUF (llama.cpp) → HuggingFace folder: `config.json`, `model.safetensors` (f32),
//! `tokenizer.json`, `tokenizer_config.json`, `generation_config.json`.
//!
//! Undoes llama.cpp's q/k row permutation (its pairwise RoPE layout) so the weights work
//! with transformers' rotate_half convention, which toki uses.

use std::collections::BTreeMap;
use std::path::Path;

use safetensors::{Dtype, tensor::TensorView};
use serde_json::{Value as Json, json};

use crate::error::{ModelError, Result};
use crate::gguf::{GgufFile, Value};

/// What a conversion produced, for the CLI to report.
#[derive(Debug, Clone)]
pub struct ConvertReport {
    pub architecture: String,
    pub tensors: usize,
    pub parameters: usize,
    pub vocab_size: usize,
}

fn gerr(g: &GgufFile, msg: impl Into<String>) -> ModelError {
    ModelError::Gguf {
        path: g.path.clone(),
        msg: msg.into(),
    }
}

/// An f32 read from GGUF metadata, written with the shortest decimal that reads back the
/// same f32 (9.9999997e-06 stored becomes 1e-05, as transformers' configs have it).
fn f32_meta(v: f64) -> f64 {
    format!("{}", v as f32).parse().unwrap_or(v)
}

/// Inverse of llama.cpp's `permute(w, n_head)`: GGUF row `h*hd + 2j + s` is HF row
/// `h*hd + s*hd/2 + j`. `w` is row-major with `cols` columns.
pub fn unpermute_rows(w: &[f32], n_head: usize, cols: usize) -> Vec<f32> {
    let rows = w.len() / cols;
    let hd = rows / n_head;
    let half = hd / 2;
    let mut out = vec![0.0; w.len()];
    for h in 0..n_head {
        for j in 0..half {
            for s in 0..2 {
                let src = (h * hd + 2 * j + s) * cols;
                let dst = (h * hd + s * half + j) * cols;
                out[dst..dst + cols].copy_from_slice(&w[src..src + cols]);
            }
        }
    }
    out
}

/// Convert `gguf_path` into an HF folder at `out` (created if needed).
pub fn convert_gguf(gguf_path: &Path, out: &Path) -> Result<ConvertReport> {
    let g = GgufFile::open(gguf_path)?;
    let arch = g
        .get("general.architecture")
        .and_then(Value::as_str)
        .ok_or_else(|| gerr(&g, "no general.architecture"))?
        .to_string();
    if !matches!(arch.as_str(), "llama" | "qwen2" | "mistral") {
        return Err(gerr(
            &g,
            format!("architecture `{arch}` is not supported (llama, mistral, qwen2)"),
        ));
    }
    let u = |k: &str| -> Result<usize> {
        g.get(&format!("{arch}.{k}"))
            .and_then(Value::as_u64)
            .map(|v| v as usize)
            .ok_or_else(|| gerr(&g, format!("missing metadata `{arch}.{k}`")))
    };
    let hidden = u("embedding_length")?;
    let layers = u("block_count")?;
    let n_head = u("attention.head_count")?;
    let n_kv = u("attention.head_count_kv").unwrap_or(n_head);
    let ffn = u("feed_forward_length")?;
    let ctx = u("context_length").unwrap_or(2048);
    let head_dim = u("attention.key_length")
        .or_else(|_| u("rope.dimension_count"))
        .unwrap_or(hidden / n_head);
    let fmeta = |k: &str| g.get(&format!("{arch}.{k}")).and_then(Value::as_f64);
    let eps = f32_meta(
        fmeta("attention.layer_norm_rms_epsilon").ok_or_else(|| gerr(&g, "missing rms epsilon"))?,
    );
    let theta = f32_meta(fmeta("rope.freq_base").unwrap_or(10_000.0));
    if g.tensor("rope_freqs.weight").is_some() {
        return Err(gerr(
            &g,
            "per-frequency RoPE factors (rope_freqs, Llama 3.1 scaling) cannot be expressed as an HF config; convert from the original HF folder instead",
        ));
    }
    let rope = match g
        .get(&format!("{arch}.rope.scaling.type"))
        .and_then(Value::as_str)
    {
        None | Some("none") => json!({"rope_type": "default", "rope_theta": theta}),
        Some("linear") => {
            json!({"rope_type": "linear", "rope_theta": theta, "factor": fmeta("rope.scaling.factor").unwrap_or(1.0)})
        }
        Some(other) => return Err(gerr(&g, format!("RoPE scaling `{other}` is not supported"))),
    };

    // Tokenizer first: the vocabulary size comes from it.
    let tok = crate::tokenizer::gguf_tokenizer(&g)?;
    let vocab = tok.vocab_size;
    let tied = g.tensor("output.weight").is_none();

    std::fs::create_dir_all(out).map_err(|e| ModelError::io(out, e))?;
    let mut tensors: BTreeMap<String, (Vec<usize>, Vec<u8>)> = BTreeMap::new();
    let mut parameters = 0;
    for info in &g.tensors {
        let name = hf_name(&info.name)
            .ok_or_else(|| gerr(&g, format!("unexpected tensor `{}`", info.name)))?;
        let shape = info.shape();
        let mut data = g.dequantize(info)?;
        if arch == "llama" || arch == "mistral" {
            let cols = *shape.last().unwrap_or(&1);
            if info.name.ends_with("attn_q.weight") || info.name.ends_with("attn_q.bias") {
                data = unpermute_rows(&data, n_head, if shape.len() == 1 { 1 } else { cols });
            } else if info.name.ends_with("attn_k.weight") || info.name.ends_with("attn_k.bias") {
                data = unpermute_rows(&data, n_kv, if shape.len() == 1 { 1 } else { cols });
            }
        }
        parameters += data.len();
        let bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
        tensors.insert(name, (shape, bytes));
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, (shape, bytes))| {
            TensorView::new(Dtype::F32, shape.clone(), bytes)
                .map(|v| (n.clone(), v))
                .map_err(|e| gerr(&g, format!("tensor `{n}`: {e}")))
        })
        .collect::<Result<_>>()?;
    let st_path = out.join("model.safetensors");
    let tmp = out.join("model.safetensors.tmp");
    let meta = Some(std::collections::HashMap::from([(
        "format".to_string(),
        "pt".to_string(),
    )]));
    safetensors::serialize_to_file(views, meta, &tmp).map_err(|e| ModelError::Safetensors {
        path: tmp.clone(),
        msg: e.to_string(),
    })?;
    std::fs::rename(&tmp, &st_path).map_err(|e| ModelError::io(&st_path, e))?;

    let config = json!({
        "architectures": [match arch.as_str() { "qwen2" => "Qwen2ForCausalLM", "mistral" => "MistralForCausalLM", _ => "LlamaForCausalLM" }],
        "model_type": arch,
        "hidden_size": hidden,
        "intermediate_size": ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "head_dim": head_dim,
        "rms_norm_eps": eps,
        "rope_theta": theta,
        "rope_parameters": rope,
        "max_position_embeddings": ctx,
        "vocab_size": vocab,
        "tie_word_embeddings": tied,
        "hidden_act": "silu",
        "bos_token_id": tok.bos,
        "eos_token_id": tok.eos,
        "torch_dtype": "float32",
        "name": g.get("general.name").and_then(Value::as_str),
    });
    write_json(&out.join("config.json"), &config)?;
    write_json(&out.join("tokenizer.json"), &tok.tokenizer_json)?;
    write_json(
        &out.join("tokenizer_config.json"),
        &tok.tokenizer_config(ctx),
    )?;
    write_json(
        &out.join("generation_config.json"),
        &json!({"bos_token_id": tok.bos, "eos_token_id": tok.eos, "do_sample": false}),
    )?;
    Ok(ConvertReport {
        architecture: arch,
        tensors: tensors.len(),
        parameters,
        vocab_size: vocab,
    })
}

fn write_json(path: &Path, v: &Json) -> Result<()> {
    let text = serde_json::to_string_pretty(v).map_err(|e| ModelError::Gguf {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })?;
    std::fs::write(path, text).map_err(|e| ModelError::io(path, e))
}

/// llama.cpp tensor names → transformers names.
fn hf_name(gguf: &str) -> Option<String> {
    Some(match gguf {
        "token_embd.weight" => "model.embed_tokens.weight".into(),
        "output_norm.weight" => "model.norm.weight".into(),
        "output.weight" => "lm_head.weight".into(),
        _ => {
            let rest = gguf.strip_prefix("blk.")?;
            let (layer, part) = rest.split_once('.')?;
            let layer: usize = layer.parse().ok()?;
            let (stem, kind) = part.rsplit_once('.')?;
            let hf = match stem {
                "attn_norm" => "input_layernorm",
                "ffn_norm" => "post_attention_layernorm",
                "attn_q" => "self_attn.q_proj",
                "attn_k" => "self_attn.k_proj",
                "attn_v" => "self_attn.v_proj",
                "attn_output" => "self_attn.o_proj",
                "ffn_gate" => "mlp.gate_proj",
                "ffn_up" => "mlp.up_proj",
                "ffn_down" => "mlp.down_proj",
                _ => return None,
            };
            if kind != "weight" && kind != "bias" {
                return None;
            }
            format!("model.layers.{layer}.{hf}.{kind}")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// llama.cpp's permute, written out from its definition, to check the inverse.
    fn permute(w: &[f32], n_head: usize, cols: usize) -> Vec<f32> {
        let rows = w.len() / cols;
        let hd = rows / n_head;
        let half = hd / 2;
        let mut out = vec![0.0; w.len()];
        // reshape(n_head, 2, half, cols).swapaxes(1, 2): out[h][j][s] = w[h][s][j]
        for h in 0..n_head {
            for j in 0..half {
                for s in 0..2 {
                    let dst = (h * hd + 2 * j + s) * cols;
                    let src = (h * hd + s * half + j) * cols;
                    out[dst..dst + cols].copy_from_slice(&w[src..src + cols]);
                }
            }
        }
        out
    }

    #[test]
    fn unpermute_inverts_permute() {
        let w: Vec<f32> = (0..3 * 8 * 5).map(|x| x as f32).collect();
        assert_eq!(unpermute_rows(&permute(&w, 3, 5), 3, 5), w);
        assert_ne!(permute(&w, 3, 5), w);
    }

    #[test]
    fn names_map() {
        assert_eq!(
            hf_name("blk.12.attn_k.weight").as_deref(),
            Some("model.layers.12.self_attn.k_proj.weight")
        );
        assert_eq!(
            hf_name("blk.0.attn_q.bias").as_deref(),
            Some("model.layers.0.self_attn.q_proj.bias")
        );
        assert_eq!(hf_name("rope_freqs.weight"), None);
    }
}
