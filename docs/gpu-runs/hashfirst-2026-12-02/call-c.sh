#!/usr/bin/env bash
# As it ran: the fused families' bench with the torch.compile baselines (the earlier runs had --no-compile).
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
mkdir -p "$OUT"
timeout 540 tools/gpu-session bench .whl "$OUT" --only 'fused_|rmsnorm_fp8' 2>&1 | tail -60
echo "bench rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
ls "$OUT"
