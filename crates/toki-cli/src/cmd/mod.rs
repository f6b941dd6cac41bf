pub mod convert_gguf;
pub mod generate;
