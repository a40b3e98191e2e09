#!/usr/bin/env bash
# Device session of 2026-12-05d, run under setsid by .gpu/next5-call.sh:
# 1. certify sm_90 reusing the committed table (--reuse; H200 only): the routed MoE's contracts with the
#    STAGES tactics, DeepSeek-V3's routed experts and router;
# 2. ncu over the served MoE chain at 64 tokens, same-8 and uniform routing (where vLLM leads);
# 3. bench_moe with vLLM's Triton kernel at both Qwen3 contracts, and chains of unserved tactics (--chains);
# 4. the gpu tests not run on the H100 (norms, fused, integrations, sanitizer, router; the MoE conformance
#    passed there and certify repeats it);
# 5. the operator-path bench (issue 31).
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
mkdir -p "$R/prof"; step prof start
bash "$R/tree/.gpu/prof3.sh" "$R/prof" > "$R/prof/session.log" 2>&1; step prof "rc=$?"
rm -f "$R"/prof/*.ncu-rep; pack prof
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/house/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  step "bench-$c" start
  timeout 420 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" --vllm-src "$R/vllm/VS" \
    --contracts "$c" --no-compile --chains g4r8+d3 g4a2+d3a2 g2a4+d2a3 g2a2r4+d2a2r4 g2a2r4+d3a2r2 g4p+d3p g4a2+d3 g4r8+d3a2 \
    > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
mkdir -p "$R/tests"; step tests start
timeout 1200 tools/gpu-session tests "$R/house" "$R/tests" \
  tests/test_gpu_moe.py::test_every_tactic_through_the_operator_gives_the_served_bits tests/test_gpu_sm90.py tests/test_gpu_torch_ops.py \
  tests/test_gpu_torch_fused.py tests/test_gpu_integrations_transformers.py tests/test_gpu_grouped_router.py \
  tests/test_gpu_sanitizer.py tests/test_cli.py tests/test_bench_operator_path.py tests/test_bench_moe.py \
  > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
mkdir -p "$R/path"; step path start
timeout 600 tools/gpu-session path-bench "$R/house" "$R/path" > "$R/path/session.log" 2>&1
step path "rc=$?"; pack path
echo done >> "$R/progress"
