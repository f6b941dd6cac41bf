#!/bin/bash
# Plain sampling (no heads), by default with llama.cpp's defaults (T 0.8, top-k 40, top-p
# 0.95; ARGS sets others), the binary before (the top-k from the full lm_head product, the
# Gumbel draw over bounds from x rounded once) against after (the top-k over the lm_head's
# bounds, x rounded twice for them), alternated, 128 new tokens, 2 seeds, 2 rounds. Each
# line: round, prompt, binary, seed, the text's md5 (the two binaries must give the same
# text), and generate's summary line.
D=$(dirname "$0")
M="--model models/smollm2-135m-instruct"
for round in 1 2; do
  i=0
  while IFS= read -r p; do
    i=$((i+1))
    for b in $( [ $(( (i+round) % 2 )) = 0 ] && echo "${OLD:-/tmp/toki-base} ${NEW:-/tmp/toki-topk}" || echo "${NEW:-/tmp/toki-topk} ${OLD:-/tmp/toki-base}"); do
      for seed in 1 2; do
        $b generate $M --prompt "$p" --max-new-tokens 128 ${ARGS:---temperature 0.8 --top-k 40 --top-p 0.95} \
          --seed $seed --backend cpu --chat > /tmp/ab-out.txt 2> /tmp/ab-err.txt
        echo "$round $i $(basename $b) $seed $(md5sum < /tmp/ab-out.txt | cut -c1-8) $(tail -1 /tmp/ab-err.txt)"
      done
    done
  done < $D/prompts.txt
done
