#!/usr/bin/env bash
# As it ran: part 2 of the gpu-marked tests (tools/gpu-session's default selection less call C's two files),
# against the same wheel and wheelhouse as call-c.sh.
timeout 500 tools/gpu-session tests build/gpuwh "$OUT/t" tests/test_gpu_torch_fused.py tests/test_gpu_sanitizer.py \
  tests/test_cli.py > "$OUT/session.log" 2>&1; echo "gpu-session rc=$?" >> "$OUT/session.log"
