#!/bin/sh
# The issue's command with --repeat 3 --control (v52-v54's), the binary of 5ce4ccb (stop 43):
# v54's engine (the lm_head pick's way re-timed every 512 calls), with calibration's cost
# passes over the base's longest answer after its prompt, cycled (v54: the answers laid end
# to end; before v54: the prompts' text). The pick's choices are logged to stderr.txt.
set -e
D=${D:-benches/results/2026-12-07-cpu-v55-stop43}
TOKI=${TOKI:-toki}
TOKI_LOG=warn,wgpu_hal::gles=off,toki_model::kernels::pick=debug \
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --repeat 3 --control --json --report $D > $D/bench.json 2> $D/stderr.txt
