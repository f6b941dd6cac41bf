#!/usr/bin/env bash
# The test suite: fetch + convert the demo model, then every test on the cpu backend
# (flex). With TOKI_WGPU=1 the same build includes the wgpu backend and the tiny-model
# equivalence and model checks run again on the wgpu device (Mesa lavapipe on a machine
# without a GPU). With TOKI_CUDA_CHECK=1, also check that the cuda feature builds.
set -euo pipefail
cd "$(dirname "$0")/.."
features=()
if [ "${TOKI_WGPU:-0}" = 1 ]; then
  features=(--features toki-tests/wgpu,toki-cli/wgpu,toki-benches/wgpu)
fi
# One build serves the converter, the tests and the CLI tests.
cargo build -q -p toki-cli "${features[@]}"
TOKI_BIN=target/debug/toki scripts/fetch-demo.sh
cargo test --workspace "${features[@]}"
if [ "${TOKI_WGPU:-0}" = 1 ]; then
  TOKI_TEST_BACKEND=wgpu cargo test -p toki-tests "${features[@]}" --test speculative_tiny --test model_units
fi
if [ "${TOKI_CUDA_CHECK:-0}" = 1 ]; then
  cargo check -q -p toki-cli --features cuda
  echo "cuda feature: builds"
fi
