#!/usr/bin/env bash
# As it ran: from a folder one level below the repository root, with .whl/ (the netra wheel of this change and
# the wheels the tests need: pyelftools, jsonschema and its dependencies for the python of this image).
# Call F: every gpu-marked test (and the certify JSON test) against the installed wheel of this change (install,
# doctor --require-gpu, the gpu-marked tests).
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
mkdir -p "$OUT"
timeout 560 tools/gpu-session tests .whl "$OUT" tests/test_gpu_sm90.py tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_sanitizer.py tests/test_cli.py::test_certify_json_follows_its_schema 2>&1 | grep -E 'PASS|FAIL|ERROR|SKIP|passed|failed|error|==|result' | tail -120
echo "tests rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
ls "$OUT"
