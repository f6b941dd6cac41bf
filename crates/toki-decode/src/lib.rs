//! toki-decode: plain and self-speculative decoding over a toki-model base.
//!
//! ```no_run
//! use burn::tensor::Device;
//! use toki_decode::{Engine, EngineOptions, Prompt, Request};
//! use toki_model::tokenizer::Message;
//!
//! let device = Device::flex();
//! let engine = Engine::load("models/smollm2-135m-instruct".as_ref(), &device, &EngineOptions::default())?;
//! let request = Request::greedy(Prompt::Chat(vec![Message::user("Why is the sky blue?")]), 64);
//! let output = engine.generate(&request)?;
//! println!("{} ({:.1} tokens/s)", output.text, output.stats.tokens_per_s);
//! # Ok::<(), toki_decode::DecodeError>(())
//! ```

pub mod acceptance;
pub mod adapt;
pub mod batch;
pub mod bounds;
pub mod datastore;
pub mod driver;
pub mod dynamic;
pub mod engine;
pub mod error;
pub mod gumbel;
pub mod lookup;
pub mod proposer;
pub mod request;
pub mod sampling;
pub mod tree;
pub mod verifier;

pub use acceptance::{AcceptRule, Acceptance};
pub use adapt::TreePolicy;
pub use datastore::Datastore;
pub use driver::greedy_tokens;
pub use dynamic::DynamicTree;
pub use engine::{Emitted, Engine, EngineOptions, Speculation, TreeShape};
pub use error::{DecodeError, Result};
pub use lookup::Lookup;
pub use proposer::{HeadProposer, Proposer};
pub use request::{FinishReason, Output, Prompt, Request, Stats};
pub use sampling::{SampleParams, Sampling};
pub use tree::{Tree, TreeBuffers, TreePreset};
