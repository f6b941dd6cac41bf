//! `toki bench`: plain vs speculative decoding, side by side in one process, by category.
//!
//! For every prompt, after one warm-up pair: `--repeat` pairs of one plain and one
//! speculative run, the order alternating from pair to pair and from prompt to prompt
//! (plain first, then speculative first: A B, B A, …), so that whatever the first run
//! after a new prompt pays (allocations sized to its context, caches) falls on both
//! sides. Outputs must be identical (a mismatch is reported with its prompt and makes the
//! command fail): greedy ones, and sampled ones under lossless acceptance, where plain and
//! speculative runs with the same seed draw the same token at every position; typical
//! acceptance is lossy, its outputs are not compared. Reported per category
//! and overall: τ (tokens per base pass of the speculative runs), tokens/s of each,
//! speedup (median, min, max over prompts, and how many prompts ran below 1.00x) and
//! per-head acceptance.
//!
//! `--control` adds a second plain run to each pair (the three rotate: P S C, S C P,
//! C P S) and reports its ratio to the first beside the speedup: plain decoding against
//! itself, the spread a prompt's ratio shows by noise alone on this machine. A speculative
//! run below 1.00x means little where the control runs as low.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::json;
use toki_decode::{
    Acceptance, Engine, EngineOptions, HeadProposer, Output, Prompt, Request, Sampling, TreePolicy,
};
use toki_model::tokenizer::Message;

use super::bench_report;
use super::calibrate::{self, Take};
use super::generate::{AcceptanceArgs, SamplingArgs};
use crate::backend::{self, Backend};
use crate::heads::{self, DraftArg};

/// The model and heads that `bench` and `calibrate` load, and where they run.
#[derive(clap::Args)]
pub struct ModelAndHeads {
    #[arg(long)]
    pub model: PathBuf,
    /// Medusa heads folder.
    #[arg(long)]
    pub heads: PathBuf,
    #[command(flatten)]
    pub draft: DraftArg,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    pub backend: Backend,
}

impl ModelAndHeads {
    /// The engine, the heads, and the backend they run on (`auto` settled).
    pub fn load(&self) -> Result<(Engine, HeadProposer, Backend)> {
        let (backend, device) = backend::resolve(self.backend)?;
        let engine = Engine::load(&self.model, &device, &EngineOptions::default())
            .with_context(|| format!("loading {}", self.model.display()))?;
        let heads = heads::load(&self.heads, &engine, self.draft)?;
        Ok((engine, heads, backend))
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: ModelAndHeads,
    /// JSONL: {"category": "...", "prompt": "...", "chat": true} per line.
    #[arg(long)]
    prompts: PathBuf,
    /// `--tree auto` calibrates now, on up to 8 prompts spread over the file.
    #[command(flatten)]
    tree: crate::tree::TreeArgs,
    #[arg(long, default_value_t = 128, value_parser = super::at_least_one())]
    max_new_tokens: usize,
    /// Plain/speculative pairs per prompt (after one warm-up pair; the order alternates).
    #[arg(long, default_value_t = 1, value_parser = super::at_least_one())]
    repeat: usize,
    /// At most this many prompts per category (0 = all).
    #[arg(long, default_value_t = 0)]
    per_category: usize,
    #[command(flatten)]
    sampling: SamplingArgs,
    #[command(flatten)]
    acceptance: AcceptanceArgs,
    /// Verify the full tree every step (no fallback to plain steps).
    #[arg(long)]
    no_adapt: bool,
    /// A second plain run per pair, reported as the control ratio (plain against plain):
    /// how far a prompt's ratio strays from 1.00x by noise alone.
    #[arg(long)]
    control: bool,
    /// Print one JSON object on the last line of stdout.
    #[arg(long)]
    json: bool,
    /// Write report.md and speedup.svg into this folder.
    #[arg(long)]
    report: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct BenchPrompt {
    pub category: String,
    pub prompt: String,
    pub chat: bool,
}

pub fn read_prompts(path: &std::path::Path) -> Result<Vec<BenchPrompt>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    // A byte-order mark (some Windows editors write one) is not part of the first line.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut out = vec![];
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{} line {}: not JSON", path.display(), i + 1))?;
        let field = |k: &str| v.get(k).and_then(|x| x.as_str()).map(String::from);
        let (Some(category), Some(prompt)) = (field("category"), field("prompt")) else {
            bail!(
                "{} line {}: expected {{\"category\": ..., \"prompt\": ...}}",
                path.display(),
                i + 1
            );
        };
        if prompt.trim().is_empty() {
            bail!("{} line {}: the prompt is empty", path.display(), i + 1);
        }
        let chat = match v.get("chat") {
            None => true,
            Some(x) => x.as_bool().with_context(|| {
                format!(
                    "{} line {}: \"chat\" must be true or false",
                    path.display(),
                    i + 1
                )
            })?,
        };
        out.push(BenchPrompt {
            category,
            prompt,
            chat,
        });
    }
    if out.is_empty() {
        bail!("{} holds no prompts", path.display());
    }
    Ok(out)
}

/// One prompt's side-by-side result.
#[derive(Debug, Clone, Serialize)]
pub struct PromptResult {
    pub category: String,
    pub prompt: String,
    pub plain_tokens_per_s: f64,
    pub spec_tokens_per_s: f64,
    pub speedup: f64,
    /// With `--control`: the second plain run's tokens/s over the first's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<f64>,
    pub tau: f64,
    /// Tree nodes verified per step of the speculative runs (roots included).
    pub nodes_per_step: f64,
    pub head_acceptance: Vec<f64>,
    /// Share of the speculative run's tokens accepted on nodes only a chain (prompt lookup or
    /// the datastore) proposed.
    pub lookup_share: f64,
    /// Tokens the speculative runs generated, summed over the `--repeat` runs.
    pub tokens: usize,
    /// Greedy: whether every run of the prompt gave the same ids. Sampled: `None` (null in
    /// the JSON): the runs are draws, not compared.
    pub identical: Option<bool>,
    /// The plain (greedy: the reference) output of the last pair, to compare across backends.
    pub output_ids: Vec<u32>,
}

/// Aggregates of a group of prompts.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub prompts: usize,
    pub tau: f64,
    pub plain_tokens_per_s: f64,
    pub spec_tokens_per_s: f64,
    pub speedup_median: f64,
    pub speedup_min: f64,
    pub speedup_max: f64,
    /// Prompts whose speedup is below 1.00x.
    pub slower: usize,
    /// With `--control`: the control ratios' spread over the same prompts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control: Option<Spread>,
    pub nodes_per_step: f64,
    pub head_acceptance: Vec<f64>,
    pub lookup_share: f64,
}

/// Median, min and max of per-prompt ratios, and how many are below 1.00x.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub slower: usize,
}

impl Spread {
    /// `None` for no ratios.
    pub fn of(mut ratios: Vec<f64>) -> Option<Self> {
        ratios.sort_by(|a, b| a.total_cmp(b));
        let n = ratios.len();
        let median = match n {
            0 => return None,
            n if n % 2 == 1 => ratios[n / 2],
            n => 0.5 * (ratios[n / 2 - 1] + ratios[n / 2]),
        };
        Some(Self {
            median,
            min: ratios[0],
            max: ratios[n - 1],
            slower: ratios.iter().filter(|&&r| r < 1.0).count(),
        })
    }
}

/// The runs of one repetition of a prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Plain,
    Speculative,
    /// The second plain run of `--control`.
    Control,
}

/// The order of repetition `turn`'s runs (turn = prompt index + repetition): plain and
/// speculative alternate which goes first; with the control the three rotate, so each
/// run takes each place as often.
fn run_order(turn: usize, control: bool) -> Vec<Run> {
    let mut runs = vec![Run::Plain, Run::Speculative];
    if control {
        runs.push(Run::Control);
    }
    let n = runs.len();
    runs.rotate_left(turn % n);
    runs
}

pub fn summarize(rs: &[&PromptResult]) -> Summary {
    let mean = |f: &dyn Fn(&PromptResult) -> f64| {
        rs.iter().map(|r| f(r)).sum::<f64>() / rs.len().max(1) as f64
    };
    let speedup = Spread::of(rs.iter().map(|r| r.speedup).collect()).unwrap_or_default();
    let controls: Option<Vec<f64>> = rs.iter().map(|r| r.control).collect();
    let heads = rs
        .iter()
        .map(|r| r.head_acceptance.len())
        .max()
        .unwrap_or(0);
    Summary {
        prompts: rs.len(),
        tau: mean(&|r| r.tau),
        plain_tokens_per_s: mean(&|r| r.plain_tokens_per_s),
        spec_tokens_per_s: mean(&|r| r.spec_tokens_per_s),
        speedup_median: speedup.median,
        speedup_min: speedup.min,
        speedup_max: speedup.max,
        slower: speedup.slower,
        control: controls.and_then(Spread::of),
        nodes_per_step: mean(&|r| r.nodes_per_step),
        lookup_share: mean(&|r| r.lookup_share),
        head_acceptance: (0..heads)
            .map(|k| mean(&|r| r.head_acceptance.get(k).copied().unwrap_or(0.0)))
            .collect(),
    }
}

pub fn run(a: Args) -> Result<()> {
    let sampling = a.sampling.sampling()?;
    let acceptance = a.acceptance.resolve(&sampling)?;
    let mut prompts = read_prompts(&a.prompts)?;
    if a.per_category > 0 {
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        prompts.retain(|p| {
            let n = seen.entry(p.category.clone()).or_default();
            *n += 1;
            *n <= a.per_category
        });
    }
    if let Some(dir) = &a.report {
        bench_report::prepare(dir)?;
    }
    let (engine, heads, backend) = a.target.load()?;
    // Up to 8 prompts spread over the file (and so over its categories) for `auto`.
    let calib: Vec<Prompt> = calibrate::pick(&prompts, 8, Take::Spread)
        .into_iter()
        .map(to_prompt)
        .collect();
    let tree = a.tree.resolve(
        &engine,
        &heads,
        &a.target.heads,
        backend,
        &calib,
        a.max_new_tokens.min(64),
    )?;
    let datastore = a.tree.datastore(&a.target.heads)?;
    let tree_desc = tree.describe(
        heads.heads().num_heads(),
        a.tree.lookup(),
        datastore.as_ref(),
    );
    // Columns the heads score: the draft vocabulary, or the whole vocabulary.
    let draft_vocab = heads
        .draft()
        .map_or(engine.model().config().vocab_size, |d| d.len());
    tracing::info!("heads score {draft_vocab} tokens");
    eprintln!("tree: {tree_desc}");
    let engine = tree.install(engine, heads, a.tree.lookup(), datastore)?;
    let spec_policy = if a.no_adapt {
        TreePolicy::Always
    } else {
        TreePolicy::Adaptive
    };
    // Outputs that must be equal: greedy, or sampled with lossless acceptance.
    let compared = matches!(sampling, Sampling::Greedy) || acceptance == Acceptance::Lossless;
    let request = |p: &BenchPrompt, policy| Request {
        sampling,
        acceptance,
        tree_policy: policy,
        ..Request::greedy(to_prompt(p), a.max_new_tokens)
    };

    let bar = ProgressBar::new(prompts.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} prompts eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // Warm-up pair.
    engine.generate(&request(&prompts[0], TreePolicy::Never))?;
    engine.generate(&request(&prompts[0], spec_policy))?;
    let mut results = vec![];
    for (index, p) in prompts.iter().enumerate() {
        let (mut plain_tps, mut spec_tps, mut tau, mut identical) = (0.0, 0.0, 0.0, true);
        let (mut nodes, mut lookup, mut control_tps) = (0.0, 0.0, 0.0);
        // Whether plain decoding gave the same output in the control run.
        let mut steady = true;
        let mut heads_acc: Vec<f64> = vec![];
        let mut tokens = 0;
        let mut output_ids = vec![];
        for rep in 0..a.repeat {
            let (mut plain, mut spec, mut control) = (None, None, None);
            for run in run_order(index + rep, a.control) {
                let (slot, policy) = match run {
                    Run::Plain => (&mut plain, TreePolicy::Never),
                    Run::Speculative => (&mut spec, spec_policy),
                    Run::Control => (&mut control, TreePolicy::Never),
                };
                *slot = Some(engine.generate(&request(p, policy))?);
            }
            let (Some(plain), Some(spec)) = (plain, spec) else {
                bail!("internal: a repetition ran without its plain or speculative run");
            };
            if compared {
                identical &= plain.output_ids == spec.output_ids;
                steady &= control
                    .as_ref()
                    .is_none_or(|c| c.output_ids == plain.output_ids);
            }
            control_tps += control.map_or(0.0, |c| c.stats.tokens_per_s);
            plain_tps += plain.stats.tokens_per_s;
            spec_tps += spec.stats.tokens_per_s;
            tau += tokens_per_pass(&spec);
            nodes += spec.stats.verified_nodes as f64 / spec.stats.steps.max(1) as f64;
            tokens += spec.output_ids.len();
            lookup += spec.stats.lookup_tokens as f64 / spec.output_ids.len().max(1) as f64;
            if heads_acc.is_empty() {
                heads_acc = vec![0.0; spec.stats.head_acceptance.len()];
            }
            heads_acc
                .iter_mut()
                .zip(&spec.stats.head_acceptance)
                .for_each(|(x, y)| *x += y);
            output_ids = plain.output_ids;
        }
        let r = a.repeat as f64;
        if !identical {
            bar.println(format!(
                "MISMATCH: plain and speculative outputs differ for {:?}",
                p.prompt
            ));
        }
        if !steady {
            bar.println(format!(
                "MISMATCH: two plain runs gave different outputs for {:?}",
                p.prompt
            ));
        }
        results.push(PromptResult {
            category: p.category.clone(),
            prompt: p.prompt.clone(),
            plain_tokens_per_s: plain_tps / r,
            spec_tokens_per_s: spec_tps / r,
            speedup: spec_tps / plain_tps.max(1e-9),
            control: a.control.then(|| control_tps / plain_tps.max(1e-9)),
            tau: tau / r,
            nodes_per_step: nodes / r,
            head_acceptance: heads_acc.iter().map(|x| x / r).collect(),
            lookup_share: lookup / r,
            tokens,
            identical: compared.then_some(identical && steady),
            output_ids,
        });
        bar.inc(1);
        bar.set_message(p.category.clone());
    }
    bar.finish_and_clear();

    let mismatches = results
        .iter()
        .filter(|r| r.identical == Some(false))
        .count();
    let mut by_cat: BTreeMap<String, Vec<&PromptResult>> = BTreeMap::new();
    for r in &results {
        by_cat.entry(r.category.clone()).or_default().push(r);
    }
    let categories: BTreeMap<String, Summary> = by_cat
        .iter()
        .map(|(c, rs)| (c.clone(), summarize(rs)))
        .collect();
    let overall = summarize(&results.iter().collect::<Vec<_>>());
    let table = bench_report::table(&categories, &overall);
    println!("{table}");
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    if let Some(dir) = &a.report {
        bench_report::write(dir, &command, &tree_desc, &table, &categories, &results)?;
    }
    if a.json {
        let v = json!({
            "mismatches": mismatches,
            "temperature": a.sampling.temperature,
            "tree": tree_desc,
            "draft_vocab": draft_vocab,
            "overall": overall,
            "categories": categories,
            "prompts": results,
        });
        println!("{v}");
    }
    if mismatches > 0 {
        bail!(
            "{mismatches} prompt(s) gave different outputs (speculative against plain, or plain against plain with --control)"
        );
    }
    Ok(())
}

/// τ of a speculative run: tokens per base pass over the decode steps (the prefill's token
/// excluded), counting the adaptive policy's plain steps too.
fn tokens_per_pass(o: &Output) -> f64 {
    if o.stats.steps == 0 {
        return 1.0;
    }
    o.stats.accept_lengths.iter().sum::<usize>() as f64 / o.stats.steps as f64
}

pub fn to_prompt(p: &BenchPrompt) -> Prompt {
    if p.chat {
        Prompt::Chat(vec![Message::user(p.prompt.clone())])
    } else {
        Prompt::Text(p.prompt.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::{Run, Spread, read_prompts, run_order};

    /// Plain and speculative alternate which goes first; with the control each of the
    /// three runs takes each place once in three turns.
    #[test]
    fn runs_rotate_through_every_place() {
        use Run::{Control as C, Plain as P, Speculative as S};
        assert_eq!(run_order(0, false), [P, S]);
        assert_eq!(run_order(1, false), [S, P]);
        assert_eq!(run_order(2, false), [P, S]);
        assert_eq!(run_order(0, true), [P, S, C]);
        assert_eq!(run_order(1, true), [S, C, P]);
        assert_eq!(run_order(2, true), [C, P, S]);
        assert_eq!(run_order(3, true), [P, S, C]);
    }

    #[test]
    fn spread_counts_ratios_below_one() {
        assert!(Spread::of(vec![]).is_none());
        let s = Spread::of(vec![1.2, 0.9, 1.0, 0.99]).unwrap();
        assert_eq!((s.min, s.max, s.slower), (0.9, 1.2, 2));
        assert!((s.median - 0.995).abs() < 1e-12, "{s:?}");
        let s = Spread::of(vec![1.1, 0.8, 1.3]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.slower), (1.1, 0.8, 1.3, 1));
    }

    /// Each bad line is refused naming the file and line; `chat` defaults to true.
    #[test]
    fn prompt_file_lines_are_checked() {
        let dir = toki_model::testing::ScratchDir::new("bench-prompts").unwrap();
        let read = |text: &str| {
            let path = dir.join("p.jsonl");
            std::fs::write(&path, text).unwrap();
            read_prompts(&path).map_err(|e| format!("{e:#}"))
        };
        // With a byte-order mark and Windows line ends.
        let ok = read("\u{feff}{\"category\": \"code\", \"prompt\": \"a\"}\r\n\r\n{\"category\": \"qa\", \"prompt\": \"b\", \"chat\": false}\r\n").unwrap();
        assert_eq!(ok.len(), 2);
        assert!(ok[0].chat && !ok[1].chat);
        assert_eq!(
            (ok[1].category.as_str(), ok[1].prompt.as_str()),
            ("qa", "b")
        );
        for (text, needle) in [
            ("", "holds no prompts"),
            ("{\"category\": \"code\"}", "line 1: expected"),
            (
                "{\"category\": \"code\", \"prompt\": 3}",
                "line 1: expected",
            ),
            (
                "\n{\"category\": \"code\", \"prompt\": \" \"}",
                "line 2: the prompt is empty",
            ),
            (
                "{\"category\": \"code\", \"prompt\": \"a\", \"chat\": \"no\"}",
                "\"chat\" must be",
            ),
            (
                "{\"category\": \"code\", \"prompt\": \"a\"",
                "line 1: not JSON",
            ),
        ] {
            let err = read(text).expect_err(text);
            assert!(
                err.contains("p.jsonl") && err.contains(needle),
                "{text}: {err}"
            );
        }
    }
}
