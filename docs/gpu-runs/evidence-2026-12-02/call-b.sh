#!/usr/bin/env bash
# As it ran: from a folder one level below the repository root, with .whl/ (the netra wheel of this tree, with
# the sm_90 certification of call A committed, and the wheels the tests need: pyelftools, jsonschema and its
# dependencies for the python of this image) and .whl-old/ (the netra wheel of 2594e8b, before this change).
# Call B: doctor's and the first lookup's benches for both wheels side by side, alternating, on this GPU host;
# then the gpu-marked tests of the files this change touches against the installed wheel.
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
mkdir -p "$OUT"
here=$(pwd)
for w in old new; do
  venv=/tmp/netra-bench-$w
  python3 -m venv "$venv"
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/image-packages.pth"
  whl=$([ $w = old ] && echo .whl-old/netra_kernel-*.whl || echo .whl/netra_kernel-*.whl)
  "$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check $whl .whl/pyelftools-*.whl
done
{
  for round in 1 2; do
    for w in old new; do
      echo "== round $round, wheel $w"
      (cd /tmp && timeout 60 /tmp/netra-bench-$w/bin/python "$here/bench/bench_doctor.py" -n 20) 2>&1
      for cls in sm_90 gfx950; do
        (cd /tmp && timeout 60 /tmp/netra-bench-$w/bin/python "$here/bench/bench_lookup.py" -n 20 --gpu-class $cls) 2>&1
      done
    done
  done
} > "$OUT/bench-side-by-side.log"
grep -E "^==|sha256sum FILES  |doctor.verify|of which|imports excluded" "$OUT/bench-side-by-side.log"
echo "benches after $(el) s"
timeout 360 tools/gpu-session tests .whl "$OUT" tests/test_gpu_sm90.py tests/test_cli.py::test_certify_json_follows_its_schema \
  tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py 2>&1 | grep -E 'PASS|FAIL|ERROR|SKIP|passed|failed|error|==' | tail -40
echo "tests rc=${PIPESTATUS[0]} after $(el) s"
ls "$OUT"
