#!/usr/bin/env bash
# Round-robin A/B/C: arms rotate per round. Prints: round arm mode category tokens/s tokens hash tau
set -euo pipefail
cd /work/main
ARMS=("$@"); ROUNDS=${ROUNDS:-3}; N=${N:-3}
HEADS=training/heads/smollm2-135m-instruct
mapfile -t PROMPTS < <(python3 -c '
import json, collections
seen = collections.Counter()
for line in open("benches/prompts.jsonl"):
    p = json.loads(line)
    if seen[p["category"]] < '"$N"':
        seen[p["category"]] += 1; print(p["category"] + "\t" + p["prompt"].replace("\n", " "))')
k=${#ARMS[@]}
for r in $(seq 1 "$ROUNDS"); do
  for line in "${PROMPTS[@]}"; do
    cat=${line%%$'\t'*}; prompt=${line#*$'\t'}
    for mode in plain spec; do
      extra=(); [ "$mode" = spec ] && extra=(--heads $HEADS --tree $HEADS/tree-cpu.json --tree-mode dynamic)
      for i in $(seq 0 $((k-1))); do
        a=${ARMS[$(( (i + r) % k ))]}
        "$a" generate --model models/smollm2-135m-instruct "${extra[@]}" --chat \
          --prompt "$prompt" --backend cpu --max-new-tokens 128 --json 2>/dev/null | tail -1 |
          python3 -c "import json,sys; j=json.loads(sys.stdin.read()); print('$r $(basename $a) $mode $cat', round(j['stats']['tokens_per_s'],2), len(j['output_ids']), hash(tuple(j['output_ids'])) % 10**8, round(j['stats']['mean_accepted'],2))"
      done
    done
  done
done
