#!/usr/bin/env bash
# Device session of 2026-12-05e, under setsid by .gpu/s6-call.sh, the wheel of branch moe-route-smem
# (routing from shared memory, byte flags, the tails; STAGES tactics dropped; the workspace per contract).
# On an H200: 1. certify sm_90 --reuse (every MoE contract, DeepSeek-V3's router); 2. the MoE gpu tests;
# 3. bench_moe with vLLM; 4. ncu at one token; 5. the other gpu tests (test_gpu_sm90's every-kernel test
# takes more than 10 minutes on an H100). On another card the same without certify.
set -u
R=/tmp/run
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$R/certify"; step certify start
  timeout 900 tools/gpu-session certify "$R/house" "$R/certify" --reuse "$R/tree/release/tables/sm_90.json" \
    --tool-timeout 240 > "$R/certify/session.log" 2>&1
  step certify "rc=$?"; pack certify
fi
mkdir -p "$R/tests"; step tests start
timeout 900 tools/gpu-session tests "$R/house" "$R/tests" \
  tests/test_gpu_moe.py::test_the_chain_through_the_operator \
  tests/test_gpu_moe.py::test_every_call_of_the_chain_leaves_its_counters_at_zero \
  tests/test_gpu_moe.py::test_every_tactic_through_the_operator_gives_the_bits_of_its_warp_split \
  tests/test_gpu_grouped_router.py tests/test_bench_moe.py > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/house/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  step "bench-$c" start
  timeout 420 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" --vllm-src "$R/vllm/VS" \
    --contracts "$c" --no-compile --policy experiment --chains g4r8+d3 g4l+d3l g4r8+d3l g4l+d3 g8l+d3 g8l+d3l g4p+d3 g4r8+d3r8 \
    > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
mkdir -p "$R/prof"; step prof start
bash "$R/tree/.gpu/prof4.sh" "$R/prof" > "$R/prof/session.log" 2>&1; step prof "rc=$?"
rm -f "$R"/prof/*.ncu-rep; pack prof
mkdir -p "$R/rest"; step rest start
timeout 1500 tools/gpu-session tests "$R/house" "$R/rest" tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_integrations_transformers.py tests/test_gpu_sm90.py tests/test_cli.py > "$R/rest/session.log" 2>&1
step rest "rc=$?"; pack rest
echo done >> "$R/progress"
