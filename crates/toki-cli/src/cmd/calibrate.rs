//! `toki calibrate`: choose the candidate tree for this hardware.
//!
//! 1. Cost: time one verification pass of n tree nodes (n = 1..64, over a 128-token cache,
//!    and again over 512- and 2,048-token caches; forward, logits and the host read-back),
//!    and one pass of the heads, on the backend. The passes read one of the base's own
//!    answers to the calibration prompts (step 2's longest, cycled): on arbitrary token
//!    ids, and less so on the prompts' text, the logits come out flatter than decoding's,
//!    the lm_head's exact two-stage pick (`kernels/blocks/argmax.rs`) keeps more
//!    candidates, and both the curve and the pick's choice of way (timed on these passes'
//!    first calls) would follow rows that decoding does not see.
//! 2. Acceptance (measured first): on calibration prompts, the base's own greedy
//!    continuations are known; for head k and rank r, a(k, r) = how often head k's rank-r
//!    token is the token k+2 ahead.
//! 3. Static tree: Medusa's greedy construction, adding at each size the path with the
//!    highest expected acceptance Π a(k, r_k); the expected tokens per step of the n-node
//!    tree are 1 + Σ over its nodes. The size chosen maximises expected tokens per
//!    *second*: E[tokens](n) / (cost(n) + heads), with n = 1 meaning plain decoding.
//! 4. Dynamic tree (`toki_decode::dynamic`, the default way the file is used): the cost
//!    curve, and each head's accuracy against its own confidence, counted where the heads
//!    before it were right (the chance a node is accepted given its parent path is), in
//!    ten bins, smoothed towards the confidence itself and made non-decreasing.

use std::path::PathBuf;

use anyhow::{Result, bail};
use serde::Serialize;
use toki_decode::dynamic::{ContextCost, greedy_tree};
use toki_decode::{DynamicTree, Engine, HeadProposer, Prompt, Proposer, Request, Tree, TreePolicy};
use toki_model::RopeTables;

// The cost curve and the heads' pass, timed on this backend.
mod costs;
pub use costs::{Measured, costs, costs_on_sample};

pub const MAX_RANK: usize = 10;
/// Confidence bins of the dynamic tree's calibration.
const BINS: usize = 10;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: super::bench::ModelAndHeads,
    /// Calibration prompts (the `toki bench` JSONL format).
    #[arg(long)]
    prompts: PathBuf,
    /// Where to write the tree (paths plus the measurements behind them). Written as
    /// HEADS_DIR/tree-<backend>.json (tree-cpu.json), it is what `generate` and `bench`
    /// use on that backend when `--tree` is left out.
    #[arg(long)]
    out: PathBuf,
    /// How many prompts to calibrate on (at most).
    #[arg(long, default_value_t = 8, value_parser = super::at_least_one())]
    limit: usize,
    /// Which prompts: spread evenly over the file, and so over its categories (what
    /// `toki bench --tree auto` calibrates on), or the file's first ones.
    #[arg(long, value_enum, default_value_t = Take::Spread)]
    take: Take,
    /// Tokens each calibration prompt decodes (the heads' acceptance is measured on them).
    #[arg(long, default_value_t = 64, value_parser = super::at_least_one())]
    max_new_tokens: usize,
}

/// What calibration measured and chose.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub paths: Vec<Vec<usize>>,
    /// Seconds of one verification pass of n nodes over a 128-token cache, n = 1..=64 (or
    /// fewer: see `MAX_COST`).
    pub cost_s: Vec<f64>,
    /// The same over longer caches.
    pub longer_cost_s: Vec<ContextCost>,
    pub heads_s: f64,
    /// a(k, r): head k's rank-r token is right.
    pub acceptance: Vec<Vec<f64>>,
    /// Per head, its confidence (softmax probability of its top token) against how often
    /// that token is right where the heads before it were right, in ten bins of
    /// confidence: [bin start, positions, right].
    pub confidence: Vec<Vec<(f64, usize, f64)>>,
    /// What a dynamic tree needs: the cost curve and the smoothed accuracies.
    pub dynamic: DynamicTree,
    /// Expected tokens per step and per second of the greedy tree of each size.
    pub expected_tokens: Vec<f64>,
    pub expected_speedup: Vec<f64>,
    #[serde(skip)]
    pub tree: Tree,
}

/// Which prompts of a file calibration runs on.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Every ⌈n / limit⌉-th prompt from the first.
    Spread,
    /// The first `limit` prompts.
    First,
}

/// Up to `limit` (at least 1) of `all`, as `take` says. A prompt file is usually grouped
/// by category, so only a spread covers all of them.
pub fn pick<T>(all: &[T], limit: usize, take: Take) -> Vec<&T> {
    let limit = limit.max(1);
    match take {
        Take::Spread => all
            .iter()
            .step_by(all.len().div_ceil(limit).max(1))
            .collect(),
        Take::First => all.iter().take(limit).collect(),
    }
}

pub fn run(a: Args) -> Result<()> {
    super::check_out_file(&a.out, "--out")?;
    let all = super::bench::read_prompts(&a.prompts)?;
    let prompts: Vec<Prompt> = pick(&all, a.limit, a.take)
        .into_iter()
        .map(super::bench::to_prompt)
        .collect();
    let (engine, heads, _) = a.target.load()?;
    let c = auto_tree(&engine, &heads, &prompts, a.max_new_tokens)?;
    let text = serde_json::to_string_pretty(&c)?;
    super::write_file(&a.out, text)?;
    eprintln!("{}; written to {}", c.summary(), a.out.display());
    Ok(())
}

impl Calibration {
    /// One line: the static tree chosen, the cost curve's start, the heads' top-1 accuracy.
    pub fn summary(&self) -> String {
        let n = self.paths.len() + 1;
        let ratio = |i: usize| self.cost_s.get(i).map_or(f64::NAN, |c| c / self.cost_s[0]);
        let ceiling = self.dynamic.ceiling(self.acceptance.len());
        format!(
            "static tree of {n} node(s), expected {:.2} tokens/step, {:.2}x plain; verify cost 2/4/8 nodes {:.2}/{:.2}/{:.2}x one{}, heads {:.2}x; head top-1 acceptance {}; with every proposal right at most {:.2}x plain (a chain of {} node(s))",
            self.expected_tokens[n - 1],
            self.expected_speedup[n - 1],
            ratio(1),
            ratio(3),
            ratio(7),
            self.longer_cost_s
                .iter()
                .map(|l| {
                    let r = |i: usize| l.cost.get(i).map_or(f64::NAN, |c| c / l.cost[0]);
                    format!(
                        " ({:.2}/{:.2}/{:.2} over {} tokens)",
                        r(1),
                        r(3),
                        r(7),
                        l.context
                    )
                })
                .collect::<String>(),
            self.heads_s / self.cost_s[0],
            self.acceptance
                .iter()
                .map(|r| format!("{:.2}", r.first().copied().unwrap_or(0.0)))
                .collect::<Vec<_>>()
                .join(" "),
            ceiling.0,
            ceiling.1,
        )
    }
}

/// Measure and choose (see the module docs).
pub fn auto_tree(
    engine: &Engine,
    heads: &HeadProposer,
    prompts: &[Prompt],
    max_new: usize,
) -> Result<Calibration> {
    if prompts.is_empty() {
        bail!("calibration needs at least one prompt");
    }
    let Observed {
        acceptance,
        bins,
        answer,
    } = head_acceptance(engine, heads, prompts, max_new)?;
    // The cost passes read the base's longest answer, cycled: from its second copy on the
    // model repeats it, so the timed rows are sure, as decoding's mostly are. On the
    // prompts' text (the passes before this) the rows were flatter, the lm_head's two
    // stages kept more candidates and were timed slower than the full product, which
    // decoding then ran (2026-12-07); a long prompt before the answer put the timed rows
    // in the prompt again (Spec-Bench's). The prompts where nothing was answered.
    let text = match answer {
        text if !text.is_empty() => text,
        _ => prompts
            .iter()
            .map(|p| engine.encode_prompt(p))
            .collect::<std::result::Result<Vec<_>, _>>()?
            .concat(),
    };
    let measured = costs(engine, heads, &text)?;
    let dynamic = measured.dynamic(bins.iter().map(|b| smoothed_accuracy(b)).collect())?;
    let Measured {
        cost_s,
        longer_s,
        heads_s,
    } = measured;
    let max_nodes = cost_s.len();
    let (order, expected_tokens) = greedy_tree(&acceptance, max_nodes, heads.conditioning());
    let expected_speedup: Vec<f64> = (0..max_nodes)
        .map(|i| {
            let step = cost_s[i] + if i == 0 { 0.0 } else { heads_s };
            expected_tokens[i] / step * cost_s[0]
        })
        .collect();
    let confidence = bins
        .iter()
        .map(|b| {
            b.iter()
                .enumerate()
                .map(|(i, &(n, right))| (i as f64 / BINS as f64, n, right as f64 / n.max(1) as f64))
                .collect()
        })
        .collect();
    let best = (0..max_nodes)
        .max_by(|&x, &y| expected_speedup[x].total_cmp(&expected_speedup[y]))
        .unwrap_or(0);
    let paths: Vec<Vec<usize>> = order[..best].to_vec();
    let tree = if paths.is_empty() {
        Tree::root_only()
    } else {
        Tree::from_paths(&paths, heads.num_heads(), MAX_RANK)?
    };
    Ok(Calibration {
        paths,
        cost_s,
        longer_cost_s: longer_s,
        heads_s,
        acceptance,
        confidence,
        dynamic,
        expected_tokens,
        expected_speedup,
        tree,
    })
}

/// A head's accuracy per confidence bin from (positions, right) counts: each bin pulled
/// towards its own mid-point confidence by 5 pseudo-positions (sparse bins say little),
/// then made non-decreasing (pool adjacent violators): surer heads are not less right.
pub fn smoothed_accuracy(bins: &[(usize, usize)]) -> Vec<f64> {
    const PRIOR: f64 = 5.0;
    let raw: Vec<(f64, f64)> = bins
        .iter()
        .enumerate()
        .map(|(i, &(n, right))| {
            let mid = (i as f64 + 0.5) / bins.len() as f64;
            (
                (right as f64 + PRIOR * mid) / (n as f64 + PRIOR),
                n as f64 + PRIOR,
            )
        })
        .collect();
    non_decreasing(&raw)
}

/// The weighted least-squares non-decreasing fit of (value, weight) pairs (pool adjacent
/// violators).
pub fn non_decreasing(values: &[(f64, f64)]) -> Vec<f64> {
    // Blocks of (mean, weight, values pooled).
    let mut blocks: Vec<(f64, f64, usize)> = vec![];
    for &(v, w) in values {
        blocks.push((v, w, 1));
        while blocks.len() > 1 && blocks[blocks.len() - 2].0 > blocks[blocks.len() - 1].0 {
            let (v2, w2, c2) = blocks.pop().unwrap_or_default();
            let (v1, w1, c1) = blocks.pop().unwrap_or_default();
            blocks.push(((v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, c1 + c2));
        }
    }
    blocks
        .into_iter()
        .flat_map(|(v, _, c)| std::iter::repeat_n(v, c))
        .collect()
}

/// Per head and confidence bin: (positions, right).
type Bins = Vec<Vec<(usize, usize)>>;

/// What the heads did on the base's greedy continuations of the calibration prompts.
struct Observed {
    /// a(k, r): how often head k's rank-r token was the token k+2 ahead.
    acceptance: Vec<Vec<f64>>,
    bins: Bins,
    /// The longest continuation (empty where no prompt was answered).
    answer: Vec<u32>,
}

/// a(k, r) over the base's greedy continuations of `prompts`, and per head the confidence
/// bins of its top token, counted at the positions where every head before it was right;
/// and the longest of those continuations.
fn head_acceptance(
    engine: &Engine,
    heads: &HeadProposer,
    prompts: &[Prompt],
    max_new: usize,
) -> Result<Observed> {
    let model = engine.model();
    let device = model.device();
    let k = heads.num_heads();
    // Ranks a proposer cannot give (beyond a draft vocabulary) are left out of the tree.
    let ranks = MAX_RANK.min(heads.max_rank());
    let mut hits = vec![vec![0f64; ranks]; k];
    let mut total = vec![0f64; k];
    let mut bins: Bins = vec![vec![(0, 0); BINS]; k];
    let mut answer = vec![];
    // Logits column of each vocabulary token (None: outside the draft vocabulary).
    let vocab = model.config().vocab_size;
    let mut column: Vec<Option<usize>> = vec![None; vocab];
    let cols = heads.draft().map_or(vocab, |d| d.len());
    for c in 0..cols {
        column[heads.token(c) as usize] = Some(c);
    }
    for prompt in prompts {
        let out = engine.generate(&Request {
            tree_policy: TreePolicy::Never,
            ..Request::greedy(prompt.clone(), max_new)
        })?;
        let seq: Vec<u32> = out
            .prompt_ids
            .iter()
            .chain(&out.output_ids)
            .copied()
            .collect();
        if out.output_ids.len() > answer.len() {
            answer = out.output_ids.clone();
        }
        let t = seq.len();
        let rope = RopeTables::new(model.config(), t, &device);
        let hidden = model.sequence_hidden(&seq, &rope); // [t, D]
        // From the last prompt token on: the positions decoding proposes from.
        let start = out.prompt_ids.len() - 1;
        let hidden = hidden.slice([start..t]);
        let rows = t - start;
        // The base's next token at each row: the one after it in its own continuation
        // (the last row has none; its heads' targets are past the end anyway).
        let next: Vec<u32> = (start..t)
            .map(|i| seq.get(i + 1).copied().unwrap_or(0))
            .collect();
        let (flat, cols) = heads.logits(hidden, &next, model, k)?; // [k, rows, cols]
        for i in 0..rows {
            // Whether heads 0..h were all right at this row (their top token the target).
            let mut chain = true;
            for h in 0..k {
                let Some(&target) = seq.get(start + i + h + 2) else {
                    break;
                };
                total[h] += 1.0;
                let row = &flat[(h * rows + i) * cols..(h * rows + i + 1) * cols];
                // A token outside the draft vocabulary cannot be proposed: a miss.
                let rank = column[target as usize].map(|col| {
                    let tl = row[col];
                    row.iter().filter(|&&x| x > tl).count()
                });
                if chain {
                    let b = ((confidence(row) * BINS as f64) as usize).min(BINS - 1);
                    bins[h][b].0 += 1;
                    bins[h][b].1 += usize::from(rank == Some(0));
                }
                chain &= rank == Some(0);
                if let Some(r) = rank.filter(|&r| r < ranks) {
                    hits[h][r] += 1.0;
                }
            }
        }
    }
    let acceptance = hits
        .into_iter()
        .zip(total)
        .map(|(row, n)| row.into_iter().map(|x| x / n.max(1.0)).collect())
        .collect();
    Ok(Observed {
        acceptance,
        bins,
        answer,
    })
}

/// Softmax probability of the largest logit.
fn confidence(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
    1.0 / z
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_prompts_spread_over_the_file_or_are_its_first() {
        let all: Vec<usize> = (0..48).collect();
        let spread = |limit| {
            pick(&all, limit, Take::Spread)
                .into_iter()
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(spread(8), (0..48).step_by(6).collect::<Vec<_>>());
        // 4 categories of 12 in file order: 16 prompts take 4 of each.
        let sixteen = spread(16);
        assert_eq!(sixteen.len(), 16);
        assert!((0..4).all(|c| sixteen.iter().filter(|&&i| i / 12 == c).count() == 4));
        assert_eq!(spread(100), all);
        assert_eq!(spread(0), vec![0]);
        let first: Vec<usize> = pick(&all, 12, Take::First).into_iter().copied().collect();
        assert_eq!(first, (0..12).collect::<Vec<_>>());
        assert!(pick(&[] as &[usize], 8, Take::Spread).is_empty());
    }

    #[test]
    fn smoothed_accuracy_is_pulled_to_confidence_and_non_decreasing() {
        // Empty bins take their mid-point; a well-filled bin keeps its count; an inversion
        // (bin 6 above bin 7) is pooled.
        let mut bins = vec![(0, 0); 10];
        bins[5] = (1000, 500);
        bins[6] = (100, 95);
        bins[7] = (100, 60);
        let a = smoothed_accuracy(&bins);
        assert!((a[0] - 0.05).abs() < 1e-12);
        assert!((a[5] - (500.0 + 2.75) / 1005.0).abs() < 1e-12);
        assert!((a[6] - a[7]).abs() < 1e-12, "{a:?}");
        assert!(a.windows(2).all(|w| w[0] <= w[1] + 1e-12), "{a:?}");
        assert!((a[9] - 0.95).abs() < 1e-12);
        let fit = non_decreasing(&[(1.0, 1.0), (1.4, 1.0), (1.2, 1.0), (1.5, 1.0)]);
        let want = [1.0, 1.3, 1.3, 1.5];
        assert!(
            fit.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
            "{fit:?}"
        );
    }
}
