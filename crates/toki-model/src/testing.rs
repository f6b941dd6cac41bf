//! Tiny models on disk and in memory, for tests and benchmarks: seeded random weights in a
//! real HF folder layout (config.json, model.safetensors, a word-level tokenizer.json).

use std::path::{Path, PathBuf};

use safetensors::{Dtype, tensor::TensorView};
use serde_json::json;

use crate::config::LlamaConfig;
use crate::error::{ModelError, Result};
use crate::weights::{RandomWeights, WeightSource};

/// A fresh folder under the system's temp dir, removed with everything in it when dropped
/// (a test that passes or panics leaves nothing behind). `name` and the process id keep
/// concurrent tests and runs apart.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// Creates `$TMPDIR/toki-{name}-{pid}`, emptied first if an earlier run left it.
    pub fn new(name: &str) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("toki-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for ScratchDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `n` pseudo-random values in [-0.5, 0.5) from `seed` (a linear congruential generator:
/// the same on every machine), for kernel tests.
pub fn lcg(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

/// A tiny Llama config: `vocab` tokens, hidden 32, 2 layers, 4 query heads over `kv_heads`.
pub fn tiny_config(vocab: usize, kv_heads: usize, tied: bool) -> LlamaConfig {
    LlamaConfig::from_json(
        &json!({
            "model_type": "llama", "vocab_size": vocab, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": kv_heads,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "max_position_embeddings": 512,
            "tie_word_embeddings": tied, "eos_token_id": 0, "bos_token_id": 1
        })
        .to_string(),
    )
    .expect("the tiny config is valid")
}

/// Names and shapes of every tensor `config` needs, in HF naming.
pub fn tensor_shapes(c: &LlamaConfig) -> Vec<(String, Vec<usize>)> {
    let (d, hd) = (c.hidden_size, c.head_dim);
    let mut v = vec![(
        "model.embed_tokens.weight".to_string(),
        vec![c.vocab_size, d],
    )];
    for i in 0..c.num_hidden_layers {
        let p = format!("model.layers.{i}");
        v.push((format!("{p}.input_layernorm.weight"), vec![d]));
        v.push((format!("{p}.post_attention_layernorm.weight"), vec![d]));
        v.push((
            format!("{p}.self_attn.q_proj.weight"),
            vec![c.num_attention_heads * hd, d],
        ));
        v.push((
            format!("{p}.self_attn.k_proj.weight"),
            vec![c.num_key_value_heads * hd, d],
        ));
        v.push((
            format!("{p}.self_attn.v_proj.weight"),
            vec![c.num_key_value_heads * hd, d],
        ));
        v.push((
            format!("{p}.self_attn.o_proj.weight"),
            vec![d, c.num_attention_heads * hd],
        ));
        v.push((
            format!("{p}.mlp.gate_proj.weight"),
            vec![c.intermediate_size, d],
        ));
        v.push((
            format!("{p}.mlp.up_proj.weight"),
            vec![c.intermediate_size, d],
        ));
        v.push((
            format!("{p}.mlp.down_proj.weight"),
            vec![d, c.intermediate_size],
        ));
    }
    v.push(("model.norm.weight".into(), vec![d]));
    if !c.tie_word_embeddings {
        v.push(("lm_head.weight".into(), vec![c.vocab_size, d]));
    }
    v
}

/// Write `tensors` (name, shape, f32 data) as one safetensors file.
pub fn write_safetensors(path: &Path, tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Result<()> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, _, d)| d.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, s, _), b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).expect("shape matches data"),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).map_err(|e| ModelError::Safetensors {
        path: path.to_path_buf(),
        msg: e.to_string(),
    })
}

/// A complete HF folder for `config` with seeded random weights and a word-level
/// tokenizer whose tokens are `t0`, `t1`, ... (`t0` is EOS).
pub fn write_model_folder(dir: &Path, config: &LlamaConfig, seed: u64) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| ModelError::io(dir, e))?;
    let mut src = RandomWeights { seed, std: 0.2 };
    let tensors = tensor_shapes(config)
        .into_iter()
        .map(|(n, s)| {
            let d = src.tensor(&n, &s)?;
            Ok((n, s, d))
        })
        .collect::<Result<Vec<_>>>()?;
    write_safetensors(&dir.join("model.safetensors"), &tensors)?;
    let cfg = json!({
        "model_type": "llama", "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
        "rms_norm_eps": config.rms_norm_eps, "rope_theta": config.rope_theta,
        "max_position_embeddings": config.max_position_embeddings,
        "tie_word_embeddings": config.tie_word_embeddings, "eos_token_id": 0, "bos_token_id": 1
    });
    let vocab: serde_json::Map<String, serde_json::Value> = (0..config.vocab_size)
        .map(|i| (format!("t{i}"), json!(i)))
        .collect();
    let tok = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t1"}
    });
    let tcfg = json!({"chat_template": "{% for m in messages %}t2 {{ m.content }} t3 {% endfor %}{% if add_generation_prompt %}t4{% endif %}", "eos_token": "t0"});
    for (name, v) in [
        ("config.json", cfg),
        ("tokenizer.json", tok),
        ("tokenizer_config.json", tcfg),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, v.to_string()).map_err(|e| ModelError::io(&p, e))?;
    }
    Ok(())
}
