#!/usr/bin/env bash
# Round 2 of the A/B: the issue command with --repeat 3 --control, the binary before first this time.
cd /work/main
M=models/smollm2-135m-instruct; H=training/heads/smollm2-135m-instruct
for b in old new2; do
  out=/tmp/runs/r2-$b
  /tmp/e/toki-$b bench --model $M --heads $H --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic \
    --max-new-tokens 128 --backend cpu --repeat 3 --control --json --report $out > $out.json 2> $out.stderr.txt
  echo "r2 $b done $(date)"
done
