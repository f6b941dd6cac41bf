//! Step 1 of calibration: what verifying n tree nodes and one pass of the heads cost on
//! this backend (see the parent module's docs).

use std::time::Instant;

use anyhow::{Context, Result};
use burn::tensor::{Int, Tensor, TensorData};
use toki_decode::dynamic::ContextCost;
use toki_decode::proposer::top_k;
use toki_decode::{DynamicTree, Engine, HeadProposer, Prompt, Proposer};
use toki_model::{AttnMask, RopeTables};

use super::{MAX_RANK, non_decreasing};

const MAX_NODES: usize = 64;
/// Tree sizes whose cost is measured (linear in between). Sizes past the first that costs
/// more than `MAX_COST` one-node passes are not measured: no tree that large can pay.
const SIZES: [usize; 12] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64];
const MAX_COST: f64 = 4.0;

/// Cache lengths the verification cost is measured over (those that fit the engine's
/// context): every tree node attends to the whole cache, so nodes cost more over a long
/// prompt. The first is the base curve; a dynamic tree interpolates between them.
const CONTEXTS: [usize; 3] = [128, 512, 2048];

/// What `costs` measured, in seconds.
pub struct Measured {
    /// One verification pass of n nodes over `CONTEXTS[0]` tokens, n = 1..=64 or fewer.
    pub cost_s: Vec<f64>,
    /// The same sizes over the longer caches that fit.
    pub longer_s: Vec<ContextCost>,
    /// One pass of the heads.
    pub heads_s: f64,
}

impl Measured {
    /// A dynamic tree of these costs.
    pub fn dynamic(&self, accuracy: Vec<Vec<f64>>) -> Result<DynamicTree> {
        let one = self.cost_s[0];
        let longer = self
            .longer_s
            .iter()
            .map(|l| ContextCost {
                context: l.context,
                cost: l.cost.iter().map(|c| c / one).collect(),
            })
            .collect();
        Ok(
            DynamicTree::new(self.cost_s.clone(), self.heads_s, MAX_RANK, accuracy)?
                .with_contexts(CONTEXTS[0], longer)?,
        )
    }
}

/// Text for the cost passes where there are no calibration prompts (see `calibrate.rs`).
const SAMPLE_TEXT: &str = "The river runs through the old town, past the market and the \
    library, and under three stone bridges. In spring the water rises and the fishermen \
    wait for the boats to come back in the evening. def count_words(text):\n    \
    return len(text.split())\n\nprint(count_words(\"one two three\"))";

/// [`costs`] without calibration prompts: over a short built-in text (arbitrary ids where
/// the engine has no tokenizer).
pub fn costs_on_sample(engine: &Engine, heads: &HeadProposer) -> Result<Measured> {
    let text = engine
        .encode_prompt(&Prompt::Text(SAMPLE_TEXT.into()))
        .unwrap_or_default();
    costs(engine, heads, &text)
}

/// Verification cost of 1..=64 nodes over caches of `CONTEXTS` tokens, and one heads pass.
/// The passes read `text` cycled (arbitrary ids where it is empty).
pub fn costs(engine: &Engine, heads: &HeadProposer, text: &[u32]) -> Result<Measured> {
    let model = engine.model();
    let device = model.device();
    let contexts: Vec<usize> = CONTEXTS
        .into_iter()
        .filter(|&c| c == CONTEXTS[0] || c + MAX_NODES <= engine.context())
        .collect();
    let longest = contexts.last().copied().unwrap_or(CONTEXTS[0]);
    let rope = RopeTables::new(model.config(), longest + MAX_NODES, &device);
    let vocab = model.config().vocab_size;
    let token = |i: usize| match text.len() {
        0 => ((i * 37 + 11) % vocab) as i64,
        len => i64::from(text[i % len]),
    };
    let ids = |n: usize, start: usize| {
        let v: Vec<i64> = (start..start + n).map(token).collect();
        let p: Vec<i64> = (start..start + n).map(|x| x as i64).collect();
        (
            Tensor::<1, Int>::from_data(TensorData::new(v, [n]), &device),
            Tensor::<1, Int>::from_data(TensorData::new(p, [n]), &device),
        )
    };
    let mut curves = vec![];
    let mut sizes: Option<Vec<usize>> = None;
    let mut last = None;
    for prefix in contexts {
        let mut cache = model.new_cache(prefix + MAX_NODES);
        let (t, p) = ids(prefix, 0);
        let hidden = model.forward(t, p, &AttnMask::Causal, &mut cache, &rope);
        last.get_or_insert_with(|| hidden.slice([prefix - 1..prefix]));
        let mut pass = |n: usize| -> Result<f64> {
            cache.truncate(prefix);
            let (t, p) = ids(n, prefix);
            let start = Instant::now();
            let h = model.forward(t, p, &AttnMask::Causal, &mut cache, &rope);
            toki_decode::greedy_tokens(model, h)?;
            Ok(start.elapsed().as_secs_f64())
        };
        // The lm_head's greedy pick chooses between two exact ways by timing its first
        // calls of each size (toki_model::kernels::PICK_TIMING_CALLS): those calls are
        // made first, unmeasured, so that the curve prices the way decoding will run.
        if sizes.is_none() && model.uses_host_kernels() {
            for n in [1, 2, 4, 8] {
                for _ in 0..toki_model::kernels::PICK_TIMING_CALLS {
                    pass(n)?;
                }
            }
        }
        let (s, cost) = curve(pass, sizes.as_deref())?;
        sizes = Some(s);
        curves.push((prefix, cost));
    }
    let mut curves = curves.into_iter();
    let (_, cost_s) = curves.next().context("no cost curve measured")?;
    let longer_s = curves
        .map(|(context, cost)| ContextCost { context, cost })
        .collect();
    // One proposal pass as decoding runs it: every head, read back, ranked; each after a
    // one-node pass of the base, as in decoding, where that pass has just streamed the
    // base's weights through the caches. (Timed back to back, the heads' weights stayed
    // cached and the pass measured a third of what it costs in decoding.)
    let last = last.context("no cost curve measured")?;
    let k = heads.num_heads();
    let prefix = CONTEXTS[0];
    let mut cache = model.new_cache(prefix + 1);
    let (t, p) = ids(prefix, 0);
    model.forward(t, p, &AttnMask::Causal, &mut cache, &rope);
    let mut heads_times = vec![];
    for round in 0..6 {
        cache.truncate(prefix);
        let (t, p) = ids(1, prefix);
        let h = model.forward(t, p, &AttnMask::Causal, &mut cache, &rope);
        toki_decode::greedy_tokens(model, h)?;
        let start = Instant::now();
        let (flat, cols) = heads.logits(last.clone(), &[11], model, k)?;
        for h in 0..k {
            top_k(&flat[h * cols..(h + 1) * cols], MAX_RANK.min(cols));
        }
        if round > 0 {
            heads_times.push(start.elapsed().as_secs_f64());
        }
    }
    heads_times.sort_by(|a, b| a.total_cmp(b));
    let heads_s = heads_times[heads_times.len() / 2];
    Ok(Measured {
        cost_s,
        longer_s,
        heads_s,
    })
}

/// One cost curve: seconds of `pass(n)` for n = 1..=largest size measured. Without
/// `sizes`, measured at `SIZES` until one costs more than `MAX_COST` one-node passes
/// (no larger tree can pay), and the sizes used are returned; with them, at those. Linear
/// in between.
fn curve(
    mut pass: impl FnMut(usize) -> Result<f64>,
    sizes: Option<&[usize]>,
) -> Result<(Vec<usize>, Vec<f64>)> {
    // A shared machine drifts: after a first pass, ROUNDS more passes over all the sizes,
    // and the median of each size's rounds. Each size is run once unmeasured first: a GPU
    // backend compiles (and may autotune) kernels for a new shape on its first pass, which
    // must not end the sweep as if that size cost that much.
    const ROUNDS: usize = 5;
    let mut used = vec![];
    let mut rounds: Vec<Vec<f64>> = vec![];
    for &n in sizes.unwrap_or(&SIZES) {
        if sizes.is_none()
            && rounds
                .last()
                .is_some_and(|r| r[0] > MAX_COST * rounds[0][0])
        {
            break;
        }
        pass(n)?; // warm-up
        used.push(n);
        rounds.push(vec![pass(n)?]);
    }
    for _ in 0..ROUNDS {
        for (i, &n) in used.iter().enumerate() {
            rounds[i].push(pass(n)?);
        }
    }
    let measured: Vec<f64> = rounds
        .into_iter()
        .map(|mut r| {
            r.sort_by(|a, b| a.total_cmp(b));
            r[r.len() / 2]
        })
        .collect();
    // Verifying more nodes never costs less: timing noise is smoothed out.
    let measured = non_decreasing(&measured.iter().map(|&s| (s, 1.0)).collect::<Vec<_>>());
    let largest = used.last().copied().unwrap_or(1);
    let cost = (1..=largest)
        .map(|n| {
            let i = used.iter().position(|&s| s >= n).unwrap_or(used.len() - 1);
            if used[i] == n || i == 0 {
                measured[i]
            } else {
                let (n0, n1) = (used[i - 1] as f64, used[i] as f64);
                let w = (n as f64 - n0) / (n1 - n0);
                measured[i - 1] * (1.0 - w) + measured[i] * w
            }
        })
        .collect();
    Ok((used, cost))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_first_pass_per_size_does_not_cut_the_cost_curve_short() {
        // A JIT backend: the first pass at each size compiles (100 units), later passes
        // cost 1 + n/64. Every size is measured, at its steady cost.
        let mut seen = std::collections::HashSet::new();
        let pass = |n: usize| -> Result<f64> {
            Ok(if seen.insert(n) {
                100.0
            } else {
                1.0 + n as f64 / 64.0
            })
        };
        let (used, cost) = curve(pass, None).expect("curve");
        assert_eq!(used, SIZES.to_vec());
        assert_eq!(cost.len(), 64);
        assert!((cost[0] - (1.0 + 1.0 / 64.0)).abs() < 1e-12, "{cost:?}");
        assert!((cost[63] - 2.0).abs() < 1e-12, "{cost:?}");
        // A steep curve still stops once a size costs more than MAX_COST one-node passes.
        let (used, _) = curve(|n| Ok(n as f64), None).expect("curve");
        assert_eq!(used.last(), Some(&6), "{used:?}");
    }
}
