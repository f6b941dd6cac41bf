#!/bin/sh
# The issue's command with --repeat 3 --control, the binary of 9e93ec2 (stop 39): v49's
# engine for greedy decoding but for the lm_head pick timer's early choice (a way clearly
# faster after 4 calls of each is kept then); a root-only tree (not used here) decodes plainly.
set -e
D=${D:-benches/results/2026-12-07-cpu-v51-stop39}
TOKI=${TOKI:-toki}
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --repeat 3 --control --json --report $D > $D/bench.json 2> $D/stderr.txt
