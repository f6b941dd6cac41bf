#!/bin/bash
# Continuations of the shipped heads, 1 epoch each, same cache and schedule: hard targets (control), then soft.
cd /work/main
DATA="training/data/distilled-smollm2-135m-instruct.jsonl training/data/distilled-2-smollm2-135m-instruct.jsonl"
while pgrep -f "toki-base train" >/dev/null; do sleep 10; done
for run in "$@"; do
  name=${run%%:*}; alpha=${run##*:}
  mkdir -p /tmp/kd/$name
  ln -f /tmp/kd/base0/hidden-cache.safetensors /tmp/kd/$name/
  echo "$name start $(date +%T)" >> /tmp/kd/times.txt
  /tmp/toki-kd train --model models/smollm2-135m-instruct --data $DATA --out /tmp/kd/$name \
    --heads 3 --layers 2 --lm-head shared --head-input hidden-path --init training/heads/smollm2-135m-instruct \
    --epochs 1 --batch 256 --lr 5e-4 --warmup 50 --seq-len 256 --eval-every 500 --checkpoint-every 250 \
    --dtype f16 --teacher-weight $alpha --backend cpu > /tmp/kd/$name.log 2>&1
  echo "$name end $(date +%T) rc=$?" >> /tmp/kd/times.txt
done
