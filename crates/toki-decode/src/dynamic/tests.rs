//! Unit tests of the dynamic tree: the greedy construction, the choice, settled heads,
//! costs and feedback.

use super::*;

fn ranked(probs: &[&[f32]]) -> Vec<Ranked> {
    probs
        .iter()
        .map(|p| p.iter().enumerate().map(|(i, &x)| (i as u32, x)).collect())
        .collect()
}

fn tree(cost: &[f64]) -> DynamicTree {
    DynamicTree::new(cost.to_vec(), 0.0, 4, vec![]).unwrap()
}

fn at(lambda: f64) -> Feedback {
    Feedback {
        lambda,
        ..Feedback::default()
    }
}

#[test]
fn greedy_tree_adds_the_likeliest_paths_first() {
    let acc = vec![vec![0.6, 0.2, 0.05], vec![0.5, 0.1, 0.0]];
    let (paths, e) = greedy_tree(&acc, 5, Conditioning::Independent);
    // [0] .6, [0,0] .3, [1] .2, then [1,0] .1 over [0,1] .06 and [2] .05
    assert_eq!(paths, vec![vec![0], vec![0, 0], vec![1], vec![1, 0]]);
    assert!((e[4] - (1.0 + 0.6 + 0.3 + 0.2 + 0.1)).abs() < 1e-12);
    // Chain-conditioned proposals: [1] gets no children, [0,1] comes next instead.
    let (paths, e) = greedy_tree(&acc, 5, Conditioning::Chain);
    assert_eq!(paths, vec![vec![0], vec![0, 0], vec![1], vec![0, 1]]);
    assert!((e[4] - (1.0 + 0.6 + 0.3 + 0.2 + 0.06)).abs() < 1e-12);
}

#[test]
fn worked_example_of_the_module_docs() {
    let t = tree(&[1.0, 1.04, 1.09, 1.2, 1.3]);
    let r = ranked(&[&[0.92, 0.03], &[0.82], &[0.12]]);
    let c = t.choose(&r, &at(1.3), &t.costs_at(128));
    assert_eq!(c.paths, vec![vec![0], vec![0, 0]]);
    assert!((c.expected() - (0.92 + 0.92 * 0.82)).abs() < 1e-6);
    assert!((c.reach[1] - 0.92 * 0.82).abs() < 1e-6 && c.reach[2] == 0.0);
}

#[test]
fn sure_heads_go_deep_and_guessing_heads_verify_the_root_alone() {
    let t = tree(&[1.0, 1.04, 1.09, 1.13, 1.3, 1.5]);
    let sure = ranked(&[&[0.97, 0.01], &[0.95, 0.01], &[0.9, 0.01]]);
    assert_eq!(
        t.choose(&sure, &at(1.5), &t.costs_at(128)).paths,
        vec![vec![0], vec![0, 0], vec![0, 0, 0]]
    );
    let guessing = ranked(&[&[0.04, 0.03], &[0.05], &[0.02]]);
    assert!(
        t.choose(&guessing, &at(1.0), &t.costs_at(128))
            .paths
            .is_empty()
    );
}

#[test]
fn settled_heads_choose_what_all_heads_would() {
    // Random heads (best first), costs (not always convex, not always rising), λ and
    // feedback: when heads 0..=h are settled, the choice over every head is theirs; it
    // fires, and not always, also after heads 1 and 2 with a tree that is not the root
    // alone.
    let mut seed = 11u64;
    let mut rnd = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    let (mut fired, mut deeper, mut trials) = (0, 0, 0);
    for _ in 0..2000 {
        let mut cost = vec![1.0];
        for _ in 0..7 {
            let last = *cost.last().unwrap();
            cost.push(last + rnd() * 0.4 - 0.05);
        }
        let t = tree(&cost);
        let scale = rnd().powi(2);
        let heads: Vec<Vec<f32>> = (0..4)
            .map(|_| {
                let mut h: Vec<f32> = (0..3).map(|_| (rnd() * scale) as f32).collect();
                h.sort_by(|a, b| b.total_cmp(a));
                h
            })
            .collect();
        let probs: Vec<&[f32]> = heads.iter().map(|h| &h[..]).collect();
        let r = ranked(&probs);
        let mut fb = at(1.0 + rnd());
        let choice = Choice {
            paths: vec![vec![0]],
            reach: (0..4).map(|_| rnd()).collect(),
        };
        fb.observe(&t.costs_at(128), 2, &choice, 1 + (rnd() * 3.0) as usize, 1);
        let costs = t.costs_at(128);
        for conditioning in [Conditioning::Independent, Conditioning::Chain] {
            let all = t.choose_for(&r, &fb, &costs, conditioning);
            for h in 0..3 {
                trials += 1;
                let ran = &r[..=h];
                if t.settled(ran, &fb, &costs, conditioning) {
                    fired += 1;
                    let mine = t.choose_for(ran, &fb, &costs, conditioning);
                    assert_eq!(mine.paths, all.paths, "{cost:?} {heads:?} {fb:?} h={h}");
                    deeper += usize::from(h > 0 && !mine.paths.is_empty());
                }
            }
        }
    }
    assert!(
        fired > trials / 10 && fired < trials * 9 / 10,
        "{fired} of {trials}"
    );
    assert!(deeper > trials / 20, "{deeper} of {trials}");
    // Guessing head 0: the root alone, settled; a sure one is not.
    let t = tree(&[1.0, 1.2, 1.3, 1.7]);
    let costs = t.costs_at(128);
    let settled = |p: &[f32]| t.settled(&ranked(&[p]), &at(1.0), &costs, Conditioning::Chain);
    assert!(settled(&[0.05, 0.04]));
    assert!(!settled(&[0.6, 0.1]));
}

#[test]
fn cheaper_verification_buys_a_wider_tree() {
    let r = ranked(&[&[0.5, 0.3, 0.1], &[0.5, 0.2], &[0.4]]);
    let pick = |t: DynamicTree| t.choose(&r, &at(1.2), &t.costs_at(128)).paths;
    let steep = pick(tree(&[1.0, 1.2, 1.5, 1.9, 2.4, 3.0]));
    let flat = pick(tree(&[1.0, 1.01, 1.02, 1.03, 1.04, 1.05]));
    assert!(steep.len() < flat.len(), "{steep:?} vs {flat:?}");
    assert_eq!(flat.len(), 5);
}

#[test]
fn calibration_replaces_the_heads_probabilities() {
    // Head 2 says .3 but is right 90% of the time after a right head 1.
    let acc = vec![
        vec![0.5; 10],
        vec![0.1, 0.1, 0.1, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9],
    ];
    let t = DynamicTree::new(vec![1.0, 1.05, 1.1], 0.0, 4, acc).unwrap();
    assert_eq!(t.estimate(1, 0.35), 0.9);
    assert_eq!(t.estimate(1, 1.0), 0.9);
    assert_eq!(t.estimate(0, 0.99), 0.5);
    let r = ranked(&[&[0.95], &[0.35]]);
    assert_eq!(
        t.choose(&r, &at(1.0), &t.costs_at(128)).paths,
        vec![vec![0], vec![0, 0]]
    );
}

#[test]
fn lambda_follows_what_steps_yield_and_never_drops_below_one() {
    let t = DynamicTree::new(vec![2.0, 2.0, 2.2], 0.2, 4, vec![]).unwrap();
    assert_eq!(t.cost, vec![1.0, 1.0, 1.1]);
    let chain = Choice {
        paths: vec![vec![0], vec![0, 0]],
        reach: vec![0.9, 0.8],
    };
    // 3 tokens for 1.1 + 0.1 units
    let mut fb = Feedback::default();
    fb.observe(&t.costs_at(128), 3, &chain, 3, 3);
    assert!((fb.lambda - (0.75 + 0.25 * 3.0 / 1.2)).abs() < 1e-12);
    let mut fb = Feedback::default();
    fb.observe(
        &t.costs_at(128),
        1,
        &Choice {
            paths: vec![],
            reach: vec![0.0; 2],
        },
        1,
        1,
    );
    assert_eq!(fb.lambda, 1.0);
}

#[test]
fn estimates_follow_what_each_depth_accepts() {
    let t = tree(&[1.0, 1.1, 1.2, 1.3, 1.4, 1.5]);
    let r = ranked(&[&[0.8, 0.1], &[0.7], &[0.6]]);
    let mut fb = at(1.2);
    let before = t.choose(&r, &fb, &t.costs_at(128));
    assert_eq!(before.paths.len(), 3);
    // Head 1 is right as often as estimated, heads 2 and 3 never: depth 1 keeps its
    // node, the deeper ones go.
    for _ in 0..10 {
        fb.observe(&t.costs_at(128), 4, &before, 2, 2);
    }
    fb.lambda = 1.5;
    assert!((fb.factor(0) - 1.0).abs() < 0.3, "{}", fb.factor(0));
    assert!(fb.factor(1) < 0.3, "{}", fb.factor(1));
    assert_eq!(t.choose(&r, &fb, &t.costs_at(128)).paths, vec![vec![0]]);
    // Tokens that came along prompt lookup's nodes raise λ but not the heads' scores.
    let mut fb = at(1.2);
    for _ in 0..10 {
        fb.observe(&t.costs_at(128), 6, &before, 5, 1);
    }
    assert!(fb.lambda > 2.0, "{}", fb.lambda);
    assert!(fb.factor(0) < 0.5, "{}", fb.factor(0));
    // Trees grow where the heads do better than estimated.
    let mut fb = at(1.2);
    let small = ranked(&[&[0.3, 0.1], &[0.3], &[0.3]]);
    let chain = Choice {
        paths: vec![vec![0], vec![0, 0]],
        reach: vec![0.3, 0.09],
    };
    for _ in 0..10 {
        fb.observe(&t.costs_at(128), 3, &chain, 3, 3);
    }
    fb.lambda = 1.2;
    assert!(fb.factor(0) > 1.5 && fb.factor(1) > 1.5, "{fb:?}");
    // The next request starts from it, with half the evidence.
    let next = fb.carried();
    assert_eq!(next.lambda, fb.lambda);
    assert!(
        next.factor(0) > 1.5 && next.factor(0) < fb.factor(0) + 1e-12,
        "{next:?}"
    );
    assert!(
        t.choose(&small, &fb, &t.costs_at(128)).paths.len()
            > t.choose(&small, &at(1.2), &t.costs_at(128)).paths.len()
    );
}

#[test]
fn costs_follow_the_cache_length() {
    // One node costs 1 over 128 tokens, 2 over 1,152; four nodes 1.5 and 4.
    let t = DynamicTree::new(vec![1.0, 1.2, 1.4, 1.5], 0.1, 4, vec![])
        .unwrap()
        .with_contexts(
            128,
            vec![ContextCost {
                context: 1152,
                cost: vec![2.0, 2.6, 3.3, 4.0],
            }],
        )
        .unwrap();
    assert_eq!(t.costs_at(64), t.costs_at(128));
    assert_eq!(t.costs_at(128).cost, vec![1.0, 1.2, 1.4, 1.5]);
    let long = t.costs_at(5000);
    assert_eq!(long.cost, vec![1.0, 1.3, 1.65, 2.0]);
    assert!((long.heads - 0.05).abs() < 1e-12);
    // Half way: one node 1.5, four 2.75.
    let mid = t.costs_at(640);
    assert!((mid.cost[3] - 2.75 / 1.5).abs() < 1e-12, "{mid:?}");
    // The same heads buy a smaller tree over a long cache.
    let r = ranked(&[&[0.6, 0.3], &[0.5], &[0.4]]);
    let short = t.choose(&r, &at(1.3), &t.costs_at(128)).paths.len();
    let over_long = t.choose(&r, &at(1.3), &long).paths.len();
    assert!(over_long < short, "{over_long} vs {short}");
    // Curves that do not fit are refused.
    let base = || DynamicTree::new(vec![1.0, 1.2], 0.0, 4, vec![]).unwrap();
    let curve = |context, cost: &[f64]| ContextCost {
        context,
        cost: cost.to_vec(),
    };
    assert!(
        base()
            .with_contexts(128, vec![curve(64, &[1.0, 1.1])])
            .is_err()
    );
    assert!(base().with_contexts(128, vec![curve(512, &[1.0])]).is_err());
    assert!(
        base()
            .with_contexts(128, vec![curve(512, &[1.0, -1.0])])
            .is_err()
    );
}

#[test]
fn bad_measurements_are_errors() {
    assert!(DynamicTree::new(vec![], 0.0, 4, vec![]).is_err());
    assert!(DynamicTree::new(vec![1.0, f64::NAN], 0.0, 4, vec![]).is_err());
    assert!(DynamicTree::new(vec![1.0], -1.0, 4, vec![]).is_err());
    assert!(DynamicTree::new(vec![1.0], 0.0, 0, vec![]).is_err());
    assert!(DynamicTree::new(vec![1.0], 0.0, 4, vec![vec![1.5]]).is_err());
    assert!(DynamicTree::new(vec![1.0], 0.0, 4, vec![vec![]]).is_err());
}

#[test]
fn the_ceiling_is_the_best_chain_of_right_proposals() {
    // Three heads: chains of 1-4 nodes yield 1-4 tokens for 1, 1.2 + 0.1, 1.5 + 0.1,
    // 1.8 + 0.1 one-node passes: 1, 1.54, 1.88, 2.11x. The 5-node cost is past the
    // heads' depth and does not count.
    let (s, n) = ceiling(&[1.0, 1.2, 1.5, 1.8, 1.0], 0.1, 3);
    assert_eq!(n, 4);
    assert!((s - 4.0 / 1.9).abs() < 1e-12, "{s}");
    // Where a second node costs as much as two steps, no chain pays: plain decoding.
    assert_eq!(ceiling(&[1.0, 2.5, 4.0], 0.1, 2), (1.0, 1));
    // A flat curve (a GPU's) makes the deepest chain the best.
    let (s, n) = ceiling(&[1.0, 1.01, 1.02, 1.03], 0.05, 3);
    assert_eq!(n, 4);
    assert!((s - 4.0 / 1.08).abs() < 1e-12, "{s}");
    // No costs measured, or not finite: plain decoding.
    assert_eq!(ceiling(&[], 0.1, 3), (1.0, 1));
    assert_eq!(ceiling(&[1.0, f64::NAN], 0.1, 3), (1.0, 1));
}

#[test]
fn a_dynamic_tree_reports_the_ceiling_of_its_own_curve() {
    let d = DynamicTree::new(vec![1.0, 1.2, 1.5, 1.8], 0.1, 4, vec![]).unwrap();
    let (s, n) = d.ceiling(3);
    assert_eq!(n, 4);
    assert!((s - 4.0 / 1.9).abs() < 1e-12, "{s}");
    // With two heads the chain ends at 3 nodes.
    let (s, n) = d.ceiling(2);
    assert_eq!(n, 3);
    assert!((s - 3.0 / 1.6).abs() < 1e-12, "{s}");
    assert_eq!(d.ceiling(0), (1.0, 1));
}
