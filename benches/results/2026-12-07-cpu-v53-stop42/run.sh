#!/bin/sh
# The issue's command with --repeat 3 --control (v52's), the binary of d3c8274 (stop 42):
# greedy decoding as in v52 but for a refactor of the greedy pick (its bound's slack
# computed beside its use instead of in the shared row grouping).
set -e
D=${D:-benches/results/2026-12-07-cpu-v53-stop42}
TOKI=${TOKI:-toki}
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --repeat 3 --control --json --report $D > $D/bench.json 2> $D/stderr.txt
