#!/usr/bin/env bash
# Runs on the H200 under setsid: certify, the gpu-marked tests, the MoE bench, one after another,
# each into /tmp/run/<step>/ and packed as /tmp/run/<step>.tar.gz when it ends.
set -u
R=/tmp/run
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
echo "certify start $(date +%s)" >> "$R/progress"
mkdir -p "$R/certify"
timeout 1500 tools/gpu-session certify "$R/house" "$R/certify" --tool-timeout 240 > "$R/certify/session.log" 2>&1
echo "certify rc $? $(date +%s)" >> "$R/progress"
pack certify
mkdir -p "$R/tests"
NETRA_TEST_MOE_CONTRACTS=30b timeout 900 tools/gpu-session tests "$R/house" "$R/tests" --durations=25 \
  tests/test_gpu_moe.py tests/test_bench_moe.py tests/test_gpu_sm90.py tests/test_gpu_sanitizer.py tests/test_cli.py \
  tests/test_gpu_torch_fused.py tests/test_gpu_torch_ops.py tests/test_gpu_integrations_transformers.py \
  > "$R/tests/session.log" 2>&1
echo "tests rc $? $(date +%s)" >> "$R/progress"
pack tests
mkdir -p "$R/bench"
for i in $(seq 1 60); do [ -f "$R/vllm-ready" ] && break; sleep 2; done
house="$R/house"; vs=()
if [ -f "$R/vllm-ready" ]; then house="$R/house-bench"; vs=(--vllm-src "$R/vllm/VS"); fi
timeout 900 tools/gpu-session moe-bench "$house" "$R/bench" "${vs[@]}" --no-compile > "$R/bench/session.log" 2>&1
echo "bench rc $? $(date +%s)" >> "$R/progress"
pack bench
echo done >> "$R/progress"
