//! Errors of the training crate.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Model(#[from] toki_model::ModelError),
    /// Bad training data: the file and (where there is one) the line.
    #[error("{}{}: {msg}", path.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Data {
        path: PathBuf,
        line: Option<usize>,
        msg: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid training settings: {0}")]
    Config(String),
    #[error(
        "update {update}: the loss ({loss}) or the gradient norm ({grad_norm}) is not finite; try a lower --lr (the checkpoints written so far are kept)"
    )]
    Diverged {
        update: usize,
        loss: f32,
        grad_norm: f32,
    },
    #[error("checkpoint {}: {msg}", path.display())]
    Checkpoint { path: PathBuf, msg: String },
    #[error("reading a result back from the device failed: {0}")]
    Device(String),
}

pub type Result<T> = std::result::Result<T, TrainError>;

impl TrainError {
    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        TrainError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
    pub(crate) fn data(path: &std::path::Path, line: Option<usize>, msg: impl ToString) -> Self {
        TrainError::Data {
            path: path.to_path_buf(),
            line,
            msg: msg.to_string(),
        }
    }
    pub(crate) fn device(e: impl std::fmt::Display) -> Self {
        TrainError::Device(e.to_string())
    }
}
