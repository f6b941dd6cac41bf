//! Errors of the model crate: every failure a user can cause names the file or tensor involved.

use std::path::PathBuf;

/// Anything that can go wrong while reading, converting or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("model folder {0} does not exist or is not a folder")]
    MissingFolder(PathBuf),
    #[error("{path}: invalid config: {msg}")]
    Config { path: PathBuf, msg: String },
    #[error("{path}: not a valid safetensors file: {msg}")]
    Safetensors { path: PathBuf, msg: String },
    #[error("tensor `{name}` is missing from the weights")]
    MissingTensor { name: String },
    #[error("unexpected tensor `{name}` in the weights (not part of this architecture)")]
    ExtraTensor { name: String },
    #[error("tensor `{name}` has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor `{name}` has unsupported dtype {dtype} (supported: F32, F16, BF16)")]
    UnsupportedDtype { name: String, dtype: String },
    #[error("{path}: GGUF: {msg}")]
    Gguf { path: PathBuf, msg: String },
    #[error(
        "GGUF tensor `{name}` has ggml type {kind}, which toki cannot dequantize (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)"
    )]
    UnsupportedGgmlType { name: String, kind: String },
    #[error("tokenizer {path}: {msg}")]
    Tokenizer { path: PathBuf, msg: String },
    #[error("chat template: {0}")]
    ChatTemplate(String),
    #[error("heads {path}: {msg}")]
    Heads { path: PathBuf, msg: String },
    #[error(
        "heads do not fit the base model: {what} is {heads} in the heads but {base} in the base"
    )]
    HeadsMismatch {
        what: &'static str,
        heads: usize,
        base: usize,
    },
}

pub type Result<T> = std::result::Result<T, ModelError>;

impl ModelError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
