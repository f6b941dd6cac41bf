#!/usr/bin/env bash
# Builds toki (target/debug/toki) with `--features wgpu,cuda` on a machine that cannot
# download LLVM, to carry to a GPU machine for scripts/gpu-check.sh. This project's
# machines reach only the package registries.
#
# Burn 0.22.1's cuda feature depends on cubecl-llvm, whose build downloads LLVM. toki's
# cuda feature selects cubecl-cuda's `cpp` path (CUDA C++ through NVRTC), which does not
# call LLVM. So this builds with DOCS_RS=1, under which tracel-llvm-bundler and
# cubecl-llvm skip their native steps, and then links a stub for every LLVM symbol left
# undefined. Each stub aborts with the function's name, so a call that does reach LLVM
# says so. This is a check build, not a release: where LLVM can be downloaded, build
# normally (`cargo build --release -p toki-cli --features cuda`).
#
# CUDARC_CUDA_VERSION (default 13000) is the target machine's CUDA version: no nvcc here
# to ask. At run time: the NVIDIA driver and libnvrtc on the library path, the toolkit's
# lib/stubs not on it (README, prerequisites).
set -euo pipefail
cd "$(dirname "$0")/.."
export DOCS_RS=1 CUDARC_CUDA_VERSION=${CUDARC_CUDA_VERSION:-13000}
target=$(realpath -m "${CARGO_TARGET_DIR:-target}")
dir=$target/llvm-stubs
mkdir -p "$dir"
build() { cargo rustc -p toki-cli --bin toki --features wgpu,cuda -- "$@"; }
# First link: collect the undefined symbols (all of them: lld stops at 20 by default).
if build -C link-arg=-Wl,--error-limit=0 >"$dir/link.log" 2>&1; then
  echo "linked without stubs: $target/debug/toki"
  exit 0
fi
grep -o 'undefined symbol: [A-Za-z_][A-Za-z0-9_]*' "$dir/link.log" | cut -d' ' -f3 | sort -u >"$dir/symbols.txt"
if [ ! -s "$dir/symbols.txt" ]; then
  echo "the build failed for another reason than missing LLVM symbols:" >&2
  tail -n 30 "$dir/link.log" >&2
  exit 1
fi
{
  echo '#include <stdio.h>'
  echo '#include <stdlib.h>'
  echo 'static void stub(const char *f) {'
  echo '  fprintf(stderr, "toki check build: LLVM is not linked (%s called)\n", f);'
  echo '  abort();'
  echo '}'
  while read -r s; do echo "void $s(void) { stub(\"$s\"); }"; done <"$dir/symbols.txt"
} >"$dir/stubs.c"
cc -O1 -fPIC -c "$dir/stubs.c" -o "$dir/stubs.o"
build -C link-arg="$dir/stubs.o"
echo "$target/debug/toki: $(wc -l <"$dir/symbols.txt") LLVM symbols stubbed"
