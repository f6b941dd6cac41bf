//! `toki train`: fit Medusa heads on a frozen base. The output folder loads with
//! `toki generate --heads DIR`; `--resume` continues a run from its last checkpoint, and
//! Ctrl-C saves one before exiting.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use toki_decode::{Engine, EngineOptions};
use toki_model::{HeadInput, HeadKind, StoreDtype};
use toki_train::{Event, HiddenSet, TrainConfig, Trainer, load_documents, pack, target_counts};

use crate::backend::{self, Backend};

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LmHeadArg {
    /// Each head gets its own vocabulary projection (initialised from the base's).
    Own,
    /// Every head reuses the base's frozen lm_head (small files).
    Shared,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum DtypeArg {
    F32,
    /// Half the file; the held-out metrics are of the rounded heads.
    F16,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum HeadInputArg {
    /// The base's last hidden state only (the reference Medusa).
    Hidden,
    /// The hidden state plus the embedding of the base's own next token (the tree root).
    HiddenNext,
    /// The hidden state plus every token on the path to the head's target: the root and
    /// the earlier heads' proposals (Hydra's sequential heads).
    HiddenPath,
}

#[derive(clap::Args)]
pub struct Args {
    /// HF-style model folder of the frozen base.
    #[arg(long)]
    model: PathBuf,
    /// Data files or folders: .jsonl ({"text"} or {"messages"}), .txt, .md.
    #[arg(long, required = true, num_args = 1..)]
    data: Vec<PathBuf>,
    /// Output folder: heads, checkpoints, metrics.jsonl, the hidden-state cache.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 4)]
    heads: usize,
    /// Residual blocks per head.
    #[arg(long, default_value_t = 1)]
    layers: usize,
    #[arg(long, value_enum, default_value_t = LmHeadArg::Shared)]
    lm_head: LmHeadArg,
    /// What each head reads (hidden-next: measured better on the demo model, see
    /// training/README.md).
    #[arg(long, value_enum, default_value_t = HeadInputArg::HiddenNext)]
    head_input: HeadInputArg,
    /// Optimizer updates (default: one epoch).
    #[arg(long, conflicts_with = "epochs")]
    steps: Option<usize>,
    #[arg(long)]
    epochs: Option<f64>,
    #[arg(long, default_value_t = 1e-3)]
    lr: f32,
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    /// Positions per micro-batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Micro-batches per update (gradient accumulation).
    #[arg(long, default_value_t = 1)]
    accum: usize,
    /// Tokens per packed training sequence.
    #[arg(long, default_value_t = 256)]
    seq_len: usize,
    /// Loss weight of head k is head_decay^k.
    #[arg(long, default_value_t = 0.8)]
    head_decay: f32,
    #[arg(long, default_value_t = 1.0)]
    max_grad_norm: f32,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f32,
    /// Weight in [0, 1] of soft targets, the base's own distribution at each target's
    /// position (from the cached hidden states), against the data's token (knowledge
    /// distillation); 0: the data's token alone.
    #[arg(long, default_value_t = 0.0)]
    teacher_weight: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[arg(long, default_value_t = 100)]
    checkpoint_every: usize,
    #[arg(long, default_value_t = 200)]
    eval_every: usize,
    /// Every N-th packed sequence is held out for metrics.
    #[arg(long, default_value_t = 20)]
    held_out_every: usize,
    /// Held-out rows (positions) each evaluation reads, spread evenly over the held-out
    /// sequences; 0: all of them.
    #[arg(long, default_value_t = 2048)]
    eval_rows: usize,
    /// Train the heads to score only the N most frequent target tokens of the data (the
    /// draft vocabulary decoding uses; ~10x cheaper updates); 0 = the whole vocabulary.
    #[arg(long, default_value_t = crate::heads::DEFAULT_DRAFT)]
    draft_vocab: usize,
    /// Do not read or write the hidden-state cache (recompute the base every run).
    #[arg(long)]
    no_cache: bool,
    /// How heads.safetensors stores the weights (the resume state stays f32).
    #[arg(long, value_enum, default_value_t = DtypeArg::F32)]
    dtype: DtypeArg,
    /// Continue the run saved in --out.
    #[arg(long)]
    resume: bool,
    /// Start from the heads saved in this folder (same kind, heads and blocks): tensors it
    /// lacks start at zero, e.g. the path projections of hidden-path heads grown from
    /// hidden-next ones.
    #[arg(long, conflicts_with = "resume")]
    init: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
}

pub fn run(a: Args) -> Result<()> {
    if let Some(e) = a.epochs.filter(|e| !(e.is_finite() && *e >= 0.0)) {
        bail!("--epochs must be a finite number >= 0, not {e}");
    }
    let state = a.out.join("trainer.safetensors");
    if state.exists() && !a.resume {
        bail!(
            "{} already holds a training run: pass --resume to continue it, or choose another --out",
            a.out.display()
        );
    }
    if a.resume && !state.exists() {
        bail!("--resume: no checkpoint ({}) to resume", state.display());
    }
    // Heads without a checkpoint beside them (shipped ones, or a run whose checkpoint was
    // removed) are not this command's to replace: a run writes its heads (and their draft
    // vocabulary) over them. A folder a run left before its first checkpoint (the draft
    // vocabulary, the hidden-state cache) is reused.
    let theirs = ["heads.safetensors", "heads.json"];
    if let Some(f) = theirs.iter().map(|f| a.out.join(f)).find(|f| f.exists())
        && !state.exists()
    {
        bail!(
            "{} holds heads that no training run there can continue ({} exists, {} does not): \
             choose another --out",
            a.out.display(),
            f.display(),
            state.display()
        );
    }
    let device = backend::device(a.backend)?;
    let engine = Engine::load(&a.model, &device, &EngineOptions::default())
        .with_context(|| format!("loading {}", a.model.display()))?;
    let base = engine.model();
    let tok = engine.tokenizer().context("the model has no tokenizer")?;
    let docs = load_documents(&a.data, tok)?;
    let seqs = pack(&docs, a.seq_len, a.heads + 2);
    tracing::info!(
        "{} documents -> {} sequences of <= {} tokens",
        docs.len(),
        seqs.len(),
        a.seq_len
    );
    // The heads' draft vocabulary: the training targets' token counts (written below).
    let source: Vec<String> = a.data.iter().map(|p| p.display().to_string()).collect();
    let draft = a.out.join(crate::heads::DRAFT_FILE);
    let counts = target_counts(&docs, source.join(", "));
    let draft_vocab = match a.draft_vocab {
        0 => vec![],
        n => counts.top(n, base.config().vocab_size, &draft)?,
    };

    let config = TrainConfig {
        num_heads: a.heads,
        num_layers: a.layers,
        kind: match a.lm_head {
            LmHeadArg::Own => HeadKind::Own,
            LmHeadArg::Shared => HeadKind::Shared,
        },
        steps: a.steps.unwrap_or(0),
        batch: a.batch,
        accum: a.accum,
        lr: a.lr,
        warmup: a.warmup,
        weight_decay: a.weight_decay,
        teacher_weight: a.teacher_weight,
        max_grad_norm: a.max_grad_norm,
        head_decay: a.head_decay,
        seed: a.seed,
        checkpoint_every: a.checkpoint_every,
        eval_every: a.eval_every,
        eval_rows: match a.eval_rows {
            0 => usize::MAX,
            n => n,
        },
        draft_vocab,
        input: match a.head_input {
            HeadInputArg::Hidden => HeadInput::Hidden,
            HeadInputArg::HiddenNext => HeadInput::HiddenAndNext,
            HeadInputArg::HiddenPath => HeadInput::HiddenAndPath,
        },
        dtype: match a.dtype {
            DtypeArg::F32 => StoreDtype::F32,
            DtypeArg::F16 => StoreDtype::F16,
        },
        ..TrainConfig::default()
    };
    // Refused settings are refused here, before the output folder or the hidden states
    // (an hour's work for the demo model's data on two cores).
    config.check()?;
    if seqs.is_empty() {
        bail!(
            "no training rows: the data packs into no sequence of at least {} tokens (--seq-len {})",
            a.heads + 2,
            a.seq_len
        );
    }
    toki_train::trainer::count_rows(&seqs, a.held_out_every)?;
    if a.resume {
        // The checkpoint's header against this run, before the draft vocabulary is
        // written over the run's own.
        toki_train::checkpoint::check_resume(&a.out, &config, base.config()).context("--resume")?;
    }
    if let Some(dir) = &a.init {
        toki_train::trainer::check_init(dir, &config.heads_for(base.config()))
            .with_context(|| format!("--init {}", dir.display()))?;
    }
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    counts
        .write(&draft)
        .with_context(|| format!("writing {}", draft.display()))?;
    let data = hidden_states(&a, base, &seqs)?;
    let mut trainer = if a.resume {
        Trainer::resume(base, &data, config, a.held_out_every, &a.out)?
    } else {
        Trainer::new(base, &data, config, a.held_out_every)?
    };
    if let Some(dir) = &a.init {
        let taken = trainer
            .init_from(dir)
            .with_context(|| format!("--init {}", dir.display()))?;
        tracing::info!("{taken} tensors taken from {}", dir.display());
    }
    if a.steps.is_none() {
        let per_update = (a.batch * a.accum) as f64;
        let epochs = a.epochs.unwrap_or(1.0);
        trainer.config.steps =
            ((epochs * trainer.train_rows() as f64) / per_update).ceil() as usize;
    }
    tracing::info!(
        "{} training rows, {} held out; {} updates",
        trainer.train_rows(),
        trainer.held_out_rows(),
        trainer.config.steps
    );
    if trainer.held_out_rows() == 0 && a.held_out_every > 0 {
        tracing::warn!(
            "no held-out rows (fewer than {} packed sequences): the metrics read nothing; \
             give more data or a smaller --held-out-every",
            a.held_out_every
        );
    }

    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .context("installing the Ctrl-C handler")?;
    }
    let bar = ProgressBar::new(trainer.config.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {per_sec} eta {eta} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_position(trainer.step() as u64);
    let start = std::time::Instant::now();
    // Without a terminal the bar is hidden: report on stderr every 50 updates instead.
    let say = |line: String| {
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
    };
    trainer.run(&a.out, &stop, |e| match e {
        Event::Step {
            step,
            total,
            loss,
            head_loss,
            lr,
            ..
        } => {
            bar.set_position(*step as u64);
            bar.set_message(format!("loss {loss:.3} lr {lr:.2e}"));
            if bar.is_hidden() && step % 50 == 0 {
                let hl: Vec<f64> = head_loss.iter().map(|&x| x as f64).collect();
                say(format!(
                    "step {step}/{total}: loss {loss:.3} per head {} lr {lr:.2e}",
                    fmt(&hl)
                ));
            }
        }
        Event::Eval(r) => say(format!(
            "step {}: held-out top-1 {} top-5 {}{} ({} rows)",
            r.step,
            fmt(&r.top1),
            fmt(&r.top5),
            if r.top1_chain == r.top1 {
                String::new()
            } else {
                format!(" top-1 on the heads' own chain {}", fmt(&r.top1_chain))
            },
            r.rows
        )),
        Event::Checkpoint { .. } => {}
    })?;
    bar.finish();
    if stop.load(Ordering::SeqCst) {
        eprintln!(
            "interrupted at step {}: checkpoint saved; continue with --resume",
            trainer.step()
        );
    } else {
        eprintln!(
            "trained {} updates in {:.0} s; heads in {}",
            trainer.step(),
            start.elapsed().as_secs_f64(),
            a.out.display()
        );
    }
    Ok(())
}

fn fmt(v: &[f64]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x:.3}")).collect();
    format!("[{}]", parts.join(", "))
}

/// The base's hidden states of `seqs`, from the cache in --out when it was computed from
/// the same model and data.
fn hidden_states(
    a: &Args,
    base: &toki_model::LlamaModel,
    seqs: &[toki_train::Sequence],
) -> Result<HiddenSet> {
    let path = a.out.join("hidden-cache.safetensors");
    let key = cache_key(&a.model, seqs)?;
    if !a.no_cache
        && let Some(set) = HiddenSet::load(&path, &key)?
    {
        tracing::info!("hidden states from {}", path.display());
        return Ok(set);
    }
    let bar = ProgressBar::new(seqs.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("base forward {bar:30} {pos}/{len} sequences eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let set = HiddenSet::compute(base, seqs, |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    if !a.no_cache {
        set.save(&path, &key)?;
    }
    Ok(set)
}

/// What a hidden-state cache was computed from: the model's config and weight files (by
/// size and modification time) and the packed tokens.
fn cache_key(model: &Path, seqs: &[toki_train::Sequence]) -> Result<String> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x1000_0000_01b3);
        }
    };
    eat(&std::fs::read(model.join("config.json")).context("reading config.json")?);
    let mut files: Vec<PathBuf> = std::fs::read_dir(model)
        .with_context(|| format!("reading {}", model.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    for p in files {
        if p.extension().is_some_and(|x| x == "safetensors") {
            let m = std::fs::metadata(&p)?;
            eat(p.to_string_lossy().as_bytes());
            eat(&m.len().to_le_bytes());
            if let Ok(t) = m.modified()
                && let Ok(d) = t.duration_since(std::time::UNIX_EPOCH)
            {
                eat(&d.as_secs().to_le_bytes());
            }
        }
    }
    for s in seqs {
        eat(&(s.tokens.len() as u64).to_le_bytes());
        s.tokens.iter().for_each(|t| eat(&t.to_le_bytes()));
        s.target.iter().for_each(|&t| eat(&[t as u8]));
    }
    Ok(format!("{h:016x}"))
}
