//! Golden equivalence on tiny random models: speculative greedy == plain greedy, token for
//! token, whatever the tree, the heads, and how much of each tree is accepted.

use toki_decode::adapt::Estimates;
use toki_decode::proposer::{Conditioning, Ranked, StepInput};
use toki_decode::{
    Datastore, DynamicTree, Engine, HeadProposer, Lookup, Prompt, Proposer, Request, Tree,
    TreePolicy, TreePreset,
};
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

/// The proposers every tree is checked with: random heads, untrained heads (the base's own
/// next-token guess), a noisy oracle, the same heads scoring a draft vocabulary, heads
/// that also read the root token, and path heads (each reading the earlier heads' top-1
/// proposals), scoring the whole vocabulary and a draft one.
fn proposers(
    engine: &Engine,
    seed: u64,
    reference: &[u32],
) -> Vec<Box<dyn toki_decode::proposer::Proposer>> {
    let device = engine.model().device();
    let random = MedusaHeads::random(heads_config(5, HeadKind::Own), seed, 0.3, &device).unwrap();
    let untrained = MedusaHeads::init(heads_config(5, HeadKind::Shared), engine.model()).unwrap();
    let oracle = OracleProposer {
        reference: reference.to_vec(),
        depth: 5,
        vocab: 64,
        noise: true,
        honest: false,
    };
    // A draft vocabulary (every third token, then the rest of the first 40): proposals
    // outside it are impossible, output not.
    let draft_ids: Vec<u32> = (0..64).step_by(3).chain(1..40).fold(vec![], |mut v, t| {
        if !v.contains(&t) {
            v.push(t);
        }
        v
    });
    let draft = |heads: MedusaHeads| {
        let d = DraftVocab::new(draft_ids.clone(), &heads, engine.model()).unwrap();
        HeadProposer::with_draft(heads, d)
    };
    // Heads that also read what is known past the hidden state (random weights, so it
    // matters): the root token; the root and the earlier heads' top-1 proposals (chain).
    let reading = |input: HeadInput, kind: HeadKind, seed: u64| {
        let cfg = HeadsConfig {
            input,
            ..heads_config(5, kind)
        };
        MedusaHeads::random(cfg, seed, 0.3, &device).unwrap()
    };
    let next_input = reading(HeadInput::HiddenAndNext, HeadKind::Shared, seed + 100);
    let path_input = reading(HeadInput::HiddenAndPath, HeadKind::Own, seed + 200);
    vec![
        Box::new(HeadProposer::new(path_input.clone())),
        Box::new(HeadProposer::new(random.clone())),
        Box::new(HeadProposer::new(untrained.clone())),
        Box::new(oracle),
        Box::new(draft(random)),
        Box::new(draft(untrained)),
        Box::new(draft(next_input)),
        Box::new(draft(path_input)),
    ]
}

/// The plain greedy run (a prompt of `prompt_len` tokens) every speculative one must
/// equal, and prompt + output.
fn plain_run(
    seed: u64,
    kv: usize,
    tied: bool,
    prompt_len: usize,
    tokens: usize,
) -> (Request, Vec<u32>, Vec<u32>) {
    let p = prompt(seed, prompt_len, 64);
    let req = Request {
        tree_policy: TreePolicy::Always,
        ..Request::greedy(Prompt::Ids(p.clone()), tokens)
    };
    let plain = tiny_engine(seed, kv, tied).generate(&req).unwrap();
    assert_eq!(plain.output_ids.len(), tokens);
    let mut reference = p;
    reference.extend(&plain.output_ids);
    (req, plain.output_ids, reference)
}

const MODELS: [(u64, usize, bool); 4] = [(1, 4, true), (2, 2, false), (3, 1, true), (4, 2, true)];

#[test]
fn speculative_equals_plain_on_tiny_models() {
    let mut checked = 0;
    let mut accepted_somewhere = false;
    for (seed, kv, tied) in MODELS {
        let (req, plain, reference) = plain_run(seed, kv, tied, 9, 40);
        for (ti, paths) in trees().iter().enumerate() {
            let tree = Tree::from_paths(paths, 5, 10).unwrap();
            let engine = tiny_engine(seed, kv, tied);
            for (pi, proposer) in proposers(&engine, seed + ti as u64, &reference)
                .into_iter()
                .enumerate()
            {
                let engine = tiny_engine(seed, kv, tied)
                    .with_proposer(proposer, tree.clone())
                    .unwrap();
                let spec = engine.generate(&req).unwrap();
                assert_eq!(
                    spec.output_ids, plain,
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
                assert_eq!(engine.generate(&adaptive).unwrap().output_ids, plain);
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 4 * 8 * 8);
    assert!(
        accepted_somewhere,
        "no proposal was ever accepted: the test would not see a wrong acceptance"
    );
}

#[test]
fn dynamic_trees_equal_plain_on_tiny_models() {
    // Cost curves: a CPU's (steep), a GPU's (flat up to 32 nodes), and a calibration that
    // makes every head look sure (deep trees from random heads). Two of the four models
    // (GQA untied, MQA tied):
    // every new tree size compiles new kernels on wgpu (lavapipe), where this runs too.
    let steep: Vec<f64> = (0..16).map(|n| 1.0 + 0.04 * n as f64 * n as f64).collect();
    let flat: Vec<f64> = (0..32).map(|n| 1.0 + 0.002 * n as f64).collect();
    let dynamics = [
        DynamicTree::new(steep.clone(), 0.03, 4, vec![]).unwrap(),
        DynamicTree::new(flat, 0.01, 6, vec![]).unwrap(),
        DynamicTree::new(steep, 0.03, 3, vec![vec![0.9, 0.95]; 5]).unwrap(),
    ];
    let (mut checked, mut sizes) = (0, std::collections::BTreeSet::new());
    for (seed, kv, tied) in [MODELS[1], MODELS[2]] {
        let (req, plain, reference) = plain_run(seed, kv, tied, 9, 40);
        for (di, dynamic) in dynamics.iter().enumerate() {
            let engine = tiny_engine(seed, kv, tied);
            for (pi, proposer) in proposers(&engine, seed + di as u64, &reference)
                .into_iter()
                .enumerate()
            {
                let engine = tiny_engine(seed, kv, tied)
                    .with_dynamic_tree(proposer, dynamic.clone())
                    .unwrap();
                let spec = engine.generate(&req).unwrap();
                assert_eq!(
                    spec.output_ids, plain,
                    "seed {seed} dynamic {di} proposer {pi}"
                );
                sizes.insert(spec.stats.verified_nodes * 100 / spec.stats.steps);
                for policy in [TreePolicy::Adaptive, TreePolicy::Never] {
                    let other = Request {
                        tree_policy: policy,
                        ..req.clone()
                    };
                    assert_eq!(engine.generate(&other).unwrap().output_ids, plain);
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 3 * 8);
    assert!(sizes.len() > 10, "tree sizes barely varied: {sizes:?}");
}

/// Each policy's run of `req` on `engine` gives `plain`; returns the most tokens one step
/// emitted and the tokens accepted on chain nodes, over the runs.
fn equal_plain_runs(
    engine: &Engine,
    req: &Request,
    policies: &[TreePolicy],
    plain: &[u32],
    what: &str,
) -> (usize, usize) {
    let (mut deepest, mut chained) = (0, 0);
    for &policy in policies {
        let r = Request {
            tree_policy: policy,
            ..req.clone()
        };
        let spec = engine.generate(&r).unwrap();
        assert_eq!(spec.output_ids, plain, "{what} {policy:?}");
        let most = spec.stats.accept_lengths.iter().max().copied();
        deepest = deepest.max(most.unwrap_or(0));
        chained += spec.stats.lookup_tokens;
    }
    (deepest, chained)
}

#[test]
fn prompt_lookup_grafts_equal_plain_on_tiny_models() {
    // Two heads and lookup chains of up to six tokens: a step that emits more than three
    // tokens accepted grafted lookup nodes. One-token matches count here, so the tiny
    // models' text (which repeats itself) gives many chains, right and wrong.
    let lookup = Lookup {
        min_match: 1,
        max_match: 3,
        max_len: 6,
    };
    let steep: Vec<f64> = (0..12).map(|n| 1.0 + 0.01 * n as f64 * n as f64).collect();
    let flat: Vec<f64> = (0..16).map(|n| 1.0 + 0.002 * n as f64).collect();
    let dynamics = [
        DynamicTree::new(steep, 0.03, 3, vec![]).unwrap(),
        DynamicTree::new(flat, 0.01, 4, vec![]).unwrap(),
    ];
    let (mut deepest, mut checked, mut by_lookup) = (0, 0, 0);
    // Prompts after which these two models repeat themselves for a while.
    for (seed, kv, tied) in [MODELS[2], MODELS[3]] {
        let (req, plain, _) = plain_run(seed, kv, tied, 20, 60);
        let device = toki_tests::device();
        for (di, dynamic) in dynamics.iter().enumerate() {
            for input in [HeadInput::Hidden, HeadInput::HiddenAndPath] {
                let cfg = HeadsConfig {
                    input,
                    ..heads_config(2, HeadKind::Own)
                };
                let heads = MedusaHeads::random(cfg, seed + di as u64, 0.3, &device).unwrap();
                let engine = tiny_engine(seed, kv, tied)
                    .with_dynamic_tree(Box::new(HeadProposer::new(heads)), dynamic.clone())
                    .unwrap()
                    .with_lookup(Some(lookup))
                    .unwrap();
                // The second request starts from what the first learnt of the chains.
                let policies = [TreePolicy::Always, TreePolicy::Always, TreePolicy::Adaptive];
                let what = format!("seed {seed} dynamic {di} {input:?}");
                let (most, chained) = equal_plain_runs(&engine, &req, &policies, &plain, &what);
                deepest = deepest.max(most);
                by_lookup += chained;
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 2 * 2);
    assert!(
        deepest > 3,
        "no lookup node was ever accepted (at most {deepest} tokens a step)"
    );
    assert!(by_lookup > 0, "no token was accepted on a lookup node");
    // Lookup grafts onto dynamic trees only, and needs sane lengths.
    let static_tree = Tree::from_paths(&TreePreset::Chain(2).paths(), 2, 1).unwrap();
    let heads = MedusaHeads::random(
        heads_config(2, HeadKind::Own),
        1,
        0.3,
        &toki_tests::device(),
    );
    let engine = tiny_engine(1, 4, true)
        .with_proposer(Box::new(HeadProposer::new(heads.unwrap())), static_tree)
        .unwrap();
    let err = engine
        .with_lookup(Some(lookup))
        .err()
        .expect("static tree refused");
    assert!(err.to_string().contains("dynamic"), "{err}");
    let bad = Lookup {
        min_match: 3,
        max_match: 2,
        max_len: 4,
    };
    let heads = MedusaHeads::random(
        heads_config(2, HeadKind::Own),
        1,
        0.3,
        &toki_tests::device(),
    );
    let engine = tiny_engine(1, 4, true)
        .with_dynamic_tree(
            Box::new(HeadProposer::new(heads.unwrap())),
            dynamics[0].clone(),
        )
        .unwrap();
    assert!(engine.with_lookup(Some(bad)).is_err());
}

#[test]
fn back_off_steps_verify_lookup_chains_and_equal_plain() {
    // Speculation found not to pay: each request starts in a back-off longer than it is.
    // Its plain steps still verify the chains prompt lookup finds where they are worth a
    // node (no heads' pass), and the output is plain decoding's; the baseline
    // (`TreePolicy::Never`) verifies the root alone.
    let backing_off = Estimates {
        plain_s: Some(1e-3),
        spec_s: Some(1e-2),
        tau: Some(1.0),
        backoff: 128,
        plain_left: 128,
    };
    let lookup = Lookup {
        min_match: 1,
        max_match: 3,
        max_len: 6,
    };
    let steep: Vec<f64> = (0..12).map(|n| 1.0 + 0.01 * n as f64 * n as f64).collect();
    let (mut chain_steps, mut by_lookup) = (0, 0);
    for (seed, kv, tied) in [MODELS[2], MODELS[3]] {
        let (req, plain, _) = plain_run(seed, kv, tied, 20, 60);
        let device = toki_tests::device();
        let heads = MedusaHeads::random(heads_config(2, HeadKind::Own), seed, 0.3, &device);
        let engine = tiny_engine(seed, kv, tied)
            .with_dynamic_tree(
                Box::new(HeadProposer::new(heads.unwrap())),
                DynamicTree::new(steep.clone(), 0.03, 3, vec![]).unwrap(),
            )
            .unwrap()
            .with_lookup(Some(lookup))
            .unwrap();
        for policy in [TreePolicy::Adaptive, TreePolicy::Never] {
            engine.set_policy_estimates(backing_off);
            let r = Request {
                tree_policy: policy,
                ..req.clone()
            };
            let out = engine.generate(&r).unwrap();
            let s = &out.stats;
            assert_eq!(out.output_ids, plain, "seed {seed} {policy:?}");
            // No probe: every step that verified more than its root verified chains.
            assert_eq!(s.speculative_steps, s.chain_steps, "seed {seed} {policy:?}");
            if policy == TreePolicy::Never {
                assert_eq!((s.chain_steps, s.verified_nodes), (0, s.steps), "{s:?}");
            }
            chain_steps += s.chain_steps;
            by_lookup += s.lookup_tokens;
        }
    }
    assert!(chain_steps > 0, "no back-off step verified a chain");
    assert!(by_lookup > 0, "no token was accepted on a chain node");
}

#[test]
fn datastore_chains_equal_plain_on_tiny_models() {
    // Three corpora: the model's own answer to this very prompt among random documents
    // (chains often right, deep), random documents only (chains almost always wrong), and
    // the same beside prompt lookup. Every output equals plain decoding.
    let dynamic = DynamicTree::new(
        (0..16).map(|n| 1.0 + 0.002 * n as f64).collect(),
        0.01,
        3,
        vec![],
    )
    .unwrap();
    let noise: Vec<Vec<u32>> = (0..8).map(|i| prompt(100 + i, 30, 64)).collect();
    let (mut deepest, mut by_chains, mut checked) = (0, 0, 0);
    for (seed, kv, tied) in [MODELS[0], MODELS[2], MODELS[3]] {
        let (req, plain, _) = plain_run(seed, kv, tied, 20, 60);
        let device = toki_tests::device();
        let with_answer = noise.iter().cloned().chain([plain.clone()]);
        for (corpus, lookup) in [
            (with_answer.collect::<Vec<_>>(), None),
            (noise.clone(), None),
            (noise.clone(), Some(Lookup::default())),
        ] {
            let heads = MedusaHeads::random(heads_config(2, HeadKind::Own), seed, 0.3, &device);
            let engine = tiny_engine(seed, kv, tied)
                .with_dynamic_tree(Box::new(HeadProposer::new(heads.unwrap())), dynamic.clone())
                .unwrap()
                .with_lookup(lookup)
                .unwrap()
                .with_datastore(Some(Datastore::new(corpus).unwrap()))
                .unwrap();
            let policies = [TreePolicy::Always, TreePolicy::Adaptive];
            let what = format!("seed {seed} lookup {lookup:?}");
            let (most, chained) = equal_plain_runs(&engine, &req, &policies, &plain, &what);
            deepest = deepest.max(most);
            by_chains += chained;
            checked += 1;
        }
    }
    assert_eq!(checked, 3 * 3);
    assert!(
        deepest > 3,
        "no datastore node was ever accepted (at most {deepest} a step)"
    );
    assert!(by_chains > 0, "no token was accepted on a chain's node");
    // A datastore grafts onto dynamic trees only, and its ids must fit the vocabulary.
    let heads = || {
        let h = MedusaHeads::random(
            heads_config(2, HeadKind::Own),
            1,
            0.3,
            &toki_tests::device(),
        );
        Box::new(HeadProposer::new(h.unwrap()))
    };
    let static_tree = Tree::from_paths(&TreePreset::Chain(2).paths(), 2, 1).unwrap();
    let err = tiny_engine(1, 4, true)
        .with_proposer(heads(), static_tree)
        .unwrap()
        .with_datastore(Some(Datastore::new(noise.clone()).unwrap()))
        .err()
        .expect("static tree refused");
    assert!(err.to_string().contains("dynamic"), "{err}");
    let err = tiny_engine(1, 4, true)
        .with_dynamic_tree(heads(), dynamic)
        .unwrap()
        .with_datastore(Some(Datastore::new([vec![1, 2, 64]]).unwrap()))
        .err()
        .expect("a token outside the vocabulary refused");
    assert!(err.to_string().contains("64"), "{err}");
}

/// A proposer that counts the calls made to it.
struct CountingProposer<P> {
    inner: P,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl<P> CountingProposer<P> {
    fn new(inner: P) -> Self {
        Self {
            inner,
            calls: Default::default(),
        }
    }
    fn count(&self) {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl<P: Proposer> Proposer for CountingProposer<P> {
    fn num_heads(&self) -> usize {
        self.inner.num_heads()
    }
    fn max_rank(&self) -> usize {
        self.inner.max_rank()
    }
    fn rank(&self, input: StepInput<'_>, top_k: &[usize]) -> toki_decode::Result<Vec<Ranked>> {
        self.count();
        self.inner.rank(input, top_k)
    }
    fn rank_until(
        &self,
        input: StepInput<'_>,
        top_k: &[usize],
        enough: &mut dyn FnMut(&[Ranked]) -> bool,
    ) -> toki_decode::Result<Vec<Ranked>> {
        self.count();
        self.inner.rank_until(input, top_k, enough)
    }
    fn conditioning(&self) -> Conditioning {
        self.inner.conditioning()
    }
}

#[test]
fn a_tree_of_the_root_alone_decodes_plainly() {
    // Every step verifies the root only, with or without the adaptive policy: no step is
    // speculative and no head runs, not even in a plain step's shadow.
    let (req, plain, reference) = plain_run(3, 2, true, 9, 40);
    let root_only = Tree::from_paths(&[], 2, 1).unwrap();
    for policy in [TreePolicy::Adaptive, TreePolicy::Always] {
        let proposer = CountingProposer::new(OracleProposer {
            reference: reference.clone(),
            depth: 2,
            vocab: 64,
            noise: false,
            honest: true,
        });
        let calls = proposer.calls.clone();
        let out = tiny_engine(3, 2, true)
            .with_proposer(Box::new(proposer), root_only.clone())
            .unwrap()
            .generate(&Request {
                tree_policy: policy,
                ..req.clone()
            })
            .unwrap();
        assert_eq!(out.output_ids, plain, "{policy:?}");
        assert_eq!(out.stats.speculative_steps, 0, "{policy:?}");
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{policy:?}"
        );
    }
}

#[test]
fn dynamic_trees_spend_nodes_where_the_heads_are_sure() {
    // An oracle that is sure (0.95) when right and unsure (0.05) when wrong: the dynamic
    // tree stops each chain where the oracle goes wrong, so it accepts exactly what the
    // static chain accepts while verifying fewer nodes.
    let (req, plain, reference) = plain_run(11, 2, true, 9, 60);
    let oracle = || OracleProposer {
        reference: reference.clone(),
        depth: 4,
        vocab: 64,
        noise: true,
        honest: true,
    };
    let chain = Tree::from_paths(&TreePreset::Chain(4).paths(), 4, 1).unwrap();
    let fixed = tiny_engine(11, 2, true)
        .with_proposer(Box::new(oracle()), chain)
        .unwrap()
        .generate(&req)
        .unwrap();
    let cost: Vec<f64> = (0..8).map(|n| 1.0 + 0.05 * n as f64).collect();
    let dynamic = DynamicTree::new(cost, 0.0, 1, vec![]).unwrap();
    let sized = tiny_engine(11, 2, true)
        .with_dynamic_tree(Box::new(oracle()), dynamic)
        .unwrap()
        .generate(&req)
        .unwrap();
    assert_eq!(fixed.output_ids, plain);
    assert_eq!(sized.output_ids, plain);
    assert_eq!(sized.stats.accept_lengths, fixed.stats.accept_lengths);
    assert!(
        fixed.stats.mean_accepted > 1.5,
        "{}",
        fixed.stats.mean_accepted
    );
    assert!(
        sized.stats.verified_nodes < fixed.stats.verified_nodes * 3 / 4,
        "{} vs {} nodes",
        sized.stats.verified_nodes,
        fixed.stats.verified_nodes
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
            honest: false,
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
    // The context leaves no room for the full tree near the end: still identical, and the
    // output ends where prompt and output fill the context.
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
    // Prompt and output fill the context (48), no more.
    assert_eq!(p.len() + plain.output_ids.len(), 48);
    let mut reference = p.clone();
    reference.extend(&plain.output_ids);
    let oracle = OracleProposer {
        reference,
        depth: 4,
        vocab: 64,
        noise: true,
        honest: false,
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

#[test]
fn heads_stop_where_the_step_has_enough() {
    // On the host kernels (flex), `rank_until` ranks head by head and runs no head past the
    // one that is enough; elsewhere (wgpu: one read-back per head would wait on the device
    // each time) it ranks every head, as `rank`. What it ranks is what `rank` ranks (path
    // heads, whole vocabulary and a draft one).
    use toki_decode::{Proposer, proposer::StepInput};
    let engine = tiny_engine(11, 2, true);
    let model = engine.model();
    let cfg = HeadsConfig {
        input: HeadInput::HiddenAndPath,
        ..heads_config(3, HeadKind::Shared)
    };
    let heads = MedusaHeads::random(cfg, 12, 0.3, &model.device()).unwrap();
    let draft = DraftVocab::new((0..40).collect(), &heads, model).unwrap();
    let history = prompt(11, 9, 64);
    let rope = toki_model::RopeTables::new(model.config(), history.len(), &model.device());
    let hidden = model.sequence_hidden(&history, &rope).slice([8..9]); // [1, D]
    let input = || StepInput {
        base: model,
        hidden: hidden.clone(),
        history: &history,
    };
    for p in [
        HeadProposer::new(heads.clone()),
        HeadProposer::with_draft(heads, draft),
    ] {
        let k = [4, 3, 2];
        let all = p.rank(input(), &k).unwrap();
        assert_eq!(all.len(), 3);
        let mut told = vec![];
        let first = p
            .rank_until(input(), &k, &mut |r| {
                told.push(r.len());
                r.len() == 1
            })
            .unwrap();
        let host = model.uses_host_kernels();
        match host {
            true => assert_eq!((first, told), (all[..1].to_vec(), vec![1])),
            false => assert_eq!((first, told), (all.clone(), vec![])),
        }
        let mut told = vec![];
        let every = p
            .rank_until(input(), &k, &mut |r| {
                told.push(r.len());
                false
            })
            .unwrap();
        // The last head needs no verdict: nothing comes after it.
        let asked = if host { vec![1, 2] } else { vec![] };
        assert_eq!((every, told), (all.clone(), asked));
        assert_eq!(
            p.rank_until(input(), &k[..2], &mut |_| false).unwrap(),
            all[..2].to_vec()
        );
    }
}
