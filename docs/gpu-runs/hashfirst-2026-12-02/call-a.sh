#!/usr/bin/env bash
# As it ran: from a folder one level below the repository root (cd "$(dirname "$0")/.." goes to the root), with
# the wheelhouse in .whl/ (the netra wheel of this tree, pyelftools, liger-kernel) and $OUT set by the device machine.
# Call A: doctor --require-gpu and every gpu-marked test against the installed wheel; then doctor's and the
# first lookup's benches on this GPU host (the sm_90 catalog is the one a lookup opens here).
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
mkdir -p "$OUT"
timeout 330 tools/gpu-session tests .whl "$OUT" --continue-on-collection-errors $(grep -l "mark.gpu" tests/test_*.py) 2>&1 \
  | grep -E 'PASS|FAIL|ERROR|SKIP|passed|failed|error|==' | tail -60
echo "tests rc=${PIPESTATUS[0]} after $(el) s"
venv=$(mktemp -d /tmp/netra-bench-venv.XXXXXX)
python3 -m venv "$venv"
python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
  > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/image-packages.pth"
"$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check .whl/netra_kernel-*.whl .whl/pyelftools-*.whl
here=$(pwd)
(cd /tmp && timeout 60 "$venv/bin/python" "$here/bench/bench_doctor.py" -n 20) 2>&1 | tee "$OUT/bench_doctor.log"
for cls in sm_90 gfx950; do
  (cd /tmp && timeout 60 "$venv/bin/python" "$here/bench/bench_lookup.py" -n 20 --gpu-class $cls) 2>&1 | tee -a "$OUT/bench_lookup.log"
done
echo "benches after $(el) s"
ls "$OUT"
