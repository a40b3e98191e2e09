#!/usr/bin/env bash
# The fifteenth session's second device run (branch moe-tc's wheel): tests/test_gpu_moe.py at Qwen3-30B-A3B
# with every tactic (the old ones through the family records' new grid, "inter / columns" and "hidden /
# columns"), then bench_moe at the token counts between the first run's (2, 8, 32).
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
NETRA_TEST_MOE_CONTRACTS=30b gs all30 300 tests tests/test_gpu_moe.py
C="g4r8+d3 g4o+d8sh g8x8+d8x8 g8x16+d8x8 g8x64+d8x64 g8x64+d8x8"
gs moe30b 200 moe-bench $V --contracts Qwen3-30B-A3B --chains $C --tokens 2 8 32 --no-compile --rounds 3
echo done >> "$R/progress"
