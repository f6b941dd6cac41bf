//! Tokenizer (HF `tokenizer.json` through the `tokenizers` crate) and chat template
//! (`tokenizer_config.json`'s Jinja template, rendered with minijinja); plus rebuilding a
//! byte-level BPE `tokenizer.json` from GGUF metadata.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value as Json, json};

use crate::error::{ModelError, Result};
use crate::gguf::{GgufFile, Value};

/// One chat message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: "user".into(),
            content: content.into(),
        }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: "assistant".into(),
            content: content.into(),
        }
    }
}

/// A model's tokenizer with its chat template and special tokens.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    chat_template: Option<String>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    path: PathBuf,
}

fn tok_err(path: &Path, msg: impl ToString) -> ModelError {
    ModelError::Tokenizer {
        path: path.to_path_buf(),
        msg: msg.to_string(),
    }
}

/// A special token in tokenizer_config.json: a string or `{"content": ...}`.
fn token_str(v: Option<&Json>) -> Option<String> {
    match v? {
        Json::String(s) => Some(s.clone()),
        Json::Object(o) => o.get("content").and_then(|c| c.as_str()).map(String::from),
        _ => None,
    }
}

impl Tokenizer {
    /// Load `tokenizer.json` and (if present) `tokenizer_config.json` from a model folder.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("tokenizer.json");
        if !path.exists() {
            return Err(tok_err(&path, "file not found"));
        }
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| tok_err(&path, e))?;
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: Json = match std::fs::read_to_string(&cfg_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| tok_err(&cfg_path, e))?,
            Err(_) => Json::Null,
        };
        Ok(Self {
            inner,
            chat_template: cfg
                .get("chat_template")
                .and_then(|t| t.as_str())
                .map(String::from),
            bos_token: token_str(cfg.get("bos_token")),
            eos_token: token_str(cfg.get("eos_token")),
            path,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn has_chat_template(&self) -> bool {
        self.chat_template.is_some()
    }

    /// Token ids of `text`, with no special tokens added (a chat template adds its own).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode(text, false)
            .map_err(|e| tok_err(&self.path, e))?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text of `ids`; special tokens are kept when `skip_special` is false.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| tok_err(&self.path, e))
    }

    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Render `messages` with the model's chat template, as transformers'
    /// `apply_chat_template(..., tokenize=False)` does.
    pub fn apply_chat_template(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
    ) -> Result<String> {
        let template = self.chat_template.as_deref().ok_or_else(|| {
            ModelError::ChatTemplate(
                "this model has no chat template (tokenizer_config.json)".into(),
            )
        })?;
        let mut env = minijinja::Environment::new();
        env.set_unknown_method_callback(minijinja_contrib_like_pycompat);
        env.add_function(
            "raise_exception",
            |msg: String| -> std::result::Result<String, minijinja::Error> {
                Err(minijinja::Error::new(
                    minijinja::ErrorKind::InvalidOperation,
                    msg,
                ))
            },
        );
        env.add_template("chat", template)
            .map_err(|e| ModelError::ChatTemplate(e.to_string()))?;
        let tmpl = env
            .get_template("chat")
            .map_err(|e| ModelError::ChatTemplate(e.to_string()))?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.clone().unwrap_or_default(),
            eos_token => self.eos_token.clone().unwrap_or_default(),
        })
        .map_err(|e| ModelError::ChatTemplate(e.to_string()))
    }
}

/// Python string methods templates commonly call (`strip`, `startswith`, ...).
fn minijinja_contrib_like_pycompat(
    _state: &minijinja::State,
    value: &minijinja::Value,
    method: &str,
    args: &[minijinja::Value],
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    let unknown = || {
        minijinja::Error::new(
            minijinja::ErrorKind::UnknownMethod,
            format!("unknown method {method}"),
        )
    };
    let s = value.as_str().ok_or_else(unknown)?;
    let arg = |i: usize| args.get(i).and_then(|a| a.as_str()).unwrap_or("");
    Ok(match method {
        "strip" => s.trim().into(),
        "lstrip" => s.trim_start().into(),
        "rstrip" => s.trim_end().into(),
        "startswith" => s.starts_with(arg(0)).into(),
        "endswith" => s.ends_with(arg(0)).into(),
        "upper" => s.to_uppercase().into(),
        "lower" => s.to_lowercase().into(),
        _ => return Err(unknown()),
    })
}

/// A tokenizer rebuilt from GGUF metadata.
pub(crate) struct GgufTokenizer {
    pub tokenizer_json: Json,
    pub vocab_size: usize,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    chat_template: Option<String>,
    tokens: Vec<String>,
    add_bos: bool,
}

impl GgufTokenizer {
    pub fn tokenizer_config(&self, ctx: usize) -> Json {
        let name = |id: Option<u32>| id.and_then(|i| self.tokens.get(i as usize)).cloned();
        json!({
            "add_bos_token": self.add_bos,
            "add_eos_token": false,
            "bos_token": name(self.bos),
            "eos_token": name(self.eos),
            "chat_template": self.chat_template,
            "model_max_length": ctx,
            "tokenizer_class": "PreTrainedTokenizerFast",
            "clean_up_tokenization_spaces": false,
        })
    }
}

/// The pre-tokenizer llama.cpp names in `tokenizer.ggml.pre`, as a tokenizer.json fragment.
fn pre_tokenizer(pre: &str) -> Option<Json> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |pattern: &str| json!({"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false});
    Some(match pre {
        "default" | "gpt-2" | "gpt2" => byte_level(true),
        // Digits split one at a time before the GPT-2 split (SmolLM, StarCoder).
        "smollm" | "starcoder" | "refact" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true}, byte_level(true)]}),
        "llama3" | "llama-bpe" | "llama-v3" => json!({"type": "Sequence", "pretokenizers": [
            split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
            byte_level(false)]}),
        "qwen2" => json!({"type": "Sequence", "pretokenizers": [
            split(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
            byte_level(false)]}),
        _ => return None,
    })
}

pub(crate) fn gguf_tokenizer(g: &GgufFile) -> Result<GgufTokenizer> {
    let err = |msg: String| ModelError::Gguf {
        path: g.path.clone(),
        msg,
    };
    let model = g
        .get("tokenizer.ggml.model")
        .and_then(Value::as_str)
        .unwrap_or("");
    if model != "gpt2" {
        return Err(err(format!(
            "tokenizer model `{model}` is not supported (byte-level BPE `gpt2` only)"
        )));
    }
    let strings = |key: &str| -> Result<Vec<String>> {
        g.get(key)
            .and_then(Value::as_array)
            .ok_or_else(|| err(format!("missing `{key}`")))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(String::from)
                    .ok_or_else(|| err(format!("`{key}` holds a non-string")))
            })
            .collect()
    };
    let tokens = strings("tokenizer.ggml.tokens")?;
    let merges = strings("tokenizer.ggml.merges")?;
    let types: Vec<u64> = g
        .get("tokenizer.ggml.token_type")
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_u64().unwrap_or(1)).collect())
        .unwrap_or_else(|| vec![1; tokens.len()]);
    let pre_name = g
        .get("tokenizer.ggml.pre")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let pre = pre_tokenizer(pre_name).ok_or_else(|| err(format!("pre-tokenizer `{pre_name}` is not supported (default, gpt2, smollm, starcoder, llama3, qwen2)")))?;
    let id = |k: &str| g.get(k).and_then(Value::as_u64).map(|v| v as u32);
    let bos = id("tokenizer.ggml.bos_token_id");
    let eos = id("tokenizer.ggml.eos_token_id");
    let add_bos = matches!(
        g.get("tokenizer.ggml.add_bos_token"),
        Some(Value::Bool(true))
    );

    let vocab: serde_json::Map<String, Json> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    // Control (3) and user-defined (4) tokens are matched before BPE, as added tokens.
    let added: Vec<Json> = tokens
        .iter()
        .zip(&types)
        .enumerate()
        .filter(|(_, (_, ty))| **ty == 3 || **ty == 4)
        .map(|(i, (t, ty))| json!({"id": i, "content": t, "single_word": false, "lstrip": false, "rstrip": false, "normalized": *ty == 4, "special": *ty == 3}))
        .collect();
    let post = match (add_bos, bos) {
        (true, Some(b)) => {
            let bos_tok = &tokens[b as usize];
            json!({"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": bos_tok, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": bos_tok, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {bos_tok.clone(): {"id": bos_tok, "ids": [b], "tokens": [bos_tok]}}})
        }
        _ => Json::Null,
    };
    let tokenizer_json = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
            "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": merges},
    });
    Ok(GgufTokenizer {
        tokenizer_json,
        vocab_size: tokens.len(),
        bos,
        eos,
        chat_template: g
            .get("tokenizer.chat_template")
            .and_then(Value::as_str)
            .map(String::from),
        tokens,
        add_bos,
    })
}
