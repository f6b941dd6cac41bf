//! `toki`: convert models, generate text, benchmark decoding.

mod backend;
mod cmd;
mod heads;
mod tree;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "toki",
    version,
    about = "Self-speculative (Medusa) LLM decoding in Rust"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Convert a llama.cpp GGUF file into a HuggingFace-style folder.
    ConvertGguf(cmd::convert_gguf::Args),
    /// Generate text from a prompt.
    Generate(cmd::generate::Args),
    /// Self-distillation: the base model answers a prompt file (head training data).
    Distill(cmd::distill::Args),
    /// Train Medusa heads on a frozen base model.
    Train(cmd::train::Args),
    /// Plain vs speculative decoding side by side, by prompt category.
    Bench(cmd::bench::Args),
    /// Measure verification cost and head acceptance here; write the best tree.
    Calibrate(cmd::calibrate::Args),
    /// Count the tokens of head-training data: the heads' draft vocabulary.
    DraftVocab(cmd::draft_vocab::Args),
}

/// Makes this thread one of rayon's global pool (the CPU kernels' parallel loops run on
/// it), so that a loop started here runs its share here: otherwise each of a step's ~200
/// loops hands its work to the pool's threads and sleeps until they are done (README,
/// "The main thread in the pool"). The pool keeps at least one thread of its own for
/// work started on other threads (`RAYON_NUM_THREADS`, else one per CPU, at least 2).
fn join_rayon_pool() {
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(2);
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(2))
        .use_current_thread()
        .build_global()
    {
        tracing::warn!("rayon's global pool: {e}");
    }
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOKI_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    join_rayon_pool();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::ConvertGguf(a) => cmd::convert_gguf::run(a),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Distill(a) => cmd::distill::run(a),
        Command::Train(a) => cmd::train::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::DraftVocab(a) => cmd::draft_vocab::run(a),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line: the error and its causes.
            let chain: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("error: {}", chain.join(": "));
            std::process::ExitCode::FAILURE
        }
    }
}
