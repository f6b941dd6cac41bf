//! Head training on a tiny model: the loss falls, the base is untouched, a resumed run
//! equals an uninterrupted one, bad data is a clear error, a mismatched head set is refused.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Int, Tensor, TensorData};
use toki_model::testing::{ScratchDir, tiny_config, write_model_folder};
use toki_model::tokenizer::Tokenizer;
use toki_model::weights::SafetensorsWeights;
use toki_model::{HeadInput, HeadPath, LlamaConfig, LlamaModel, MedusaHeads, Precision};
use toki_tests::device;
use toki_train::checkpoint::check_resume;
use toki_train::trainer::count_rows;
use toki_train::{Event, HiddenSet, TrainConfig, Trainer, load_documents, pack};

/// A fresh folder, removed when the test ends.
fn scratch(name: &str) -> ScratchDir {
    ScratchDir::new(&format!("train-{name}")).expect("scratch dir")
}

fn tiny_model(dir: &Path, config: &LlamaConfig) -> (LlamaModel, Tokenizer) {
    write_model_folder(dir, config, 7).expect("tiny folder");
    let mut w = SafetensorsWeights::open(dir).expect("weights");
    let model = LlamaModel::from_weights(config, &mut w, &device(), Precision::F32).expect("model");
    (model, Tokenizer::from_dir(dir).expect("tokenizer"))
}

/// Periodic token text: the token two ahead is a function of the current one.
fn pattern_file(dir: &Path) -> PathBuf {
    let path = dir.join("data.jsonl");
    let lines: Vec<String> = (0..24)
        .map(|l| {
            let text: Vec<String> = (0..40)
                .map(|i| format!("t{}", 5 + (i * 3 + l) % 7))
                .collect();
            serde_json::json!({ "text": text.join(" ") }).to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).expect("data file");
    path
}

fn hidden(model: &LlamaModel, tok: &Tokenizer, data: &Path) -> HiddenSet {
    let docs = load_documents(&[data.to_path_buf()], tok).expect("data loads");
    HiddenSet::compute(model, &pack(&docs, 32, 4), |_, _| {}).expect("hidden states")
}

fn config(steps: usize) -> TrainConfig {
    TrainConfig {
        num_heads: 2,
        steps,
        batch: 32,
        lr: 1e-2,
        warmup: 3,
        checkpoint_every: 0,
        eval_every: 0,
        eval_rows: 256,
        seed: 3,
        ..TrainConfig::default()
    }
}

struct Collect(Vec<Vec<f32>>);
impl ModuleVisitor for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0
            .push(param.val().try_into_vec_as().expect("readback"));
    }
}

fn weights_of(model: &LlamaModel) -> Vec<Vec<f32>> {
    let mut c = Collect(vec![]);
    model.visit(&mut c);
    c.0
}

#[test]
fn loss_falls_and_the_base_stays_bit_identical() {
    let dir = scratch("falls");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let data = hidden(&model, &tok, &pattern_file(&dir));
    let before = weights_of(&model);
    let mut t = Trainer::new(&model, &data, config(30), 5).expect("trainer");
    let mut losses = vec![];
    t.run(&dir.join("out"), &AtomicBool::new(false), |e| {
        if let Event::Step { loss, .. } = e {
            losses.push(*loss);
        }
    })
    .expect("training runs");
    assert_eq!(losses.len(), 30);
    let first: f32 = losses[..5].iter().sum::<f32>() / 5.0;
    let last: f32 = losses[25..].iter().sum::<f32>() / 5.0;
    assert!(
        last < 0.7 * first,
        "loss did not fall: {first} -> {last} ({losses:?})"
    );
    assert!(
        weights_of(&model) == before,
        "base weights changed during training"
    );
    // The output folder loads as heads for this base, and they predict the pattern.
    let heads = MedusaHeads::load(&dir.join("out"), &model).expect("heads load");
    assert_eq!(heads.num_heads(), 2);
    let report = t.evaluate().expect("eval");
    assert!(report.top1[0] > 0.5, "held-out top-1 {:?}", report.top1);
}

#[test]
fn a_resumed_run_equals_an_uninterrupted_one() {
    let dir = scratch("resume");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let data = hidden(&model, &tok, &pattern_file(&dir));
    let (full, cut) = (dir.join("full"), dir.join("cut"));
    let mut a = Trainer::new(&model, &data, config(20), 5).expect("trainer");
    a.run(&full, &AtomicBool::new(false), |_| {}).expect("run");

    let stop = AtomicBool::new(false);
    let mut b = Trainer::new(&model, &data, config(20), 5).expect("trainer");
    b.run(&cut, &stop, |e| {
        if let Event::Step { step: 7, .. } = e {
            stop.store(true, Ordering::SeqCst); // as Ctrl-C does
        }
    })
    .expect("interrupted run");
    assert_eq!(b.step(), 7, "the loop stops at the next step boundary");
    drop(b);
    // The checkpoint's header is read against the resuming run before anything runs:
    // another head count, input or draft vocabulary is refused, by name.
    let check = |c: &TrainConfig| check_resume(&cut, c, model.config()).map_err(|e| e.to_string());
    assert_eq!(check(&config(20)), Ok(()));
    let refused = [
        (
            TrainConfig {
                num_heads: 3,
                ..config(20)
            },
            "3 heads",
        ),
        (
            TrainConfig {
                input: HeadInput::HiddenAndNext,
                ..config(20)
            },
            "HiddenAndNext",
        ),
        (
            TrainConfig {
                draft_vocab: vec![5, 6, 7],
                ..config(20)
            },
            "draft vocabulary",
        ),
    ];
    for (other, needle) in refused {
        let e = check(&other).expect_err("refused");
        assert!(e.contains(needle), "{e}");
        let e = Trainer::resume(&model, &data, other, 5, &cut)
            .err()
            .expect("refused");
        assert!(e.to_string().contains(needle), "{e}");
    }
    let mut c = Trainer::resume(&model, &data, config(20), 5, &cut).expect("resume");
    assert_eq!(c.step(), 7);
    c.run(&cut, &AtomicBool::new(false), |_| {})
        .expect("resumed run");
    let bytes = |d: &Path| std::fs::read(d.join("heads.safetensors")).expect("heads file");
    assert!(
        bytes(&full) == bytes(&cut),
        "resumed heads differ from the uninterrupted run"
    );
}

/// NaN or negative rates are refused up front; a run whose loss stops being finite ends
/// with an error before that update changes anything, keeping its last checkpoint.
#[test]
fn bad_rates_are_refused_and_a_diverging_run_keeps_its_last_finite_heads() {
    let dir = scratch("diverge");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let data = hidden(&model, &tok, &pattern_file(&dir));
    type Set = fn(&mut TrainConfig);
    let bad: [(&str, Set); 9] = [
        ("at most 32", |c| c.num_heads = 1_000_000_000),
        ("at most 32", |c| c.num_layers = 33),
        ("learning rate", |c| c.lr = f32::NAN),
        ("learning rate", |c| c.lr = -1e-3),
        ("learning rate", |c| c.lr = 0.0),
        ("weight decay", |c| c.weight_decay = f32::NAN),
        ("gradient-norm bound", |c| c.max_grad_norm = f32::INFINITY),
        ("head decay", |c| c.head_decay = -0.5),
        ("floor", |c| c.lr_floor = 2.0),
    ];
    for (what, set) in bad {
        let mut c = config(5);
        set(&mut c);
        let err = Trainer::new(&model, &data, c, 5)
            .err()
            .map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains(what)),
            "{what}: {err:?}"
        );
    }
    // A learning rate that is finite but as large as f32 goes: the first update moves
    // the weights to about ±f32::MAX, so the next one's products overflow. (1e30 only
    // gives losses of 1e31.)
    let out = dir.join("out");
    let mut c = config(50);
    (c.lr, c.warmup, c.checkpoint_every, c.max_grad_norm) = (f32::MAX, 0, 1, 0.0);
    let mut t = Trainer::new(&model, &data, c, 5).expect("trainer");
    let err = t
        .run(&out, &AtomicBool::new(false), |_| {})
        .expect_err("it diverges");
    let toki_train::TrainError::Diverged { update, .. } = err else {
        panic!("expected Diverged, got {err}");
    };
    assert!(update > 1 && update <= 50, "update {update}");
    assert_eq!(t.step(), update - 1, "the failing update changed nothing");
    let bytes = std::fs::read(out.join("heads.safetensors")).expect("last checkpoint");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    for (name, view) in st.tensors() {
        assert!(
            view.data()
                .chunks_exact(4)
                .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite()),
            "{name} holds a non-finite weight"
        );
    }
}

#[test]
fn bad_data_is_an_error_naming_file_and_line() {
    let dir = scratch("bad");
    let (_, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let err = |p: &Path| {
        load_documents(&[p.to_path_buf()], &tok)
            .expect_err("must fail")
            .to_string()
    };

    let missing = dir.join("nope.jsonl");
    assert!(err(&missing).contains("nope.jsonl"), "{}", err(&missing));
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "\n").expect("write");
    let e = err(&empty);
    assert!(e.contains("empty.jsonl") && e.contains("empty"), "{e}");
    let bad = dir.join("bad.jsonl");
    std::fs::write(&bad, "{\"text\": \"t5 t6\"}\n{\"txt\": 3}\n").expect("write");
    let e = err(&bad);
    assert!(e.contains("bad.jsonl line 2"), "{e}");
    let broken = dir.join("broken.jsonl");
    std::fs::write(&broken, "{\"text\": \"t5\"}\n{\"text\": \n").expect("write");
    assert!(
        err(&broken).contains("broken.jsonl line 2"),
        "{}",
        err(&broken)
    );
}

#[test]
fn chat_data_takes_loss_on_assistant_tokens_only() {
    let dir = scratch("chat");
    let (_, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let path = dir.join("chat.jsonl");
    let line = serde_json::json!({"messages": [
        {"role": "user", "content": "t5 t6"}, {"role": "assistant", "content": "t7 t8"}]});
    std::fs::write(&path, line.to_string()).expect("write");
    let docs = load_documents(std::slice::from_ref(&path), &tok).expect("loads");
    // Rendered: t2 t5 t6 t3 | t2 t7 t8 t3; the prompt with its generation marker is 5 tokens.
    assert_eq!(docs[0].tokens, vec![2, 5, 6, 3, 2, 7, 8, 3]);
    // A byte-order mark before the first line (some Windows editors write one) is skipped.
    std::fs::write(&path, format!("\u{feff}{line}")).expect("write");
    let again = load_documents(&[path], &tok).expect("loads with a byte-order mark");
    assert_eq!(again[0].tokens, docs[0].tokens);
    assert_eq!(
        docs[0].target,
        vec![false, false, false, false, false, true, true, true]
    );
}

/// A heads.json that claims far more heads or blocks than heads.safetensors holds: the
/// first missing tensor is named (nothing is reserved for the claimed count).
#[test]
fn a_head_count_beyond_the_file_is_an_error() {
    let dir = scratch("count");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let data = hidden(&model, &tok, &pattern_file(&dir));
    let out = dir.join("out");
    Trainer::new(&model, &data, config(0), 5)
        .expect("trainer")
        .run(&out, &AtomicBool::new(false), |_| {})
        .expect("a run of 0 updates writes the heads");
    let path = out.join("heads.json");
    let written = std::fs::read_to_string(&path).expect("heads.json");
    for field in ["num_heads", "num_layers"] {
        let mut v: serde_json::Value = serde_json::from_str(&written).expect("JSON");
        v[field] = serde_json::json!(1u64 << 40);
        std::fs::write(&path, v.to_string()).expect("write");
        let e = MedusaHeads::load(&out, &model).err().map(|e| e.to_string());
        assert!(
            e.as_deref().is_some_and(|e| e.contains("missing")),
            "{field}: {e:?}"
        );
    }
    std::fs::write(&path, written).expect("write");
    assert!(MedusaHeads::load(&out, &model).is_ok());
}

#[test]
fn heads_for_another_hidden_size_are_refused() {
    let dir = scratch("mismatch");
    let (model, tok) = tiny_model(&dir.join("a"), &tiny_config(24, 2, true));
    let mut wide = tiny_config(24, 2, true);
    wide.hidden_size = 48;
    wide.head_dim = 12;
    let (other, _) = tiny_model(&dir.join("b"), &wide);
    let data_file = pattern_file(&dir);
    // Hidden states of the 48-wide model cannot train heads for the 32-wide one.
    let wide_data = hidden(&other, &tok, &data_file);
    let e = Trainer::new(&model, &wide_data, config(2), 5)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("hidden size"), "{e}");
    // Nor can a 32-wide checkpoint be resumed on the 48-wide model.
    let data = hidden(&model, &tok, &data_file);
    let out = dir.join("out");
    Trainer::new(&model, &data, config(2), 5)
        .expect("trainer")
        .run(&out, &AtomicBool::new(false), |_| {})
        .expect("run");
    let e = Trainer::resume(&other, &wide_data, config(4), 5, &out)
        .err()
        .expect("refused");
    assert!(e.to_string().contains("hidden size"), "{e}");
    let e = check_resume(&out, &config(4), other.config()).expect_err("refused");
    assert!(e.to_string().contains("hidden size"), "{e}");
}

/// The rows a run will have are counted from the packed sequences, before their hidden
/// states: the same counts as the trainer's, and none to train on is an error.
#[test]
fn rows_are_counted_before_the_hidden_states() {
    let dir = scratch("rows");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let docs = load_documents(&[pattern_file(&dir)], &tok).expect("data loads");
    let seqs = pack(&docs, 32, 4);
    let data = HiddenSet::compute(&model, &seqs, |_, _| {}).expect("hidden states");
    for every in [0, 2, 5, 40] {
        let t = Trainer::new(&model, &data, config(2), every).expect("trainer");
        assert_eq!(
            count_rows(&seqs, every).expect("rows"),
            (t.train_rows(), t.held_out_rows())
        );
    }
    let e = count_rows(&seqs, 1).expect_err("all held out");
    assert!(e.to_string().contains("held-out sequence"), "{e}");
    let e = Trainer::new(&model, &data, config(2), 1)
        .err()
        .expect("all held out");
    assert!(e.to_string().contains("held-out sequence"), "{e}");
    let e = count_rows(&pack(&docs, 2, 2), 0).expect_err("too short");
    assert!(e.to_string().contains("at least 3 tokens"), "{e}");
}

#[test]
fn heads_train_on_a_draft_vocabulary() {
    let dir = scratch("draft");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let data = hidden(&model, &tok, &pattern_file(&dir));
    // The pattern uses t5..t11 equally; t10 and t11 are left out of the draft vocabulary.
    let draft: Vec<u32> = vec![5, 6, 7, 8, 9];
    for kind in [toki_model::HeadKind::Shared, toki_model::HeadKind::Own] {
        let cfg = TrainConfig {
            kind,
            draft_vocab: draft.clone(),
            ..config(30)
        };
        let mut t = Trainer::new(&model, &data, cfg, 5).expect("trainer");
        let mut losses = vec![];
        let out = dir.join(format!("out-{kind:?}"));
        t.run(&out, &AtomicBool::new(false), |e| {
            if let Event::Step { loss, .. } = e {
                losses.push(*loss);
            }
        })
        .expect("training runs");
        let first: f32 = losses[..5].iter().sum::<f32>() / 5.0;
        let last: f32 = losses[25..].iter().sum::<f32>() / 5.0;
        assert!(last < 0.7 * first, "{kind:?}: {first} -> {last}");
        let heads = MedusaHeads::load(&out, &model).expect("heads load");
        assert_eq!(heads.config().draft_vocab, 5, "heads.json records the size");
        // Targets outside the draft count as misses: top-1 is at most 5/7.
        let report = t.evaluate().expect("eval");
        assert!(
            report.top1[0] > 0.4 && report.top1[0] <= 5.0 / 7.0 + 0.05,
            "{kind:?}: held-out top-1 {:?}",
            report.top1
        );
    }
    for (bad, needle) in [
        (vec![5, 5], "twice"),
        (vec![5, 99], "outside the vocabulary"),
    ] {
        let cfg = TrainConfig {
            draft_vocab: bad,
            ..config(2)
        };
        let e = Trainer::new(&model, &data, cfg, 5).err().expect("refused");
        assert!(e.to_string().contains(needle), "{e}");
    }
}

/// Pairs `a f(a)` with `a` drawn at random: the token after a pair's first is a function of
/// it, but nothing before tells which `a` comes next.
fn pairs_file(dir: &Path) -> PathBuf {
    let path = dir.join("pairs.jsonl");
    let mut state = 12345u64;
    let lines: Vec<String> = (0..24)
        .map(|_| {
            let text: Vec<String> = (0..20)
                .flat_map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let a = 5 + (state >> 33) % 7;
                    [format!("t{a}"), format!("t{}", a + 7)]
                })
                .collect();
            serde_json::json!({ "text": text.join(" ") }).to_string()
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).expect("data file");
    path
}

#[test]
fn next_token_heads_learn_what_the_hidden_state_cannot_tell() {
    let dir = scratch("next");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let data = hidden(&model, &tok, &pairs_file(&dir));
    let top1 = |input: HeadInput| {
        let cfg = TrainConfig {
            input,
            num_heads: 1,
            ..config(150)
        };
        let mut t = Trainer::new(&model, &data, cfg, 5).expect("trainer");
        let out = dir.join(format!("out-{input:?}"));
        t.run(&out, &AtomicBool::new(false), |_| {})
            .expect("training runs");
        let heads = MedusaHeads::load(&out, &model).expect("heads load");
        assert_eq!(heads.config().input, input, "heads.json records the input");
        t.evaluate().expect("eval").top1[0]
    };
    // Head 1 guesses token t+2. When t+1 is a pair's first, t+2 follows from it (half the
    // rows); otherwise t+2 is a fresh random draw (1 in 7). The hidden state alone never
    // knows the draw.
    let (hidden_only, with_next) = (top1(HeadInput::Hidden), top1(HeadInput::HiddenAndNext));
    assert!(hidden_only < 0.3, "hidden only: {hidden_only}");
    assert!(
        with_next > 0.45 && with_next > hidden_only + 0.2,
        "with the next token: {with_next}, hidden only: {hidden_only}"
    );
}

#[test]
fn path_heads_grow_from_next_token_heads_and_use_the_path() {
    let dir = scratch("path");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let data = hidden(&model, &tok, &pairs_file(&dir));
    let run = |input: HeadInput, init: Option<&Path>, steps: usize| {
        let cfg = TrainConfig {
            input,
            ..config(steps)
        };
        let mut t = Trainer::new(&model, &data, cfg, 5).expect("trainer");
        if let Some(d) = init {
            t.init_from(d).expect("init");
        }
        let out = dir.join(format!("out-{input:?}-{steps}-{}", init.is_some()));
        t.run(&out, &AtomicBool::new(false), |_| {})
            .expect("training runs");
        (t.evaluate().expect("eval"), out)
    };
    // Two heads: head 1 guesses t+3. Where t+2 is a pair's first, t+3 follows from it;
    // only a head that reads t+2 can know it.
    let (next, next_dir) = run(HeadInput::HiddenAndNext, None, 150);
    // Grown from the next-token heads, before any update: the same heads.
    let (start, _) = run(HeadInput::HiddenAndPath, Some(&next_dir), 0);
    for h in 0..2 {
        assert!(
            (start.top1[h] - next.top1[h]).abs() < 1e-9,
            "{start:?} vs {next:?}"
        );
        assert!(
            (start.loss[h] - next.loss[h]).abs() < 1e-4,
            "{start:?} vs {next:?}"
        );
    }
    let (path, path_dir) = run(HeadInput::HiddenAndPath, Some(&next_dir), 150);
    assert!(
        path.top1[1] > next.top1[1] + 0.15,
        "head 1 with the path: {:?}, with the next token only: {:?}",
        path.top1,
        next.top1
    );
    let heads = MedusaHeads::load(&path_dir, &model).expect("heads load");
    assert_eq!(heads.config().input, HeadInput::HiddenAndPath);
    // Another kind or shape of head set is refused, naming the file.
    let other = TrainConfig {
        num_heads: 3,
        input: HeadInput::HiddenAndPath,
        ..config(1)
    };
    let mut t = Trainer::new(&model, &data, other, 5).expect("trainer");
    let e = t.init_from(&next_dir).expect_err("refused").to_string();
    assert!(e.contains("heads.json") && e.contains("2 heads"), "{e}");
}

/// Soft targets (teacher weight 1) teach the base's own distribution at each target's
/// position. On the periodic text the tokens are not the base's choices (a random tiny
/// model's arg-max is not the pattern): heads trained on soft targets agree with the
/// base's arg-max for token t+2, read from h[t+1]; heads trained on the data's tokens
/// learn the pattern instead. A weight outside [0, 1] is refused.
#[test]
fn soft_targets_teach_the_base_distribution_at_the_target_position() {
    let dir = scratch("soft");
    let (model, tok) = tiny_model(&dir, &tiny_config(24, 2, true));
    let data = hidden(&model, &tok, &pattern_file(&dir));
    let (d, n) = (data.hidden_size, data.len());
    let all = Tensor::<2>::from_data(TensorData::new(data.hidden.clone(), [n, d]), &device());
    // The base's arg-max for the token after each position: [N].
    let base_pick: Vec<i64> = model
        .logits(all.clone())
        .argmax(1)
        .try_into_vec_as()
        .unwrap();
    // Every position t whose head-1 target t+2 lies in its sequence.
    let rows: Vec<usize> = (0..data.num_sequences())
        .flat_map(|s| data.starts[s]..data.starts[s + 1].saturating_sub(2))
        .collect();
    let ids =
        |v: Vec<i64>| Tensor::<1, Int>::from_data(TensorData::new(v, [rows.len()]), &device());
    let at = ids(rows.iter().map(|&t| t as i64).collect());
    let next = ids(rows.iter().map(|&t| data.tokens[t + 1] as i64).collect());
    let agreement = |teacher_weight: f32| {
        let cfg = TrainConfig {
            input: HeadInput::HiddenAndNext,
            num_heads: 1,
            teacher_weight,
            ..config(150)
        };
        let mut t = Trainer::new(&model, &data, cfg, 5).expect("trainer");
        let out = dir.join(format!("out-{teacher_weight}"));
        t.run(&out, &AtomicBool::new(false), |_| {})
            .expect("training runs");
        let heads = t.heads(&device()).expect("heads");
        let logits = heads.forward_on(
            all.clone().select(0, at.clone()),
            HeadPath::Given(vec![next.clone()]),
            &model,
        );
        let guess: Vec<i64> = logits[0].clone().argmax(1).try_into_vec_as().unwrap();
        let same = rows
            .iter()
            .zip(&guess)
            .filter(|&(&t, &g)| base_pick[t + 1] == g)
            .count();
        same as f64 / rows.len() as f64
    };
    let (soft, hard) = (agreement(1.0), agreement(0.0));
    assert!(
        // (0.71 and 0.004 when written; soft targets read one position later: 0.07)
        soft > 0.6 && soft > hard + 0.3,
        "agreement with the base's arg-max: soft targets {soft}, the data's tokens {hard}"
    );
    let bad = TrainConfig {
        teacher_weight: 1.5,
        ..config(1)
    };
    let e = Trainer::new(&model, &data, bad, 5).err().expect("refused");
    assert!(e.to_string().contains("teacher weight"), "{e}");
}
