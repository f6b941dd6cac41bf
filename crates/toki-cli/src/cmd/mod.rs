pub mod bench;
pub mod bench_report;
pub mod calibrate;
pub mod convert_gguf;
pub mod corpus;
pub mod datastore;
pub mod distill;
pub mod draft_vocab;
pub mod generate;
pub mod train;

/// A count that must be at least 1 (`--repeat`, `--limit`, `--batch`, `--max-new-tokens`
/// where no token would leave nothing to measure or learn from), refused by clap with its
/// range.
pub fn at_least_one() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}
