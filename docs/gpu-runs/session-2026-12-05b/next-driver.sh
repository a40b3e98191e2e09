#!/usr/bin/env bash
# The next device session's work, run under setsid on the H200 by .gpu/next-call.sh; each step's output in
# /tmp/run/<step>/, packed as /tmp/run/<step>.tar.gz when it ends. Order: what must land first.
set -u
R=/tmp/run
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
# 1. certify (the routed MoE and the new models' contracts): commit OUT/sm_90.json + evidence after
mkdir -p "$R/certify"; step certify start
timeout 1200 tools/gpu-session certify "$R/house" "$R/certify" --tool-timeout 240 > "$R/certify/session.log" 2>&1
step certify "rc=$?"; pack certify
# 2. the tests that failed on 2026-12-05, and the MoE at the 235B contract
mkdir -p "$R/tests"; step tests start
timeout 900 tools/gpu-session tests "$R/house" "$R/tests" --durations=15 \
  tests/test_gpu_sm90.py::test_a_deleted_table_and_a_flipped_text_byte_are_refused_by_name \
  tests/test_cli.py::test_certify_json_follows_its_schema tests/test_gpu_moe.py \
  tests/test_gpu_torch_ops.py::test_batch_invariant_mode_gives_a_row_the_same_bits_at_every_row_count > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
# 3. the MoE bench with vLLM's fused_moe side by side (wheelhouse + vLLM's deps, VS unpacked)
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/house/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  step "bench-$c" start
  timeout 400 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" --vllm-src "$R/vllm/VS" \
    --contracts "$c" --no-compile > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
# 4. ncu over the MoE kernels (30B, M=1 and 64) for tuning facts
mkdir -p "$R/prof"; step prof start
OUT="$R/prof" timeout 300 bash "$R/tree/.gpu/prof.sh" > "$R/prof/session.log" 2>&1
step prof "rc=$?"; pack prof
echo done >> "$R/progress"
