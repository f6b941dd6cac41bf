#!/bin/sh
# The issue's command with --repeat 3 --control: v49's engine for greedy decoding (the
# changes since touch sampling, the CLI and the bench report only), one day later.
set -e
D=${D:-benches/results/2026-12-07-cpu-v50-rerun}
TOKI=${TOKI:-toki}
$TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
  --backend cpu --repeat 3 --control --json --report $D > $D/bench.json 2> $D/stderr.txt
