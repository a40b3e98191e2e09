#!/usr/bin/env bash
# The fifteenth session's third device run (branch moe-tc's wheel): the 64-column tensor-core tactics
# (g4x8, g4x16, g4x64: a 128-column group's two CTAs one cluster; d4x8, d4x64) on every conformance case at
# both Qwen3 contracts, then bench_moe beside the first run's chains, vLLM and the read limit.
set -u
R=/tmp/run; H="$R/house"
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
gs() {
  local n=$1 t=$2 mode=$3 hh=$H; shift 3
  [ "$mode" = moe-bench ] && hh=$HB
  mkdir -p "$R/$n"; step "$n" start
  timeout "$t" tools/gpu-session "$mode" "$hh" "$R/$n" "$@" > "$R/$n/session.log" 2>&1
  local rc=$?; step "$n" "rc=$rc"; pack "$n"; }
V=""; HB="$H"
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" \
    && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" && V="--vllm-src $R/vllm/VS" HB="$R/house-bench"
fi
export NETRA_TEST_MOE_TACTICS=g4x8,g4x16,g4x64,d4x8,d4x64
NETRA_TEST_MOE_CONTRACTS=30b gs u30 200 tests tests/test_gpu_moe.py
C="g4r8+d3 g4o+d8sh g8x8+d8x8 g8x16+d8x8 g8x64+d8x64 g4x8+d4x8 g4x16+d4x8 g4x64+d4x64 g4x8+d8x8 g8x8+d4x8 g4x64+d8x64"
gs m30 200 moe-bench $V --contracts Qwen3-30B-A3B --chains $C --tokens 1 4 16 64 --no-compile --rounds 3
gs m235 200 moe-bench $V --contracts Qwen3-235B-A22B --chains $C --tokens 1 16 64 --no-compile --rounds 3
NETRA_TEST_MOE_CONTRACTS=235b gs u235 150 tests tests/test_gpu_moe.py -k "every_tactic_passes"
echo done >> "$R/progress"
