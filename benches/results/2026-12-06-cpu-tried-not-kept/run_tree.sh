#!/usr/bin/env bash
# Per prompt, rotating: plain, spec with tree file A (old), spec with tree file B (new). Prints: round arm category tok/s tokens hash tau
cd /work/main
BIN=${BIN:-target/debug/toki}; ROUNDS=${ROUNDS:-1}; N=${N:-6}
HEADS=training/heads/smollm2-135m-instruct
mapfile -t PROMPTS < <(python3 -c '
import json, collections
seen = collections.Counter()
for line in open("benches/prompts.jsonl"):
    p = json.loads(line)
    if seen[p["category"]] < '"$N"':
        seen[p["category"]] += 1; print(p["category"] + "\t" + p["prompt"].replace("\n", " "))')
ARMS=(plain none ds)
for r in $(seq 1 "$ROUNDS"); do
  for line in "${PROMPTS[@]}"; do
    cat=${line%%$'\t'*}; prompt=${line#*$'\t'}
    for i in 0 1 2; do
      a=${ARMS[$(( (i + r) % 3 ))]}
      case $a in
        plain) extra=();;
        none) extra=(--heads $HEADS --tree $A --tree-mode dynamic);;
        ds) extra=(--heads $HEADS --tree $B --tree-mode dynamic);;
      esac
      $BIN generate --model models/smollm2-135m-instruct "${extra[@]}" --chat \
        --prompt "$prompt" --backend cpu --max-new-tokens 128 --json 2>/dev/null | tail -1 |
        python3 -c "import json,sys; j=json.loads(sys.stdin.read()); print('$r $a $cat', round(j['stats']['tokens_per_s'],2), len(j['output_ids']), hash(tuple(j['output_ids'])) % 10**8, round(j['stats']['mean_accepted'],2))"
    done
  done
done
