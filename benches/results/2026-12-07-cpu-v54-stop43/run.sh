#!/bin/sh
# The issue's command with --repeat 3 --control (v52-v53's), the binary of 7adacac (stop 43):
# the lm_head pick's way re-timed every 512 calls, and calibration's cost passes over the
# base's answers (before: over the prompts' text, where the timer chose the full product for
# every size, and plain decoding paid ~1 ms a step more than it needs; see README).
# The pick's choices are logged (TOKI_LOG) to stderr.txt.
set -e
D=${D:-benches/results/2026-12-07-cpu-v54-stop43}
TOKI=${TOKI:-toki}
TOKI_LOG=warn,wgpu_hal::gles=off,toki_model::kernels::pick=debug \
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --repeat 3 --control --json --report $D > $D/bench.json 2> $D/stderr.txt
