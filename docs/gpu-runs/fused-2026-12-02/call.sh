#!/usr/bin/env bash
# As it ran: from a folder one level below the repository root (cd "$(dirname "$0")/.." goes to the root), with
# the wheelhouse in .whl/ (the netra wheel, pyelftools, liger-kernel) and $OUT set by the device machine.
# Call B: certify every sm_90 candidate (the fused families' included), the gpu-marked tests against the
# installed wheel, then the bench served from the certify output (torch.compile when time is left).
set -u
cd "$(dirname "$0")/.."
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
mkdir -p "$OUT"
timeout 200 tools/gpu-session certify .whl "$OUT" --tool-timeout 120 2>&1 | grep -v ': launched$\|: passed, timed$' | tail -30
echo "certify rc=${PIPESTATUS[0]} after $(el) s"
[ -f "$OUT/sm_90.json" ] && rm -f "$OUT/certify-logs.tar.gz" "$OUT/doctor-before.log"
timeout 220 tools/gpu-session tests .whl "$OUT" --continue-on-collection-errors $(grep -l "mark.gpu" tests/test_*.py) 2>&1 | grep -E 'PASS|FAIL|ERROR|SKIP|passed|failed|error|==' | tail -80
echo "tests rc=${PIPESTATUS[0]} after $(el) s"
if [ -f "$OUT/sm_90.json" ]; then
  left=$(( 420 - $(el) ))
  extra=(--no-compile --only 'fused_|rmsnorm_fp8')
  [ "$left" -gt 30 ] && timeout "$left" tools/gpu-session bench .whl "$OUT" --table "$OUT/sm_90.json" "${extra[@]}" 2>&1 | tail -8
  echo "bench ${extra[*]} rc=${PIPESTATUS[0]} after $(el) s"
fi
ls "$OUT"
