#!/usr/bin/env bash
# Device session of 2026-12-05d on an H100 (no H200 could be started), under setsid by .gpu/next6-call.sh,
# with the wheel of branch moe-route-smem (routing from shared memory, the tails, g2a2r4/d2a2r4/d3a2r2):
# 1. the chain through nt.fp8_moe against the composite, and every tactic through it bit for bit (30B);
# 2. ncu over the chain at 64 tokens (same-8 and uniform);
# 3. bench_moe with vLLM at both Qwen3 contracts, with the tactics' chains (--chains);
# 4. every tactic on every conformance case (tests/test_gpu_moe.py) at 30B and 235B.
set -u
R=/tmp/run
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
mkdir -p "$R/quick"; step quick start
NETRA_TEST_MOE_CONTRACTS=30b,235b timeout 400 tools/gpu-session tests "$R/house" "$R/quick" \
  tests/test_gpu_moe.py::test_the_chain_through_the_operator \
  tests/test_gpu_moe.py::test_every_tactic_through_the_operator_gives_the_bits_of_its_warp_split > "$R/quick/session.log" 2>&1
step quick "rc=$?"; pack quick
mkdir -p "$R/prof"; step prof start
bash "$R/tree/.gpu/prof3.sh" "$R/prof" > "$R/prof/session.log" 2>&1; step prof "rc=$?"
rm -f "$R"/prof/*.ncu-rep; pack prof
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/house/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  step "bench-$c" start
  timeout 420 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" --vllm-src "$R/vllm/VS" \
    --contracts "$c" --no-compile --policy experiment \
    --chains g4r8+d3 g4a2+d3a2 g2a4+d2a3 g2a2r4+d2a2r4 g2a2r4+d3a2r2 g4p+d3p g4a2+d3 g4r8+d3a2 \
    > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
mkdir -p "$R/moe"; step moe start
NETRA_TEST_MOE_CONTRACTS=30b,235b timeout 900 tools/gpu-session tests "$R/house" "$R/moe" \
  tests/test_gpu_moe.py::test_every_tactic_passes_every_case_deterministic_and_batch_invariant > "$R/moe/session.log" 2>&1
step moe "rc=$?"; pack moe
echo done >> "$R/progress"
