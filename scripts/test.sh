#!/usr/bin/env bash
# The test suite: fetch + convert the demo model, then every test on the cpu backend
# (flex); with TOKI_WGPU=1 also on wgpu (Mesa lavapipe on a machine without a GPU); with
# TOKI_CUDA_CHECK=1 also check that the cuda feature builds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-demo.sh
cargo test --workspace
if [ "${TOKI_WGPU:-0}" = 1 ]; then
  # The wgpu path, for real: tiny-model equivalence and model checks on the wgpu device.
  TOKI_TEST_BACKEND=wgpu cargo test -p toki-tests --features toki-tests/wgpu --test speculative_tiny --test model_units
fi
if [ "${TOKI_CUDA_CHECK:-0}" = 1 ]; then
  cargo check -p toki-cli --features cuda
fi
