#!/bin/sh
# The issue command at temperature 0.7 (lossless acceptance: the output distribution is
# plain sampling's, so there is no identity check), two pairs a prompt plus the control.
set -e
D=${D:-benches/results/2026-12-07-cpu-t07-v5-sampling}
TOKI=${TOKI:-toki}
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --temperature 0.7 --seed 1 --repeat 2 --control --json --report $D \
  > $D/bench.json 2> $D/stderr.txt
