#!/usr/bin/env bash
# v49: the issue command with --repeat 3 --control, the new binary and the one before it, in turn;
# then Spec-Bench (the README command plus --control) with each.
cd /work/main
M=models/smollm2-135m-instruct; H=training/heads/smollm2-135m-instruct
for b in new2 old; do
  out=/tmp/runs/v49-$b
  /tmp/e/toki-$b bench --model $M --heads $H --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic \
    --max-new-tokens 128 --backend cpu --repeat 3 --control --json --report $out > $out.json 2> $out.stderr.txt
  echo "$b done $(date)"
done
for b in new2 old; do
  out=/tmp/runs/sb-$b
  /tmp/e/toki-$b bench --model $M --heads $H --prompts ../shared/specbench/prompts.jsonl --per-category 10 --lookup 8 \
    --tree auto --tree-mode dynamic --max-new-tokens 128 --backend cpu --control --json --report $out > $out.json 2> $out.stderr.txt
  echo "sb $b done $(date)"
done
