//! The measured ceiling: how fast speculative decoding runs on this machine when its
//! proposals are right as often as asked, end to end through the engine.
//!
//! `cargo bench -p toki-benches --bench ceiling` (env `TOKI_MODEL`, `TOKI_HEADS`,
//! `TOKI_PROMPTS` = a `toki bench` prompt file (default `benches/prompts.jsonl`),
//! `TOKI_PER_CATEGORY` = the first N prompts of each category (2), `TOKI_MAX_NEW` (128),
//! `TOKI_REPEAT` = pairs per prompt (2), `TOKI_CHAINS` = chain lengths in nodes
//! ("2,3,4,6,8"), `TOKI_ACCEPT` = acceptance rates ("1,0.8,0.6")). The cpu backend.
//!
//! Every prompt's plain greedy answer is computed first. Then, side by side with plain
//! decoding (A B A B, after a warm-up pair), speculative decoding verifies a static chain
//! of n nodes every step (the root and n - 1 proposals; `TreePolicy::Always`, no adaptive
//! policy, no lookup) filled by an oracle. The oracle runs the shipped heads' pass and
//! drops its proposals, so that a step costs what it costs with heads (chains deeper than
//! the heads pay for the heads there are), then proposes the answer's own tokens, each
//! right with probability p given the ones before it (a fixed draw per prompt, position
//! and depth), else a wrong token. At p = 1 this is the ceiling `toki calibrate` computes
//! from its cost curve, measured instead of modelled; lower p show what acceptance a
//! target needs. Every speculative output is checked against the plain answer. A prompt's
//! speedup is the median speculative tokens/s over the median plain tokens/s of its timed
//! pairs (of an even count, `common::median` takes the upper middle: with 2 pairs, each
//! side's faster run).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use burn::tensor::Device;
use toki_decode::proposer::{Ranked, StepInput};
use toki_decode::sampling::Rng;
use toki_decode::{HeadProposer, Prompt, Proposer, Request, Tree, TreePolicy};
use toki_model::HostPrecision;
use toki_model::tokenizer::Message;

mod common;
use common::{count_from_env, join_rayon_pool, load_engine, load_proposer, median, path_from_env};

/// What the oracle proposes from: the current prompt's ids and plain answer, the rate.
#[derive(Default)]
struct Answer {
    /// Prompt and plain greedy output, as one sequence.
    ids: Vec<u32>,
    accept: f64,
    /// The prompt's index: varies the draws from prompt to prompt.
    prompt: u64,
}

/// Proposes the answer's next tokens after paying for the heads' pass.
struct Oracle {
    heads: Arc<HeadProposer>,
    depth: usize,
    vocab: u32,
    answer: Arc<Mutex<Answer>>,
}

/// A fixed draw in [0, 1) for (prompt, position, depth), from the engine's own SplitMix64.
fn draw(prompt: u64, pos: usize, depth: usize) -> f64 {
    let key = prompt
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((pos as u64) << 8 | depth as u64);
    Rng::new(key).uniform()
}

impl Proposer for Oracle {
    fn num_heads(&self) -> usize {
        self.depth
    }

    fn rank(&self, input: StepInput<'_>, top_k: &[usize]) -> toki_decode::Result<Vec<Ranked>> {
        // history[m - 1] is the root; head h proposes the token h + 1 after it.
        let m = input.history.len();
        let paid = top_k.len().min(self.heads.num_heads());
        // Only the heads a chain of this depth reads are run, as a dynamic tree's step
        // runs them (`Proposer::rank_until`).
        self.heads
            .rank_until(input, &vec![1; paid], &mut |_| false)?;
        let answer = self.answer.lock().expect("the oracle's answer");
        Ok((0..top_k.len())
            .map(|h| {
                let right = answer.ids.get(m + h).copied().unwrap_or(0);
                let best = if draw(answer.prompt, m, h) < answer.accept {
                    right
                } else {
                    (right + 1) % self.vocab
                };
                (0..top_k[h] as u32)
                    .map(|r| match r {
                        0 => (best, 1.0),
                        _ => ((right + 1 + r) % self.vocab, 0.0),
                    })
                    .collect()
            })
            .collect())
    }
}

/// The first `per_category` prompts of each category in a `toki bench` prompt file.
fn read_prompts(path: &std::path::Path, per_category: usize) -> Vec<(String, Prompt)> {
    let text = std::fs::read_to_string(path).expect("reading the prompt file (TOKI_PROMPTS)");
    let mut taken = BTreeMap::<String, usize>::new();
    let mut out = vec![];
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
        let (Some(category), Some(text)) = (field("category"), field("prompt")) else {
            panic!("expected {{\"category\": ..., \"prompt\": ...}} in {line}");
        };
        let n = taken.entry(category.clone()).or_default();
        if *n < per_category {
            *n += 1;
            let chat = v.get("chat").and_then(|x| x.as_bool()).unwrap_or(true);
            let prompt = match chat {
                true => Prompt::Chat(vec![Message::user(text)]),
                false => Prompt::Text(text),
            };
            out.push((category, prompt));
        }
    }
    out
}

fn list<T: std::str::FromStr>(var: &str, default: &str) -> Vec<T> {
    std::env::var(var)
        .unwrap_or_else(|_| default.into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .ok()
                .expect("a comma-separated list of numbers")
        })
        .collect()
}

fn main() {
    join_rayon_pool();
    let heads_dir = path_from_env("TOKI_HEADS", "training/heads/smollm2-135m-instruct");
    let prompt_file = path_from_env("TOKI_PROMPTS", "benches/prompts.jsonl");
    let per_category = count_from_env("TOKI_PER_CATEGORY", 2);
    let max_new = count_from_env("TOKI_MAX_NEW", 128);
    let repeat = count_from_env("TOKI_REPEAT", 2);
    let chains: Vec<usize> = list("TOKI_CHAINS", "2,3,4,6,8");
    let accepts: Vec<f64> = list("TOKI_ACCEPT", "1,0.8,0.6");
    assert!(chains.iter().all(|&n| n >= 2), "chains of 2 nodes or more");
    let device = Device::flex();
    let Some(mut engine) = load_engine(&device) else {
        return;
    };
    let heads = Arc::new(load_proposer(&heads_dir, engine.model(), HostPrecision::Q8));
    let vocab = engine.model().config().vocab_size as u32;
    let prompts = read_prompts(&prompt_file, per_category);
    let request = |prompt: &Prompt, tree_policy| Request {
        tree_policy,
        ..Request::greedy(prompt.clone(), max_new)
    };
    let answers: Vec<Vec<u32>> = prompts
        .iter()
        .map(|(_, p)| {
            let out = engine
                .generate(&request(p, TreePolicy::Never))
                .expect("plain decoding");
            [out.prompt_ids, out.output_ids].concat()
        })
        .collect();
    let answer = Arc::new(Mutex::new(Answer::default()));

    println!(
        "speculative decoding with an oracle's chain against plain decoding: {} prompts, {max_new} new tokens, {repeat} pairs each; heads' pass paid ({} heads)",
        prompts.len(),
        heads.num_heads()
    );
    println!("  nodes | accept | tau  | speedup median | min   | max   | by category (median)");
    for &n in &chains {
        let oracle = Oracle {
            heads: heads.clone(),
            depth: n - 1,
            vocab,
            answer: answer.clone(),
        };
        let chain: Vec<Vec<usize>> = (1..n).map(|d| vec![0; d]).collect();
        let tree = Tree::from_paths(&chain, n - 1, 1).expect("a chain");
        engine = engine
            .without_heads()
            .with_proposer(Box::new(oracle), tree)
            .expect("the oracle's chain");
        for &p in &accepts {
            let mut by_category = BTreeMap::<&str, Vec<f64>>::new();
            let (mut speedups, mut taus) = (vec![], vec![]);
            for (i, ((category, prompt), ids)) in prompts.iter().zip(&answers).enumerate() {
                *answer.lock().expect("the oracle's answer") = Answer {
                    ids: ids.clone(),
                    accept: p,
                    prompt: i as u64,
                };
                let (mut a, mut b, mut tau) = (vec![], vec![], 0.0);
                for pair in 0..=repeat {
                    let plain = engine.generate(&request(prompt, TreePolicy::Never));
                    let spec = engine.generate(&request(prompt, TreePolicy::Always));
                    let (plain, spec) = (plain.expect("plain"), spec.expect("speculative"));
                    assert_eq!(spec.output_ids, plain.output_ids, "speculative != plain");
                    // Pair 0 warms up.
                    if pair > 0 {
                        a.push(plain.stats.tokens_per_s);
                        b.push(spec.stats.tokens_per_s);
                        tau = spec.stats.mean_accepted;
                    }
                }
                let s = median(b) / median(a);
                speedups.push(s);
                taus.push(tau);
                by_category.entry(category).or_default().push(s);
            }
            let cats: Vec<String> = by_category
                .into_iter()
                .map(|(c, v)| format!("{c} {:.2}x", median(v)))
                .collect();
            let (lo, hi) = speedups
                .iter()
                .fold((f64::MAX, 0f64), |(l, h), &s| (l.min(s), h.max(s)));
            println!(
                "  {n:>5} | {p:>6.2} | {:.2} | {:>13.2}x | {lo:.2}x | {hi:.2}x | {}",
                taus.iter().sum::<f64>() / taus.len() as f64,
                median(speedups.clone()),
                cats.join(", ")
            );
        }
    }
}
