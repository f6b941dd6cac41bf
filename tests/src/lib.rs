//! Shared helpers of the integration tests.

use burn::tensor::Device;
use toki_decode::Engine;
use toki_decode::proposer::{Proposer, Ranked, StepInput};
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
/// Its probabilities vary from step to step too (rank 0: 0.05 to 0.95, right or wrong), so
/// dynamic trees take every size; an `honest` oracle gives rank 0 0.95 when it is right
/// and 0.05 when it is wrong.
pub struct OracleProposer {
    pub reference: Vec<u32>,
    pub depth: usize,
    pub vocab: u32,
    pub noise: bool,
    pub honest: bool,
}

impl Proposer for OracleProposer {
    fn num_heads(&self) -> usize {
        self.depth
    }
    fn rank(&self, input: StepInput<'_>, top_k: &[usize]) -> toki_decode::Result<Vec<Ranked>> {
        let m = input.history.len();
        Ok((0..top_k.len())
            .map(|h| {
                let right = self.reference.get(m + h).copied().unwrap_or(0);
                let wrong_here = self.noise && (m * 7 + h * 3) % 5 < 2;
                let best = if wrong_here {
                    (right + 1) % self.vocab
                } else {
                    right
                };
                let p0 = match (self.honest, wrong_here) {
                    (true, true) => 0.05,
                    (true, false) => 0.95,
                    (false, _) => 0.05 + 0.1 * ((m * 13 + h * 7) % 10) as f32,
                };
                (0..top_k[h] as u32)
                    .map(|r| {
                        if r == 0 {
                            (best, p0)
                        } else {
                            ((best + r + 1) % self.vocab, (1.0 - p0) / (r + 2) as f32)
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
