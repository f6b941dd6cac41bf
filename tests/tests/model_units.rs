//! Model-level checks on tiny random models: RoPE at explicit positions, tree masks, KV
//! cache compaction, host attention, import errors; the heads' checks are in
//! `model_units/heads.rs` (one test binary, which the wgpu pass of scripts/test.sh runs).

use burn::tensor::{Device, Int, Tensor, TensorData};
use toki_decode::{Tree, TreePreset};
use toki_model::testing::{
    ScratchDir, tensor_shapes, tiny_config, write_model_folder, write_safetensors,
};
use toki_model::weights::{RandomWeights, SafetensorsWeights, WeightSource};
use toki_model::{
    AttnMask, DraftVocab, HeadInput, HeadKind, HeadPath, HeadsConfig, LlamaConfig, LlamaModel,
    MedusaHeads, ModelError, Precision, RopeTables, StoreDtype, TokenCounts,
};

#[path = "model_units/heads.rs"]
mod heads;

fn dev() -> Device {
    toki_tests::device()
}

fn ids(v: &[u32]) -> Tensor<1, Int> {
    Tensor::from_data(
        TensorData::new(v.iter().map(|&x| x as i64).collect::<Vec<_>>(), [v.len()]),
        &dev(),
    )
}

/// `n` next tokens for head inputs (read by `HiddenAndNext` heads only).
fn next(n: usize) -> Tensor<1, Int> {
    let v: Vec<u32> = (0..n as u32).map(|i| (i * 5 + 3) % 64).collect();
    ids(&v)
}

fn vec2(t: Tensor<2>) -> Vec<f32> {
    t.try_into_vec_as().unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn model(seed: u64, kv: usize) -> LlamaModel {
    LlamaModel::from_weights(
        &tiny_config(64, kv, true),
        &mut RandomWeights { seed, std: 0.3 },
        &dev(),
        Precision::F32,
    )
    .unwrap()
}

#[test]
fn rope_at_arbitrary_positions_equals_rope_one_position_at_a_time() {
    let c = tiny_config(64, 2, true);
    let rope = RopeTables::new(&c, 64, &dev());
    let x = Tensor::<4>::random([1, 2, 3, 8], burn::tensor::Distribution::Default, &dev());
    let all = rope.at(ids(&[17, 3, 40])).apply(x.clone());
    for (i, p) in [17u32, 3, 40].into_iter().enumerate() {
        let one = rope
            .at(ids(&[p]))
            .apply(x.clone().slice([0..1, 0..2, i..i + 1, 0..8]));
        let part = all.clone().slice([0..1, 0..2, i..i + 1, 0..8]);
        let d = max_diff(
            &part.try_into_vec_as::<f32>().unwrap(),
            &one.try_into_vec_as::<f32>().unwrap(),
        );
        assert!(d < 1e-6, "position {p}: {d}");
    }
    // And a batched causal forward equals token-by-token decoding.
    let m = model(3, 2);
    let toks = [5u32, 9, 33, 2, 61];
    let mut c1 = m.new_cache(8);
    let batched = vec2(m.forward(
        ids(&toks),
        ids(&[0, 1, 2, 3, 4]),
        &AttnMask::Causal,
        &mut c1,
        &rope,
    ));
    let mut c2 = m.new_cache(8);
    let mut seq = vec![];
    for (i, &t) in toks.iter().enumerate() {
        seq.extend(vec2(m.forward(
            ids(&[t]),
            ids(&[i as u32]),
            &AttnMask::Causal,
            &mut c2,
            &rope,
        )));
    }
    assert!(max_diff(&batched, &seq) < 1e-4);
}

#[test]
fn chain_tree_mask_equals_causal_mask() {
    let m = model(4, 1);
    let rope = RopeTables::new(m.config(), 64, &dev());
    let tree = Tree::from_paths(&TreePreset::Chain(4).paths(), 4, 1).unwrap();
    let buffers = tree.buffers(&dev());
    let bias = vec2(buffers.mask.clone());
    let causal = vec2(AttnMask::causal_bias(5, &dev()));
    assert_eq!(bias, causal);
    let run = |mask: AttnMask| {
        let mut c = m.new_cache(16);
        m.forward(
            ids(&[1, 2, 3]),
            ids(&[0, 1, 2]),
            &AttnMask::Causal,
            &mut c,
            &rope,
        );
        vec2(m.forward(
            ids(&[7, 8, 9, 10, 11]),
            ids(&[3, 4, 5, 6, 7]),
            &mask,
            &mut c,
            &rope,
        ))
    };
    assert!(max_diff(&run(AttnMask::Causal), &run(AttnMask::Tree(buffers.mask))) < 1e-6);
}

#[test]
fn tree_nodes_compute_what_plain_decoding_does_bit_for_bit() {
    // A 20-node tree (more than a step of 16 rows, which once left the host kernels) over a
    // 60-token prefix, so the nodes' keys cross the attention kernel's 64-key blocks, on a
    // model with the demo's head size (64: the kernels' vector paths). Each node on the
    // chain [0], [0, 0], ... has the hidden state plain decoding computes at its position:
    // the same bits where the model runs on the host kernels (cpu), close elsewhere.
    let config = LlamaConfig::from_json(
        r#"{"model_type": "llama", "vocab_size": 64, "hidden_size": 128,
            "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "max_position_embeddings": 512, "tie_word_embeddings": true}"#,
    )
    .unwrap();
    let m = LlamaModel::from_weights(
        &config,
        &mut RandomWeights { seed: 21, std: 0.3 },
        &dev(),
        Precision::F32,
    )
    .unwrap();
    let rope = RopeTables::new(m.config(), 128, &dev());
    let mut paths: Vec<Vec<usize>> = vec![];
    for depth in 1..=4 {
        for r in 0..5 {
            let mut p = vec![0; depth - 1];
            p.push(r);
            paths.push(p);
        }
    }
    let tree = Tree::from_paths(&paths, 4, 5).unwrap();
    let b = tree.buffers(&dev());
    let n = tree.len();
    assert!(n > 16, "{n} nodes");
    let prompt: Vec<u32> = (0..60).map(|i| (i * 11 + 5) % 64).collect();
    let tokens: Vec<u32> = (0..n as u32).map(|i| (i * 7 + 3) % 64).collect();
    let prefill = |cache: &mut toki_model::KvCache| {
        let pos: Vec<u32> = (0..60).collect();
        m.forward(ids(&prompt), ids(&pos), &AttnMask::Causal, cache, &rope);
    };
    let mut cache = m.new_cache(100);
    prefill(&mut cache);
    let pos: Vec<u32> = b.depths.iter().map(|&d| 60 + d as u32).collect();
    let tree_hidden = vec2(m.forward(
        ids(&tokens),
        ids(&pos),
        &AttnMask::Tree(b.mask.clone()),
        &mut cache,
        &rope,
    ));
    // The chain's nodes, root first.
    let chain: Vec<usize> = (0..n)
        .filter(|&i| tree.path(i).iter().all(|&r| r == 0))
        .collect();
    assert_eq!(chain.len(), 5);
    let mut plain = m.new_cache(100);
    prefill(&mut plain);
    let d = config.hidden_size;
    for (depth, &node) in chain.iter().enumerate() {
        let h = vec2(m.forward(
            ids(&[tokens[node]]),
            ids(&[60 + depth as u32]),
            &AttnMask::Causal,
            &mut plain,
            &rope,
        ));
        let t = &tree_hidden[node * d..(node + 1) * d];
        if m.uses_host_kernels() {
            let same = h.iter().zip(t).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(
                same,
                "node {node} (depth {depth}) differs by {}",
                max_diff(&h, t)
            );
        } else {
            assert!(max_diff(&h, t) < 1e-4, "node {node} (depth {depth})");
        }
    }
}

#[test]
fn compact_keeps_exactly_the_chosen_rows_and_next_logits_match_plain() {
    let m = model(5, 2);
    let rope = RopeTables::new(m.config(), 64, &dev());
    let prompt = [3u32, 14, 15, 9, 26];
    // Tree: 0 root=a, 1 [0]=b, 2 [1]=z, 3 [0,0]=c.
    let tree = Tree::from_paths(&[vec![0], vec![1], vec![0, 0]], 2, 2).unwrap();
    let b = tree.buffers(&dev());
    let (a, bb, z, c, d) = (40u32, 41, 42, 43, 44);
    let mut cache = m.new_cache(32);
    m.forward(
        ids(&prompt),
        ids(&[0, 1, 2, 3, 4]),
        &AttnMask::Causal,
        &mut cache,
        &rope,
    );
    let tree_hidden = m.forward(
        ids(&[a, bb, z, c]),
        ids(&[5, 6, 6, 7]),
        &AttnMask::Tree(b.mask),
        &mut cache,
        &rope,
    );
    assert_eq!(cache.len(), 9);
    cache.compact(4, &[0, 1, 3]);
    assert_eq!(cache.len(), 8);
    let next =
        vec2(m.logits(m.forward(ids(&[d]), ids(&[8]), &AttnMask::Causal, &mut cache, &rope)));

    let mut plain = m.new_cache(32);
    let all = [&prompt[..], &[a, bb, c, d]].concat();
    let h = m.forward(
        ids(&all),
        ids(&(0..9).collect::<Vec<_>>()),
        &AttnMask::Causal,
        &mut plain,
        &rope,
    );
    let plain_logits = vec2(m.logits(h.clone()));
    let v = m.config().vocab_size;
    assert!(
        max_diff(&next, &plain_logits[8 * v..9 * v]) < 1e-4,
        "next-step logits after compact"
    );
    // The tree's own node c saw exactly root a and b: same as plain at position 7.
    let tree_c = vec2(m.logits(tree_hidden.slice([3..4])));
    assert!(max_diff(&tree_c, &plain_logits[7 * v..8 * v]) < 1e-4);
}

#[test]
fn host_attention_and_cache_match_burns() {
    // On the cpu backend the model keeps its cache on the host and runs the host attention
    // kernel for every step; without host kernels, Burn's ops on a device
    // cache. Prefill (20 tokens), a tree step with
    // compaction, then a plain step: the same logits. Also with biases on q, k, v and o,
    // whose layers take the tensor-op variant of the host path.
    let mut biased = tiny_config(64, 2, true);
    (biased.qkv_bias, biased.o_bias) = (true, true);
    let biased = LlamaModel::from_weights(
        &biased,
        &mut RandomWeights { seed: 12, std: 0.3 },
        &dev(),
        Precision::F32,
    )
    .unwrap();
    for fast in [model(11, 2), biased] {
        host_attention_matches_burns(fast);
    }
}

fn host_attention_matches_burns(fast: LlamaModel) {
    let slow = fast.clone().without_host_kernels();
    let rope = RopeTables::new(fast.config(), 64, &dev());
    let tree = Tree::from_paths(&[vec![0], vec![1], vec![0, 0]], 2, 2).unwrap();
    let prompt: Vec<u32> = (0..20).map(|i| (i * 7 + 2) % 64).collect();
    let run = |m: &LlamaModel| {
        let mut cache = m.new_cache(40);
        assert_eq!(cache.is_host(), m.uses_host_kernels());
        let pos: Vec<u32> = (0..20).collect();
        let mut out = vec2(m.logits(m.forward(
            ids(&prompt),
            ids(&pos),
            &AttnMask::Causal,
            &mut cache,
            &rope,
        )));
        let b = tree.buffers(&dev());
        out.extend(vec2(m.logits(m.forward(
            ids(&[5, 6, 7, 8]),
            ids(&[20, 21, 21, 22]),
            &AttnMask::Tree(b.mask),
            &mut cache,
            &rope,
        ))));
        cache.compact(4, &[0, 1, 3]);
        out.extend(vec2(m.logits(m.forward(
            ids(&[9]),
            ids(&[23]),
            &AttnMask::Causal,
            &mut cache,
            &rope,
        ))));
        out
    };
    let d = max_diff(&run(&fast), &run(&slow));
    assert!(d < 1e-4, "host and Burn attention differ by {d}");
}

fn write_tiny(dir: &std::path::Path) -> LlamaConfig {
    let c = tiny_config(64, 2, false);
    write_model_folder(dir, &c, 1).unwrap();
    c
}

fn tensors(c: &LlamaConfig) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let mut src = RandomWeights { seed: 1, std: 0.2 };
    tensor_shapes(c)
        .into_iter()
        .map(|(n, s)| {
            let d = src.tensor(&n, &s).unwrap();
            (n, s, d)
        })
        .collect()
}

fn load(dir: &std::path::Path, c: &LlamaConfig) -> Result<LlamaModel, ModelError> {
    let mut w = SafetensorsWeights::open(dir)?;
    LlamaModel::from_weights(c, &mut w, &dev(), Precision::F32)
}

#[test]
fn import_errors_name_the_tensor() {
    let tmp = ScratchDir::new("import").unwrap();
    let c = write_tiny(&tmp);
    assert!(load(&tmp, &c).is_ok());
    let st = tmp.join("model.safetensors");
    let all = tensors(&c);

    let missing: Vec<_> = all
        .iter()
        .filter(|t| t.0 != "model.layers.1.mlp.up_proj.weight")
        .cloned()
        .collect();
    write_safetensors(&st, &missing).unwrap();
    let e = load(&tmp, &c).unwrap_err().to_string();
    assert!(
        e.contains("model.layers.1.mlp.up_proj.weight") && e.contains("missing"),
        "{e}"
    );

    let mut wrong = all.clone();
    let i = wrong
        .iter()
        .position(|t| t.0 == "model.norm.weight")
        .unwrap();
    wrong[i].1 = vec![16];
    wrong[i].2.truncate(16);
    write_safetensors(&st, &wrong).unwrap();
    let e = load(&tmp, &c).unwrap_err().to_string();
    assert!(
        e.contains("model.norm.weight") && e.contains("[16]") && e.contains("[32]"),
        "{e}"
    );

    let mut extra = all.clone();
    extra.push((
        "model.layers.9.surprise.weight".into(),
        vec![2],
        vec![0.0, 1.0],
    ));
    write_safetensors(&st, &extra).unwrap();
    let e = load(&tmp, &c).unwrap_err().to_string();
    assert!(e.contains("model.layers.9.surprise.weight"), "{e}");

    // A config that claims far more layers than the file holds: the first missing layer
    // is named (nothing is reserved for the claimed count).
    write_safetensors(&st, &all).unwrap();
    let huge = LlamaConfig {
        num_hidden_layers: 1 << 40,
        ..c.clone()
    };
    let e = load(&tmp, &huge).unwrap_err().to_string();
    assert!(e.contains("model.layers.2."), "{e}");

    // Truncated file: a clear error, not a panic.
    write_safetensors(&st, &all).unwrap();
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    let e = load(&tmp, &c).unwrap_err().to_string();
    assert!(e.contains("model.safetensors"), "{e}");
}

#[test]
fn autodiff_tensors_never_take_the_host_kernel() {
    // The host kernel copies x to host memory: on a tensor that records gradients that
    // would cut it off the graph without an error. Such tensors take Burn's matmul.
    let m = model(11, 2);
    let ad = dev().autodiff();
    let lm = m.lm_head().weight.val().autodiff(); // [D, V]
    let h = Tensor::<2>::random([2, 32], burn::tensor::Distribution::Default, &ad).require_grad();
    let grads = h.clone().matmul(lm).sum().backward();
    let want = h.grad(&grads).expect("reference gradient");
    let h2 = Tensor::<2>::from_data(h.to_data(), &ad).require_grad();
    let grads = m.logits(h2.clone()).sum().backward();
    let got = h2
        .grad(&grads)
        .expect("a gradient through LlamaModel::logits");
    assert!(max_diff(&vec2(got), &vec2(want)) < 1e-4);
}
