#!/usr/bin/env bash
# Alternating toki bench runs of two binaries: per run, the overall and per-category speedup medians.
cd /work/main
M=models/smollm2-135m-instruct H=training/heads/smollm2-135m-instruct
for r in $(seq 1 ${ROUNDS:-3}); do
  for a in "$@"; do
    "$a" bench --model $M --heads $H --prompts benches/prompts.jsonl --tree auto --tree-mode dynamic \
      --max-new-tokens 128 --backend cpu --per-category ${PER:-4} --json 2>/dev/null | tail -1 |
      python3 -c "import json,sys; d=json.loads(sys.stdin.read()); c=d['categories']; print('$r $(basename $a)', d['mismatches'], round(d['overall']['speedup_median'],3), ' '.join(k[:5]+'='+str(round(v['speedup_median'],3)) for k,v in c.items()), 'plain', round(d['overall']['plain_tokens_per_s'],1), 'spec', round(d['overall']['spec_tokens_per_s'],1))"
  done
done
