#!/usr/bin/env bash
# As it ran: from a folder one level below the repository root (cd "$(dirname "$0")/.." goes to the root), with
# the wheelhouse in .whl/ (the netra wheel, pyelftools, liger-kernel) and $OUT set by the device machine.
# Call A: certify every sm_90 candidate of the wheel, then the bench served from that certify output.
set -u
cd "$(dirname "$0")/.."
start=$(date +%s)
timeout 370 tools/gpu-session certify .whl "$OUT" --tool-timeout 150  2>&1 | tail -40
echo "certify rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
if [ -f "$OUT/sm_90.json" ]; then
  left=$(( 540 - ($(date +%s) - start) )); [ "$left" -gt 150 ] && left=150
  timeout "$left" tools/gpu-session bench .whl "$OUT" --table "$OUT/sm_90.json" --no-compile 2>&1 | tail -60
  echo "bench rc=${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"
fi
