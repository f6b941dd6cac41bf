//! toki-model: the frozen base model and the files it comes from.
//!
//! - [`config`]: HF `config.json` → [`LlamaConfig`]
//! - [`weights`]: safetensors folders (and seeded random weights for tests)
//! - [`llama`]: the decoder; forward with explicit positions, mask and cache
//! - [`rope`], [`cache`]: the explicit state a forward takes
//! - [`gguf`], [`convert`]: llama.cpp files → an HF folder
//! - [`heads`], [`draft`]: Medusa heads, and the draft vocabulary they may score
//! - [`kernels`], [`attention`]: the CPU fast path for small steps (weights streamed once,
//!   keys and values read in place)
//! - [`tokenizer`]: tokenizer.json and the chat template

pub mod attention;
pub mod cache;
pub mod config;
pub mod convert;
pub mod draft;
pub mod error;
pub mod gguf;
pub mod heads;
pub mod kernels;
pub mod llama;
pub mod rope;
pub mod testing;
pub mod tokenizer;
pub mod weights;

pub use cache::KvCache;
pub use config::LlamaConfig;
pub use draft::{DraftVocab, TokenCounts};
pub use error::{ModelError, Result};
pub use heads::{HeadInput, HeadKind, HeadPath, HeadsConfig, MedusaHeads, StoreDtype};
pub use kernels::{HostPrecision, Rounding, RowValues};
pub use llama::{AttnMask, HostLogits, LlamaModel, Precision};
pub use rope::RopeTables;
