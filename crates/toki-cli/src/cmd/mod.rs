pub mod convert_gguf;
pub mod distill;
pub mod generate;
pub mod train;
