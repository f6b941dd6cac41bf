pub mod bench;
pub mod bench_report;
pub mod calibrate;
pub mod convert_gguf;
pub mod distill;
pub mod draft_vocab;
pub mod generate;
pub mod train;
