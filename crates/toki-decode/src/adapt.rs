//! Never slower than plain decoding: an online policy that decides, step by step, whether
//! to speculate with the full tree or to decode plainly.
//!
//! It measures what it decides on, on this hardware and this request: the wall time of a
//! plain step `t_p`, of a speculative step `t_s`, and the tokens a speculative step yields
//! `τ` (moving averages, τ's over a longer window: see `TAU_WINDOW`). Speculation pays when
//! `τ / t_s > 1 / t_p`; the tree stays only where the estimates say it pays by a margin
//! (`MARGIN`), as they come from a few noisy steps. When it does not, the policy decodes
//! plainly for a back-off period
//! (doubling while speculation keeps failing, up to a cap), then probes the tree again;
//! when it pays, the back-off resets. Each probe decides on the acceptance it measures
//! itself (τ starts afresh), so a request whose text the heads cannot guess backs off after
//! one probe even when the requests before it paid. The last plain steps of a back-off
//! check the first head's guesses in their shadow (its pass only, no tree): when every one
//! misses, the probe is skipped and the back-off doubles. Where every path of the tree
//! starts at a guess the shadow checks (static trees: the first head's top ranks), the
//! hits bound what a probe can yield: at most the tree's depth after each hit, so when
//! `1 + depth · hits / checks` tokens a step would not pay at the measured step times, the
//! probe is skipped too (a 7-node tree costing 2.9 plain steps needs 3 hits of 4 at
//! depth 3). A back-off's plain steps still verify the chains that prompt lookup (or the
//! datastore) finds without a model pass, node by node where a node's chance covers its
//! cost (`Policy::chains_next`; the dynamic tree prices them as in its own steps): a
//! summary copies its source where the heads guess little of it. Those steps count the
//! back-off down but are not timed as plain steps. Greedy and lossless outputs do not
//! depend on the choice: every kind of step emits the base's tokens.

/// When a request with heads verifies a tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TreePolicy {
    /// The policy below (default): the tree where it pays, plain steps where it does not.
    #[default]
    Adaptive,
    /// The full tree every step (`--no-adapt`; tests of the raw tree).
    Always,
    /// Plain decoding even though heads are loaded (the baseline in `toki bench`).
    Never,
}

/// Which kind of step to run next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    Plain,
    Speculative,
}

/// What the policy learned, carried from one request to the next by the engine, so that
/// a request does not pay the timing steps and the probe again (short answers would).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Estimates {
    pub plain_s: Option<f64>,
    pub spec_s: Option<f64>,
    pub tau: Option<f64>,
    /// The back-off the last request ended with.
    pub backoff: usize,
    /// Plain steps that were left before its next probe: the count-down goes on in the
    /// next request, so a run of short requests still probes (once per back-off period)
    /// instead of restarting the whole back-off each time.
    pub plain_left: usize,
}

#[derive(Debug, Clone)]
pub struct Policy {
    policy: TreePolicy,
    /// Moving averages (None until observed).
    plain_s: Option<f64>,
    spec_s: Option<f64>,
    tau: Option<f64>,
    /// Speculative steps behind `tau` since it started afresh (its weight: see `TAU_WINDOW`).
    tau_steps: usize,
    /// Plain steps left before the next probe.
    plain_left: usize,
    backoff: usize,
    /// Speculative steps left in the current probe.
    probe_left: usize,
    /// Shadow checks before the next probe, and how many the heads' guess passed.
    shadows: usize,
    shadow_hits: usize,
    /// The tree's depth where every accepted path starts at a guess the shadow checks
    /// (see [`Policy::with_shadow_bound`]); `None`: paths may start elsewhere.
    shadow_depth: Option<usize>,
}

/// Weight of the newest step time in the times' moving averages.
const ALPHA: f64 = 0.25;
/// τ is the mean of a probe's steps until it holds this many, then a moving average over
/// about as many: a step's yield varies far more than its time (1 token on half of the
/// steps of an answer whose mean is 1.6), so a few unlucky steps must not send an answer
/// that pays into back-off, while the first probe still decides on its own 4 steps.
const TAU_WINDOW: usize = 16;
/// The expected speed-up a probe must show for the tree to stay: the estimates come from
/// a few noisy steps, and a tree that only breaks even loses whenever they are optimistic.
const MARGIN: f64 = 1.05;
const FIRST_BACKOFF: usize = 8;
/// Plain steps at the end of a back-off that check the first head's top guess against the
/// base's token, at the cost of the first head's pass and no tree: when every one misses,
/// the probe is skipped (a probe of such text costs several steps; four misses of a head
/// right 60% of the time happen 2.6% of the time).
const SHADOW: usize = 4;
const MAX_BACKOFF: usize = 128;
const PROBE: usize = 4;
/// Plain steps run first to time one (the first decode step also warms caches).
const PLAIN_WARMUP: usize = 2;

/// A moving average giving `x` the weight `w` (the first value as it is).
fn ema(old: Option<f64>, x: f64, w: f64) -> Option<f64> {
    Some(old.map_or(x, |o| (1.0 - w) * o + w * x))
}

impl Policy {
    /// A policy for one request, starting from what earlier requests measured: when they
    /// found that speculation does not pay (or the last one ended as a probe began) it
    /// starts in back-off, ending in shadow checks of its own text; when it pays it starts
    /// on the tree (a probe that measures this request's own τ); with nothing known it times
    /// two plain steps first. Step timings carry over, τ does not: it depends on the text.
    pub fn with_prior(policy: TreePolicy, prior: Estimates) -> Self {
        let mut p = Self::new(policy);
        if policy != TreePolicy::Adaptive {
            return p;
        }
        (p.plain_s, p.spec_s, p.tau) = (prior.plain_s, prior.spec_s, prior.tau);
        match (p.plain_s, p.spec_s, p.ratio()) {
            // Both kinds of step timed, and the tree paid: a probe first.
            (_, _, Some(r)) if r >= MARGIN => p.plain_left = 0,
            // It did not pay, or its τ is unknown (the last request ended as a probe
            // began): the back-off's count-down goes on, and its last steps check this
            // request's own text in the heads' shadow before a probe (the last request's
            // checks were of other text): at least SHADOW of them.
            (Some(_), Some(_), _) => {
                p.backoff = prior.backoff.clamp(FIRST_BACKOFF, MAX_BACKOFF);
                p.plain_left = prior.plain_left.min(p.backoff).max(SHADOW);
            }
            // Not both timed yet: the timing steps first, as in a first request.
            _ => {}
        }
        p.tau = None;
        p
    }

    pub fn estimates(&self) -> Estimates {
        Estimates {
            plain_s: self.plain_s,
            spec_s: self.spec_s,
            tau: self.tau,
            backoff: self.backoff,
            plain_left: self.plain_left,
        }
    }

    pub fn new(policy: TreePolicy) -> Self {
        Self {
            policy,
            plain_s: None,
            spec_s: None,
            tau: None,
            tau_steps: 0,
            plain_left: if policy == TreePolicy::Adaptive {
                PLAIN_WARMUP
            } else {
                0
            },
            backoff: FIRST_BACKOFF,
            probe_left: PROBE,
            shadows: 0,
            shadow_hits: 0,
            shadow_depth: None,
        }
    }

    /// The shadow checks every first token a tree of `depth` can accept (a static tree's
    /// depth-1 nodes are the first head's top ranks, and the shadow checks those ranks):
    /// its hits then bound a probe's yield. Not for trees with lookup chains, whose first
    /// token can be any.
    pub fn with_shadow_bound(mut self, depth: usize) -> Self {
        self.shadow_depth = Some(depth);
        self
    }

    /// Whether the shadow checks before a probe say it cannot pay: no guess was right, or
    /// (with a bound) even `depth` tokens after every right guess would not beat plain
    /// steps by [`MARGIN`] at the measured step times.
    fn probe_ruled_out(&self) -> bool {
        if self.shadows < SHADOW {
            return false;
        }
        if self.shadow_hits == 0 {
            return true;
        }
        match (self.shadow_depth, self.plain_s, self.spec_s) {
            (Some(depth), Some(p), Some(s)) if s > 0.0 => {
                let hit_rate = self.shadow_hits as f64 / self.shadows as f64;
                let best_tau = 1.0 + depth as f64 * hit_rate;
                best_tau * p / s < MARGIN
            }
            _ => false,
        }
    }

    pub fn next(&self) -> StepKind {
        match self.policy {
            TreePolicy::Never => StepKind::Plain,
            TreePolicy::Always => StepKind::Speculative,
            TreePolicy::Adaptive if self.plain_left == 0 => StepKind::Speculative,
            TreePolicy::Adaptive => StepKind::Plain,
        }
    }

    /// Whether the next (plain) step should check the heads' first guess in its shadow:
    /// one of the last `SHADOW` plain steps of a back-off (not the first timing steps).
    pub fn shadow_next(&self) -> bool {
        self.policy == TreePolicy::Adaptive
            && self.spec_s.is_some()
            && (1..=SHADOW).contains(&self.plain_left)
    }

    /// Whether the next step, plain by the policy, may verify chain nodes beside its root:
    /// in a back-off (after a probe; not the first steps, which time plain steps), where
    /// the heads do not run but a chain costs nothing to find, and each of its nodes is
    /// verified only where its chance covers its cost. A summary copies its source while
    /// the heads guess little of it: its back-off still takes what lookup finds.
    pub fn chains_next(&self) -> bool {
        self.policy == TreePolicy::Adaptive && self.spec_s.is_some() && self.plain_left > 0
    }

    /// Whether the first head's top guess, made before a plain step, was the base's token.
    pub fn observe_shadow(&mut self, hit: bool) {
        self.shadows += 1;
        self.shadow_hits += usize::from(hit);
    }

    /// Speculation's expected speed relative to plain decoding, once both were timed.
    pub fn ratio(&self) -> Option<f64> {
        match (self.plain_s, self.spec_s, self.tau) {
            (Some(p), Some(s), Some(t)) if s > 0.0 => Some(t * p / s),
            _ => None,
        }
    }

    /// Record a plain step that verified chain nodes beside its root
    /// ([`Policy::chains_next`]): one step of the back-off, not timed as a plain step.
    pub fn observe_chains(&mut self) {
        if self.next() == StepKind::Plain {
            self.count_down();
        }
    }

    /// One plain step of a back-off (or of the first timing steps) has run.
    fn count_down(&mut self) {
        self.plain_left = self.plain_left.saturating_sub(1);
        if self.plain_left == 0 {
            if self.probe_ruled_out() {
                // The heads' first guesses missed too often: this text is not theirs
                // now. No probe; a longer back-off.
                self.plain_left = self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            } else {
                // A probe starts: it judges the tree on what it measures now.
                self.probe_left = PROBE;
                self.tau = None;
                self.tau_steps = 0;
            }
            (self.shadows, self.shadow_hits) = (0, 0);
        }
    }

    /// Record a finished step: its kind, wall time and tokens emitted.
    pub fn observe(&mut self, kind: StepKind, seconds: f64, tokens: usize) {
        match kind {
            StepKind::Plain => {
                self.plain_s = ema(self.plain_s, seconds, ALPHA);
                self.count_down();
            }
            StepKind::Speculative => {
                self.spec_s = ema(self.spec_s, seconds, ALPHA);
                self.tau_steps += 1;
                let w = 1.0 / self.tau_steps.min(TAU_WINDOW) as f64;
                self.tau = ema(self.tau, tokens as f64, w);
                self.probe_left = self.probe_left.saturating_sub(1);
                if self.policy != TreePolicy::Adaptive || self.probe_left > 0 {
                    return;
                }
                match self.ratio() {
                    Some(r) if r < MARGIN => {
                        self.plain_left = self.backoff;
                        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    }
                    _ => {
                        self.backoff = FIRST_BACKOFF;
                        self.probe_left = PROBE;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drive(policy: &mut Policy, steps: usize, plain_s: f64, spec_s: f64, tau: usize) -> usize {
        let mut spec = 0;
        for _ in 0..steps {
            match policy.next() {
                StepKind::Plain => policy.observe(StepKind::Plain, plain_s, 1),
                StepKind::Speculative => {
                    spec += 1;
                    policy.observe(StepKind::Speculative, spec_s, tau)
                }
            }
        }
        spec
    }

    #[test]
    fn keeps_speculating_when_it_pays() {
        let mut p = Policy::new(TreePolicy::Adaptive);
        let spec = drive(&mut p, 100, 1.0, 1.5, 3);
        assert_eq!(spec, 100 - PLAIN_WARMUP);
        assert!(p.ratio().unwrap() > 1.9);
    }

    #[test]
    fn a_few_unlucky_steps_do_not_end_speculation_that_pays() {
        // Tree steps yield 2, 3, 2, 3 tokens, then 1 four times in a row (mean 1.75), at
        // 1.5x a plain step's time: speculation pays 1.17x. A moving average over the last
        // few steps dips below 1.5 after each run of ones and would back off.
        let yields = [2, 3, 2, 3, 1, 1, 1, 1];
        let mut p = Policy::new(TreePolicy::Adaptive);
        let mut spec = 0;
        for _ in 0..200 {
            match p.next() {
                StepKind::Plain => p.observe(StepKind::Plain, 1.0, 1),
                StepKind::Speculative => {
                    p.observe(StepKind::Speculative, 1.5, yields[spec % yields.len()]);
                    spec += 1;
                }
            }
        }
        assert_eq!(spec, 200 - PLAIN_WARMUP, "it backed off");
    }

    #[test]
    fn a_probe_is_skipped_when_the_first_heads_guesses_all_miss() {
        // Into back-off: the tree does not pay.
        let mut p = Policy::new(TreePolicy::Adaptive);
        drive(&mut p, PLAIN_WARMUP + PROBE, 1.0, 2.0, 1);
        assert_eq!(p.next(), StepKind::Plain);
        // The back-off's plain steps, the last SHADOW of them in the heads' shadow.
        let plain_steps = |p: &mut Policy, hit: bool| {
            let mut shadowed = 0;
            while p.next() == StepKind::Plain {
                if p.shadow_next() {
                    shadowed += 1;
                    p.observe_shadow(hit);
                }
                p.observe(StepKind::Plain, 1.0, 1);
                if shadowed == SHADOW {
                    break;
                }
            }
            shadowed
        };
        assert_eq!(plain_steps(&mut p, false), SHADOW);
        // Every guess missed: no probe, a back-off twice as long, shadowed again at its end.
        assert_eq!(p.next(), StepKind::Plain);
        assert_eq!(p.estimates().plain_left, 2 * FIRST_BACKOFF);
        assert_eq!(plain_steps(&mut p, false), SHADOW);
        assert_eq!(p.estimates().plain_left, 4 * FIRST_BACKOFF);
        // One guess of four right: the probe runs.
        let mut hits = [false, true, false, false].into_iter();
        while p.next() == StepKind::Plain {
            if p.shadow_next() {
                p.observe_shadow(hits.next().unwrap_or(false));
            }
            p.observe(StepKind::Plain, 1.0, 1);
        }
        assert_eq!(p.next(), StepKind::Speculative);
        // Without shadow checks (no heads' guesses), probes run as before; and the first
        // request's timing steps are never shadowed.
        assert!(!Policy::new(TreePolicy::Adaptive).shadow_next());
    }

    #[test]
    fn chain_steps_run_in_a_back_off_and_count_it_down_untimed() {
        // Neither the first timing steps nor other policies verify chains.
        let mut p = Policy::new(TreePolicy::Adaptive);
        assert!(!p.chains_next());
        assert!(!Policy::new(TreePolicy::Never).chains_next());
        assert!(!Policy::new(TreePolicy::Always).chains_next());
        // Into back-off: the tree does not pay.
        drive(&mut p, PLAIN_WARMUP + PROBE, 1.0, 2.0, 1);
        assert_eq!(p.next(), StepKind::Plain);
        assert!(p.chains_next());
        let before = p.estimates();
        // A chain step counts down the back-off; its time (several nodes) is not a plain
        // step's, so the plain time stays.
        p.observe_chains();
        let after = p.estimates();
        assert_eq!(after.plain_left, before.plain_left - 1);
        assert_eq!(after.plain_s, before.plain_s);
        // Chain steps to the back-off's end: then the probe (no shadow checks ran).
        while p.next() == StepKind::Plain {
            assert!(p.chains_next());
            p.observe_chains();
        }
        assert!(!p.chains_next());
        assert_eq!(p.estimates().plain_s, before.plain_s);
    }

    /// The rest of a back-off, its shadow checks answered by `hits` in turn: returns
    /// after the last shadowed step.
    fn finish_back_off(p: &mut Policy, hits: &[bool]) {
        let mut hits = hits.iter().copied();
        let mut shadowed = 0;
        while p.next() == StepKind::Plain && shadowed < SHADOW {
            if p.shadow_next() {
                shadowed += 1;
                p.observe_shadow(hits.next().unwrap_or(false));
            }
            p.observe(StepKind::Plain, 1.0, 1);
        }
        assert_eq!(
            shadowed, SHADOW,
            "the back-off ended without its shadow checks"
        );
    }

    #[test]
    fn a_static_trees_probe_runs_only_when_the_shadow_hits_could_pay_for_it() {
        // A tree 3 deep at 2.9 plain steps' time, into back-off after its first probe.
        let backing_off = |bound: bool| {
            let mut p = Policy::new(TreePolicy::Adaptive);
            if bound {
                p = p.with_shadow_bound(3);
            }
            drive(&mut p, PLAIN_WARMUP + PROBE, 1.0, 2.9, 1);
            assert_eq!(p.next(), StepKind::Plain);
            p
        };
        // 2 hits of 4: at most 1 + 3 · 0.5 = 2.5 tokens a step, 0.86x plain: no probe, a
        // longer back-off.
        let mut p = backing_off(true);
        finish_back_off(&mut p, &[true, false, true, false]);
        assert_eq!(p.next(), StepKind::Plain);
        assert_eq!(p.estimates().plain_left, 2 * FIRST_BACKOFF);
        // 3 hits of 4: up to 3.25 tokens, 1.12x: the probe runs.
        let mut p = backing_off(true);
        finish_back_off(&mut p, &[true, true, false, true]);
        assert_eq!(p.next(), StepKind::Speculative);
        // Without the bound (trees whose paths may start off the checked guesses), one
        // hit is enough.
        let mut p = backing_off(false);
        finish_back_off(&mut p, &[false, true, false, false]);
        assert_eq!(p.next(), StepKind::Speculative);
        // A cheap tree: 1 hit of 4 bounds τ by 1.75, against 1.2 plain steps' time.
        let mut p = Policy::new(TreePolicy::Adaptive).with_shadow_bound(3);
        drive(&mut p, PLAIN_WARMUP + PROBE, 1.0, 1.2, 1);
        finish_back_off(&mut p, &[false, false, true, false]);
        assert_eq!(p.next(), StepKind::Speculative);
    }

    #[test]
    fn a_request_in_back_off_checks_its_own_text_before_probing() {
        // The last request's count-down ran out as it ended: this request still checks
        // its own first steps in the shadow, and skips a probe they rule out.
        let prior = Estimates {
            plain_s: Some(1.0),
            spec_s: Some(2.9),
            tau: Some(1.0),
            backoff: 32,
            plain_left: 0,
        };
        let mut p = Policy::with_prior(TreePolicy::Adaptive, prior).with_shadow_bound(3);
        assert_eq!(p.next(), StepKind::Plain);
        assert!(p.shadow_next());
        finish_back_off(&mut p, &[false, true, false, false]);
        assert_eq!(p.next(), StepKind::Plain, "1 hit of 4 cannot pay at 2.9x");
        assert_eq!(p.estimates().plain_left, 32);
    }

    #[test]
    fn a_request_after_one_that_ended_as_its_probe_began_checks_before_probing() {
        // Both kinds of step timed, τ unknown: no timing steps, the shadow checks first.
        let prior = Estimates {
            plain_s: Some(1.0),
            spec_s: Some(2.9),
            tau: None,
            backoff: 16,
            plain_left: 0,
        };
        let mut p = Policy::with_prior(TreePolicy::Adaptive, prior).with_shadow_bound(3);
        finish_back_off(&mut p, &[false, false, false, false]);
        assert_eq!(p.next(), StepKind::Plain);
        assert_eq!(p.estimates().plain_left, 16);
    }

    #[test]
    fn a_tree_that_only_breaks_even_is_not_kept() {
        // 3 tokens a step at 2.9 plain steps' time: 1.03x by the estimates, under the
        // margin; at 2.7, 1.11x, kept.
        let mut p = Policy::new(TreePolicy::Adaptive);
        let spec = drive(&mut p, 100, 1.0, 2.9, 3);
        assert!(spec <= 4 * 4, "{spec} speculative steps");
        let mut p = Policy::new(TreePolicy::Adaptive);
        assert_eq!(drive(&mut p, 100, 1.0, 2.7, 3), 100 - PLAIN_WARMUP);
    }

    #[test]
    fn backs_off_when_it_does_not_and_probes_less_often() {
        let mut p = Policy::new(TreePolicy::Adaptive);
        let spec = drive(&mut p, 400, 1.0, 2.0, 1);
        // Probes of 4 steps between back-offs of 8, 16, 32, 64, 128, 128: few spec steps.
        assert!(spec <= 4 * 6, "{spec} speculative steps");
    }

    #[test]
    fn comes_back_when_speculation_starts_paying() {
        let mut p = Policy::new(TreePolicy::Adaptive);
        drive(&mut p, 40, 1.0, 2.0, 1); // backing off
        let spec = drive(&mut p, 400, 1.0, 1.2, 4); // now it pays: after the next probe, always
        assert!(spec > 250, "{spec}");
    }

    #[test]
    fn a_request_starts_from_what_earlier_ones_measured() {
        let mut first = Policy::new(TreePolicy::Adaptive);
        drive(&mut first, 60, 1.0, 2.0, 1); // speculation does not pay
        let prior = first.estimates();
        assert!(prior.plain_left > 0, "60 steps end in a back-off period");
        let mut next = Policy::with_prior(TreePolicy::Adaptive, prior);
        assert_eq!(
            drive(&mut next, prior.plain_left, 1.0, 2.0, 1),
            0,
            "starts in back-off, where the last request left it"
        );
        assert_eq!(drive(&mut next, PROBE, 1.0, 2.0, 1), PROBE, "then probes");
        let mut good = Policy::new(TreePolicy::Adaptive);
        drive(&mut good, 20, 1.0, 1.2, 3);
        let mut next = Policy::with_prior(TreePolicy::Adaptive, good.estimates());
        assert_eq!(
            drive(&mut next, 8, 1.0, 1.2, 3),
            8,
            "starts on the tree, no timing steps"
        );
        // Nothing known: the two timing steps first.
        let mut fresh = Policy::with_prior(TreePolicy::Adaptive, Estimates::default());
        assert_eq!(drive(&mut fresh, 8, 1.0, 1.2, 3), 8 - PLAIN_WARMUP);
    }

    #[test]
    fn a_request_the_heads_cannot_guess_backs_off_after_one_probe() {
        // Earlier requests paid (τ 3); this one accepts nothing: one probe, then plain.
        let mut good = Policy::new(TreePolicy::Adaptive);
        drive(&mut good, 40, 1.0, 1.1, 3);
        let mut next = Policy::with_prior(TreePolicy::Adaptive, good.estimates());
        assert_eq!(drive(&mut next, 4 + FIRST_BACKOFF, 1.0, 1.1, 1), PROBE);
        // After the back-off a fresh probe measures τ again, and keeps the tree once the
        // text turns predictable.
        assert_eq!(drive(&mut next, 40, 1.0, 1.1, 3), 40);
    }

    #[test]
    fn short_requests_still_probe_once_per_back_off() {
        // Speculation does not pay, then it does: requests of 20 steps, each starting
        // from the last one's estimates, must find out within one back-off period.
        let mut est = Estimates::default();
        for _ in 0..20 {
            let mut p = Policy::with_prior(TreePolicy::Adaptive, est);
            drive(&mut p, 20, 1.0, 2.0, 1);
            est = p.estimates();
        }
        assert!(est.backoff >= MAX_BACKOFF / 2, "{est:?}");
        let mut spec = 0;
        for _ in 0..(MAX_BACKOFF / 20 + 2) {
            let mut p = Policy::with_prior(TreePolicy::Adaptive, est);
            spec += drive(&mut p, 20, 1.0, 1.2, 4);
            est = p.estimates();
        }
        assert!(spec >= 20, "{spec}: the tree never came back");
    }

    #[test]
    fn always_and_never_do_not_adapt() {
        let mut p = Policy::new(TreePolicy::Always);
        assert_eq!(drive(&mut p, 50, 1.0, 5.0, 1), 50);
        let mut p = Policy::new(TreePolicy::Never);
        assert_eq!(drive(&mut p, 50, 1.0, 0.1, 9), 0);
    }
}
