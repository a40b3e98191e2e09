#!/usr/bin/env bash
# The fifteenth session's first device run (under setsid, from .gpu/call.sh) on branch moe-tc's wheel:
# fp8_moe_gate_up_tc (g8x8, g8x16, g8x64) and fp8_moe_down_tc (d8x8, d8x64) against the served chain, vLLM's Triton kernel and the read limit.
# 1. conformance: every case, deterministic and batch invariant, for the new tactics at Qwen3-30B-A3B;
# 2. bench_moe at Qwen3-30B-A3B, then Qwen3-235B-A22B; 3. the same conformance at 235B and the operator tests.
# On an H200, certify (--reuse, --only) each Qwen3 contract's two MoE stages after its bench (issue 28:
# every candidate, the new ones included, with the sanitizers and the profiler; each part banked).
set -u
R=/tmp/run; H="$R/house"
cd "$R/tree"
export PYTHONUNBUFFERED=1
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
gs() {  # $1 name, $2 timeout, then tools/gpu-session's mode and arguments (WHEELHOUSE and OUT given here)
  local n=$1 t=$2 mode=$3 hh=$H; shift 3
  [ "$mode" = moe-bench ] && hh=$HB
  mkdir -p "$R/$n"; step "$n" start
  timeout "$t" tools/gpu-session "$mode" "$hh" "$R/$n" "$@" > "$R/$n/session.log" 2>&1
  local rc=$?; step "$n" "rc=$rc"; pack "$n"; }
# certify's tool logs stay out of the step's archive (they can pass what a returned file may hold)
pack() { tar -czf "$R/$1.tar.gz.part" --exclude=certify-logs.tar.gz -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
V=""; HB="$H"
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" \
    && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" && V="--vllm-src $R/vllm/VS" HB="$R/house-bench"
fi
export NETRA_TEST_MOE_TACTICS=g8x8,g8x16,g8x64,d8x8,d8x64
NETRA_TEST_MOE_CONTRACTS=30b gs t30 240 tests tests/test_gpu_moe.py -k "every_tactic_passes"
C="g4r8+d3 g4o+d8sh g8x8+d3 g8x64+d3 g8x8+d8x8 g8x16+d8x8 g8x64+d8x64 g4o+d8x8"
gs moe30 300 moe-bench $V --contracts Qwen3-30B-A3B --chains $C --tokens 1 4 16 64 --no-compile --rounds 3
Q30='(experts=128,topk=8,hidden=2048,inter=768)'; Q235='(experts=128,topk=8,hidden=4096,inter=1536)'
if grep -q H200 "$R/which"; then
  gs certify30 600 certify --reuse "$R/tree/release/tables/sm_90.json" --tool-timeout 300 \
    --only "fp8_moe_gate_up$Q30" --only "fp8_moe_down$Q30"
fi
gs moe235 300 moe-bench $V --contracts Qwen3-235B-A22B --chains $C --tokens 1 16 64 --no-compile --rounds 3
if grep -q H200 "$R/which" && [ -f "$R/certify30/sm_90.json" ]; then
  gs certify235 600 certify --reuse "$R/certify30/sm_90.json" --tool-timeout 300 \
    --only "fp8_moe_gate_up$Q235" --only "fp8_moe_down$Q235"
fi
NETRA_TEST_MOE_CONTRACTS=235b gs t235 300 tests tests/test_gpu_moe.py -k "every_tactic_passes"
NETRA_TEST_MOE_CONTRACTS=30b gs top30 300 tests tests/test_gpu_moe.py -k "operator"
echo done >> "$R/progress"
