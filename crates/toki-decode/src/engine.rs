//! The library entry point: an [`Engine`] holds a loaded model (and, for speculative
//! decoding, its heads and tree) and serves [`Request`]s.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;

use burn::tensor::{Device, Int, Tensor, TensorData};
use toki_model::tokenizer::Tokenizer;
use toki_model::weights::SafetensorsWeights;
use toki_model::{LlamaConfig, LlamaModel, MedusaHeads, ModelError, Precision, RopeTables};

use crate::acceptance::{AcceptRule, Acceptance, Lossless, Typical};
use crate::adapt::Estimates;
use crate::datastore::Datastore;
use crate::dynamic::{DynamicTree, Feedback};
use crate::error::{DecodeError, Result};
use crate::lookup::{Lookup, LookupStats};
use crate::proposer::{HeadProposer, Proposer};
use crate::request::{Output, Prompt, Request};
use crate::tree::{Tree, TreeBuffers};

/// How an engine is loaded.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    pub precision: Precision,
    /// Upper bound on the context (prompt + generated tokens); the model's own
    /// `max_position_embeddings` bounds it too. RoPE tables are built to this length.
    pub max_context: usize,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            precision: Precision::F32,
            max_context: 4096,
        }
    }
}

/// A model ready to serve requests.
pub struct Engine {
    pub(crate) model: LlamaModel,
    pub(crate) tokenizer: Option<Tokenizer>,
    pub(crate) rope: RopeTables,
    pub(crate) eos: Vec<u32>,
    pub(crate) context: usize,
    pub(crate) speculation: Option<Speculation>,
    /// The root-only tree: plain decoding steps.
    pub(crate) root_buffers: TreeBuffers,
    /// What the adaptive policy measured in earlier requests (reset with the tree).
    pub(crate) estimates: std::sync::Mutex<Estimates>,
    /// What dynamic trees learnt in earlier requests (reset with the tree).
    pub(crate) feedback: std::sync::Mutex<Feedback>,
    /// How often prompt lookup's chains were right (reset with the tree).
    pub(crate) lookup_stats: std::sync::Mutex<LookupStats>,
}

/// The proposer (Medusa heads) and the tree it fills.
pub struct Speculation {
    pub heads: Box<dyn Proposer>,
    pub shape: TreeShape,
    /// Prompt lookup chains grafted onto dynamic trees ([`crate::lookup`]).
    pub lookup: Option<Lookup>,
    /// Datastore chains grafted onto dynamic trees ([`crate::datastore`]), searched with
    /// `lookup`'s match lengths and chain length (or the defaults when it is off).
    pub datastore: Option<Arc<Datastore>>,
}

/// Which tree a speculative step verifies.
// One per engine, built once: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum TreeShape {
    /// The same tree every step.
    Static { tree: Tree, buffers: TreeBuffers },
    /// A tree sized each step from the heads' confidence ([`crate::dynamic`]).
    Dynamic(DynamicTree),
}

impl TreeShape {
    /// How many heads deep its trees go.
    pub fn depth(&self, heads: &dyn Proposer) -> usize {
        match self {
            Self::Static { tree, .. } => tree.depth(),
            Self::Dynamic(_) => heads.num_heads(),
        }
    }

    /// The most nodes a step verifies, root included.
    pub fn max_nodes(&self) -> usize {
        match self {
            Self::Static { tree, .. } => tree.len(),
            Self::Dynamic(d) => d.max_nodes(),
        }
    }

    /// What the adaptive policy's shadow checks look at: how many of the first head's
    /// guesses, and the depth their hits bound where every path the tree can accept starts
    /// at one of them (a static tree's depth-1 nodes are the first head's top `top_k[0]`;
    /// a dynamic tree's lookup chains can start with any token: its top guess, no bound).
    pub fn shadow(&self) -> (usize, Option<usize>) {
        match self {
            Self::Static { tree, .. } => {
                let width = tree.top_k().first().copied().unwrap_or(1).max(1);
                (width, Some(tree.depth()))
            }
            Self::Dynamic(_) => (1, None),
        }
    }
}

/// Tokens handed to a streaming callback as they are accepted.
#[derive(Debug, Clone, Copy)]
pub struct Emitted<'a> {
    /// The tokens this step added.
    pub new_tokens: &'a [u32],
    /// All generated tokens so far.
    pub all_tokens: &'a [u32],
}

impl Engine {
    /// Load an HF-style folder: `config.json`, safetensors weights, `tokenizer.json`.
    pub fn load(dir: &Path, device: &Device, options: &EngineOptions) -> Result<Self> {
        if !dir.is_dir() {
            return Err(ModelError::MissingFolder(dir.to_path_buf()).into());
        }
        let config = LlamaConfig::from_file(&dir.join("config.json"))?;
        let tokenizer = Tokenizer::from_dir(dir)?;
        let mut weights = SafetensorsWeights::open(dir)?;
        let model = LlamaModel::from_weights(&config, &mut weights, device, options.precision)?;
        let mut eos = config.eos_token_ids.clone();
        // generation_config.json may list more end tokens than config.json.
        if let Ok(text) = std::fs::read_to_string(dir.join("generation_config.json"))
            && let Ok(v) = serde_json::from_str::<serde_json::Value>(&text)
        {
            match v.get("eos_token_id") {
                Some(serde_json::Value::Number(n)) => eos.extend(n.as_u64().map(|x| x as u32)),
                Some(serde_json::Value::Array(a)) => {
                    eos.extend(a.iter().filter_map(|x| x.as_u64().map(|x| x as u32)))
                }
                _ => {}
            }
        }
        eos.sort_unstable();
        eos.dedup();
        Ok(Self::from_parts(
            model,
            Some(tokenizer),
            eos,
            options.max_context,
        ))
    }

    /// An engine over an already built model (tests use tiny random ones).
    pub fn from_parts(
        model: LlamaModel,
        tokenizer: Option<Tokenizer>,
        eos: Vec<u32>,
        max_context: usize,
    ) -> Self {
        let context = max_context
            .min(model.config().max_position_embeddings)
            .max(1);
        let rope = RopeTables::new(model.config(), context, &model.device());
        let root_buffers = Tree::root_only().buffers(&model.device());
        Self {
            model,
            tokenizer,
            rope,
            eos,
            context,
            speculation: None,
            root_buffers,
            estimates: Default::default(),
            feedback: Default::default(),
            lookup_stats: Default::default(),
        }
    }

    /// Decode speculatively with `heads` filling `tree` (checked against the heads).
    pub fn with_heads(self, heads: MedusaHeads, tree: Tree) -> Result<Self> {
        let heads = heads.with_host_kernels(&self.model);
        self.with_proposer(Box::new(HeadProposer::new(heads)), tree)
    }

    /// Decode speculatively with any proposer filling `tree`.
    pub fn with_proposer(mut self, heads: Box<dyn Proposer>, tree: Tree) -> Result<Self> {
        if tree.depth() > heads.num_heads() {
            return Err(DecodeError::Tree(format!(
                "the tree is {} deep but there are {} heads",
                tree.depth(),
                heads.num_heads()
            )));
        }
        let widest = tree.top_k().iter().copied().max().unwrap_or(0);
        if widest > heads.max_rank() {
            return Err(DecodeError::Tree(format!(
                "the tree asks for {widest} proposals per head but the heads rank only {} (draft vocabulary size)",
                heads.max_rank()
            )));
        }
        let buffers = tree.buffers(&self.device());
        self.speculation = Some(Speculation {
            heads,
            shape: TreeShape::Static { tree, buffers },
            lookup: None,
            datastore: None,
        });
        self.reset_learnt();
        Ok(self)
    }

    /// Decode speculatively with a tree sized each step from the heads' confidence. Ranks
    /// beyond what the heads can give (a draft vocabulary's size) are not considered.
    pub fn with_dynamic_tree(
        mut self,
        heads: Box<dyn Proposer>,
        mut dynamic: DynamicTree,
    ) -> Result<Self> {
        if heads.num_heads() == 0 {
            return Err(DecodeError::Tree(
                "a dynamic tree needs at least one head".into(),
            ));
        }
        dynamic.max_rank = dynamic.max_rank.min(heads.max_rank());
        self.speculation = Some(Speculation {
            heads,
            shape: TreeShape::Dynamic(dynamic),
            lookup: None,
            datastore: None,
        });
        self.reset_learnt();
        Ok(self)
    }

    /// Graft prompt lookup chains onto the dynamic tree's steps ([`crate::lookup`]), or
    /// stop (`None`). Static trees verify the same nodes every step: they take none.
    pub fn with_lookup(mut self, lookup: Option<Lookup>) -> Result<Self> {
        if let Some(l) = lookup
            && (l.min_match == 0 || l.min_match > l.max_match || l.max_len == 0)
        {
            return Err(DecodeError::Tree(format!(
                "prompt lookup needs 1 <= min_match <= max_match and max_len >= 1, got {l:?}"
            )));
        }
        if let Some(spec) = self.chains_onto("prompt lookup", lookup.is_some())? {
            spec.lookup = lookup;
            self.reset_learnt();
        }
        Ok(self)
    }

    /// Graft the chains `datastore` proposes onto the dynamic tree's steps
    /// ([`crate::datastore`]), or stop (`None`). Needs a dynamic tree, and a corpus whose
    /// token ids fit this model's vocabulary.
    pub fn with_datastore(mut self, datastore: Option<Datastore>) -> Result<Self> {
        let vocab = self.model.config().vocab_size;
        if let Some(t) = datastore.as_ref().and_then(Datastore::max_token)
            && t as usize >= vocab
        {
            return Err(DecodeError::BadToken { id: t, vocab });
        }
        if let Some(spec) = self.chains_onto("a datastore", datastore.is_some())? {
            spec.datastore = datastore.map(Arc::new);
            self.reset_learnt();
        }
        Ok(self)
    }

    /// The speculation a chain source (`what`, for errors) is set on: none without heads,
    /// where turning the source on (`on`) is an error, as it is on a static tree (chains
    /// graft onto dynamic trees only).
    fn chains_onto(&mut self, what: &str, on: bool) -> Result<Option<&mut Speculation>> {
        match self.speculation.as_mut() {
            None if on => Err(DecodeError::Tree(format!(
                "{what} needs heads and a dynamic tree"
            ))),
            Some(spec) if on && !matches!(spec.shape, TreeShape::Dynamic(_)) => {
                Err(DecodeError::Tree(format!(
                    "{what} grafts onto dynamic trees; this engine has a static one"
                )))
            }
            spec => Ok(spec),
        }
    }

    fn reset_learnt(&mut self) {
        self.estimates = Default::default();
        self.feedback = Default::default();
        self.lookup_stats = Default::default();
    }

    /// What the adaptive policy has learnt of this machine's steps (their times, τ, the
    /// back-off), which the next request starts from.
    pub fn policy_estimates(&self) -> Estimates {
        self.estimates.lock().map(|e| *e).unwrap_or_default()
    }

    /// Start the next request from `estimates`: e.g. a server restoring what an earlier
    /// process measured on this machine, or a test that needs a request to begin in
    /// back-off.
    pub fn set_policy_estimates(&self, estimates: Estimates) {
        if let Ok(mut e) = self.estimates.lock() {
            *e = estimates;
        }
    }

    /// Drop the heads: plain decoding from now on (the model is kept).
    pub fn without_heads(mut self) -> Self {
        self.speculation = None;
        self
    }

    pub fn speculation(&self) -> Option<&Speculation> {
        self.speculation.as_ref()
    }

    pub fn model(&self) -> &LlamaModel {
        &self.model
    }
    pub fn tokenizer(&self) -> Option<&Tokenizer> {
        self.tokenizer.as_ref()
    }
    /// Whether `token` ends generation (the model's end tokens).
    pub fn is_eos(&self, token: u32) -> bool {
        self.eos.contains(&token)
    }
    /// The most tokens (prompt + generated) a request can hold.
    pub fn context(&self) -> usize {
        self.context
    }

    fn tokenizer_or_err(&self) -> Result<&Tokenizer> {
        self.tokenizer.as_ref().ok_or_else(|| {
            DecodeError::Request("this engine has no tokenizer: pass token ids".into())
        })
    }

    /// Token ids of a prompt, after the chat template where asked.
    pub fn encode_prompt(&self, prompt: &Prompt) -> Result<Vec<u32>> {
        let ids = match prompt {
            Prompt::Ids(ids) => ids.clone(),
            Prompt::Text(text) => self.tokenizer_or_err()?.encode(text)?,
            Prompt::Chat(messages) => {
                let tok = self.tokenizer_or_err()?;
                tok.encode(&tok.apply_chat_template(messages, true)?)?
            }
        };
        if ids.is_empty() {
            return Err(DecodeError::EmptyPrompt);
        }
        let vocab = self.model.config().vocab_size;
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(DecodeError::BadToken { id, vocab });
        }
        if ids.len() >= self.context {
            return Err(DecodeError::PromptTooLong {
                prompt: ids.len(),
                context: self.context,
            });
        }
        Ok(ids)
    }

    /// Text of generated ids (special tokens dropped); empty without a tokenizer.
    pub fn decode_text(&self, ids: &[u32]) -> Result<String> {
        match &self.tokenizer {
            Some(t) => Ok(t.decode(ids, true)?),
            None => Ok(String::new()),
        }
    }

    /// Run a request to the end.
    pub fn generate(&self, request: &Request) -> Result<Output> {
        self.generate_with(request, |_| ControlFlow::Continue(()))
    }

    /// Run a request, calling `on_tokens` each time tokens are accepted; returning
    /// `ControlFlow::Break` from it stops generation.
    pub fn generate_with(
        &self,
        request: &Request,
        on_tokens: impl FnMut(Emitted<'_>) -> ControlFlow<()>,
    ) -> Result<Output> {
        match request.acceptance {
            Acceptance::Lossless => self.generate_with_rule(request, &Lossless, on_tokens),
            Acceptance::Typical { epsilon, delta } => {
                self.generate_with_rule(request, &Typical { epsilon, delta }, on_tokens)
            }
        }
    }

    /// Run a request with any acceptance rule for sampled proposals (`request.acceptance`
    /// is ignored). Tests use it to show that a wrong rule is caught.
    pub fn generate_with_rule(
        &self,
        request: &Request,
        rule: &dyn AcceptRule,
        on_tokens: impl FnMut(Emitted<'_>) -> ControlFlow<()>,
    ) -> Result<Output> {
        request.check()?;
        let prompt_ids = self.encode_prompt(&request.prompt)?;
        crate::driver::run(self, prompt_ids, request, rule, on_tokens)
    }

    pub(crate) fn device(&self) -> Device {
        self.model.device()
    }

    pub(crate) fn ids_tensor(&self, ids: &[u32]) -> Tensor<1, Int> {
        let v: Vec<i64> = ids.iter().map(|&x| x as i64).collect();
        Tensor::from_data(TensorData::new(v, [ids.len()]), &self.device())
    }

    pub(crate) fn positions(&self, start: usize, n: usize) -> Tensor<1, Int> {
        let v: Vec<i64> = (start..start + n).map(|x| x as i64).collect();
        Tensor::from_data(TensorData::new(v, [n]), &self.device())
    }
}
