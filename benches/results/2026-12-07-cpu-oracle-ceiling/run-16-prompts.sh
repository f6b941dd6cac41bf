#!/bin/sh
# The second run (21:41-21:52): 4 prompts a category (the first 2 are run.sh's), 9 cells.
cd "$(dirname "$0")/../../.." || exit 1
TOKI_PER_CATEGORY=4 TOKI_CHAINS=3,4,6 TOKI_ACCEPT=1,0.9,0.8 TOKI_REPEAT=2 TOKI_MAX_NEW=128 \
  cargo bench -q -p toki-benches --features toki-benches/wgpu --profile dev --bench ceiling
