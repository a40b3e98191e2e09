#!/usr/bin/env bash
# As it ran: every served contract's bench with the torch.compile baselines, dynamo reset per contract
# (call C's compile rows past a family's eighth graph had run eagerly: recompile_limit).
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
mkdir -p "$OUT"
timeout 540 tools/gpu-session bench .whl "$OUT" 2>&1 | grep -v "^W1202\|recompil" | tail -75
echo "bench rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
ls "$OUT"
