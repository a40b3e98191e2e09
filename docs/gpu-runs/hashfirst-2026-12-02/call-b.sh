#!/usr/bin/env bash
# As it ran (after call A, whose tests reached test_gpu_torch_fused.py in its time: the sanitizer and sm_90
# tests had passed): the fused and unfused PyTorch-operator tests against the installed wheel, timed.
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
mkdir -p "$OUT"
timeout 560 tools/gpu-session tests .whl "$OUT" --durations=12 tests/test_gpu_torch_fused.py tests/test_gpu_torch_ops.py 2>&1 \
  | grep -E 'PASS|FAIL|ERROR|SKIP|passed|failed|error|==|s call|s setup' | tail -40
echo "tests rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
ls "$OUT"
