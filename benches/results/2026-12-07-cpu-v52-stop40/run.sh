#!/bin/sh
# The command with --repeat 3 --control, the binary of fc82fd6 (stop 40): greedy
# decoding as in v51 (this stop changed sampling; the greedy pick's stage 1 was refactored
# to share its row grouping with the sampler's bounds).
set -e
D=${D:-benches/results/2026-12-07-cpu-v52-stop40}
TOKI=${TOKI:-toki}
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --repeat 3 --control --json --report $D > $D/bench.json 2> $D/stderr.txt
