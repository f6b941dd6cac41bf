//! The decoding loop. Plain decoding: prefill the prompt, then one base-model pass per token.

use std::borrow::Cow;
use std::ops::ControlFlow;
use std::time::Instant;

use burn::tensor::Tensor;
use toki_model::{AttnMask, KvCache, LlamaModel};

use crate::acceptance::AcceptRule;
use crate::adapt::StepKind;
use crate::dynamic::{Choice, Costs};
use crate::engine::{Emitted, Engine, Speculation, TreeShape};
use crate::error::{DecodeError, Result};
use crate::lookup::{Continuation, graft};
use crate::proposer::{StepInput, node_tokens, propose};
use crate::request::{FinishReason, Output, Request, Stats};
use crate::sampling::{Rng, Sampling, filtered_probs};
use crate::tree::{Tree, TreeBuffers};
use crate::verifier::{Verdict, verify_drawn, verify_greedy, verify_sampled};

mod draws;
mod learnt;
use draws::Draws;
use learnt::{Learnt, Ran, StepRecord};

/// The base's greedy token for every row of `hidden` [R, D], read back in one transfer. On
/// the CPU the host kernel's arg-max: the same choice, without the [R, vocab] logits.
pub fn greedy_tokens(model: &LlamaModel, hidden: Tensor<2>) -> Result<Vec<u32>> {
    if let Some(ids) = model.host_argmax(&hidden) {
        return Ok(ids);
    }
    let ids: Vec<i64> = model
        .logits(hidden) // [R, vocab]
        .argmax(1)
        .try_into_vec_as()
        .map_err(DecodeError::device)?;
    Ok(ids.into_iter().map(|x| x as u32).collect())
}

/// Next-token choice for every row of `hidden` [R, D]; sampled, row r's token is the one at
/// sequence position `position + r` ([`draws`]).
pub(crate) fn pick(
    model: &LlamaModel,
    hidden: Tensor<2>,
    sampling: &Sampling,
    position: usize,
) -> Result<Vec<u32>> {
    match sampling {
        Sampling::Greedy => greedy_tokens(model, hidden),
        Sampling::Sample(p) => {
            let rows = hidden.dims()[0];
            let draws = Draws::new(model, hidden, *p)?;
            (0..rows).map(|r| draws.token(r, position + r)).collect()
        }
    }
}

/// Tracks the generated tokens and decides when generation ends.
pub(crate) struct Progress<'a> {
    engine: &'a Engine,
    request: &'a Request,
    pub tokens: Vec<u32>,
    pub accept_lengths: Vec<usize>,
    text_cut: Option<String>,
    /// The output tokens the context leaves after the prompt: prompt + output never
    /// exceed it.
    context_room: usize,
}

impl<'a> Progress<'a> {
    pub fn new(engine: &'a Engine, request: &'a Request, prompt_len: usize) -> Self {
        let context_room = engine.context.saturating_sub(prompt_len);
        Self {
            engine,
            request,
            // A request can ask for more tokens than fit the context: it ends there.
            tokens: Vec::with_capacity(request.max_new_tokens.min(context_room)),
            accept_lengths: vec![],
            text_cut: None,
            context_room,
        }
    }

    /// Add the tokens one step produced (cut at the first end token, the token budget or
    /// the end of the context), report them, and say whether generation is finished.
    /// `is_step`: the tokens came from a decoding step (counted in `accept_lengths`), not
    /// from the prefill.
    pub fn push(
        &mut self,
        step: &[u32],
        is_step: bool,
        on_tokens: &mut impl FnMut(Emitted<'_>) -> ControlFlow<()>,
    ) -> Result<Option<FinishReason>> {
        let start = self.tokens.len();
        let budget = self.request.max_new_tokens.min(self.context_room);
        let mut finish = None;
        for &t in step.iter().take(budget.saturating_sub(start)) {
            self.tokens.push(t);
            if self.engine.eos.contains(&t) || self.request.stop_tokens.contains(&t) {
                finish = Some(FinishReason::Eos);
                break;
            }
        }
        if finish.is_none() && self.tokens.len() >= self.request.max_new_tokens {
            finish = Some(FinishReason::MaxTokens);
        } else if finish.is_none() && self.tokens.len() >= self.context_room {
            finish = Some(FinishReason::ContextFull);
        }
        if self.cut_at_stop_string(start)? {
            finish = Some(FinishReason::StopString);
        }
        if is_step {
            self.accept_lengths.push(self.tokens.len() - start);
        }
        let emitted = Emitted {
            new_tokens: &self.tokens[start..],
            all_tokens: &self.tokens,
        };
        if on_tokens(emitted).is_break() && finish.is_none() {
            finish = Some(FinishReason::Cancelled);
        }
        Ok(finish)
    }

    /// Where the text first contains a stop string, ends the tokens at the one that
    /// completed it (a step that accepted several tokens may have gone past it; plain
    /// decoding stops there, so speculative decoding must too) and keeps the text before
    /// the stop string. Only the tokens from `start` (this step's) can complete one:
    /// earlier steps were checked. Whether one was found.
    fn cut_at_stop_string(&mut self, start: usize) -> Result<bool> {
        let stops = &self.request.stop_strings;
        let first = |text: &str| stops.iter().filter_map(|s| text.find(s.as_str())).min();
        if stops.is_empty() || first(&self.engine.decode_text(&self.tokens)?).is_none() {
            return Ok(false);
        }
        for end in start + 1..=self.tokens.len() {
            let text = self.engine.decode_text(&self.tokens[..end])?;
            if let Some(at) = first(&text) {
                self.tokens.truncate(end);
                self.text_cut = Some(text[..at].to_string());
                return Ok(true);
            }
        }
        // Only the whole decodes to a stop string (a tokenizer whose text is not a sum of
        // its tokens'): keep every token.
        let text = self.engine.decode_text(&self.tokens)?;
        let at = first(&text).unwrap_or(text.len());
        self.text_cut = Some(text[..at].to_string());
        Ok(true)
    }

    pub fn finish(
        self,
        prompt_ids: Vec<u32>,
        reason: FinishReason,
        mut stats: Stats,
    ) -> Result<Output> {
        let text = match self.text_cut {
            Some(t) => t,
            None => self.engine.decode_text(&self.tokens)?,
        };
        let n = self.tokens.len();
        stats.tokens_per_s = if stats.decode_ms > 0.0 {
            n as f64 / (stats.decode_ms / 1e3)
        } else {
            0.0
        };
        let steps = self.accept_lengths.len();
        stats.mean_accepted = if steps == 0 {
            0.0
        } else {
            self.accept_lengths.iter().sum::<usize>() as f64 / steps as f64
        };
        stats.accept_lengths = self.accept_lengths;
        Ok(Output {
            prompt_ids,
            output_ids: self.tokens,
            text,
            finish_reason: reason,
            stats,
        })
    }
}

/// Verify one step: greedy (accept what the base's arg-max agrees with) or sampled, from
/// the tree's hidden states [N, D]. The root sits at sequence position `root_position`; the
/// token after node i at `root_position + depth + 1`. A rule that follows the draw
/// (lossless) walks the tree on the tokens plain sampling would draw there; another
/// (typical) walks it on the base's filtered distributions.
fn verify(
    model: &LlamaModel,
    hidden: Tensor<2>,
    buffers: &TreeBuffers,
    tokens: &[u32],
    sampling: &Sampling,
    rule: &dyn AcceptRule,
    root_position: usize,
) -> Result<Verdict> {
    let position = |i: usize| root_position + buffers.depths[i] + 1;
    match sampling {
        Sampling::Greedy => Ok(verify_greedy(
            buffers,
            tokens,
            &greedy_tokens(model, hidden)?,
        )),
        Sampling::Sample(p) if rule.follows_the_draw() => {
            let draws = Draws::new(model, hidden, *p)?;
            verify_drawn(buffers, tokens, |i| draws.token(i, position(i)))
        }
        Sampling::Sample(p) => {
            let logits = model.logits(hidden); // [N, vocab]
            let [_, vocab] = logits.dims();
            let flat: Vec<f32> = logits.try_into_vec_as().map_err(DecodeError::device)?;
            let dist = |i: usize| filtered_probs(&flat[i * vocab..(i + 1) * vocab], p);
            let draws = |i: usize| Rng::for_position(p.seed, position(i));
            Ok(verify_sampled(buffers, tokens, dist, rule, draws))
        }
    }
}

/// What a dynamic tree chose for a step, for what the request learns after it.
struct Chosen {
    choice: Choice,
    costs: Costs,
    /// Per node: the heads' choice (not a node only a chain added).
    from_heads: Vec<bool>,
    /// The chains grafted on (prompt lookup's, the datastore's) and, per token of each
    /// that the tree holds, whether it took a node of its own.
    chains: Vec<(Continuation, Vec<bool>)>,
}

/// Who proposes a step's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drafters {
    /// The heads (a static tree's nodes, or a dynamic tree's) and, on a dynamic tree, the
    /// chains of prompt lookup and the datastore: a speculative step.
    HeadsAndChains,
    /// The chains alone, without the heads' pass: a plain step of the adaptive policy's
    /// that verifies what was found for free ([`crate::adapt::Policy::chains_next`]).
    Chains,
}

/// A step's node tokens and tree: the static tree filled by the heads, or a tree sized
/// from their confidence with the chains of prompt lookup and the datastore grafted on
/// (with [`Drafters::Chains`], onto the root alone; the root alone when nothing is worth
/// verifying), with what a dynamic tree chose.
fn draft<'e>(
    engine: &'e Engine,
    s: &'e Speculation,
    drafters: Drafters,
    input: StepInput<'_>,
    root: u32,
    learnt: &Learnt,
) -> Result<(Vec<u32>, Cow<'e, TreeBuffers>, Option<Chosen>)> {
    let (feedback, lookup_stats) = (&learnt.feedback, &learnt.lookup_stats);
    let heads = s.heads.as_ref();
    let d = match (&s.shape, drafters) {
        (TreeShape::Dynamic(d), _) => d,
        (TreeShape::Static { tree, buffers }, Drafters::HeadsAndChains) => {
            return Ok((propose(heads, input, tree)?, Cow::Borrowed(buffers), None));
        }
        // Static trees take no chains.
        (TreeShape::Static { .. }, Drafters::Chains) => return Ok(root_step(engine, root, None)),
    };
    let mut found: Vec<Continuation> = s
        .lookup
        .and_then(|l| l.find(input.history))
        .into_iter()
        .collect();
    if let Some(ds) = &s.datastore {
        found.extend(ds.find(&s.lookup.unwrap_or_default(), input.history));
    }
    if drafters == Drafters::Chains && found.is_empty() {
        return Ok(root_step(engine, root, None));
    }
    // Every node attends to the whole cache: prompt and tokens so far.
    let costs = d.costs_at(input.history.len());
    let (mut ranked, choice) = match drafters {
        Drafters::HeadsAndChains => {
            // Once the heads that ran decide the tree (no deeper node could pay:
            // `DynamicTree::settled`), the deeper heads are not run.
            let max_ranks = vec![d.max_rank; heads.num_heads()];
            let ranked = heads.rank_until(input, &max_ranks, &mut |r| {
                d.settled(r, feedback, &costs, heads.conditioning())
            })?;
            let choice = d.choose_for(&ranked, feedback, &costs, heads.conditioning());
            (ranked, choice)
        }
        Drafters::Chains => (vec![], Choice::root()),
    };
    let mut paths = choice.paths.clone();
    // The chain likelier to be right first: it takes the nodes first.
    let first_rate = |c: &Continuation| lookup_stats.rate(c, 0, true);
    found.sort_by(|a, b| first_rate(b).total_cmp(&first_rate(a)));
    let chains = found
        .into_iter()
        .map(|c| {
            // Chain token j is worth a node when the chance it is reached, times one
            // token, covers λ times the cost the node adds.
            let max_nodes = costs.cost.len();
            let worth = |j: usize, nodes: usize, fresh: &[bool]| {
                let before: f64 = (fresh.iter().enumerate())
                    .map(|(i, &own)| lookup_stats.rate(&c, i, own))
                    .product();
                let reach = before * lookup_stats.rate(&c, j, true);
                nodes < max_nodes
                    && reach >= feedback.lambda * (costs.cost[nodes] - costs.cost[nodes - 1])
            };
            let fresh = graft(&mut ranked, &mut paths, &c.tokens, worth);
            (c, fresh)
        })
        .collect();
    if paths.is_empty() {
        let chosen = Chosen {
            choice,
            costs,
            from_heads: vec![true],
            chains,
        };
        return Ok(root_step(engine, root, Some(chosen)));
    }
    let depth = ranked.len();
    let widest = ranked.iter().map(Vec::len).max().unwrap_or(0);
    let tree = Tree::from_paths(&paths, depth, widest)?;
    let from_heads = (0..tree.len())
        .map(|i| i == 0 || choice.paths.iter().any(|p| p.as_slice() == tree.path(i)))
        .collect();
    let tokens = node_tokens(root, &ranked, &tree)?;
    let buffers = Cow::Owned(tree.buffers(&engine.device()));
    let chosen = Chosen {
        choice,
        costs,
        from_heads,
        chains,
    };
    Ok((tokens, buffers, Some(chosen)))
}

/// A step that verifies the root alone (a plain step), with what a dynamic tree chose.
fn root_step(
    engine: &Engine,
    root: u32,
    chosen: Option<Chosen>,
) -> (Vec<u32>, Cow<'_, TreeBuffers>, Option<Chosen>) {
    (vec![root], Cow::Borrowed(&engine.root_buffers), chosen)
}

/// The first head's guesses for the token after the root (one head's pass, no tree), as
/// many as [`TreeShape::shadow`] says. `None` where the head ranks nothing.
fn first_guesses(s: &Speculation, input: StepInput<'_>) -> Result<Option<Vec<u32>>> {
    let (width, _) = s.shape.shadow();
    let ranked = s.heads.rank_until(input, &[width], &mut |_| true)?;
    Ok(ranked
        .first()
        .map(|r| r.iter().take(width).map(|&(t, _)| t).collect::<Vec<_>>())
        .filter(|guesses| !guesses.is_empty()))
}

/// One base pass over a step's nodes [N] on top of `cache`: the root alone under the
/// causal mask, a tree under its own, each node at the position its depth gives.
/// Returns the nodes' hidden states [N, D].
fn forward_nodes(
    engine: &Engine,
    tokens: &[u32],
    buffers: &TreeBuffers,
    cache: &mut KvCache,
) -> Tensor<2> {
    let prefix = cache.len();
    let mask = match tokens.len() {
        1 => AttnMask::Causal,
        _ => AttnMask::Tree(buffers.mask.clone()),
    };
    let positions: Vec<u32> = buffers
        .depths
        .iter()
        .map(|&d| (prefix + d) as u32)
        .collect();
    engine.model.forward(
        engine.ids_tensor(tokens),
        engine.ids_tensor(&positions),
        &mask,
        cache,
        &engine.rope,
    )
}

/// One loop for plain and speculative decoding. Each step: the heads fill the tree from the
/// last accepted hidden state, with the base's own next token at the root (on dynamic trees
/// prompt lookup grafts its chain onto it, [`crate::lookup`]); one base pass
/// verifies every node; the path the verifier accepts is kept (cache compacted to it) and
/// the base's token after it is emitted too. Without heads the tree is the root alone,
/// which is plain decoding.
pub(crate) fn run(
    engine: &Engine,
    prompt_ids: Vec<u32>,
    request: &Request,
    rule: &dyn AcceptRule,
    mut on_tokens: impl FnMut(Emitted<'_>) -> ControlFlow<()>,
) -> Result<Output> {
    let model = &engine.model;
    let n = prompt_ids.len();
    let mut progress = Progress::new(engine, request, n);
    let mut stats = Stats::default();
    if request.max_new_tokens == 0 {
        return progress.finish(prompt_ids, FinishReason::MaxTokens, stats);
    }
    // A tree of the root alone (a path list `[]`, a calibration that found nothing worth
    // verifying) verifies nothing beside the root: plain decoding, without the heads.
    let spec = engine
        .speculation
        .as_ref()
        .filter(|s| s.shape.max_nodes() > 1);
    let tree_len = spec.map_or(1, |s| s.shape.max_nodes());
    let capacity = n
        .saturating_add(request.max_new_tokens)
        .saturating_add(tree_len)
        .min(engine.context);
    let mut cache = model.new_cache(capacity);
    let mut accepted_per_head = vec![0usize; spec.map_or(0, |s| s.shape.depth(s.heads.as_ref()))];

    // Prefill: the prompt in one pass; its last hidden state gives the first token.
    let t0 = Instant::now();
    let hidden = model.forward(
        engine.ids_tensor(&prompt_ids),
        engine.positions(0, n),
        &AttnMask::Causal,
        &mut cache,
        &engine.rope,
    );
    let mut last_hidden = hidden.slice([n - 1..n]); // [1, D]
    let mut root = pick(model, last_hidden.clone(), &request.sampling, n)?[0];
    stats.prefill_ms = t0.elapsed().as_secs_f64() * 1e3;

    let t1 = Instant::now();
    let mut history = prompt_ids.clone();
    let mut reason = progress.push(&[root], false, &mut on_tokens)?;
    let mut learnt = Learnt::from_engine(engine, request, n);
    while reason.is_none() {
        // The output ends at the context's end first (`Progress::push`); this keeps a step
        // from ever writing past the cache.
        if cache.len() + 1 > capacity {
            reason = Some(FinishReason::ContextFull);
            break;
        }
        let step_start = Instant::now();
        // 1. Propose: the policy may choose a plain step; near the end of the context a
        //    full tree may not fit: the root alone then.
        let fits = |s: &Speculation| cache.len() + s.shape.max_nodes() <= capacity;
        let step_spec = spec.filter(|s| learnt.policy.next() == StepKind::Speculative && fits(s));
        // Append only what the last steps added (prompt + generated so far).
        history.extend_from_slice(&progress.tokens[history.len() - n..]);
        let input = |hidden| StepInput {
            base: model,
            hidden,
            history: &history,
        };
        // A plain step near a back-off's end: the first head's guess in its shadow.
        let shadow = match spec {
            Some(s) if step_spec.is_none() && learnt.policy.shadow_next() => {
                first_guesses(s, input(last_hidden.clone()))?
            }
            _ => None,
        };
        // A plain step of a back-off still verifies the chains found for free, where worth it.
        let drafting = match (step_spec, spec) {
            (Some(s), _) => Some((s, Drafters::HeadsAndChains)),
            (None, Some(s)) if learnt.policy.chains_next() && fits(s) => {
                Some((s, Drafters::Chains))
            }
            _ => None,
        };
        let (tokens, buffers, choice) = match drafting {
            Some((s, drafters)) => draft(engine, s, drafters, input(last_hidden), root, &learnt)?,
            None => root_step(engine, root, None),
        };
        let drafted = step_start.elapsed();
        // 2. Verify every node in one base pass; keep the accepted path's cache rows.
        let root_position = cache.len();
        let hidden = forward_nodes(engine, &tokens, &buffers, &mut cache); // [N, D]
        let forwarded = step_start.elapsed();
        let verdict = verify(
            model,
            hidden.clone(),
            &buffers,
            &tokens,
            &request.sampling,
            rule,
            root_position,
        )?;
        let verified = step_start.elapsed();
        cache.compact(tokens.len(), &verdict.accepted);
        // 3. Emit the accepted tokens and the base's own token after them (the next root).
        let last = *verdict.accepted.last().unwrap_or(&0);
        last_hidden = hidden.slice([last..last + 1]);
        root = verdict.bonus;
        let mut emitted: Vec<u32> = verdict.accepted[1..].iter().map(|&i| tokens[i]).collect();
        emitted.push(root);
        // 4. Learn: what the tree yielded, and the step's time for the policy.
        let kind = match step_spec {
            Some(_) => Ran::Speculative,
            None if tokens.len() > 1 => Ran::Chains,
            None => Ran::Plain,
        };
        let step = StepRecord {
            kind,
            nodes: tokens.len(),
            choice: choice.as_ref(),
            verdict: &verdict,
            emitted: &emitted,
            shadow,
            times: [drafted, forwarded, verified, step_start.elapsed()],
        };
        learnt.record(&mut stats, &mut accepted_per_head, step);
        reason = progress.push(&emitted, true, &mut on_tokens)?;
    }
    stats.decode_ms = t1.elapsed().as_secs_f64() * 1e3;
    learnt.hand_back(engine, request, &stats);
    stats.head_acceptance = accepted_per_head
        .iter()
        .map(|&a| a as f64 / stats.speculative_steps.max(1) as f64)
        .collect();
    progress.finish(prompt_ids, reason.unwrap_or(FinishReason::MaxTokens), stats)
}
