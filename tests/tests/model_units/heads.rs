//! Head checks on tiny random models: reference Medusa checkpoints, untrained heads,
//! next-token and path heads, draft vocabularies, the host kernel under the heads.

use super::*;
use toki_model::HostPrecision;

#[test]
fn reference_medusa_checkpoint_gives_the_same_proposals_as_native() {
    let m = model(8, 2);
    let cfg = HeadsConfig::for_model(HeadKind::Own, 3, 2, m.config());
    let heads = MedusaHeads::random(cfg.clone(), 11, 0.3, &dev()).unwrap();
    let dir = ScratchDir::new("heads").unwrap();
    let native = dir.join("native");
    heads.save(&native).unwrap();
    // The same weights under the reference implementation's key names.
    let reference = dir.join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    let mut w = SafetensorsWeights::open_file(&native.join("heads.safetensors")).unwrap();
    let mut out = vec![];
    for h in 0..3 {
        for b in 0..2 {
            out.push((
                format!("{h}.{b}.linear.weight"),
                vec![32, 32],
                w.tensor(&format!("heads.{h}.blocks.{b}.weight"), &[32, 32])
                    .unwrap(),
            ));
            out.push((
                format!("{h}.{b}.linear.bias"),
                vec![32],
                w.tensor(&format!("heads.{h}.blocks.{b}.bias"), &[32])
                    .unwrap(),
            ));
        }
        out.push((
            format!("{h}.2.weight"),
            vec![64, 32],
            w.tensor(&format!("heads.{h}.lm_head.weight"), &[64, 32])
                .unwrap(),
        ));
    }
    write_safetensors(&reference.join("medusa_lm_head.safetensors"), &out).unwrap();
    std::fs::write(
        reference.join("config.json"),
        r#"{"medusa_num_heads": 3, "medusa_num_layers": 2, "base_model_name_or_path": "tiny"}"#,
    )
    .unwrap();

    let a = MedusaHeads::load(&native, &m).unwrap();
    let b = MedusaHeads::load(&reference, &m).unwrap();
    let hidden = Tensor::<2>::random([3, 32], burn::tensor::Distribution::Default, &dev());
    for (x, y) in a
        .forward(hidden.clone(), next(3), &m)
        .into_iter()
        .zip(b.forward(hidden.clone(), next(3), &m))
    {
        let (x, y) = (vec2(x), vec2(y));
        assert!(max_diff(&x, &y) < 1e-6);
    }
    for (x, y) in a
        .forward(hidden.clone(), next(3), &m)
        .into_iter()
        .zip(heads.forward(hidden, next(3), &m))
    {
        assert!(max_diff(&vec2(x), &vec2(y)) < 1e-6, "save/load round trip");
    }
    // Heads for a model of another hidden size are refused, naming both sizes.
    let big = LlamaModel::from_weights(&LlamaConfig::from_json(r#"{"vocab_size":64,"hidden_size":48,"intermediate_size":64,"num_hidden_layers":1,"num_attention_heads":4}"#).unwrap(), &mut RandomWeights { seed: 1, std: 0.1 }, &dev(), Precision::F32).unwrap();
    let e = MedusaHeads::load(&native, &big).unwrap_err().to_string();
    assert!(e.contains("32") && e.contains("48"), "{e}");
}

#[test]
fn untrained_heads_start_at_the_base_prediction() {
    let m = model(9, 2);
    let cfg = HeadsConfig::for_model(HeadKind::Own, 2, 1, m.config());
    let heads = MedusaHeads::init(cfg, &m).unwrap();
    let hidden = Tensor::<2>::random([2, 32], burn::tensor::Distribution::Default, &dev());
    let base = vec2(m.logits(hidden.clone()));
    for h in heads.forward(hidden, next(2), &m) {
        assert!(max_diff(&vec2(h), &base) < 1e-5);
    }
}

#[test]
fn next_token_heads_read_the_next_token_and_round_trip() {
    let m = model(13, 2);
    let hidden = Tensor::<2>::random([4, 32], burn::tensor::Distribution::Default, &dev());
    let base = vec2(m.logits(hidden.clone()));
    for kind in [HeadKind::Shared, HeadKind::Own] {
        let cfg = HeadsConfig {
            input: HeadInput::HiddenAndNext,
            ..HeadsConfig::for_model(kind, 2, 1, m.config())
        };
        // Untrained (F = 0, blocks = 0): the base's own prediction, whatever the next token.
        let init = MedusaHeads::init(cfg.clone(), &m).unwrap();
        for h in init.forward(hidden.clone(), next(4), &m) {
            assert!(max_diff(&vec2(h), &base) < 1e-5, "{kind:?}");
        }
        // Trained-like weights: the next token changes what the heads say.
        let heads = MedusaHeads::random(cfg, 5, 0.3, &dev()).unwrap();
        let a = heads.forward(hidden.clone(), ids(&[1, 2, 3, 4]), &m);
        let b = heads.forward(hidden.clone(), ids(&[9, 8, 7, 6]), &m);
        for (x, y) in a.iter().zip(&b) {
            assert!(
                max_diff(&vec2(x.clone()), &vec2(y.clone())) > 1e-3,
                "{kind:?}"
            );
        }
        // Saved and loaded: same logits, and heads.json says what the heads read.
        let dir = ScratchDir::new(&format!("next-{kind:?}")).unwrap();
        heads.save(&dir).unwrap();
        let json = std::fs::read_to_string(dir.join("heads.json")).unwrap();
        assert!(json.contains("hidden_and_next"), "{json}");
        let loaded = MedusaHeads::load(&dir, &m).unwrap();
        for (x, y) in a
            .into_iter()
            .zip(loaded.forward(hidden.clone(), ids(&[1, 2, 3, 4]), &m))
        {
            assert!(max_diff(&vec2(x), &vec2(y)) < 1e-6, "{kind:?} round trip");
        }
        // A file without the F tensors is refused, naming the missing tensor.
        let medusa = HeadsConfig::for_model(kind, 2, 1, m.config());
        MedusaHeads::random(medusa, 5, 0.3, &dev())
            .unwrap()
            .save(&dir)
            .unwrap();
        std::fs::write(dir.join("heads.json"), &json).unwrap();
        let e = MedusaHeads::load(&dir, &m).unwrap_err().to_string();
        assert!(e.contains("heads.0.next.weight"), "{e}");
    }
}

/// Row-wise argmax of [R, C] logits (first of ties).
fn argmax_rows(logits: &[f32], cols: usize) -> Vec<usize> {
    logits
        .chunks(cols)
        .map(|row| (0..cols).fold(0, |best, c| if row[c] > row[best] { c } else { best }))
        .collect()
}

#[test]
fn path_heads_read_the_top1_chain_when_decoding_and_the_data_in_training() {
    let m = model(15, 2);
    let root = [3u32, 9, 27];
    let hidden = Tensor::<2>::random([3, 32], burn::tensor::Distribution::Default, &dev());
    let draft_ids: Vec<u32> = (0..64).rev().step_by(3).collect(); // 22 ids, not in order
    for kind in [HeadKind::Shared, HeadKind::Own] {
        let cfg = HeadsConfig {
            input: HeadInput::HiddenAndPath,
            ..HeadsConfig::for_model(kind, 3, 1, m.config())
        };
        let names: Vec<String> = MedusaHeads::tensor_names(&cfg)
            .into_iter()
            .map(|n| n.0)
            .collect();
        assert!(
            names.contains(&"heads.2.path.2.weight".to_string()),
            "{names:?}"
        );
        assert!(
            !names.contains(&"heads.1.path.2.weight".to_string()),
            "{names:?}"
        );
        let heads = MedusaHeads::random(cfg, 16, 0.3, &dev()).unwrap();
        // Decoding: head k reads the argmax of heads 0..k-1; the same as giving those tokens.
        let chain = heads.forward(hidden.clone(), ids(&root), &m);
        let t2: Vec<u32> = argmax_rows(&vec2(chain[0].clone()), 64)
            .iter()
            .map(|&c| c as u32)
            .collect();
        let t3: Vec<u32> = argmax_rows(&vec2(chain[1].clone()), 64)
            .iter()
            .map(|&c| c as u32)
            .collect();
        let given = heads.forward_on(
            hidden.clone(),
            HeadPath::Given(vec![ids(&root), ids(&t2), ids(&t3)]),
            &m,
        );
        for (h, (x, y)) in chain.iter().zip(&given).enumerate() {
            let d = max_diff(&vec2(x.clone()), &vec2(y.clone()));
            assert!(
                d < 1e-5,
                "{kind:?} head {h}: chain and given path differ by {d}"
            );
        }
        // Another token t+3 changes head 2 (which reads it) and no other head.
        let other: Vec<u32> = t3.iter().map(|&t| (t + 1) % 64).collect();
        let moved = heads.forward_on(
            hidden.clone(),
            HeadPath::Given(vec![ids(&root), ids(&t2), ids(&other)]),
            &m,
        );
        for h in 0..3 {
            let d = max_diff(&vec2(given[h].clone()), &vec2(moved[h].clone()));
            assert_eq!(d > 1e-3, h == 2, "{kind:?} head {h} moved by {d}");
        }
        // Over a draft vocabulary the chain runs on draft columns, mapped to their tokens.
        let draft = DraftVocab::new(draft_ids.clone(), &heads, &m).unwrap();
        let n = draft_ids.len();
        let cut = draft.logits(&heads, hidden.clone(), ids(&root), &m);
        let d2: Vec<u32> = argmax_rows(&vec2(cut[0].clone()), n)
            .iter()
            .map(|&c| draft_ids[c])
            .collect();
        let d3: Vec<u32> = argmax_rows(&vec2(cut[1].clone()), n)
            .iter()
            .map(|&c| draft_ids[c])
            .collect();
        let full = heads.forward_on(
            hidden.clone(),
            HeadPath::Given(vec![ids(&root), ids(&d2), ids(&d3)]),
            &m,
        );
        for (h, (c, f)) in cut.into_iter().zip(full).enumerate() {
            let (c, f) = (vec2(c), vec2(f));
            for r in 0..3 {
                for (j, &id) in draft_ids.iter().enumerate() {
                    let (x, y) = (c[r * n + j], f[r * 64 + id as usize]);
                    assert!((x - y).abs() < 1e-4, "{kind:?} head {h}: {x} vs {y}");
                }
            }
        }
        // Saved and loaded: same logits, and heads.json says what the heads read.
        let dir = ScratchDir::new(&format!("path-{kind:?}")).unwrap();
        heads.save(&dir).unwrap();
        let json = std::fs::read_to_string(dir.join("heads.json")).unwrap();
        assert!(json.contains("hidden_and_path"), "{json}");
        let loaded = MedusaHeads::load(&dir, &m)
            .unwrap()
            .with_host_kernels_in(&m, HostPrecision::F32);
        for (x, y) in chain
            .into_iter()
            .zip(loaded.forward(hidden.clone(), ids(&root), &m))
        {
            assert!(max_diff(&vec2(x), &vec2(y)) < 1e-4, "{kind:?} round trip");
        }
        // Stored as f16: about half the file, the same heads to f16's rounding.
        let f32_bytes = std::fs::metadata(dir.join("heads.safetensors"))
            .unwrap()
            .len();
        let mut cfg16 = heads.config().clone();
        cfg16.dtype = StoreDtype::F16;
        let mut src = SafetensorsWeights::open_file(&dir.join("heads.safetensors")).unwrap();
        let half = MedusaHeads::from_source(cfg16, &mut src, &dev()).unwrap();
        half.save(&dir).unwrap();
        let f16_bytes = std::fs::metadata(dir.join("heads.safetensors"))
            .unwrap()
            .len();
        assert!(
            f16_bytes * 10 < f32_bytes * 6,
            "{f16_bytes} vs {f32_bytes} bytes"
        );
        let half = MedusaHeads::load(&dir, &m).unwrap();
        assert_eq!(half.config().dtype, StoreDtype::F16);
        let path = vec![ids(&root), ids(&t2), ids(&t3)];
        for (x, y) in
            given
                .into_iter()
                .zip(half.forward_on(hidden.clone(), HeadPath::Given(path), &m))
        {
            let d = max_diff(&vec2(x), &vec2(y));
            assert!(
                d > 0.0 && d < 2e-2,
                "{kind:?} f16 round trip differs by {d}"
            );
        }
    }
}

#[test]
fn draft_vocabulary_logits_are_the_full_logits_at_its_ids() {
    let m = model(10, 2);
    let ids: Vec<u32> = vec![63, 0, 17, 5, 42, 8, 31, 2, 60, 11, 29, 40];
    for (kind, input) in [
        (HeadKind::Shared, HeadInput::Hidden),
        (HeadKind::Own, HeadInput::Hidden),
        (HeadKind::Shared, HeadInput::HiddenAndNext),
    ] {
        let cfg = HeadsConfig {
            input,
            ..HeadsConfig::for_model(kind, 3, 1, m.config())
        };
        let heads = MedusaHeads::random(cfg, 12, 0.3, &dev()).unwrap();
        let draft = DraftVocab::new(ids.clone(), &heads, &m).unwrap();
        assert_eq!(draft.ids(), &ids[..]);
        // 3 rows run on the host kernel where there is one, 20 rows on Burn's matmul.
        for rows in [3, 20] {
            let hidden =
                Tensor::<2>::random([rows, 32], burn::tensor::Distribution::Default, &dev());
            let full = heads.forward(hidden.clone(), next(rows), &m);
            let cut = draft.logits(&heads, hidden, next(rows), &m);
            assert_eq!(cut.len(), 3);
            for (f, c) in full.into_iter().zip(cut) {
                assert_eq!(c.dims(), [rows, ids.len()]);
                let (f, c) = (vec2(f), vec2(c));
                for r in 0..rows {
                    for (j, &id) in ids.iter().enumerate() {
                        let (x, y) = (f[r * 64 + id as usize], c[r * ids.len() + j]);
                        assert!((x - y).abs() < 1e-4, "{kind:?} rows {rows}: {x} vs {y}");
                    }
                }
            }
        }
    }
}

#[test]
fn heads_on_the_host_kernel_match_burns() {
    // `with_host_kernels` copies F_k and the residual blocks (bias included) to the host
    // kernel on the cpu backend; a step's few rows take it, 20 rows keep Burn's matmul.
    // On a backend without host kernels (wgpu) it changes nothing. f32 copies give Burn's
    // logits; smaller copies give them to their rounding of the weights, relative to the
    // largest logit: f16's 2⁻¹¹ per weight (seen: 2e-4 here), and the default Q8 blocks'
    // half a step of 1/127 of the block's largest weight (seen: 6e-3).
    let m = model(13, 2);
    let cfg = HeadsConfig {
        input: HeadInput::HiddenAndNext,
        ..HeadsConfig::for_model(HeadKind::Shared, 3, 2, m.config())
    };
    let burn_only = MedusaHeads::random(cfg, 14, 0.3, &dev()).unwrap();
    assert_eq!(burn_only.host_precision(), HostPrecision::F32);
    let host = burn_only
        .clone()
        .with_host_kernels_in(&m, HostPrecision::F32);
    let on_host = m.uses_host_kernels();
    let kept = |p: HostPrecision| if on_host { p } else { HostPrecision::F32 };
    let default = burn_only.clone().with_host_kernels(&m);
    assert_eq!(default.host_precision(), kept(HostPrecision::Q8));
    for (precision, tol) in [(HostPrecision::F16, 1e-3), (HostPrecision::Q8, 2e-2)] {
        let small = burn_only.clone().with_host_kernels_in(&m, precision);
        assert_eq!(small.host_precision(), kept(precision));
        for rows in [1, 3, 20] {
            let hidden =
                Tensor::<2>::random([rows, 32], burn::tensor::Distribution::Default, &dev());
            let a = burn_only.forward(hidden.clone(), next(rows), &m);
            let b = host.forward(hidden.clone(), next(rows), &m);
            let c = small.forward(hidden, next(rows), &m);
            for ((x, y), z) in a.into_iter().zip(b).zip(c) {
                let (x, y, z) = (vec2(x), vec2(y), vec2(z));
                let d = max_diff(&x, &y);
                assert!(d < 1e-4, "rows {rows}: host and Burn heads differ by {d}");
                let largest = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
                let d = max_diff(&x, &z) / largest;
                assert!(
                    d < tol,
                    "rows {rows}: {precision:?} host and Burn heads differ by {d} of the largest logit"
                );
                if on_host && rows < 20 {
                    assert!(
                        d > 0.0,
                        "rows {rows}: the {precision:?} copies were not used"
                    );
                }
            }
        }
    }
}

#[test]
fn heads_on_host_rows_match_the_tensor_path() {
    // Where the heads and their scoring have host copies, a step's rows run the whole pass
    // on host vectors (`heads/host.rs`); heads without host copies take the tensor path.
    // Both must give the same logits for every kind of head, with and without a draft
    // vocabulary, chained heads included (each reads the previous one's top-1), and stop
    // where `enough` says so.
    let m = model(16, 2);
    let draft_ids: Vec<u32> = (0..64).rev().step_by(3).collect(); // 22 ids, not in order
    for (kind, input) in [
        (HeadKind::Shared, HeadInput::Hidden),
        (HeadKind::Shared, HeadInput::HiddenAndNext),
        (HeadKind::Shared, HeadInput::HiddenAndPath),
        (HeadKind::Own, HeadInput::HiddenAndPath),
    ] {
        let cfg = HeadsConfig {
            input,
            ..HeadsConfig::for_model(kind, 3, 2, m.config())
        };
        let tensor_path = MedusaHeads::random(cfg, 17, 0.3, &dev()).unwrap();
        let host = tensor_path
            .clone()
            .with_host_kernels_in(&m, HostPrecision::F32);
        let full = |h: &MedusaHeads, x: Tensor<2>, r| h.forward(x, next(r), &m);
        let cut_tensor = DraftVocab::new(draft_ids.clone(), &tensor_path, &m).unwrap();
        let cut_host = DraftVocab::new(draft_ids.clone(), &host, &m).unwrap();
        for rows in [1, 3] {
            let hidden =
                Tensor::<2>::random([rows, 32], burn::tensor::Distribution::Default, &dev());
            let pairs = [
                (
                    full(&tensor_path, hidden.clone(), rows),
                    full(&host, hidden.clone(), rows),
                ),
                (
                    cut_tensor.logits(&tensor_path, hidden.clone(), next(rows), &m),
                    cut_host.logits(&host, hidden.clone(), next(rows), &m),
                ),
            ];
            for (vocab, (a, b)) in ["full", "draft"].iter().zip(pairs) {
                assert_eq!(a.len(), 3);
                assert_eq!(b.len(), 3);
                for (h, (x, y)) in a.into_iter().zip(b).enumerate() {
                    assert_eq!(x.dims(), y.dims());
                    let d = max_diff(&vec2(x), &vec2(y));
                    assert!(
                        d < 1e-4,
                        "{kind:?} {input:?} {vocab} rows {rows} head {h}: differ by {d}"
                    );
                }
            }
            // `enough` after head 2: two heads come back, and it was told both in order.
            let mut told = vec![];
            let got = cut_host.logits_until(
                &host,
                hidden.clone(),
                HeadPath::Root(next(rows)),
                &m,
                &mut |h, l| {
                    told.push((h, l.dims()));
                    h == 1
                },
            );
            assert_eq!(got.len(), 2);
            assert_eq!(told, vec![(0, [rows, 22]), (1, [rows, 22])]);
        }
    }
}

#[test]
fn draft_vocabulary_files_are_checked() {
    let path = std::path::Path::new("draft-vocab.json");
    let counts = TokenCounts::count("test", [5u32, 7, 5, 9, 5, 7]);
    assert_eq!(counts.tokens, vec![(5, 3), (7, 2), (9, 1)]);
    assert!((counts.coverage(2) - 5.0 / 6.0).abs() < 1e-12);
    assert_eq!(counts.top(2, 64, path).unwrap(), vec![5, 7]);
    assert_eq!(counts.top(10, 64, path).unwrap(), vec![5, 7, 9]);
    let e = counts.top(3, 8, path).unwrap_err().to_string();
    assert!(e.contains("9") && e.contains("vocabulary of 8"), "{e}");
    let e = counts.top(0, 64, path).unwrap_err().to_string();
    assert!(e.contains("at least one token"), "{e}");
    let twice = TokenCounts {
        source: String::new(),
        tokens: vec![(3, 2), (3, 1)],
    };
    let e = twice.top(2, 64, path).unwrap_err().to_string();
    assert!(e.contains("listed twice"), "{e}");
    // A round trip through the file, and a broken file named in the error.
    let dir = ScratchDir::new("draft").unwrap();
    let file = dir.join("draft-vocab.json");
    counts.write(&file).unwrap();
    assert_eq!(TokenCounts::read(&file).unwrap(), counts);
    std::fs::write(&file, "{\"tokens\": [[1, 2], [3]]}").unwrap();
    let e = TokenCounts::read(&file).unwrap_err().to_string();
    assert!(e.contains("draft-vocab.json"), "{e}");
}
