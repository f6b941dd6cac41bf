#!/bin/sh
cd /work/main
for round in 1 2; do
  for v in v54 v55; do
    [ $round = 2 ] && v=$( [ $v = v54 ] && echo v55 || echo v54 )
    /tmp/toki-$v bench --model models/smollm2-135m-instruct --heads training/heads/smollm2-135m-instruct \
      --prompts tsqa.jsonl --tree auto --tree-mode dynamic --max-new-tokens 128 --backend cpu \
      --repeat 2 --json > /tmp/ab/$v-r$round.json 2> /tmp/ab/$v-r$round.err
    echo "$v r$round $(date +%T)"
  done
done
echo done
