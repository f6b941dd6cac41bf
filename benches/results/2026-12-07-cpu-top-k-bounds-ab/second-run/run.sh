#!/bin/sh
# The second run after the change (11:17): the binary of b5811ac (topk6), llama.cpp's
# sampling settings, with --control.
set -e
D=${D:-benches/results/2026-12-07-cpu-top-k-bounds-ab/second-run}
TOKI=${TOKI:-/tmp/toki-topk6}
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1 --repeat 2 --control \
  --json --report $D > $D/bench.json 2> $D/stderr.txt
