#!/bin/sh
# README's Spec-Bench command plus --control (v25's), the binary of 5ce4ccb (stop 43, v55's):
# the first Spec-Bench run whose plain side takes the lm_head pick's faster way (v25's, like
# the prompt-set runs v38-v53, likely paid the full product; README "Where it stands").
set -e
D=${D:-benches/results/2026-12-07-specbench-v26-stop43}
TOKI=${TOKI:-toki}
TOKI_LOG=warn,wgpu_hal::gles=off,toki_model::kernels::pick=debug \
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts ../shared/specbench/prompts.jsonl --per-category 10 --lookup 8 --tree auto --tree-mode dynamic \
  --max-new-tokens 128 --backend cpu --control --json --report $D > $D/bench.json 2> $D/stderr.txt
