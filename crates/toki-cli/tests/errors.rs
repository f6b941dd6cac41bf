//! Bad input to the CLI: a one-line error, a non-zero exit, never a panic.

use std::path::Path;
use std::process::Command;

use toki_model::testing::{ScratchDir, tiny_config, write_model_folder};

/// A fresh folder, removed when the test ends.
fn tmp(name: &str) -> ScratchDir {
    ScratchDir::new(&format!("cli-{name}")).expect("scratch dir")
}

/// Run `toki generate` on the cpu backend.
fn run_generate(model: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_toki"))
        .args(["generate", "--backend", "cpu", "--model"])
        .arg(model)
        .args(extra)
        .output()
        .expect("toki runs")
}

/// Run `toki generate` and return (exit success, stderr).
fn generate(model: &Path, extra: &[&str]) -> (bool, String) {
    let out = run_generate(model, extra);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "panic: {err}");
    (out.status.success(), err)
}

/// Two untrained heads for the tiny model of `tiny_config(64, 2, true)`, saved in
/// `dir/heads`.
fn write_heads(dir: &Path) -> std::path::PathBuf {
    let heads = dir.join("heads");
    let m = toki_model::LlamaModel::from_weights(
        &tiny_config(64, 2, true),
        &mut toki_model::weights::RandomWeights { seed: 1, std: 0.1 },
        &burn::tensor::Device::flex(),
        toki_model::Precision::F32,
    )
    .unwrap();
    let cfg = toki_model::HeadsConfig::for_model(toki_model::HeadKind::Shared, 2, 1, m.config());
    toki_model::MedusaHeads::init(cfg, &m)
        .unwrap()
        .save(&heads)
        .unwrap();
    heads
}

fn assert_one_line_error(ok: bool, err: &str, needle: &str) {
    assert!(!ok, "expected failure, got success: {err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "not one line: {err}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains(needle),
        "{err}"
    );
}

#[test]
fn tiny_model_generates() {
    let dir = tmp("ok");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let (ok, err) = generate(
        &dir,
        &["--prompt", "t5 t6 t7", "--max-new-tokens", "5", "--json"],
    );
    assert!(ok, "{err}");
}

/// `--stop`: the streamed text ends where a stop string would begin, none of it printed;
/// an empty stop string is an error.
#[test]
fn stop_strings_end_the_streamed_text_before_them() {
    let dir = tmp("stop");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let run = |seed: u64, extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_toki"))
            .args(["generate", "--backend", "cpu", "--model"])
            .arg(&dir)
            // Sampled: the tiny model's greedy text repeats one word.
            .args(["--prompt", "t5 t6 t7", "--max-new-tokens", "16"])
            .args(["--temperature", "1", "--seed", &seed.to_string()])
            .args(extra)
            .output()
            .expect("toki runs");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(out.status.success(), "{err}");
        (
            String::from_utf8_lossy(&out.stdout).trim_end().to_string(),
            err,
        )
    };
    // A seed whose text has a word after the first few, whole, whose first occurrence is
    // where it stands.
    let (seed, full, at, stop) = (0..32)
        .find_map(|seed| {
            let (full, _) = run(seed, &[]);
            let words: Vec<&str> = full.split(' ').collect();
            let (at, stop) = (3..words.len().saturating_sub(1))
                .map(|i| (words[..i].join(" ").len(), format!(" {} ", words[i])))
                .find(|(at, stop)| full.find(stop.as_str()) == Some(*at))?;
            Some((seed, full, at, stop))
        })
        .expect("a word seen once so far in the tiny model's text");
    let (cut, err) = run(seed, &["--stop", &stop]);
    assert_eq!(cut, full[..at], "stop string {stop:?}");
    assert!(err.contains("StopString"), "{err}");
    let (ok, err) = generate(&dir, &["--prompt", "t5", "--stop", ""]);
    assert_one_line_error(ok, &err, "--stop");
}

#[test]
fn missing_folder() {
    let (ok, err) = generate(Path::new("/nonexistent/toki-model"), &["--prompt", "hi"]);
    assert_one_line_error(ok, &err, "does not exist");
}

#[test]
fn truncated_safetensors() {
    let dir = tmp("trunc");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let st = dir.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() - 100]).unwrap();
    let (ok, err) = generate(&dir, &["--prompt", "t5"]);
    assert_one_line_error(ok, &err, "model.safetensors");
}

#[test]
fn config_without_required_fields() {
    let dir = tmp("cfg");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    std::fs::write(
        dir.join("config.json"),
        r#"{"model_type": "llama", "hidden_size": 32}"#,
    )
    .unwrap();
    let (ok, err) = generate(&dir, &["--prompt", "t5"]);
    assert_one_line_error(ok, &err, "num_attention_heads");
}

#[test]
fn empty_prompt() {
    let dir = tmp("empty");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let (ok, err) = generate(&dir, &["--prompt", "  "]);
    assert_one_line_error(ok, &err, "empty");
    // As a chat message it is a prompt: the template wraps it.
    let (ok, err) = generate(
        &dir,
        &["--prompt", "", "--chat", "--max-new-tokens", "3", "--json"],
    );
    assert!(ok, "{err}");
}

#[test]
fn prompt_longer_than_the_context() {
    let dir = tmp("long");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let long = vec!["t5"; 100].join(" ");
    let (ok, err) = generate(&dir, &["--prompt", &long, "--max-context", "32"]);
    assert_one_line_error(ok, &err, "context");
}

/// A zero budget or context is refused by the parser, naming the option and its range,
/// before the model loads (the folder below does not exist).
#[test]
fn zero_tokens_or_context_are_refused() {
    for option in ["--max-new-tokens", "--max-context"] {
        let (ok, err) = generate(Path::new("no-such-model"), &["--prompt", "t5", option, "0"]);
        assert!(!ok, "{option}: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(option) && err.contains("1.."),
            "{option}: {err}"
        );
        assert!(!err.contains("no-such-model"), "{option}: {err}");
    }
}

/// A token budget beyond the context (up to `usize::MAX`) is not allocated up front: the
/// answer ends when the context is full, prompt and output together filling it.
#[test]
fn a_huge_token_budget_ends_at_the_context() {
    let dir = tmp("huge");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_toki"))
        .args([
            "generate",
            "--backend",
            "cpu",
            "--json",
            "--max-context",
            "32",
        ])
        .args(["--prompt", "t5 t6 t7", "--max-new-tokens"])
        .arg(usize::MAX.to_string())
        .arg("--model")
        .arg(&dir)
        .output()
        .expect("toki runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).expect("JSON on the last line");
    assert_eq!(v["finish_reason"], "context_full", "{last}");
    let (prompt, output) = (v["prompt_ids"].as_array(), v["output_ids"].as_array());
    assert_eq!(
        prompt.map(Vec::len).unwrap_or(0) + output.map(Vec::len).unwrap_or(0),
        32
    );
}

#[test]
fn bad_tree_and_bad_heads() {
    let dir = tmp("tree");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let (ok, err) = generate(&dir, &["--prompt", "t5", "--heads", "/nonexistent/heads"]);
    assert_one_line_error(ok, &err, "heads");
    let bad = dir.join("tree.json");
    std::fs::write(&bad, "[[0, 0]]").unwrap();
    let heads = write_heads(&dir);
    let (ok, err) = generate(
        &dir,
        &[
            "--prompt",
            "t5",
            "--heads",
            heads.to_str().unwrap(),
            "--tree",
            bad.to_str().unwrap(),
        ],
    );
    assert_one_line_error(ok, &err, "no parent");
    let (ok, err) = generate(
        &dir,
        &[
            "--prompt",
            "t5 t6",
            "--heads",
            heads.to_str().unwrap(),
            "--tree",
            "chain-2",
            "--json",
            "--max-new-tokens",
            "6",
        ],
    );
    assert!(ok, "{err}");
    // A draft vocabulary asked for but not there, then one that does not fit the model.
    let with = |extra: &[&str]| {
        let mut args = vec!["--prompt", "t5", "--heads", heads.to_str().unwrap()];
        args.extend_from_slice(extra);
        generate(&dir, &args)
    };
    let (ok, err) = with(&["--draft-vocab", "16"]);
    assert_one_line_error(ok, &err, "draft-vocab.json does not exist");
    let file = heads.join("draft-vocab.json");
    std::fs::write(&file, r#"{"tokens": [[3, 9], [99, 4]]}"#).unwrap();
    let (ok, err) = with(&[]);
    assert_one_line_error(ok, &err, "outside the model's vocabulary of 64");
    std::fs::write(&file, r#"{"tokens": [[3, 9], [7, 4]]}"#).unwrap();
    let (ok, err) = with(&["--tree", "medium"]);
    assert_one_line_error(
        ok,
        &err,
        "asks for 3 proposals per head but the heads rank only 2",
    );
    let (ok, err) = with(&["--tree", "chain-2", "--max-new-tokens", "4"]);
    assert!(ok, "{err}");
    // The summary line says what speculation did; without heads it has nothing to say.
    assert!(err.contains("tokens a step over"), "{err}");
    let (ok, err) = generate(&dir, &["--prompt", "t5", "--max-new-tokens", "4"]);
    assert!(
        ok && err.contains("tokens/s") && !err.contains("a step"),
        "{err}"
    );
    // A chain of no heads is not a preset.
    let (ok, err) = with(&["--tree", "chain-0"]);
    assert_one_line_error(ok, &err, "chain-N with N >= 1");
    // More draft tokens asked for than the file lists: the ones it lists, and a warning.
    let (ok, err) = with(&["--draft-vocab", "16", "--max-new-tokens", "4"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("--draft-vocab 16 asks for 16 tokens") && err.contains("lists 2"),
        "{err}"
    );
    // Heads trained on more draft tokens than the file lists: the same, said of the heads.
    let json = heads.join("heads.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    cfg["draft_vocab"] = 8.into();
    std::fs::write(&json, cfg.to_string()).unwrap();
    let (ok, err) = with(&["--max-new-tokens", "4"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("the heads were trained on 8 draft tokens") && err.contains("lists 2"),
        "{err}"
    );
}

/// `--no-adapt`: every step verifies the tree (the adaptive policy times plain steps
/// first); without heads it is refused, naming `--heads`.
#[test]
fn no_adapt_verifies_the_tree_every_step() {
    let dir = tmp("no-adapt");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let heads = write_heads(&dir);
    let steps = |extra: &[&str]| {
        let mut args = vec!["--prompt", "t5 t6", "--heads", heads.to_str().unwrap()];
        args.extend_from_slice(&["--tree", "chain-2", "--json", "--max-new-tokens", "12"]);
        args.extend_from_slice(extra);
        let out = run_generate(&dir, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        let stats = &v["stats"];
        (stats["steps"].as_u64(), stats["speculative_steps"].as_u64())
    };
    let (all, spec) = steps(&["--no-adapt"]);
    assert!(
        all.is_some_and(|n| n > 0) && spec == all,
        "{all:?} {spec:?}"
    );
    let (all, spec) = steps(&[]);
    assert!(
        spec < all,
        "the adaptive policy times plain steps first: {all:?} {spec:?}"
    );
    let (ok, err) = generate(&dir, &["--prompt", "t5", "--no-adapt"]);
    assert!(!ok && err.contains("--heads"), "{err}");
}

#[test]
fn acceptance_mode_must_fit_the_temperature() {
    let dir = tmp("accept");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let (ok, err) = generate(&dir, &["--prompt", "t5", "--acceptance", "typical"]);
    assert_one_line_error(ok, &err, "--temperature > 0");
    let (ok, err) = generate(
        &dir,
        &[
            "--prompt",
            "t5",
            "--temperature",
            "0.7",
            "--acceptance",
            "greedy",
        ],
    );
    assert_one_line_error(ok, &err, "--temperature 0");
    let (ok, err) = generate(
        &dir,
        &[
            "--prompt",
            "t5",
            "--temperature",
            "0.7",
            "--acceptance",
            "typical",
            "--max-new-tokens",
            "4",
            "--json",
        ],
    );
    assert!(ok, "{err}");
}

/// `toki train` on bad data: one line naming the file and line; an existing run is not
/// overwritten without --resume, and heads without a checkpoint not at all.
#[test]
fn train_errors_name_the_file() {
    let dir = tmp("train");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let data = dir.join("data.jsonl");
    std::fs::write(&data, "{\"text\": \"t5 t6 t7 t8\"}\nnot json\n").unwrap();
    let run = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_toki"))
            .args(["train", "--backend", "cpu", "--model"])
            .arg(&dir)
            .arg("--data")
            .arg(&data)
            .arg("--out")
            .arg(dir.join("heads"))
            .args(extra)
            .output()
            .expect("toki runs");
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(!err.contains("panicked"), "panic: {err}");
        (out.status.success(), err)
    };
    let (ok, err) = run(&["--steps", "2"]);
    assert_one_line_error(ok, &err, "data.jsonl line 2");
    // Settings that cannot train are refused before anything is written.
    std::fs::write(&data, "{\"text\": \"t5 t6 t7 t8 t9 t10 t11 t12\"}\n").unwrap();
    for (bad, needle) in [
        (&["--heads", "0"][..], "at least 1"),
        (&["--lr", "NaN"], "learning rate"),
        (&["--seq-len", "2"], "no training rows"),
        (&["--held-out-every", "1"], "held-out sequence"),
        (&["--init", "no-such-heads"], "--init"),
    ] {
        let (ok, err) = run(&[&["--steps", "2"][..], bad].concat());
        assert_one_line_error(ok, &err, needle);
        assert!(!dir.join("heads").exists(), "{bad:?} wrote its --out");
    }
    std::fs::write(&data, "{\"text\": \"t5 t6 t7 t8 t9 t10 t11 t12\"}\n").unwrap();
    let (ok, err) = run(&["--steps", "2", "--heads", "2", "--batch", "4"]);
    assert!(ok, "{err}");
    let (ok, err) = run(&["--steps", "2", "--heads", "2"]);
    assert_one_line_error(ok, &err, "--resume");
    let (ok, err) = run(&["--steps", "4", "--heads", "2", "--batch", "4", "--resume"]);
    assert!(ok, "{err}");
    assert!(dir.join("heads/heads.json").exists());
    // A resume that does not match the checkpoint (another head count; data that gives
    // another draft vocabulary) is refused before the run's draft vocabulary is rewritten.
    let vocab = std::fs::read(dir.join("heads/draft-vocab.json")).unwrap();
    let (ok, err) = run(&["--steps", "6", "--heads", "3", "--batch", "4", "--resume"]);
    assert_one_line_error(ok, &err, "3 heads");
    std::fs::write(&data, "{\"text\": \"t20 t21 t22 t23 t24 t25 t26 t27\"}\n").unwrap();
    let (ok, err) = run(&["--steps", "6", "--heads", "2", "--batch", "4", "--resume"]);
    assert_one_line_error(ok, &err, "draft vocabulary");
    assert_eq!(
        std::fs::read(dir.join("heads/draft-vocab.json")).unwrap(),
        vocab
    );
    std::fs::write(&data, "{\"text\": \"t5 t6 t7 t8 t9 t10 t11 t12\"}\n").unwrap();
    // Heads of another shape cannot start a run: refused before its --out is written.
    let out = Command::new(env!("CARGO_BIN_EXE_toki"))
        .args([
            "train",
            "--backend",
            "cpu",
            "--steps",
            "2",
            "--heads",
            "3",
            "--model",
        ])
        .arg(&dir)
        .arg("--data")
        .arg(&data)
        .arg("--init")
        .arg(dir.join("heads"))
        .arg("--out")
        .arg(dir.join("other"))
        .output()
        .expect("toki runs");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_one_line_error(out.status.success(), &err, "cannot start a run");
    assert!(!dir.join("other").exists(), "{err}");
    // Heads that no run can continue (here: the checkpoint removed, as in a shipped
    // folder) are left as they were.
    std::fs::remove_file(dir.join("heads/trainer.safetensors")).unwrap();
    let before = std::fs::read(dir.join("heads/heads.safetensors")).unwrap();
    let vocab = std::fs::read(dir.join("heads/draft-vocab.json")).unwrap();
    let (ok, err) = run(&["--steps", "2", "--heads", "2", "--batch", "4"]);
    assert_one_line_error(ok, &err, "choose another --out");
    assert_eq!(
        std::fs::read(dir.join("heads/heads.safetensors")).unwrap(),
        before
    );
    assert_eq!(
        std::fs::read(dir.join("heads/draft-vocab.json")).unwrap(),
        vocab
    );
}

/// Commands that write one file refuse an `--out` they could not write before their work,
/// and write nothing.
#[test]
fn out_files_that_cannot_be_written_are_refused_up_front() {
    let dir = tmp("out");
    write_model_folder(&dir, &tiny_config(64, 2, true), 1).unwrap();
    let data = dir.join("data.jsonl");
    std::fs::write(&data, "{\"text\": \"t5 t6 t7 t8\"}\n").unwrap();
    let prompts = dir.join("prompts.txt");
    std::fs::write(&prompts, "t5 t6\n").unwrap();
    for (command, input) in [
        ("datastore", "--data"),
        ("draft-vocab", "--data"),
        ("distill", "--prompts"),
    ] {
        let file = if input == "--data" { &data } else { &prompts };
        for (out, needle) in [
            (dir.join("no-such-folder/out"), "does not exist"),
            (dir.join("."), "is a folder"),
        ] {
            let o = Command::new(env!("CARGO_BIN_EXE_toki"))
                .args([command, "--backend", "cpu", "--model"])
                .arg(&dir)
                .arg(input)
                .arg(file)
                .arg("--out")
                .arg(&out)
                .output()
                .expect("toki runs");
            let err = String::from_utf8_lossy(&o.stderr).to_string();
            assert!(!err.contains("panicked"), "panic: {err}");
            assert_one_line_error(o.status.success(), &err, needle);
        }
    }
    assert!(!dir.join("no-such-folder").exists());
}
