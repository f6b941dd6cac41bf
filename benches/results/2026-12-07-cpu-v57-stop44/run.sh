#!/bin/sh
# The issue's command with --repeat 3 --control (v52-v56's), the binary of e2d16e9 (stop 44:
# v56's engine; the tree line and calibration's summary now give the ceiling at the measured costs).
# The pick's choices are logged to stderr.txt.
set -e
D=${D:-benches/results/2026-12-07-cpu-v57-stop44}
TOKI=${TOKI:-toki}
TOKI_LOG=warn,wgpu_hal::gles=off,toki_model::kernels::pick=debug \
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --repeat 3 --control --json --report $D > $D/bench.json 2> $D/stderr.txt
