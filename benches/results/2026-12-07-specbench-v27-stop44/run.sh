#!/bin/sh
# README's Spec-Bench command plus --control (v25's and v26's), the binary of b1b51a8 (stop 43's
# HEAD): calibration's cost passes read the longest answer alone, cycled (9de4fbd); v26's
# binary (5ce4ccb) read it after its prompt, and priced 2 nodes as cheap as 1 on Spec-Bench.
set -e
D=${D:-benches/results/2026-12-07-specbench-v27-stop44}
TOKI=${TOKI:-toki}
TOKI_LOG=warn,wgpu_hal::gles=off,toki_model::kernels::pick=debug \
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts ../shared/specbench/prompts.jsonl --per-category 10 --lookup 8 --tree auto --tree-mode dynamic \
  --max-new-tokens 128 --backend cpu --control --json --report $D > $D/bench.json 2> $D/stderr.txt
