//! toki-train: Medusa heads trained on a frozen base model.
//!
//! - [`data`]: text / JSONL / chat files → token documents with a loss mask, packed into
//!   fixed-length sequences
//! - [`hidden`]: the frozen base's hidden states of those sequences, computed once without
//!   autodiff and cached on disk
//! - [`optim`]: AdamW, warmup + cosine schedule and gradient clipping on host-side parameters
//! - [`trainer`]: the loop (loss Σ λ_k CE(head k, token t+k+2)), held-out metrics, atomic
//!   checkpoints and resume
//!
//! The base is never changed: only the heads' tensors are parameters; its lm_head enters
//! the graph as a constant.

pub mod checkpoint;
pub mod data;
pub mod error;
pub mod hidden;
pub mod optim;
pub mod trainer;

pub use data::{Document, Sequence, load_documents, pack, target_counts};
pub use error::{Result, TrainError};
pub use hidden::HiddenSet;
pub use trainer::{Event, TrainConfig, Trainer};
