//! `toki train`, `toki calibrate`, `toki datastore` and `toki bench` end to end on a tiny
//! model.

use std::path::Path;
use std::process::Command;

use toki_model::testing::{ScratchDir, tiny_config, write_model_folder};

fn toki(args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_toki"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("toki runs");
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(!err.contains("panicked"), "panic: {err}");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        err,
    )
}

/// `toki <command>` on the test's model, heads and prompts (cpu, 8 new tokens) + `extra`.
fn on_prompts(dir: &Path, command: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec![
        command,
        "--backend",
        "cpu",
        "--model",
        "model",
        "--heads",
        "heads",
        "--prompts",
        "prompts.jsonl",
        "--max-new-tokens",
        "8",
    ];
    args.extend(extra);
    toki(&args, dir)
}

/// `toki bench` with JSON out + `extra`.
fn bench(dir: &Path, extra: &[&str]) -> (bool, String, String) {
    on_prompts(dir, "bench", &[&["--json"], extra].concat())
}

#[test]
fn bench_reports_every_category_and_calibrate_writes_a_usable_tree() {
    let dir = ScratchDir::new("cli-bench").expect("scratch dir");
    write_model_folder(&dir.join("model"), &tiny_config(64, 2, true), 3).unwrap();
    let text: Vec<String> = (0..200).map(|i| format!("t{}", 5 + i % 9)).collect();
    std::fs::write(
        dir.join("data.jsonl"),
        format!("{{\"text\": \"{}\"}}\n", text.join(" ")),
    )
    .unwrap();
    let (ok, _, err) = toki(
        &[
            "train",
            "--backend",
            "cpu",
            "--model",
            "model",
            "--data",
            "data.jsonl",
            "--out",
            "heads",
            "--heads",
            "2",
            "--steps",
            "10",
            "--batch",
            "16",
            "--lr",
            "0.01",
            "--warmup",
            "2",
            // Heads that read the root token: the whole train -> calibrate -> bench path.
            "--head-input",
            "hidden-next",
        ],
        &dir,
    );
    assert!(ok, "{err}");
    let heads_json = std::fs::read_to_string(dir.join("heads/heads.json")).unwrap();
    assert!(heads_json.contains("hidden_and_next"), "{heads_json}");
    let prompts = ["code", "qa"]
        .iter()
        .flat_map(|c| {
            (0..2).map(move |i| {
                format!(
                    "{{\"category\": \"{c}\", \"prompt\": \"t5 t{}\", \"chat\": true}}",
                    6 + i
                )
            })
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(dir.join("prompts.jsonl"), prompts).unwrap();

    let (ok, _, err) = on_prompts(&dir, "calibrate", &["--out", "tree.json"]);
    assert!(ok, "{err}");
    assert!(
        !dir.join("tree.json.tmp").exists(),
        "written in place of its temp file"
    );
    let cal: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tree.json")).unwrap()).unwrap();
    // Costs up to the first measured size over 4 one-node passes (at most 64 nodes).
    let costs = cal["cost_s"].as_array().unwrap().len();
    assert!((2..=64).contains(&costs), "{cal}");
    assert_eq!(cal["acceptance"].as_array().unwrap().len(), 2);
    assert_eq!(cal["dynamic"]["cost"].as_array().unwrap().len(), costs);
    assert_eq!(cal["dynamic"]["accuracy"].as_array().unwrap().len(), 2);

    let mut first_ids = None;
    for (tree, mode) in [
        ("chain-2", "dynamic"),
        ("tree.json", "dynamic"),
        ("tree.json", "static"),
        ("auto", "dynamic"),
        ("auto", "static"),
    ] {
        let extra = ["--tree", tree, "--tree-mode", mode, "--report", "report"];
        let (ok, out, err) = bench(&dir, &extra);
        assert!(ok, "--tree {tree}: {err}");
        let kind = if tree == "chain-2" { "static" } else { mode };
        assert!(
            err.contains(&format!("tree: {kind}")),
            "--tree {tree} {mode}: {err}"
        );
        let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(last["mismatches"], 0);
        for c in ["code", "qa"] {
            let cat = &last["categories"][c];
            assert_eq!(cat["prompts"], 2, "{last}");
            for k in [
                "tau",
                "plain_tokens_per_s",
                "spec_tokens_per_s",
                "speedup_median",
                "speedup_min",
                "speedup_max",
            ] {
                assert!(cat[k].as_f64().unwrap() > 0.0, "{c}.{k}: {last}");
            }
        }
        assert!(out.contains("| overall |"), "{out}");
        // Each row carries the plain (greedy) output ids: the same whatever the tree.
        let ids: Vec<serde_json::Value> = last["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["output_ids"].clone())
            .collect();
        assert_eq!(ids.len(), 4, "{last}");
        assert!(
            ids.iter()
                .all(|x| x.as_array().is_some_and(|a| (1..=8).contains(&a.len()))),
            "{last}"
        );
        match &first_ids {
            None => first_ids = Some(ids),
            Some(first) => assert_eq!(first, &ids, "--tree {tree} {mode}"),
        }
    }
    // The heads' copies in each precision (default q8): the same output, the plain one.
    for precision in ["f32", "f16"] {
        let extra = ["--tree", "chain-2", "--heads-precision", precision];
        let (ok, out, err) = bench(&dir, &extra);
        assert!(ok, "--heads-precision {precision}: {err}");
        let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        assert_eq!(last["mismatches"], 0);
        let ids: Vec<serde_json::Value> = (last["prompts"].as_array().unwrap().iter())
            .map(|p| p["output_ids"].clone())
            .collect();
        assert_eq!(
            Some(&ids),
            first_ids.as_ref(),
            "--heads-precision {precision}"
        );
    }
    // No --tree: the small preset (static, cut to the 2 heads) until the heads folder
    // holds a calibration for the backend, then that (its dynamic tree).
    let (ok, _, err) = bench(&dir, &[]);
    assert!(ok && err.contains("tree: static, "), "{err}");
    std::fs::copy(dir.join("tree.json"), dir.join("heads/tree-cpu.json")).unwrap();
    let (ok, _, err) = bench(&dir, &[]);
    assert!(ok && err.contains("tree: dynamic"), "{err}");
    assert!(dir.join("report/report.md").exists() && dir.join("report/speedup.svg").exists());
    let md = std::fs::read_to_string(dir.join("report/report.md")).unwrap();
    assert!(md.contains("tree: "), "the report names the tree: {md}");
    assert!(
        !md.contains("control"),
        "no control column without --control: {md}"
    );
    // A report path that cannot be a folder fails before any run, and the file stays.
    let (ok, out, err) = bench(&dir, &["--tree", "chain-2", "--report", "prompts.jsonl"]);
    assert!(
        !ok && err.contains("--report") && out.is_empty(),
        "{out}{err}"
    );
    assert!(
        std::fs::read_to_string(dir.join("prompts.jsonl"))
            .unwrap()
            .contains("t5 t6")
    );
    // No tokens to decode leaves nothing to measure: refused up front.
    let zero = ["--backend", "cpu", "--model", "model", "--heads", "heads"];
    let zero = [
        &zero[..],
        &["--prompts", "prompts.jsonl", "--max-new-tokens", "0"],
    ]
    .concat();
    for (command, out) in [("bench", &[][..]), ("calibrate", &["--out", "t0.json"])] {
        let (ok, _, err) = toki(&[&[command][..], &zero, out].concat(), &dir);
        assert!(!ok && err.contains("--max-new-tokens"), "{command}: {err}");
    }
    // An --out that cannot be written is refused before calibrating, not after.
    for (out, needle) in [
        ("no-such-folder/t.json", "does not exist"),
        ("heads", "is a folder"),
    ] {
        let (ok, _, err) = on_prompts(&dir, "calibrate", &["--out", out]);
        assert!(!ok && err.contains(needle), "{out}: {err}");
    }
    // The control: a second plain run per pair, its ratio to the first beside the speedup.
    let (ok, out, err) = bench(
        &dir,
        &["--tree", "chain-2", "--control", "--report", "report"],
    );
    assert!(ok, "{err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["mismatches"], 0);
    for (p, r) in last["prompts"].as_array().unwrap().iter().enumerate() {
        assert!(r["control"].as_f64().unwrap() > 0.0, "prompt {p}: {last}");
    }
    let control = &last["overall"]["control"];
    let (min, max) = (control["min"].as_f64(), control["max"].as_f64());
    assert!(min.unwrap() > 0.0 && min <= max, "{last}");
    let below = |x: &serde_json::Value| x.as_u64().filter(|&n| n <= 4);
    assert!(below(&control["slower"]).is_some(), "{last}");
    assert!(below(&last["overall"]["slower"]).is_some(), "{last}");
    assert!(out.contains("control median"), "{out}");
    let md = std::fs::read_to_string(dir.join("report/report.md")).unwrap();
    assert!(md.contains("| control |"), "{md}");
    // Without it, no control in the JSON.
    let (ok, out, _) = bench(&dir, &["--tree", "chain-2"]);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert!(ok && last["overall"].get("control").is_none(), "{last}");
    assert!(last["prompts"][0].get("control").is_none(), "{last}");

    // Sampling: tau and speedup at a temperature; under lossless acceptance the same seed
    // draws the same tokens plain or speculative, so the outputs are compared.
    let (ok, out, err) = bench(&dir, &["--tree", "chain-2", "--temperature", "0.7"]);
    assert!(ok, "{err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert!(
        (last["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6,
        "{last}"
    );
    assert!(last["overall"]["tau"].as_f64().unwrap() >= 1.0, "{last}");
    assert_eq!(last["prompts"][0]["identical"], true, "{last}");
    assert_eq!(last["mismatches"], 0, "{last}");
    // Typical acceptance is lossy: not compared, so not reported as identical.
    let typical = [
        "--tree",
        "chain-2",
        "--temperature",
        "0.7",
        "--acceptance",
        "typical",
    ];
    let (ok, out, err) = bench(&dir, &typical);
    assert!(ok, "{err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert!(last["prompts"][0]["identical"].is_null(), "{last}");

    // A datastore from the training data, picked up from the heads folder: the same ids.
    let datastore = |data: &str, out: &str| {
        let args = ["datastore", "--backend", "cpu", "--model", "model"];
        toki(&[&args[..], &["--data", data, "--out", out]].concat(), &dir)
    };
    let (ok, _, err) = datastore("data.jsonl", "heads/datastore.safetensors");
    assert!(ok && err.contains("from 1 documents"), "{err}");
    let bench_with = |datastore: Option<&str>| match datastore {
        Some(d) => bench(&dir, &["--tree", "tree.json", "--datastore", d]),
        None => bench(&dir, &["--tree", "tree.json"]),
    };
    let (ok, out, err) = bench_with(None);
    assert!(ok && err.contains("datastore of"), "{err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["mismatches"], 0);
    let ids: Vec<serde_json::Value> = (last["prompts"].as_array().unwrap().iter())
        .map(|p| p["output_ids"].clone())
        .collect();
    assert_eq!(Some(ids), first_ids);
    let (ok, _, err) = bench_with(Some("none"));
    assert!(ok && !err.contains("datastore of"), "{err}");
    // A missing datastore, or missing data to build one, is an error naming the file.
    let (ok, _, err) = bench_with(Some("missing.safetensors"));
    assert!(!ok && err.contains("missing.safetensors"), "{err}");
    let (ok, _, err) = datastore("nothere.jsonl", "ds.safetensors");
    assert!(!ok && err.contains("nothere.jsonl"), "{err}");
}
