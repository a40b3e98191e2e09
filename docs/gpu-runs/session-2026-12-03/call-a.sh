#!/usr/bin/env bash
# As it ran (the device's command line), from the repository root with .whl/ holding the wheel tools/release
# built from a clean clone of 31e79ac (sha256 5d0abbc0...) and pyelftools: tools/gpu-session's tests mode with
# its default selection at the time (tests/test_gpu_sm90.py, tests/test_gpu_torch_ops.py) and bench_torch_ops.
mkdir -p "$OUT" && timeout 560 tools/gpu-session tests .whl "$OUT/t" > "$OUT/session.log" 2>&1; echo rc=$?
