#!/bin/bash
# A/B: the heads' host copies in f16 (before) against rounded Q8 blocks (after), one binary, alternated.
cd "$(dirname "$0")/../../.."; OUT=${OUT:-/tmp/q8-ab}; mkdir -p "$OUT"
for round in 1 2 3; do
  for p in f16 q8; do
    out=$OUT/$p-$round
    /tmp/cc/target/debug/toki bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
      --prompts benches/prompts.jsonl --per-category 4 --tree auto --tree-mode dynamic --max-new-tokens 128 \
      --backend cpu --repeat 2 --heads-precision $p --json --report $out > $out.json 2> $out.err
  done
done
echo done
