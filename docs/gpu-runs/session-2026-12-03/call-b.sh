#!/usr/bin/env bash
# As it ran: the gpu-marked tests call A's default left out (tools/gpu-session's default now names them),
# against the same wheel; .whl/ also held jsonschema and its dependencies for the image's Python 3.12.
mkdir -p "$OUT" && timeout 560 tools/gpu-session tests .whl "$OUT/t" tests/test_gpu_torch_fused.py \
  tests/test_gpu_sanitizer.py tests/test_cli.py > "$OUT/session.log" 2>&1; echo rc=$?
