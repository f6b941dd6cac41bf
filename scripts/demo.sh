#!/usr/bin/env bash
# The main job on the demo model: fetch + convert it, then generate speculatively with the
# shipped heads and the tree calibrated for a 2-core CPU (the adaptive policy falls back to
# plain steps wherever the tree does not pay on this machine). Extra arguments go to
# `toki generate`.
set -euo pipefail
cd "$(dirname "$0")/.."
TOKI_CARGO_PROFILE=release scripts/fetch-demo.sh
cargo run --release -q -p toki-cli --bin toki -- generate \
  --model models/smollm2-135m-instruct --chat \
  --prompt "${PROMPT:-Write a Python function that checks whether a number is prime.}" \
  --heads training/heads/smollm2-135m-instruct \
  --tree training/heads/smollm2-135m-instruct/tree-cpu.json \
  --max-new-tokens "${MAX_NEW_TOKENS:-128}" "$@"
