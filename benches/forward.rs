//! Forward-pass benchmarks on a real model folder (default: the converted demo model).
//!
//! `cargo bench -p toki-benches --bench forward` (env `TOKI_MODEL` = model folder,
//! `TOKI_BACKEND` = cpu|wgpu|cuda, `TOKI_REPEAT` = timed repetitions).
//!
//! Reports prefill tokens/s, plain decode tokens/s, and the verification cost curve: one
//! forward of n new tokens (n = 1..64) over a 256-token cache, as a ratio to n = 1, all
//! measured in one run, interleaved so machine noise hits every size alike.

use std::time::Instant;

use burn::tensor::Device;
use toki_decode::{Engine, EngineOptions, Prompt, Request};
use toki_model::AttnMask;

mod common;
use common::{count_from_env, join_rayon_pool, load_engine, median, path_from_env};

fn device() -> Device {
    match std::env::var("TOKI_BACKEND").as_deref() {
        #[cfg(feature = "wgpu")]
        Ok("wgpu") => Device::wgpu(burn::tensor::DeviceKind::DefaultDevice),
        #[cfg(feature = "cuda")]
        Ok("cuda") => Device::cuda(0),
        _ => Device::flex(),
    }
}

fn main() {
    join_rayon_pool();
    let dir = path_from_env("TOKI_MODEL", "models/smollm2-135m-instruct");
    let repeat = count_from_env("TOKI_REPEAT", 5);
    let device = device();
    let Some(engine) = load_engine(&device) else {
        return;
    };
    let model = engine.model();
    let rope = toki_model::RopeTables::new(model.config(), 512, &device);
    let vocab = model.config().vocab_size as u32;
    let ids = |n: usize, salt: u32| -> Vec<u32> {
        (0..n as u32)
            .map(|i| (i * 7919 + salt * 104729) % vocab)
            .collect()
    };
    // The same weights on Burn's matmul only, to time the host kernel side by side.
    let burn_only = model.clone().without_host_kernels();
    let run_on = |model: &toki_model::LlamaModel, prefix: usize, n: usize| -> f64 {
        let mut cache = model.new_cache(prefix + n);
        if prefix > 0 {
            let h = model.forward(
                engine_ids(&engine, &ids(prefix, 1)),
                positions(&engine, 0, prefix),
                &AttnMask::Causal,
                &mut cache,
                &rope,
            );
            let _ = h.into_data();
        }
        let t = Instant::now();
        let h = model.forward(
            engine_ids(&engine, &ids(n, 2)),
            positions(&engine, prefix, n),
            &AttnMask::Causal,
            &mut cache,
            &rope,
        );
        // The readback is what waits for the pass; a failed one is no timing.
        toki_decode::greedy_tokens(model, h).expect("reading back the arg-max");
        t.elapsed().as_secs_f64() * 1e3
    };
    let run = |prefix: usize, n: usize| run_on(model, prefix, n);

    // Prefill: 256 tokens from empty.
    run(0, 8);
    let prefill = median((0..repeat).map(|_| run(0, 256)).collect());
    println!(
        "prefill 256 tokens: {prefill:.1} ms = {:.0} tokens/s",
        256.0 / prefill * 1e3
    );

    // Plain decode through the library (greedy, 64 tokens).
    let req = Request::greedy(Prompt::Ids(ids(32, 3)), 64);
    let tps = median(
        (0..repeat.min(3))
            .map(|_| {
                engine
                    .generate(&req)
                    .expect("plain decoding")
                    .stats
                    .tokens_per_s
            })
            .collect(),
    );
    println!("plain decode: {tps:.1} tokens/s");

    // Speculative vs plain, side by side (A B A B), with *untrained* shared heads (each head
    // guesses the base's own next token, right only on repeats): a floor for τ, and the
    // cost of a speculative step on this backend. Trained heads are the training issue.
    let cfg =
        |k| toki_model::HeadsConfig::for_model(toki_model::HeadKind::Shared, k, 1, model.config());
    let chat = |s: &str| Prompt::Chat(vec![toki_model::tokenizer::Message::user(s)]);
    let prompts = [
        "Write a Python function that checks whether a number is prime.",
        "List the numbers from 1 to 20, one per line.",
    ];
    for (k, tree) in [(2usize, "chain-2"), (4, "small")] {
        let heads = toki_model::MedusaHeads::init(cfg(k), model).expect("heads");
        let paths: Vec<Vec<usize>> = toki_decode::TreePreset::parse(tree)
            .expect("preset")
            .paths();
        let spec = Engine::load(&dir, &device, &EngineOptions::default())
            .expect("model")
            .with_heads(
                heads,
                toki_decode::Tree::from_paths(&paths, k, 8).expect("tree"),
            )
            .expect("engine");
        for p in prompts {
            // The raw tree every step (no adaptive fall-back): the cost of a tree step.
            let req = Request {
                tree_policy: toki_decode::TreePolicy::Always,
                ..Request::greedy(chat(p), 96)
            };
            let (mut a, mut b, mut tau) = (vec![], vec![], 0.0);
            for _ in 0..repeat.min(2) {
                a.push(engine.generate(&req).expect("plain").stats.tokens_per_s);
                let o = spec.generate(&req).expect("spec");
                tau = o.stats.mean_accepted;
                b.push(o.stats.tokens_per_s);
            }
            let (a, b) = (median(a), median(b));
            println!(
                "untrained heads, tree {tree:>7}: tau {tau:.2}, plain {a:.1} tok/s, speculative {b:.1} tok/s, speedup {:.2}x  [{}]",
                b / a,
                &p[..30]
            );
        }
    }

    // Verification cost curve over a 256-token cache, with and without the host kernel
    // (toki-model/src/kernels.rs; used only on the cpu backend in f32).
    let sizes = [1usize, 2, 4, 8, 16, 32, 64];
    let host = model.uses_host_kernels();
    let variants: Vec<&toki_model::LlamaModel> = if host {
        vec![model, &burn_only]
    } else {
        vec![model]
    };
    let mut times = vec![vec![vec![]; sizes.len()]; variants.len()];
    for _ in 0..repeat {
        for (i, &n) in sizes.iter().enumerate() {
            for (v, m) in variants.iter().enumerate() {
                times[v][i].push(run_on(m, 256, n));
            }
        }
    }
    let meds: Vec<Vec<f64>> = times
        .into_iter()
        .map(|t| t.into_iter().map(median).collect())
        .collect();
    println!("verification cost over a 256-token cache (median of {repeat}):");
    if host {
        println!(
            "  new tokens | ms (host kernel) | ratio to 1 | ms (burn matmul) | ratio to 1 | host/burn"
        );
        for (i, n) in sizes.iter().enumerate() {
            let (a, b) = (meds[0][i], meds[1][i]);
            println!(
                "  {n:>10} | {a:>16.2} | {:>10.2} | {b:>16.2} | {:>10.2} | {:.2}",
                a / meds[0][0],
                b / meds[1][0],
                a / b
            );
        }
    } else {
        println!("  new tokens | ms      | ratio to 1");
        for (n, m) in sizes.iter().zip(&meds[0]) {
            println!("  {n:>10} | {m:>7.2} | {:.2}", m / meds[0][0]);
        }
    }
}

fn engine_ids(e: &Engine, ids: &[u32]) -> burn::tensor::Tensor<1, burn::tensor::Int> {
    let v: Vec<i64> = ids.iter().map(|&x| x as i64).collect();
    burn::tensor::Tensor::from_data(
        burn::tensor::TensorData::new(v, [ids.len()]),
        &e.model().device(),
    )
}

fn positions(e: &Engine, start: usize, n: usize) -> burn::tensor::Tensor<1, burn::tensor::Int> {
    let v: Vec<i64> = (start..start + n).map(|x| x as i64).collect();
    burn::tensor::Tensor::from_data(burn::tensor::TensorData::new(v, [n]), &e.model().device())
}
