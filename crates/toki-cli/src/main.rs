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

/// Warnings and errors, less wgpu's probe of an OpenGL adapter: on a machine without one
/// (`--backend auto` looking for a GPU, then settling on another) it logs an EGL error
/// that is not toki's. `TOKI_LOG` replaces this filter.
const DEFAULT_LOG: &str = "warn,wgpu_hal::gles=off";

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TOKI_LOG")
                .unwrap_or_else(|_| DEFAULT_LOG.into()),
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
            eprintln!("error: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, each cause once: an error whose message already
/// ends with its cause's (`"{path}: {source}"`) does not repeat it.
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain().map(|c| c.to_string()) {
        if line.is_empty() {
            line = cause;
        } else if !line.ends_with(&cause) {
            line = format!("{line}: {cause}");
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::one_line;

    /// An error that prints its source in its own message, as `"{path}: {source}"`.
    #[derive(Debug)]
    struct Wrapped {
        path: String,
        source: std::io::Error,
    }
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}: {}", self.path, self.source)
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn causes_already_in_the_message_are_not_repeated() {
        let io = || std::io::Error::other("no such file");
        let e = anyhow::Error::new(Wrapped {
            path: "a.gguf".into(),
            source: io(),
        })
        .context("converting a.gguf");
        assert_eq!(one_line(&e), "converting a.gguf: a.gguf: no such file");
        let e = anyhow::Error::new(io()).context("reading b.txt");
        assert_eq!(one_line(&e), "reading b.txt: no such file");
    }
}
