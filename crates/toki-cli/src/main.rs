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
    /// Build the corpus datastore lookup searches from the base's own answers.
    Datastore(cmd::datastore::Args),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOKI_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // The main thread joins the pool the kernels run on (each of a step's ~200 parallel
    // loops then runs its share here instead of waking the pool and sleeping).
    if let Err(e) = toki_model::kernels::join_rayon_pool() {
        tracing::warn!("rayon's global pool: {e}");
    }
    let cli = Cli::parse();
    let result = match cli.command {
        Command::ConvertGguf(a) => cmd::convert_gguf::run(a),
        Command::Generate(a) => cmd::generate::run(a),
        Command::Distill(a) => cmd::distill::run(a),
        Command::Train(a) => cmd::train::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Calibrate(a) => cmd::calibrate::run(a),
        Command::DraftVocab(a) => cmd::draft_vocab::run(a),
        Command::Datastore(a) => cmd::datastore::run(a),
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
