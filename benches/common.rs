//! What the benchmarks share: paths and counts from the environment, the model, medians.
// Each bench uses part of this module.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use toki_decode::{Engine, EngineOptions, HeadProposer};
use toki_model::{DraftVocab, HostPrecision, LlamaModel, MedusaHeads, TokenCounts};

/// The path in env `var`, else `default`; relative paths are tried from here and then
/// from the workspace root (`cargo bench` runs a bench in its package folder, benches/).
pub fn path_from_env(var: &str, default: &str) -> PathBuf {
    let p = PathBuf::from(std::env::var(var).unwrap_or_else(|_| default.into()));
    if p.exists() {
        p
    } else {
        Path::new("..").join(p)
    }
}

/// The count in env `var`, else `default`.
pub fn count_from_env(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Makes this thread one of rayon's global pool, as the `toki` binary does, so that a
/// bench times a step as decoding runs it ([`toki_model::kernels::join_rayon_pool`]).
pub fn join_rayon_pool() {
    if let Err(e) = toki_model::kernels::join_rayon_pool() {
        eprintln!("rayon's global pool: {e}");
    }
}

/// The model in env `TOKI_MODEL` (default: the converted demo model) on `device`, or
/// `None` after saying why it did not load.
pub fn load_engine(device: &Device) -> Option<Engine> {
    let dir = path_from_env("TOKI_MODEL", "models/smollm2-135m-instruct");
    match Engine::load(&dir, device, &EngineOptions::default()) {
        Ok(e) => Some(e),
        Err(e) => {
            eprintln!(
                "cannot load {} ({e}); run scripts/fetch-demo.sh first or set TOKI_MODEL",
                dir.display()
            );
            None
        }
    }
}

/// The heads in `dir` for `base`, their host copies in `precision`, scoring their draft
/// vocabulary where they were trained on one (as `toki` loads them by default).
pub fn load_proposer(dir: &Path, base: &LlamaModel, precision: HostPrecision) -> HeadProposer {
    let heads = MedusaHeads::load(dir, base)
        .expect("loading the heads (set TOKI_HEADS)")
        .with_host_kernels_in(base, precision);
    let size = heads.config().draft_vocab;
    if size == 0 {
        return HeadProposer::new(heads);
    }
    let file = dir.join("draft-vocab.json");
    let ids = TokenCounts::read(&file)
        .and_then(|c| c.top(size, base.config().vocab_size, &file))
        .expect("reading the draft vocabulary");
    let draft = DraftVocab::new(ids, &heads, base).expect("draft vocabulary");
    HeadProposer::with_draft(heads, draft)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
