//! Shared helpers of the integration tests.

use burn::tensor::Device;
use toki_decode::proposer::{Proposer, StepInput};
use toki_decode::{Engine, Tree};
use toki_model::testing::tiny_config;
use toki_model::weights::RandomWeights;
use toki_model::{LlamaModel, Precision};

/// A tiny random model and an engine over it (no tokenizer, no EOS).
pub fn tiny_engine(seed: u64, kv_heads: usize, tied: bool) -> Engine {
    let config = tiny_config(64, kv_heads, tied);
    let model = LlamaModel::from_weights(
        &config,
        &mut RandomWeights { seed, std: 0.3 },
        &device(),
        Precision::F32,
    )
    .expect("tiny model builds");
    Engine::from_parts(model, None, vec![], 512)
}

/// A proposer that knows the right answer: `reference` is prompt + plain greedy output.
/// Rank 0 of head h is the token h+1 after the root; other ranks are wrong. With `noise`,
/// the rank-0 answer is also wrong at some (deterministic) steps, so acceptance varies.
pub struct OracleProposer {
    pub reference: Vec<u32>,
    pub depth: usize,
    pub vocab: u32,
    pub noise: bool,
}

impl Proposer for OracleProposer {
    fn num_heads(&self) -> usize {
        self.depth
    }
    fn rank(&self, input: StepInput<'_>, tree: &Tree) -> toki_decode::Result<Vec<Vec<u32>>> {
        let m = input.history.len();
        Ok((0..tree.depth())
            .map(|h| {
                let right = self.reference.get(m + h).copied().unwrap_or(0);
                let wrong_here = self.noise && (m * 7 + h * 3) % 5 < 2;
                let best = if wrong_here {
                    (right + 1) % self.vocab
                } else {
                    right
                };
                (0..tree.top_k()[h] as u32)
                    .map(|r| {
                        if r == 0 {
                            best
                        } else {
                            (best + r + 1) % self.vocab
                        }
                    })
                    .collect()
            })
            .collect())
    }
}

/// Deterministic prompt ids in 2..vocab.
pub fn prompt(seed: u64, len: usize, vocab: u32) -> Vec<u32> {
    (0..len as u64)
        .map(|i| 2 + ((i * 31 + seed * 17 + 5) % (vocab as u64 - 2)) as u32)
        .collect()
}

/// The device the tests run on: flex, or wgpu with `TOKI_TEST_BACKEND=wgpu` (built with
/// `--features wgpu`).
pub fn device() -> Device {
    match std::env::var("TOKI_TEST_BACKEND").as_deref() {
        Ok("wgpu") => {
            #[cfg(feature = "wgpu")]
            return Device::wgpu(burn::tensor::DeviceKind::DefaultDevice);
            #[cfg(not(feature = "wgpu"))]
            panic!("TOKI_TEST_BACKEND=wgpu needs --features toki-tests/wgpu");
        }
        Ok("cpu") | Ok("flex") | Err(_) => Device::flex(),
        Ok(other) => panic!("unknown TOKI_TEST_BACKEND {other:?} (cpu, wgpu)"),
    }
}
