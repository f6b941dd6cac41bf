#!/bin/sh
# The shipped tree-cpu.json (calibrated 2026-12-05, before the lm_head pick fix of stop 43)
# against one calibrated now with README's recipe, run in turn twice (old, new, old, new),
# each a whole pass of the bench's prompts with one pair a prompt. The binary of b1b51a8.
set -e
D=benches/results/2026-12-07-cpu-tree-cpu-recalibrated-ab
TOKI=${TOKI:-toki}
$TOKI calibrate --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
  --prompts benches/prompts.jsonl --limit 16 --take first --backend cpu --out $D/tree-cpu-after.json
for r in 1 2; do for t in old new; do
  case $t in old) TREE=$D/tree-cpu-before.json ;; new) TREE=$D/tree-cpu-after.json ;; esac
  $TOKI bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
    --prompts benches/prompts.jsonl --tree $TREE --max-new-tokens 128 --backend cpu --repeat 1 \
    --json > $D/bench-$t-$r.json
done; done
