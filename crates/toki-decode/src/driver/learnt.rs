//! What a request learns while it decodes, and hands back to the engine for the next one:
//! the adaptive policy's estimates, the dynamic tree's feedback and prompt lookup's hit
//! rates; and each step's record (its counts and its debug line).

use std::time::Duration;

use super::Chosen;
use crate::adapt::{Policy, StepKind, TreePolicy};
use crate::dynamic::Feedback;
use crate::engine::Engine;
use crate::lookup::{Continuation, LookupStats};
use crate::request::{Request, Stats};
use crate::verifier::Verdict;

/// Which kind of step ran: the policy's two ([`StepKind`]), or a step it chose plain that
/// verified chain nodes (prompt lookup's, the datastore's: found without a model pass)
/// beside its root ([`crate::adapt::Policy::chains_next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ran {
    Plain,
    Chains,
    Speculative,
}

/// What one step did, for [`Learnt::record`].
pub(super) struct StepRecord<'a> {
    pub(super) kind: Ran,
    pub(super) nodes: usize,
    pub(super) choice: Option<&'a Chosen>,
    pub(super) verdict: &'a Verdict,
    pub(super) emitted: &'a [u32],
    /// The first head's guesses made in a plain step's shadow.
    pub(super) shadow: Option<Vec<u32>>,
    /// From the step's start: drafted, forwarded, verified, done.
    pub(super) times: [Duration; 4],
}

/// What a request starts from and hands back to the engine for the next one: the
/// adaptive policy's estimates, the dynamic tree's feedback and prompt lookup's hit rates.
pub(super) struct Learnt {
    pub(super) policy: Policy,
    pub(super) feedback: Feedback,
    pub(super) lookup_stats: LookupStats,
}

impl Learnt {
    /// What earlier requests learnt (the dynamic tree's feedback weighed down).
    pub(super) fn from_engine(engine: &Engine, request: &Request, prompt_tokens: usize) -> Self {
        let prior = engine.policy_estimates();
        tracing::debug!(prompt_tokens, ?prior, "request starts");
        let mut policy = Policy::with_prior(request.tree_policy, prior);
        if let Some((_, Some(depth))) = engine.speculation.as_ref().map(|s| s.shape.shadow()) {
            policy = policy.with_shadow_bound(depth);
        }
        Self {
            policy,
            feedback: engine
                .feedback
                .lock()
                .map(|f| f.carried())
                .unwrap_or_default(),
            lookup_stats: engine
                .lookup_stats
                .lock()
                .map(|l| l.clone())
                .unwrap_or_default(),
        }
    }

    /// A step of a dynamic tree over `nodes` nodes: what they yielded. Returns the accepted
    /// tokens that came from lookup nodes. The dynamic tree learns from speculative steps
    /// only (a [`Ran::Chains`] step ran no heads), the chains' rates from both.
    fn observe(
        &mut self,
        kind: Ran,
        c: &Chosen,
        nodes: usize,
        verdict: &Verdict,
        emitted: &[u32],
    ) -> usize {
        // The heads' estimates are scored on the heads' own nodes.
        let by_heads = verdict
            .accepted
            .iter()
            .filter(|&&i| c.from_heads[i])
            .count();
        if kind == Ran::Speculative {
            self.feedback
                .observe(&c.costs, nodes, &c.choice, emitted.len(), by_heads);
        }
        for (chain, fresh) in &c.chains {
            self.lookup_stats.observe(chain, fresh, emitted);
        }
        verdict.accepted.len() - by_heads
    }

    /// One step's record: the request's counts, the step's log line, and what the policy
    /// and the dynamic tree learn from it.
    pub(super) fn record(
        &mut self,
        stats: &mut Stats,
        accepted_per_head: &mut [usize],
        step: StepRecord,
    ) {
        let StepRecord {
            kind,
            nodes,
            choice,
            verdict,
            emitted,
            shadow,
            times: [drafted, forwarded, verified, done],
        } = step;
        let depth = verdict.accepted.len() - 1;
        accepted_per_head
            .iter_mut()
            .take(depth)
            .for_each(|a| *a += 1);
        stats.steps += 1;
        stats.verified_nodes += nodes;
        if kind != Ran::Plain {
            stats.speculative_steps += 1;
            stats.chain_steps += usize::from(kind == Ran::Chains);
            if let Some(c) = choice {
                stats.lookup_tokens += self.observe(kind, c, nodes, verdict, emitted);
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        tracing::debug!(
            step = stats.steps,
            ?kind,
            nodes,
            chains = ?choice.map(|c| {
                let held = |(c, fresh): &(Continuation, Vec<bool>)| (c.source, c.matched, fresh.len());
                c.chains.iter().map(held).collect::<Vec<_>>()
            }),
            emitted = emitted.len(),
            ms = ms(done),
            draft_ms = ms(drafted),
            forward_ms = ms(forwarded - drafted),
            verify_ms = ms(verified - forwarded),
            "decode step"
        );
        // The base's token after the root (a chains step may have accepted more).
        if let (Some(guesses), Some(next)) = (&shadow, emitted.first()) {
            self.policy.observe_shadow(guesses.contains(next));
        }
        // The policy times plain decoding without the shadow's pass.
        let shadow_time = shadow.map_or(Duration::ZERO, |_| drafted);
        let seconds = (done - shadow_time).as_secs_f64();
        match kind {
            Ran::Plain => self.policy.observe(StepKind::Plain, seconds, emitted.len()),
            Ran::Chains => self.policy.observe_chains(),
            Ran::Speculative => self
                .policy
                .observe(StepKind::Speculative, seconds, emitted.len()),
        }
    }

    pub(super) fn hand_back(self, engine: &Engine, request: &Request, stats: &Stats) {
        if request.tree_policy == TreePolicy::Adaptive {
            engine.set_policy_estimates(self.policy.estimates());
        }
        if stats.speculative_steps > 0
            && let Ok(mut f) = engine.feedback.lock()
        {
            *f = self.feedback;
            if let Ok(mut l) = engine.lookup_stats.lock() {
                *l = self.lookup_stats;
            }
        }
    }
}
