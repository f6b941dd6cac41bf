#!/usr/bin/env bash
# Three speculative generations at once on the 2 cores (an oversubscribed machine): tokens/s of each.
BIN=${1:-target/debug/toki}
cd /work/main
H=training/heads/smollm2-135m-instruct
g() { timeout 300 $BIN generate --model models/smollm2-135m-instruct --heads $H --tree $H/tree-cpu.json --chat --prompt "$1" --backend cpu --max-new-tokens 128 --json 2>/dev/null | tail -1 | python3 -c "import json,sys; print(round(json.loads(sys.stdin.read())['stats']['tokens_per_s'],1))"; }
g 'Why is the ocean salty?' > /tmp/ab/t_a.txt & g 'How does a compass work?' > /tmp/ab/t_b.txt & g 'Write a poem about a city at night.' > /tmp/ab/t_c.txt & wait
echo "three together: $(cat /tmp/ab/t_a.txt) $(cat /tmp/ab/t_b.txt) $(cat /tmp/ab/t_c.txt)"
