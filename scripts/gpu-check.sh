#!/usr/bin/env bash
# Checks of the demo model on a machine with a GPU (by hand: CI has none). For each
# backend named:
#   1. oracle: greedy ids on the transformers oracle's 9 prompts (64 tokens) must equal
#      the oracle's or first differ at a near-tie; `toki bench` checks speculative ==
#      plain on them too (with the shipped heads and the `small` tree);
#   2. calibrate: `toki calibrate` on that backend, i.e. the cost curve and the tree it
#      picks (`tree-BACKEND.json`);
#   3. bench: `toki bench` with that tree on PER prompts of each category of
#      benches/prompts.jsonl (BACKEND:PER overrides it; 0 = all), 128 tokens: speedup
#      and τ side by side with plain decoding.
# Each step has a time limit (cut to what is left of GPU_CHECK_DEADLINE seconds, if set)
# and a step that fails is reported and the next runs. REFERENCE_RUN=RUN.json (`toki
# bench --json` on another backend) is compared with each bench's plain ids. With
# GPU_CHECK_TAR=FILE.tgz, OUT is archived there after every step, so a run cut short
# still returns what it finished.
#
# Usage: scripts/gpu-check.sh TOKI MODEL_DIR ORACLE_JSON OUT PER BACKEND...
# e.g.   scripts/gpu-check.sh target/release/toki models/smollm2-135m-instruct \
#            ../shared/oracle/oracle.json /tmp/gpu 5 cuda:0 wgpu
set -uo pipefail
if [ $# -lt 6 ]; then
  sed -n 2,20p "$0"
  exit 2
fi
toki=$1 model=$2 oracle=$3 out=$4 per=$5
shift 5
heads=training/heads/smollm2-135m-instruct
mkdir -p "$out"
python3 scripts/gpu_compare.py prompts "$oracle" >"$out/oracle-prompts.jsonl" || exit 1

step() { # step NAME SECONDS CMD...: run, log, report the exit status and the time
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  local left=$((${GPU_CHECK_DEADLINE:-100000} - SECONDS))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 15 ]; then
    echo "== $name: skipped (out of time)"
    return 124
  fi
  echo "== $name (limit $limit s)"
  timeout "$limit" "$@" >"$out/$name.out" 2>"$out/$name.err"
  local rc=$?
  echo "   rc $rc in $((SECONDS - t0)) s"
  [ $rc = 0 ] || tail -n 5 "$out/$name.err"
  [ -z "${GPU_CHECK_TAR:-}" ] || tar czf "$GPU_CHECK_TAR" -C "$out" .
  return $rc
}

for arg in "$@"; do
  b=${arg%%:*} n=$per
  [ "$arg" = "$b" ] || n=${arg#*:}
  common=(--model "$model" --heads "$heads" --backend "$b")
  step "oracle-$b" 180 "$toki" bench "${common[@]}" --prompts "$out/oracle-prompts.jsonl" \
    --tree small --max-new-tokens 64 --json
  if grep -q '^{' "$out/oracle-$b.out"; then
    python3 scripts/gpu_compare.py oracle "$oracle" "$out/oracle-$b.out"
    grep -v '^{' "$out/oracle-$b.out"
  fi
  # The 8 prompts spread over the file that `bench --tree auto` calibrates on.
  step "calibrate-$b" 150 "$toki" calibrate "${common[@]}" --prompts benches/prompts.jsonl \
    --limit 8 --out "$out/tree-$b.json" && tail -n 1 "$out/calibrate-$b.err"
  tree=$out/tree-$b.json
  [ -f "$tree" ] || tree=auto
  step "bench-$b" 300 "$toki" bench "${common[@]}" --prompts benches/prompts.jsonl \
    --tree "$tree" --per-category "$n" --max-new-tokens 128 --json --report "$out/bench-$b" &&
    grep -v '^{' "$out/bench-$b.out"
done
runs=("${REFERENCE_RUN:-}" "$out"/bench-*.out)
for ((i = 0; i < ${#runs[@]}; i++)); do
  for ((j = i + 1; j < ${#runs[@]}; j++)); do
    a=${runs[i]} b=${runs[j]}
    if grep -qs '^{' "$a" && grep -qs '^{' "$b"; then
      echo "== plain ids, $(basename "$a") vs $(basename "$b")"
      python3 scripts/gpu_compare.py runs "$a" "$b"
    fi
  done
done
exit 0
