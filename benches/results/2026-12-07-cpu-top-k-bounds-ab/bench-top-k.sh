#!/bin/sh
# The command sampling with llama.cpp's defaults (T 0.8, top-k 40, top-p 0.95,
# seed 1, --repeat 2), for each binary of BINS in turn (README.md in this folder: which
# binaries ran in which order).
set -e
D=${D:-benches/results/2026-12-07-cpu-top-k-bounds-ab}
for b in ${BINS:-/tmp/toki-base /tmp/toki-topk5}; do
  n=$(basename $b)
  $b bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
    --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 \
    --backend cpu --temperature 0.8 --top-k 40 --top-p 0.95 --seed 1 --repeat 2 --json \
    --report $D/bench-$n > $D/bench-$n.json 2> $D/bench-$n.stderr.txt
done
