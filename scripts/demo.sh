#!/usr/bin/env bash
# The main job on the demo model: fetch + convert it, then generate (speculatively when
# heads are given: scripts/demo.sh --heads DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
TOKI_CARGO_PROFILE=release scripts/fetch-demo.sh
cargo run --release -q -p toki-cli --bin toki -- generate \
  --model models/smollm2-135m-instruct --chat \
  --prompt "${PROMPT:-Write a Python function that checks whether a number is prime.}" \
  --max-new-tokens "${MAX_NEW_TOKENS:-128}" "$@"
