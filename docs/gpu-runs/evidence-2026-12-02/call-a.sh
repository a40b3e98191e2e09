#!/usr/bin/env bash
# As it ran: from a folder one level below the repository root (cd "$(dirname "$0")/.." goes to the root), with
# the wheelhouse in .whl/ (the netra wheel of this tree, pyelftools, liger-kernel) and $OUT set by the device machine.
# Call A (the evidence split, issue 14): certify sm_90 with the memory checkers and ncu (it writes the table and,
# beside it, the evidence file); the gpu-marked sm_90 tests and the certify JSON test against the installed
# wheel; then doctor's and the first lookup's benches on this GPU host.
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
mkdir -p "$OUT/c" "$OUT/t"
timeout 240 tools/gpu-session certify .whl "$OUT/c" -q 2>&1 | tail -15
echo "certify rc=${PIPESTATUS[0]} after $(el) s"
timeout 200 tools/gpu-session tests .whl "$OUT/t" tests/test_gpu_sm90.py tests/test_cli.py::test_certify_json_follows_its_schema 2>&1 \
  | grep -E 'PASS|FAIL|ERROR|SKIP|passed|failed|error|==' | tail -30
echo "tests rc=${PIPESTATUS[0]} after $(el) s"
venv=$(mktemp -d /tmp/netra-bench-venv.XXXXXX)
python3 -m venv "$venv"
python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
  > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/image-packages.pth"
"$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check .whl/netra_kernel-*.whl .whl/pyelftools-*.whl
here=$(pwd)
{
  (cd /tmp && timeout 60 "$venv/bin/python" "$here/bench/bench_doctor.py" -n 20) 2>&1
  for cls in sm_90 gfx950; do
    (cd /tmp && timeout 60 "$venv/bin/python" "$here/bench/bench_lookup.py" -n 20 --gpu-class $cls) 2>&1
  done
} | tee "$OUT/bench.log"
echo "benches after $(el) s"
ls -R "$OUT"
