#!/usr/bin/env bash
# The test suite: fetch + convert the demo model, then every test on the cpu backend
# (flex). With TOKI_WGPU=1 the same build includes the wgpu backend and the tiny-model
# equivalence and model checks run again on the wgpu device (Mesa lavapipe on a machine
# without a GPU).
#
# The cuda feature is not built here: Burn 0.22.1's cuda feature pulls in
# tracel-llvm-bundler, whose build script downloads LLVM, and this project's machines and
# CI have no network beyond the package registries. With TOKI_CUDA_CHECK=1 the check is
# attempted anyway (for a machine that has the network).
set -euo pipefail
cd "$(dirname "$0")/.."
cli=()
all=()
if [ "${TOKI_WGPU:-0}" = 1 ]; then
  cli=(--features wgpu)
  all=(--features toki-tests/wgpu,toki-cli/wgpu,toki-benches/wgpu)
fi
# One build (same features) serves the converter, the tests and the CLI tests.
cargo build -q -p toki-cli "${cli[@]}"
TOKI_BIN="${CARGO_TARGET_DIR:-target}/debug/toki" scripts/fetch-demo.sh
cargo test --workspace "${all[@]}"
if [ "${TOKI_WGPU:-0}" = 1 ]; then
  TOKI_TEST_BACKEND=wgpu cargo test -p toki-tests "${cli[@]}" --test speculative_tiny --test model_units
fi
if [ "${TOKI_CUDA_CHECK:-0}" = 1 ]; then
  cargo check -q -p toki-cli --features cuda
  echo "cuda feature: builds"
fi
