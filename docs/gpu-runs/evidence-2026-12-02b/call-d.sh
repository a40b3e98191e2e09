#!/usr/bin/env bash
# As it ran: from a folder one level below the repository root, with .whl/ (the netra wheel of c24e368 and the
# wheels the tests need: pyelftools, jsonschema and its dependencies for the python of this image).
# Call D: the gpu-marked tests that call B's limit cut off on the schema-5 wheel (the rest of torch ops, the
# fused ops, the memory checkers), against the installed wheel.
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
mkdir -p "$OUT"
timeout 570 tools/gpu-session tests .whl "$OUT" tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_sanitizer.py 2>&1 | grep -E 'PASS|FAIL|ERROR|SKIP|passed|failed|error|==' | tail -80
echo "tests rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
ls "$OUT"
