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
# The benchmark harnesses (benches/) time things, so they are not run here; they must build.
cargo test -q --workspace "${all[@]}" --benches --no-run
if [ "${TOKI_WGPU:-0}" = 1 ]; then
  # The binaries of the build above, run again on wgpu. (`cargo test -p toki-tests --test
  # ...` would select other packages' features and rebuild Burn: ~20 minutes here.)
  mapfile -t bins < <(cargo test --workspace "${all[@]}" --no-run --message-format=json 2>/dev/null |
    grep -o '"executable":"[^"]*/\(speculative_tiny\|model_units\)-[^"]*"' | cut -d'"' -f4)
  if [ "${#bins[@]}" != 2 ]; then
    echo "wgpu pass: expected the speculative_tiny and model_units test binaries, found: ${bins[*]}" >&2
    exit 1
  fi
  for bin in "${bins[@]}"; do
    (cd tests && TOKI_TEST_BACKEND=wgpu "$bin")
  done
fi
if [ "${TOKI_CUDA_CHECK:-0}" = 1 ]; then
  cargo check -q -p toki-cli --features cuda
  echo "cuda feature: builds"
fi
