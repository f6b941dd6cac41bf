//! `toki calibrate`: choose the candidate tree for this hardware.
//!
//! 1. Cost: time one verification pass of n tree nodes (n = 1..64, over a 128-token cache;
//!    forward, logits and the host read-back), and one pass of the heads, on the backend.
//! 2. Acceptance: on calibration prompts, the base's own greedy continuations are known;
//!    for head k and rank r, a(k, r) = how often head k's rank-r token is the token k+2
//!    ahead.
//! 3. Tree: Medusa's greedy construction, adding at each size the path with the highest
//!    expected acceptance Π a(k, r_k); the expected tokens per step of the n-node tree are
//!    1 + Σ over its nodes. The size chosen maximises expected tokens per *second*:
//!    E[tokens](n) / (cost(n) + heads), with n = 1 meaning plain decoding (no heads cost).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use burn::tensor::{Int, Tensor, TensorData};
use serde::Serialize;
use toki_decode::proposer::top_k;
use toki_decode::{Engine, HeadProposer, Prompt, Proposer, Request, Tree, TreePolicy};
use toki_model::{AttnMask, RopeTables};

const MAX_NODES: usize = 64;
const MAX_RANK: usize = 10;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: super::bench::ModelAndHeads,
    /// Calibration prompts (the `toki bench` JSONL format).
    #[arg(long)]
    prompts: PathBuf,
    /// Where to write the tree (paths plus the measurements behind them).
    #[arg(long)]
    out: PathBuf,
    /// How many prompts to calibrate on.
    #[arg(long, default_value_t = 8)]
    limit: usize,
    #[arg(long, default_value_t = 64)]
    max_new_tokens: usize,
}

/// What calibration measured and chose.
#[derive(Debug, Clone, Serialize)]
pub struct Calibration {
    pub paths: Vec<Vec<usize>>,
    /// Seconds of one verification pass of n nodes, n = 1..=64.
    pub cost_s: Vec<f64>,
    pub heads_s: f64,
    /// a(k, r): head k's rank-r token is right.
    pub acceptance: Vec<Vec<f64>>,
    /// Head 1's confidence (softmax probability of its top token) against how often that
    /// token is right, in ten bins of confidence: [bin start, positions, right].
    pub confidence: Vec<(f64, usize, f64)>,
    /// Expected tokens per step and per second of the greedy tree of each size.
    pub expected_tokens: Vec<f64>,
    pub expected_speedup: Vec<f64>,
    #[serde(skip)]
    pub tree: Tree,
}

pub fn run(a: Args) -> Result<()> {
    let prompts: Vec<Prompt> = super::bench::read_prompts(&a.prompts)?
        .iter()
        .take(a.limit.max(1))
        .map(|p| super::bench::to_prompt(p))
        .collect();
    let (engine, heads) = a.target.load()?;
    let c = auto_tree(&engine, &heads, &prompts, a.max_new_tokens)?;
    let text = serde_json::to_string_pretty(&c)?;
    std::fs::write(&a.out, text).with_context(|| format!("writing {}", a.out.display()))?;
    let best = c.paths.len() + 1;
    eprintln!(
        "tree of {best} nodes: expected {:.2} tokens/step, {:.2}x plain (cost ratio {:.2} + heads {:.2}); written to {}",
        c.expected_tokens[best - 1],
        c.expected_speedup[best - 1],
        c.cost_s[best - 1] / c.cost_s[0],
        c.heads_s / c.cost_s[0],
        a.out.display()
    );
    Ok(())
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
    let (cost_s, heads_s) = costs(engine, heads)?;
    let (acceptance, confidence) = head_acceptance(engine, heads, prompts, max_new)?;
    let (order, expected_tokens) = greedy_tree(&acceptance, MAX_NODES);
    let expected_speedup: Vec<f64> = (0..MAX_NODES)
        .map(|i| {
            let step = cost_s[i] + if i == 0 { 0.0 } else { heads_s };
            expected_tokens[i] / step * cost_s[0]
        })
        .collect();
    let best = (0..MAX_NODES)
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
        heads_s,
        acceptance,
        confidence,
        expected_tokens,
        expected_speedup,
        tree,
    })
}

/// Median seconds of `f` over a few runs after one warm-up.
fn time(mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut t: Vec<f64> = (0..5)
        .map(|_| {
            let s = Instant::now();
            f().map(|_| s.elapsed().as_secs_f64())
        })
        .collect::<Result<_>>()?;
    t.sort_by(|a, b| a.total_cmp(b));
    Ok(t[t.len() / 2])
}

/// Verification cost of 1..=64 nodes over a 128-token cache, and one heads pass.
fn costs(engine: &Engine, heads: &HeadProposer) -> Result<(Vec<f64>, f64)> {
    let model = engine.model();
    let device = model.device();
    let prefix = 128;
    let rope = RopeTables::new(model.config(), prefix + MAX_NODES, &device);
    let vocab = model.config().vocab_size;
    let ids = |n: usize, start: usize| {
        let v: Vec<i64> = (0..n).map(|i| ((i * 37 + 11) % vocab) as i64).collect();
        let p: Vec<i64> = (start..start + n).map(|x| x as i64).collect();
        (
            Tensor::<1, Int>::from_data(TensorData::new(v, [n]), &device),
            Tensor::<1, Int>::from_data(TensorData::new(p, [n]), &device),
        )
    };
    let mut cache = model.new_cache(prefix + MAX_NODES);
    let (t, p) = ids(prefix, 0);
    let hidden = model.forward(t, p, &AttnMask::Causal, &mut cache, &rope);
    let last = hidden.slice([prefix - 1..prefix]);
    // Measured at these sizes, linear in between.
    let sizes = [1usize, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64];
    let mut measured = vec![];
    for &n in &sizes {
        let s = time(|| {
            cache.truncate(prefix);
            let (t, p) = ids(n, prefix);
            let h = model.forward(t, p, &AttnMask::Causal, &mut cache, &rope);
            let _: Vec<i64> = model
                .logits(h)
                .argmax(1)
                .try_into_vec_as()
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            Ok(())
        })?;
        measured.push(s);
    }
    let cost = (1..=MAX_NODES)
        .map(|n| {
            let i = sizes
                .iter()
                .position(|&s| s >= n)
                .unwrap_or(sizes.len() - 1);
            if sizes[i] == n || i == 0 {
                measured[i]
            } else {
                let (n0, n1) = (sizes[i - 1] as f64, sizes[i] as f64);
                let w = (n as f64 - n0) / (n1 - n0);
                measured[i - 1] * (1.0 - w) + measured[i] * w
            }
        })
        .collect();
    // One proposal pass as decoding runs it: every head, read back, ranked.
    let k = heads.num_heads();
    let heads_s = time(|| {
        let (flat, cols) = heads.logits(last.clone(), &[11], model, k)?;
        for h in 0..k {
            top_k(&flat[h * cols..(h + 1) * cols], MAX_RANK.min(cols));
        }
        Ok(())
    })?;
    Ok((cost, heads_s))
}

/// a(k, r) over the base's greedy continuations of `prompts`.
fn head_acceptance(
    engine: &Engine,
    heads: &HeadProposer,
    prompts: &[Prompt],
    max_new: usize,
) -> Result<(Vec<Vec<f64>>, Vec<(f64, usize, f64)>)> {
    let model = engine.model();
    let device = model.device();
    let k = heads.num_heads();
    // Ranks a proposer cannot give (beyond a draft vocabulary) are left out of the tree.
    let ranks = MAX_RANK.min(heads.max_rank());
    let mut hits = vec![vec![0f64; ranks]; k];
    let mut total = vec![0f64; k];
    let mut bins = vec![(0usize, 0usize); 10];
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
        for h in 0..k {
            for i in 0..rows {
                let Some(&target) = seq.get(start + i + h + 2) else {
                    break;
                };
                total[h] += 1.0;
                // A token outside the draft vocabulary cannot be proposed: a miss.
                let Some(col) = column[target as usize] else {
                    continue;
                };
                let row = &flat[(h * rows + i) * cols..(h * rows + i + 1) * cols];
                let tl = row[col];
                let rank = row.iter().filter(|&&x| x > tl).count();
                if h == 0 {
                    let b = ((confidence(row) * 10.0) as usize).min(9);
                    bins[b].0 += 1;
                    bins[b].1 += usize::from(rank == 0);
                }
                if rank < ranks {
                    hits[h][rank] += 1.0;
                }
            }
        }
    }
    let acceptance = hits
        .into_iter()
        .zip(total)
        .map(|(row, n)| row.into_iter().map(|x| x / n.max(1.0)).collect())
        .collect();
    let confidence = bins
        .iter()
        .enumerate()
        .map(|(b, &(n, right))| (b as f64 / 10.0, n, right as f64 / n.max(1) as f64))
        .collect();
    Ok((acceptance, confidence))
}

/// Softmax probability of the largest logit.
fn confidence(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let z: f64 = logits.iter().map(|&x| ((x - max) as f64).exp()).sum();
    1.0 / z
}

/// Medusa's greedy tree: paths in the order they are added, and the expected tokens per
/// step 1 + Σ P(path) of the first n-1 paths, n = 1..=max_nodes.
pub fn greedy_tree(acc: &[Vec<f64>], max_nodes: usize) -> (Vec<Vec<usize>>, Vec<f64>) {
    let mut paths: Vec<(Vec<usize>, f64)> = vec![];
    let mut expected = vec![1.0];
    while expected.len() < max_nodes {
        // Candidates: the next unused rank under the root and under every path.
        let mut best: Option<(Vec<usize>, f64)> = None;
        let parents = std::iter::once((vec![], 1.0)).chain(paths.iter().cloned());
        for (parent, p) in parents {
            let depth = parent.len();
            if depth >= acc.len() {
                continue;
            }
            let used = paths
                .iter()
                .filter(|(q, _)| q.len() == depth + 1 && q[..depth] == parent[..])
                .count();
            if used >= acc[depth].len() {
                continue;
            }
            let mut child = parent.clone();
            child.push(used);
            let pc = p * acc[depth][used];
            if best.as_ref().is_none_or(|b| pc > b.1) {
                best = Some((child, pc));
            }
        }
        let Some((child, p)) = best else { break };
        expected.push(expected.last().copied().unwrap_or(1.0) + p);
        paths.push((child, p));
    }
    while expected.len() < max_nodes {
        expected.push(*expected.last().unwrap_or(&1.0));
    }
    (paths.into_iter().map(|(p, _)| p).collect(), expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_tree_adds_the_likeliest_paths_first() {
        let acc = vec![vec![0.6, 0.2, 0.05], vec![0.5, 0.1, 0.0]];
        let (paths, e) = greedy_tree(&acc, 5);
        // [0] .6, [0,0] .3, [1] .2, then [1,0] .1 over [0,1] .06 and [2] .05
        assert_eq!(paths, vec![vec![0], vec![0, 0], vec![1], vec![1, 0]]);
        assert!((e[4] - (1.0 + 0.6 + 0.3 + 0.2 + 0.1)).abs() < 1e-12);
    }
}
