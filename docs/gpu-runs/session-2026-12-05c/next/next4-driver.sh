#!/usr/bin/env bash
# The next device session (after 2026-12-05c), run under setsid by .gpu/next4-call.sh:
# 1. certify sm_90 reusing the committed table (--reuse): only the contracts whose candidates changed run
#    (the routed MoE's, with the STAGES tactics; DeepSeek-V3's routed experts and router, new);
# 2. the certified MoE chain benched with vLLM's Triton kernel side by side (issue 28);
# 3. every gpu-marked test (the FP8 experts in transformers, the new models, the router);
# 4. the operator-path bench (issue 31);
# 5. tests/test_gpu_moe.py at DeepSeek-V3's routed-expert contract.
set -u
R=/tmp/run
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
mkdir -p "$R/certify"; step certify start
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then  # the reused table's device
  timeout 900 tools/gpu-session certify "$R/house" "$R/certify" --reuse "$R/tree/release/tables/sm_90.json" \
    --tool-timeout 240 > "$R/certify/session.log" 2>&1
  step certify "rc=$?"
else
  nvidia-smi > "$R/certify/session.log" 2>&1; step certify "skipped: not an H200 (the reused table's device)"
fi
pack certify
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/house/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  step "bench-$c" start
  timeout 400 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" --vllm-src "$R/vllm/VS" \
    --contracts "$c" --no-compile > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
mkdir -p "$R/tests"; step tests start
# no arguments: every gpu test file (an argument that is not a test path would make pytest collect from /)
NETRA_TEST_MOE_CONTRACTS=30b,235b timeout 1500 tools/gpu-session tests "$R/house" "$R/tests" \
  > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
mkdir -p "$R/path"; step path start
timeout 600 tools/gpu-session path-bench "$R/house" "$R/path" > "$R/path/session.log" 2>&1
step path "rc=$?"; pack path
mkdir -p "$R/v3"; step v3 start  # DeepSeek-V3's routed experts through tests/test_gpu_moe.py (w13 7.5 GB)
NETRA_TEST_MOE_CONTRACTS=v3 timeout 900 tools/gpu-session tests "$R/house" "$R/v3" tests/test_gpu_moe.py \
  > "$R/v3/session.log" 2>&1
step v3 "rc=$?"; pack v3
echo done >> "$R/progress"
