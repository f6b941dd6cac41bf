//! Which exact arg-max a wide Q8 matrix (the lm_head) runs, chosen by timing both on this
//! machine while decoding.
//!
//! Both ways pick the same token bit for bit: the full product, and the two stages of
//! `blocks/argmax.rs`. Which is faster depends on the machine, not on the model: on a 2-core
//! AMD EPYC (Zen 4) the two stages took half the time of the full product; on a 2-core
//! Intel Xeon VM with AVX-512 VNNI the full product was about 6% faster per decoded token
//! (`benches/results/2026-12-05-cpu-pick-by-timing/`). So neither is hard-wired: the first
//! calls of each size alternate between them, each timed, and from then on the one with the
//! lower median serves that size. Where one way is clearly faster (after [`EARLY`] calls of
//! each, every call of it at least [`CLEAR`] times faster than every call of the other:
//! 1.1 against 2.0 ms on the AMD EPYC) it is chosen then, so that a short run does not pay
//! the slower way's remaining trials. Which is faster also depends on the rows: the two
//! stages gain where the model is sure (few candidates), as it mostly is on its own
//! answers, and lose on flat rows (prompt text, a tree's wrong guesses). So a choice is
//! timed again every [`RECHECK`] calls of its size: a choice made on one kind of rows (a
//! calibration's passes) does not serve decoding for good.
//!
//! ```text
//! calls of one size:  2 F 2 F 2 F 2 F 2 F 2 F 2 F 2 F 2 F | the faster, RECHECK calls | again
//!                     (2 = two stages, F = full product; TRIALS of each)
//! a clear case:       2 F 2 F 2 F 2 F | the faster, RECHECK calls | again
//! ```

use std::sync::Mutex;
use std::time::Instant;

/// Timed calls of each way before one is chosen for a size.
const TRIALS: usize = 9;
/// Timed calls of each way after which a clearly faster one is chosen (four, so that a
/// way's first slow calls, on a cold cache, cannot decide alone).
const EARLY: usize = 4;
/// How many times faster every call of one way must be than every call of the other for
/// it to be chosen after [`EARLY`] calls.
const CLEAR: f64 = 1.25;
/// Calls of one size by which its way is chosen (see [`super::PICK_TIMING_CALLS`]).
pub(crate) const CALLS: usize = 2 * TRIALS;
/// Sizes (activation rows) timed apart: 1, 2, 3-4, 5 and more.
const SIZES: usize = 4;
/// Calls of one size after which its chosen way is timed again: the rows a pick sees can
/// change (a calibration's passes over text, then decoding's steps, whose rows are surer
/// and leave the two stages fewer candidates), and a choice made on the first must not
/// serve the second for good. A re-timing costs at most `TRIALS` calls of the slower way.
const RECHECK: usize = 512;

/// One way of picking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    TwoStage,
    Full,
}

/// The timings so far, per size.
#[derive(Debug, Default)]
pub(crate) struct PickTimer {
    sizes: Mutex<[Trial; SIZES]>,
}

#[derive(Debug, Default, Clone)]
struct Trial {
    two_stage: Vec<f64>,
    full: Vec<f64>,
    chosen: Option<Way>,
    /// Calls since the way was chosen.
    since: usize,
}

impl Trial {
    /// Count a call of this size: [`RECHECK`] calls after a choice, timing starts over.
    fn tick(&mut self) {
        if self.chosen.is_some() {
            self.since += 1;
            if self.since > RECHECK {
                *self = Trial::default();
            }
        }
    }

    fn next(&self) -> Way {
        match self.chosen {
            Some(way) => way,
            None if self.two_stage.len() <= self.full.len() => Way::TwoStage,
            None => Way::Full,
        }
    }

    /// Record one call; once both ways have `TRIALS` calls, the lower median wins (a
    /// clearly faster one after `EARLY`).
    fn record(&mut self, way: Way, seconds: f64) -> Option<(Way, f64, f64)> {
        if self.chosen.is_some() {
            return None;
        }
        match way {
            Way::TwoStage => self.two_stage.push(seconds),
            Way::Full => self.full.push(seconds),
        }
        let calls = self.two_stage.len().min(self.full.len());
        // Every call of `fast` at least CLEAR times faster than every call of `slow`.
        let clear = |fast: &[f64], slow: &[f64]| {
            let worst = fast.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let best = slow.iter().copied().fold(f64::INFINITY, f64::min);
            worst * CLEAR <= best
        };
        let early = match calls {
            n if n >= TRIALS => None,
            n if n >= EARLY && clear(&self.two_stage, &self.full) => Some(Way::TwoStage),
            n if n >= EARLY && clear(&self.full, &self.two_stage) => Some(Way::Full),
            _ => return None,
        };
        let (two, full) = (median(&mut self.two_stage), median(&mut self.full));
        let way = match early {
            Some(way) => way,
            None if two <= full => Way::TwoStage,
            None => Way::Full,
        };
        self.chosen = Some(way);
        Some((way, two, full))
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn size_index(m: usize) -> usize {
    match m {
        0 | 1 => 0,
        2 => 1,
        3 | 4 => 2,
        _ => 3,
    }
}

impl PickTimer {
    /// Pick for `m` activation rows with `pick`, the way this size uses now; while the
    /// size is being timed (its first calls, and again every [`RECHECK`] calls), the call
    /// is timed and recorded.
    pub(crate) fn run<T>(&self, m: usize, pick: impl FnOnce(Way) -> T) -> T {
        let (way, timing) = match self.sizes.lock() {
            Ok(mut sizes) => {
                let trial = &mut sizes[size_index(m)];
                trial.tick();
                (trial.next(), trial.chosen.is_none())
            }
            // A panic elsewhere while timing: the two stages, as before any timing.
            Err(_) => (Way::TwoStage, false),
        };
        if !timing {
            return pick(way);
        }
        let start = Instant::now();
        let out = pick(way);
        let seconds = start.elapsed().as_secs_f64();
        if let Ok(mut sizes) = self.sizes.lock()
            && let Some((way, two, full)) = sizes[size_index(m)].record(way, seconds)
        {
            tracing::debug!(
                rows = m,
                ?way,
                two_stage_ms = two * 1e3,
                full_ms = full * 1e3,
                "lm_head arg-max chosen by timing"
            );
        }
        out
    }

    /// The way the next call for `m` rows takes.
    #[cfg(test)]
    fn next(&self, m: usize) -> Way {
        self.sizes.lock().unwrap()[size_index(m)].next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(timer: &PickTimer, m: usize, two: f64, full: f64, calls: usize) -> Vec<Way> {
        (0..calls)
            .map(|_| {
                let way = timer.next(m);
                let t = if way == Way::TwoStage { two } else { full };
                let mut sizes = timer.sizes.lock().unwrap();
                sizes[size_index(m)].record(way, t);
                way
            })
            .collect()
    }

    #[test]
    fn alternates_then_keeps_the_faster_way() {
        // Within CLEAR of each other: every trial is run.
        let timer = PickTimer::default();
        let ways = run(&timer, 1, 2.0, 1.7, 2 * TRIALS + 10);
        let trials = &ways[..2 * TRIALS];
        assert_eq!(
            trials.iter().filter(|&&w| w == Way::TwoStage).count(),
            TRIALS
        );
        assert!(trials.chunks(2).all(|p| p == [Way::TwoStage, Way::Full]));
        assert!(ways[2 * TRIALS..].iter().all(|&w| w == Way::Full));
        // Another size is timed on its own, and may choose the other way.
        let ways = run(&timer, 4, 1.0, 1.1, 2 * TRIALS + 5);
        assert!(ways[2 * TRIALS..].iter().all(|&w| w == Way::TwoStage));
        assert_eq!(timer.next(1), Way::Full);
        assert_eq!(timer.next(3), Way::TwoStage, "3 and 4 rows share a size");
    }

    #[test]
    fn a_clearly_faster_way_is_chosen_after_a_few_calls() {
        let timer = PickTimer::default();
        let ways = run(&timer, 1, 1.1, 2.0, 2 * EARLY + 10);
        assert!(
            ways[..2 * EARLY]
                .chunks(2)
                .all(|p| p == [Way::TwoStage, Way::Full])
        );
        assert!(ways[2 * EARLY..].iter().all(|&w| w == Way::TwoStage));
        let ways = run(&timer, 2, 2.6, 1.0, 2 * EARLY + 10);
        assert!(ways[2 * EARLY..].iter().all(|&w| w == Way::Full));
        // Overlapping calls (one fast call of the slower way) are not clear: every trial.
        let timer = PickTimer::default();
        for i in 0..EARLY {
            let mut sizes = timer.sizes.lock().unwrap();
            sizes[0].record(Way::TwoStage, 1.0);
            sizes[0].record(Way::Full, if i == 2 { 1.1 } else { 2.0 });
        }
        assert!(timer.sizes.lock().unwrap()[0].chosen.is_none());
    }

    #[test]
    fn a_chosen_way_is_timed_again_after_recheck_calls() {
        let timer = PickTimer::default();
        run(&timer, 1, 2.0, 1.0, 2 * EARLY);
        assert_eq!(timer.next(1), Way::Full);
        for _ in 0..RECHECK {
            timer.run(1, |_| ());
        }
        assert_eq!(timer.next(1), Way::Full, "kept for RECHECK calls");
        // The next call starts the timing over (and is itself timed, as the two stages).
        assert_eq!(timer.run(1, |way| way), Way::TwoStage);
        assert!(timer.sizes.lock().unwrap()[0].chosen.is_none());
        // The rows changed: the two stages are now the faster way, and are chosen.
        let ways = run(&timer, 1, 1.0, 2.0, 2 * EARLY + 3);
        assert_eq!(ways.last(), Some(&Way::TwoStage));
        // Other sizes keep their own count.
        assert!(timer.sizes.lock().unwrap()[1].chosen.is_none());
    }

    #[test]
    fn a_few_slow_outliers_do_not_decide() {
        // The two stages are faster but their first calls are slow (a cold cache): the
        // medians still choose them.
        let timer = PickTimer::default();
        for i in 0..TRIALS {
            let mut sizes = timer.sizes.lock().unwrap();
            let slow = if i < 3 { 50.0 } else { 1.0 };
            sizes[0].record(Way::TwoStage, slow);
            sizes[0].record(Way::Full, 1.2);
        }
        assert_eq!(timer.next(1), Way::TwoStage);
    }

    #[test]
    fn run_returns_what_the_pick_returns_and_times_only_while_choosing() {
        let timer = PickTimer::default();
        assert_eq!(timer.run(2, |way| (way, 7)), (Way::TwoStage, 7));
        assert_eq!(timer.run(2, |way| (way, 8)), (Way::Full, 8));
        assert_eq!(timer.sizes.lock().unwrap()[1].full.len(), 1);
        for _ in 0..CALLS {
            timer.run(2, |_| ());
        }
        let timed = |t: &PickTimer| {
            let s = t.sizes.lock().unwrap();
            s[1].two_stage.len() + s[1].full.len()
        };
        // Chosen after CALLS at the latest (earlier where one way was clearly faster).
        assert!(timer.sizes.lock().unwrap()[1].chosen.is_some());
        let after = timed(&timer);
        assert!((2 * EARLY..=CALLS).contains(&after), "{after}");
        for _ in 0..5 {
            timer.run(2, |_| ());
        }
        assert_eq!(timed(&timer), after, "no timing once chosen");
    }
}
