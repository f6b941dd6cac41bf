#!/bin/bash
# The shipped tree file before and after recalibration: toki bench over the first 4 prompts
# of each category, old, new, old, new. Run from the repository root.
D=benches/results/2026-12-05-cpu-tree-file-ab-2
for round in 1 2; do
  for f in old new; do
    target/debug/toki bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
      --prompts benches/prompts.jsonl --per-category 4 --tree $D/tree-$f.json --tree-mode dynamic \
      --max-new-tokens 128 --backend cpu --json 2>/dev/null | tail -1 > $D/round$round-$f.json
  done
done
