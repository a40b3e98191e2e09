#!/usr/bin/env bash
# The next device run on main's wheel (prepared in the fifteenth session; under setsid, from .gpu/call.sh). On an H200:
# certify --reuse first (issues 28 and 30: the MoE contracts' candidates and DeepSeek-V3's router and
# experts, the only contracts without hardware evidence), in three parts (--only: Qwen3-30B-A3B's MoE,
# Qwen3-235B-A22B's, then the rest), each banked as it finishes; then the transformers integration over every
# served model (issue 30), the MoE bench with vLLM on the H200 (issue 28), the operator path and decode
# (issue 31), the MoE gpu test, the other gpu tests. On another card only the transformers integration
# runs, unless .gpu/integ-done says it has (certify --reuse needs the reused table's device; the H100
# measurements of the rest are in docs/).
set -u
R=/tmp/run; H="$R/house"
cd "$R/tree"
export PYTHONUNBUFFERED=1
# a step's archive, without certify's tool logs (they can pass the 16 MiB a returned file may have: a
# certify that fails packs them apart, after its table's archive)
pack() { tar -czf "$R/$1.tar.gz.part" --exclude=certify-logs.tar.gz -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
gs() {  # $1 name, $2 timeout, then tools/gpu-session's mode and arguments (WHEELHOUSE and OUT given here)
  local n=$1 t=$2 mode=$3 hh=$H; shift 3
  [ "$mode" = moe-bench ] && hh=$HB
  mkdir -p "$R/$n"; step "$n" start
  timeout "$t" tools/gpu-session "$mode" "$hh" "$R/$n" "$@" > "$R/$n/session.log" 2>&1
  local rc=$?; step "$n" "rc=$rc"; pack "$n"
  if [ "$rc" != 0 ] && [ -f "$R/$n/certify-logs.tar.gz" ]; then cp "$R/$n/certify-logs.tar.gz" "$R/$n-logs.part" && mv "$R/$n-logs.part" "$R/$n-logs.tar.gz"; fi; }
if ! grep -q H200 "$R/which"; then  # another sm_90 card: the transformers integration once (issue 30)
  [ -f "$R/tree/.gpu/integ-done" ] || gs integ 300 tests tests/test_gpu_integrations_transformers.py
  echo done >> "$R/progress"; exit 0
fi
# certify in three parts (--only), each reusing the table of the one before: what finishes is banked
Q30='(experts=128,topk=8,hidden=2048,inter=768)'; Q235='(experts=128,topk=8,hidden=4096,inter=1536)'
gs certify30 1200 certify --reuse "$R/tree/release/tables/sm_90.json" --tool-timeout 300 \
  --only "fp8_moe_gate_up$Q30" --only "fp8_moe_down$Q30"
[ -f "$R/certify30/sm_90.json" ] && gs certify235 1200 certify --reuse "$R/certify30/sm_90.json" --tool-timeout 300 \
  --only "fp8_moe_gate_up$Q235" --only "fp8_moe_down$Q235"
[ -f "$R/certify235/sm_90.json" ] && gs certifyds 700 certify --reuse "$R/certify235/sm_90.json" --tool-timeout 300
gs integ 420 tests tests/test_gpu_integrations_transformers.py
V=""; HB="$H"
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" \
    && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" && V="--vllm-src $R/vllm/VS" HB="$R/house-bench"
fi
C="g4r8+d3 g4o+d8sh g8x8+d8x8 g8x16+d8x8 g8x64+d8x64 g4x8+d4x8 g4x16+d4x8 g4x64+d4x64"
gs moe30 300 moe-bench $V --contracts Qwen3-30B-A3B --chains $C --tokens 1 2 4 8 16 32 64 --no-compile --rounds 3
gs moe235 300 moe-bench $V --contracts Qwen3-235B-A22B --chains $C --tokens 1 4 16 64 --no-compile --rounds 3
gs path 240 path-bench
gs decode 240 torch-bench --rows 1 16
gs moetest 600 tests tests/test_gpu_moe.py
gs tests 1200 tests tests/test_gpu_grouped_router.py tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_sanitizer.py tests/test_cli.py tests/test_gpu_sm90.py
echo done >> "$R/progress"
