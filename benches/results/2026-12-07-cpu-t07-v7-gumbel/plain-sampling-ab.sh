#!/bin/bash
# Plain sampling (T 0.7, no heads), old binary (inverse CDF over the full logits) against
# new (Gumbel over the lm_head's bounds), alternated, 128 new tokens, 2 rounds.
M="--model models/smollm2-135m-instruct"
for round in 1 2; do
  i=0
  while IFS= read -r p; do
    i=$((i+1))
    for b in $( [ $(( (i+round) % 2 )) = 0 ] && echo "${OLD:-/tmp/toki-d33} ${NEW:-/tmp/toki-g1}" || echo "${NEW:-/tmp/toki-g1} ${OLD:-/tmp/toki-d33}"); do
      for seed in 1 2; do
        r=$($b generate $M --prompt "$p" --max-new-tokens 128 --temperature 0.7 --seed $seed --backend cpu --chat 2>&1 >/dev/null | tail -1)
        echo "$round $i $(basename $b) $seed $r"
      done
    done
  done < ${PROMPTS:-plain-sampling-ab-prompts.txt}
done
