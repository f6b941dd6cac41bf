#!/bin/sh
# The issue command at temperature 0.7 with lossless acceptance, two pairs a prompt plus
# the control. Each position draws from its own generator, so plain and speculative runs
# with the same seed sample the same tokens: the outputs are compared, as greedy ones are.
set -e
D=${D:-benches/results/2026-12-07-cpu-t07-v7-gumbel}
TOKI=${TOKI:-toki}
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --temperature 0.7 --seed 1 --repeat 2 --control --json --report $D \
  > $D/bench.json 2> $D/stderr.txt
