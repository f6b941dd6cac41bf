//! Errors of the decode crate.

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(transparent)]
    Model(#[from] toki_model::ModelError),
    #[error("the prompt is empty")]
    EmptyPrompt,
    #[error(
        "the prompt has {prompt} tokens but the context holds {context}, the prompt and at least one new token"
    )]
    PromptTooLong { prompt: usize, context: usize },
    #[error("the prompt's {prompt} tokens and {new} new ones exceed the context of {context}")]
    AnswerTooLong {
        prompt: usize,
        new: usize,
        context: usize,
    },
    #[error("token id {id} is outside the vocabulary ({vocab})")]
    BadToken { id: u32, vocab: usize },
    #[error("invalid sampling settings: {0}")]
    Sampling(String),
    #[error("invalid tree: {0}")]
    Tree(String),
    #[error("{0}")]
    Request(String),
    #[error("datastore {path}: {msg}")]
    Datastore {
        path: std::path::PathBuf,
        msg: String,
    },
}

pub type Result<T> = std::result::Result<T, DecodeError>;

impl DecodeError {
    pub(crate) fn device(e: impl std::fmt::Display) -> Self {
        DecodeError::Request(format!("reading a result back from the device failed: {e}"))
    }
}
