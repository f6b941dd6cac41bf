#!/bin/bash
# Prefill A/B: toki generate --max-new-tokens 1, builds alternating, 3 rounds.
cd /work/main
S="The quick brown fox jumps over the lazy dog near the river bank."
P60=$(python3 -c "print(' '.join(['$S']*4))")
P560=$(python3 -c "print(' '.join(['$S']*40))")
P2100=$(python3 -c "print(' '.join(['$S']*150))")
for round in 1 2 3; do
  for len in 60 560 2100; do
    [ $len = 2100 ] && [ $round -gt 1 ] && continue
    eval p=\$P$len
    for b in base new; do
      out=$(/tmp/toki_$b generate --model models/smollm2-135m-instruct --prompt "$p" --max-new-tokens 1 --backend cpu 2>&1 | tail -1)
      echo "round $round len $len $b $out"
    done
  done
done
