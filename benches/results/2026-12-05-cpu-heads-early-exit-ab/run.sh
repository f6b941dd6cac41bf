#!/usr/bin/env bash
# A/B of two toki binaries, speculative only (shipped heads, shipped tree file, dynamic
# trees), `toki generate` on the first N prompts of each category; rounds alternate A B / B A.
# Prints: round binary category tokens/s tokens hash.
set -euo pipefail
A=$1; B=$2; ROUNDS=${3:-3}; N=${4:-3}
HEADS=training/heads/smollm2-135m-instruct
mapfile -t PROMPTS < <(python3 -c '
import json, collections
seen = collections.Counter()
for line in open("benches/prompts.jsonl"):
    p = json.loads(line)
    if seen[p["category"]] < '"$N"':
        seen[p["category"]] += 1; print(p["category"] + "\t" + p["prompt"].replace("\n", " "))')
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="A B"; else order="B A"; fi
  for line in "${PROMPTS[@]}"; do
    cat=${line%%$'\t'*}; prompt=${line#*$'\t'}
    for which in $order; do
      bin=$A; [ "$which" = B ] && bin=$B
      "$bin" generate --model models/smollm2-135m-instruct --heads $HEADS --tree $HEADS/tree-cpu.json --tree-mode dynamic --chat \
        --prompt "$prompt" --backend cpu --max-new-tokens 128 --json 2>/dev/null | tail -1 |
        python3 -c "import json,sys; j=json.loads(sys.stdin.read()); print('$r $which $cat', round(j['stats']['tokens_per_s'],2), len(j['output_ids']), hash(tuple(j['output_ids'])) % 10**8, round(j['stats']['mean_accepted'],2))"
    done
  done
done
