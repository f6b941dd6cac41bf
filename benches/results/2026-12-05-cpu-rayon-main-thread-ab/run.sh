#!/usr/bin/env bash
# A/B of two toki binaries (A = before, B = after), `toki generate` on the first prompt
# of each category of benches/prompts.jsonl, plain and speculative (shipped heads, the
# shipped tree file, dynamic trees), 128 new tokens; rounds alternate the order A B / B A.
# Prints: round binary mode category tokens/s tokens.
# Usage: run.sh A_BINARY B_BINARY ROUNDS
set -euo pipefail
A=$1; B=$2; ROUNDS=${3:-3}
HEADS=training/heads/smollm2-135m-instruct
mapfile -t PROMPTS < <(python3 -c '
import json
seen = set()
for line in open("benches/prompts.jsonl"):
    p = json.loads(line)
    if p["category"] not in seen:
        seen.add(p["category"]); print(p["category"] + "\t" + p["prompt"])')
for r in $(seq 1 "$ROUNDS"); do
  if (( r % 2 )); then order="A B"; else order="B A"; fi
  for which in $order; do
    bin=$A; [ "$which" = B ] && bin=$B
    for mode in plain spec; do
      extra=(); [ "$mode" = spec ] && extra=(--heads $HEADS --tree $HEADS/tree-cpu.json --tree-mode dynamic)
      for line in "${PROMPTS[@]}"; do
        cat=${line%%$'\t'*}; prompt=${line#*$'\t'}
        "$bin" generate --model models/smollm2-135m-instruct "${extra[@]}" --chat \
          --prompt "$prompt" --backend cpu --max-new-tokens 128 --json 2>/dev/null | tail -1 |
          python3 -c "import json,sys; j=json.loads(sys.stdin.read()); print('$r $which $mode $cat', round(j['stats']['tokens_per_s'],2), len(j['output_ids']), hash(tuple(j['output_ids'])) % 10**8)"
      done
    done
  done
done
