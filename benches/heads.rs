//! The heads' proposal step with trained heads on a real model: the host copies of the
//! heads and their draft vocabulary kept in f32, f16 or rounded Q8 blocks
//! (`HostPrecision`), timed side by side, how often the smaller ones rank the same
//! proposals as f32, and what a step that stops after
//! head 1 costs (`Proposer::rank_until`).
//!
//! `cargo bench -p toki-benches --bench heads` (env `TOKI_MODEL` = model folder,
//! `TOKI_HEADS` = heads folder, `TOKI_REPEAT` = timed rounds). The cpu backend only: the
//! host copies exist there alone.
//!
//! Hidden states come from one real text: a prompt and the base's own answer (48 tokens),
//! run through the base once. Each round ranks every position's proposals with both
//! copies, in turn, each ranking after an untimed base pass as in decoding.

use std::time::Instant;

use burn::tensor::Device;
use toki_decode::proposer::{Ranked, StepInput};
use toki_decode::{Prompt, Proposer, Request};
use toki_model::HostPrecision;
use toki_model::RopeTables;
use toki_model::tokenizer::Message;

mod common;
use common::{count_from_env, join_rayon_pool, load_engine, load_proposer, median, path_from_env};

fn main() {
    join_rayon_pool();
    let heads_dir = path_from_env("TOKI_HEADS", "training/heads/smollm2-135m-instruct");
    let repeat = count_from_env("TOKI_REPEAT", 5);
    let device = Device::flex();
    let Some(engine) = load_engine(&device) else {
        return;
    };
    let base = engine.model();
    let proposer = |precision| load_proposer(&heads_dir, base, precision);
    let variants = [
        ("f32", proposer(HostPrecision::F32)),
        ("f16", proposer(HostPrecision::F16)),
        ("q8", proposer(HostPrecision::Q8)),
    ];
    // The precision decoding uses (`MedusaHeads::with_host_kernels`, `--heads-precision`).
    let shipped = 2;

    // One real text: a bench prompt and the base's greedy answer.
    let prompt = Prompt::Chat(vec![Message::user(
        "Write a Python function that reads a CSV file and returns the rows as dictionaries.",
    )]);
    let out = engine
        .generate(&Request::greedy(prompt, 48))
        .expect("plain decoding");
    let mut ids = out.prompt_ids.clone();
    ids.extend(&out.output_ids);
    let rope = RopeTables::new(base.config(), ids.len(), &device);
    let hidden = base.sequence_hidden(&ids, &rope); // [T, D]
    let start = out.prompt_ids.len();
    let depth = variants[0].1.num_heads();
    let k = vec![4; depth];

    let mut times = vec![vec![]; variants.len()];
    let mut ranked = vec![vec![]; variants.len()];
    let mut head1_alone = vec![];
    // As in decoding, the base's pass before each step has streamed its ~540 MB of weights
    // through the caches: one untimed base pass of one token precedes every timed ranking.
    let base_pass = |token: u32| {
        let h = base.sequence_hidden(&[token], &rope); // [1, D]
        toki_decode::greedy_tokens(base, h).expect("the base's pass");
    };
    // `rank` at every position, each after a base pass: the rankings and the mean ms.
    let run = |rank: &dyn Fn(StepInput<'_>) -> Vec<Ranked>| -> (Vec<Vec<Ranked>>, f64) {
        let mut ms = 0.0;
        let r = (start..ids.len())
            .map(|pos| {
                base_pass(ids[pos]);
                let input = StepInput {
                    base,
                    hidden: hidden.clone().slice([pos - 1..pos]),
                    history: &ids[..pos],
                };
                let t = Instant::now();
                let r = rank(input);
                ms += t.elapsed().as_secs_f64() * 1e3;
                r
            })
            .collect();
        (r, ms / (ids.len() - start) as f64)
    };
    for round in 0..=repeat {
        for (v, (_, p)) in variants.iter().enumerate() {
            let (r, ms) = run(&|input| p.rank(input, &k).expect("ranking"));
            // Round 0 warms up; later rounds are timed.
            if round > 0 {
                times[v].push(ms);
            }
            ranked[v] = r;
        }
        // The shipped copies stopped after head 1, as a dynamic tree's step does when head
        // 1 already makes the root alone the best tree (`DynamicTree::root_alone`).
        let (r, ms) = run(&|input| {
            let stop = &mut |r: &[Ranked]| r.len() == 1;
            variants[shipped]
                .1
                .rank_until(input, &k, stop)
                .expect("ranking")
        });
        assert!(r.iter().all(|r| r.len() == 1), "stopped after head 1");
        if round > 0 {
            head1_alone.push(ms);
        }
    }
    let f32_ms = median(times[0].clone());
    println!(
        "heads' proposal step ({depth} heads, top-{} each, {} positions, median of {repeat} rounds):",
        k[0],
        ids.len() - start
    );
    for ((name, _), t) in variants.iter().zip(&times) {
        let ms = median(t.clone());
        println!(
            "  host copies in {name}: {ms:.3} ms per step, {:.2}x f32",
            ms / f32_ms
        );
    }
    let ms = median(head1_alone);
    println!(
        "  host copies in {}, head 1 alone: {ms:.3} ms per step, {:.2}x f32",
        variants[shipped].0,
        ms / f32_ms
    );
    // How often the smaller copies propose what f32 copies do: the same top-1, the same
    // top-k set.
    let a = &ranked[0];
    for ((name, _), b) in variants.iter().zip(&ranked).skip(1) {
        println!("  {name} against f32:");
        agreement(a, b, depth, k[0]);
    }
}

/// Per head: at how many positions `b` ranks `a`'s top-1 first, and the same top-`k` set.
fn agreement(a: &[Vec<Ranked>], b: &[Vec<Ranked>], depth: usize, k: usize) {
    for h in 0..depth {
        let top1 = a
            .iter()
            .zip(b)
            .filter(|(x, y)| x[h][0].0 == y[h][0].0)
            .count();
        let set = a
            .iter()
            .zip(b)
            .filter(|(x, y)| {
                let mut p: Vec<u32> = x[h].iter().map(|t| t.0).collect();
                let mut q: Vec<u32> = y[h].iter().map(|t| t.0).collect();
                p.sort_unstable();
                q.sort_unstable();
                p == q
            })
            .count();
        println!(
            "    head {}: same top-1 at {top1} of {} positions, same top-{k} set at {set}",
            h + 1,
            a.len(),
        );
    }
}
