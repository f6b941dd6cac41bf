//! Head-training throughput on a real model folder (default: the converted demo model),
//! with and without the hidden-state cache, measured in one run.
//!
//! `cargo bench -p toki-benches --bench train` (env `TOKI_MODEL`, `TOKI_DATA` = a data
//! file, default the shipped distilled answers; `TOKI_STEPS` = timed updates).
//!
//! With the cache, an update reads hidden states computed once; without it, every update
//! must first run the frozen base over the tokens it trains on. Both phases are timed
//! here on the same data: base forward (tokens/s) and head updates (rows/s), and the
//! no-cache throughput is one token through both.

use std::sync::atomic::AtomicBool;
use std::time::Instant;

use burn::tensor::Device;
use toki_train::{HiddenSet, TrainConfig, Trainer, load_documents, pack};

mod common;
use common::{count_from_env, join_rayon_pool, load_engine, path_from_env};

fn main() {
    join_rayon_pool();
    let data = path_from_env(
        "TOKI_DATA",
        "training/data/distilled-smollm2-135m-instruct.jsonl",
    );
    let steps = count_from_env("TOKI_STEPS", 20);
    let device = Device::flex();
    let Some(engine) = load_engine(&device) else {
        return;
    };
    let model = engine.model();
    let tok = engine.tokenizer().expect("the demo model has a tokenizer");
    let mut docs = load_documents(std::slice::from_ref(&data), tok).expect("data loads");
    docs.truncate(64);
    let seqs = pack(&docs, 256, 5);

    let t = Instant::now();
    let set = HiddenSet::compute(model, &seqs, |_, _| {}).expect("hidden states");
    let forward_s = t.elapsed().as_secs_f64();
    let forward_tps = set.len() as f64 / forward_s;

    for (heads, batch) in [(3usize, 128usize), (4, 128)] {
        let config = TrainConfig {
            num_heads: heads,
            steps,
            batch,
            warmup: 2,
            checkpoint_every: 0,
            eval_every: 0,
            ..TrainConfig::default()
        };
        let mut trainer = Trainer::new(model, &set, config, 0).expect("trainer");
        let out = std::env::temp_dir().join(format!("toki-bench-train-{}", std::process::id()));
        let t = Instant::now();
        // Includes one final evaluation and checkpoint, as a real run does.
        trainer
            .run(&out, &AtomicBool::new(false), |_| {})
            .expect("training");
        let step_s = t.elapsed().as_secs_f64();
        let _ = std::fs::remove_dir_all(&out);
        let cached_tps = (steps * batch) as f64 / step_s;
        let uncached_tps = 1.0 / (1.0 / cached_tps + 1.0 / forward_tps);
        println!(
            "heads {heads}, batch {batch}: with cache {cached_tps:.0} tokens/s; without cache {uncached_tps:.0} tokens/s ({:.2}x); base forward alone {forward_tps:.0} tokens/s",
            cached_tps / uncached_tps
        );
    }
}
