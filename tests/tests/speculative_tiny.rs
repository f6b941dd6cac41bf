//! Golden equivalence on tiny random models: speculative greedy == plain greedy, token for
//! token, whatever the tree, the heads, and how much of each tree is accepted.

use toki_decode::{HeadProposer, Prompt, Request, Tree, TreePolicy, TreePreset};
use toki_model::{DraftVocab, HeadInput, HeadKind, HeadsConfig, MedusaHeads};
use toki_tests::{OracleProposer, prompt, tiny_engine};

fn heads_config(k: usize, kind: HeadKind) -> HeadsConfig {
    HeadsConfig::for_model(kind, k, 1, &toki_model::testing::tiny_config(64, 1, true))
}

fn trees() -> Vec<Vec<Vec<usize>>> {
    let mut t: Vec<Vec<Vec<usize>>> = (1..=5).map(|d| TreePreset::Chain(d).paths()).collect();
    t.push(TreePreset::Small.paths());
    t.push(TreePreset::Medium.paths());
    t.push(TreePreset::Medusa63.paths());
    t
}

#[test]
fn speculative_equals_plain_on_tiny_models() {
    let mut checked = 0;
    let mut accepted_somewhere = false;
    for (seed, kv, tied) in [
        (1u64, 4usize, true),
        (2, 2, false),
        (3, 1, true),
        (4, 2, true),
    ] {
        let plain_engine = tiny_engine(seed, kv, tied);
        let p = prompt(seed, 9, 64);
        let req = Request {
            tree_policy: TreePolicy::Always,
            ..Request::greedy(Prompt::Ids(p.clone()), 40)
        };
        let plain = plain_engine.generate(&req).unwrap();
        assert_eq!(plain.output_ids.len(), 40);
        let mut reference = p.clone();
        reference.extend(&plain.output_ids);
        for (ti, paths) in trees().iter().enumerate() {
            let tree = Tree::from_paths(paths, 5, 10).unwrap();
            // Proposers: random heads, untrained heads (the base's own next-token
            // guess), and a noisy oracle.
            let random = MedusaHeads::random(
                heads_config(5, HeadKind::Own),
                seed + ti as u64,
                0.3,
                &plain_engine.model().device(),
            )
            .unwrap();
            let untrained =
                MedusaHeads::init(heads_config(5, HeadKind::Shared), plain_engine.model()).unwrap();
            let oracle = OracleProposer {
                reference: reference.clone(),
                depth: 5,
                vocab: 64,
                noise: true,
            };
            // The same heads scoring only a draft vocabulary (every third token, then
            // the rest of the first 40): proposals outside it are impossible, output not.
            let draft_ids: Vec<u32> = (0..64).step_by(3).chain(1..40).fold(vec![], |mut v, t| {
                if !v.contains(&t) {
                    v.push(t);
                }
                v
            });
            let draft = |heads: MedusaHeads| {
                let d = DraftVocab::new(draft_ids.clone(), &heads, plain_engine.model()).unwrap();
                HeadProposer::with_draft(heads, d)
            };
            // Heads that also read the root token (random weights, so it matters).
            let next_input = MedusaHeads::random(
                HeadsConfig {
                    input: HeadInput::HiddenAndNext,
                    ..heads_config(5, HeadKind::Shared)
                },
                seed + 100 + ti as u64,
                0.3,
                &plain_engine.model().device(),
            )
            .unwrap();
            let random_draft = draft(random.clone());
            let untrained_draft = draft(untrained.clone());
            let proposers: Vec<Box<dyn toki_decode::proposer::Proposer>> = vec![
                Box::new(HeadProposer::new(random)),
                Box::new(HeadProposer::new(untrained)),
                Box::new(oracle),
                Box::new(random_draft),
                Box::new(untrained_draft),
                Box::new(draft(next_input)),
            ];
            for (pi, proposer) in proposers.into_iter().enumerate() {
                let engine = tiny_engine(seed, kv, tied)
                    .with_proposer(proposer, tree.clone())
                    .unwrap();
                let spec = engine.generate(&req).unwrap();
                assert_eq!(
                    spec.output_ids, plain.output_ids,
                    "seed {seed} tree {ti} proposer {pi}"
                );
                assert_eq!(
                    spec.stats.accept_lengths.iter().sum::<usize>() + 1,
                    spec.output_ids.len()
                );
                accepted_somewhere |= spec.stats.accept_lengths.iter().any(|&a| a > 1);
                // The adaptive policy mixes plain and tree steps by measured speed: the
                // tokens are the same whatever it picks.
                let adaptive = Request {
                    tree_policy: TreePolicy::Adaptive,
                    ..req.clone()
                };
                assert_eq!(
                    engine.generate(&adaptive).unwrap().output_ids,
                    plain.output_ids
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 4 * 8 * 6);
    assert!(
        accepted_somewhere,
        "no proposal was ever accepted: the test would not see a wrong acceptance"
    );
}

#[test]
fn perfect_oracle_reaches_depth_plus_one_tokens_per_step() {
    let plain_engine = tiny_engine(7, 2, true);
    let p = prompt(7, 6, 64);
    for depth in 1..=4 {
        // 1 token from the prefill, then 10 full steps.
        let n = 1 + 10 * (depth + 1);
        let req = Request {
            tree_policy: TreePolicy::Always,
            ..Request::greedy(Prompt::Ids(p.clone()), n)
        };
        let plain = plain_engine.generate(&req).unwrap();
        let mut reference = p.clone();
        reference.extend(&plain.output_ids);
        let oracle = OracleProposer {
            reference,
            depth,
            vocab: 64,
            noise: false,
        };
        let tree = Tree::from_paths(&TreePreset::Chain(depth).paths(), depth, 1).unwrap();
        let engine = tiny_engine(7, 2, true)
            .with_proposer(Box::new(oracle), tree)
            .unwrap();
        let spec = engine.generate(&req).unwrap();
        assert_eq!(spec.output_ids, plain.output_ids);
        assert_eq!(spec.stats.steps, 10, "depth {depth}");
        assert_eq!(
            spec.stats.mean_accepted,
            (depth + 1) as f64,
            "depth {depth}"
        );
        assert!(spec.stats.head_acceptance.iter().all(|&a| a == 1.0));
    }
}

#[test]
fn context_end_falls_back_to_plain_steps() {
    // The context leaves no room for the full tree near the end: still identical.
    let mk = || tiny_engine(5, 2, false);
    let p = prompt(5, 20, 64);
    let req = Request {
        tree_policy: TreePolicy::Always,
        ..Request::greedy(Prompt::Ids(p.clone()), 1000)
    };
    let small = |e: toki_decode::Engine| {
        toki_decode::Engine::from_parts(
            toki_model::LlamaModel::from_weights(
                &toki_model::testing::tiny_config(64, 2, false),
                &mut toki_model::weights::RandomWeights { seed: 5, std: 0.3 },
                &e.model().device(),
                toki_model::Precision::F32,
            )
            .unwrap(),
            None,
            vec![],
            48,
        )
    };
    let plain = small(mk()).generate(&req).unwrap();
    assert_eq!(plain.finish_reason, toki_decode::FinishReason::ContextFull);
    let mut reference = p.clone();
    reference.extend(&plain.output_ids);
    let oracle = OracleProposer {
        reference,
        depth: 4,
        vocab: 64,
        noise: true,
    };
    let tree = Tree::from_paths(&TreePreset::Small.paths(), 4, 2).unwrap();
    let spec = small(mk())
        .with_proposer(Box::new(oracle), tree)
        .unwrap()
        .generate(&req)
        .unwrap();
    assert_eq!(spec.output_ids, plain.output_ids);
    assert_eq!(spec.finish_reason, toki_decode::FinishReason::ContextFull);
}

#[test]
fn batched_greedy_equals_one_prompt_at_a_time() {
    for (seed, kv) in [(5u64, 2usize), (6, 1)] {
        let engine = tiny_engine(seed, kv, true);
        // Prompts of different lengths share one cache and one pass per step.
        let prompts: Vec<Vec<u32>> = (0..4)
            .map(|i| prompt(seed + i, 3 + 2 * i as usize, 64))
            .collect();
        let batched = engine.generate_batch(&prompts, 24).unwrap();
        for (p, got) in prompts.iter().zip(&batched) {
            let alone = engine
                .generate(&Request::greedy(Prompt::Ids(p.clone()), 24))
                .unwrap();
            assert_eq!(got, &alone.output_ids, "seed {seed}, prompt {p:?}");
        }
    }
}
