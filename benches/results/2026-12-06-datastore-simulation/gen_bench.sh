#!/usr/bin/env bash
# Plain greedy outputs of the bench prompts (and Spec-Bench) as JSON lines: for the datastore simulation.
cd /work/main
F=${1:-benches/prompts.jsonl}; OUT=${2:-/tmp/sim/bench_out.jsonl}; : > $OUT
python3 -c "
import json,sys
for l in open('$F'):
    print(json.dumps(json.loads(l)))" | while IFS= read -r line; do
  prompt=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["prompt"])' "$line")
  cat=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["category"])' "$line")
  target/debug/toki generate --model models/smollm2-135m-instruct --chat --prompt "$prompt" --backend cpu --max-new-tokens 128 --json 2>/dev/null | tail -1 | python3 -c "import json,sys; j=json.loads(sys.stdin.read()); print(json.dumps({'category':'$cat','prompt_ids':j['prompt_ids'],'output_ids':j['output_ids']}))" >> $OUT
done
wc -l $OUT
