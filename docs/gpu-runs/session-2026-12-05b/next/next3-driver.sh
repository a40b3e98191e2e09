#!/usr/bin/env bash
# The next device session (after 2026-12-05b), run under setsid by .gpu/next3-call.sh: the certified MoE chain
# benched with vLLM's kernel side by side, the operator-path bench (issue 31), every gpu-marked test on the
# certified table, then ncu of the chain.
set -u
R=/tmp/run
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/house/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  step "bench-$c" start
  timeout 400 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" --vllm-src "$R/vllm/VS" \
    --contracts "$c" --no-compile > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
mkdir -p "$R/path"; step path start
timeout 600 tools/gpu-session path-bench "$R/house" "$R/path" > "$R/path/session.log" 2>&1
step path "rc=$?"; pack path
mkdir -p "$R/tests"; step tests start
NETRA_TEST_MOE_CONTRACTS=30b,235b timeout 1500 tools/gpu-session tests "$R/house" "$R/tests" --durations=25 \
  > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
mkdir -p "$R/prof"; step prof start
OUT="$R/prof" bash "$R/tree/.gpu/prof2.sh" 2048 768 moe30b > "$R/prof/session.log" 2>&1
OUT="$R/prof" bash "$R/tree/.gpu/prof2.sh" 4096 1536 moe235b >> "$R/prof/session.log" 2>&1
step prof "rc=$?"; pack prof
echo done >> "$R/progress"
