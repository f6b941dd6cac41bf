#!/bin/sh
# The measured ceiling (benches/ceiling.rs): an oracle's chains against plain decoding.
# The dev profile, as target/debug/toki (dependencies and toki-model at opt-level 3).
cd "$(dirname "$0")/../../.." || exit 1
TOKI_PER_CATEGORY=2 TOKI_CHAINS=2,3,4,5,6,8 TOKI_ACCEPT=1,0.9,0.8,0.7,0.6 TOKI_REPEAT=2 TOKI_MAX_NEW=128 \
  cargo bench -q -p toki-benches --features toki-benches/wgpu --profile dev --bench ceiling
