#!/usr/bin/env bash
# As it ran: from a folder one level below the repository root, with .whl/ (the netra wheel of this change:
# lazily checked table entries on a first lookup, lighter class packages, the install found beside the
# package) and .whl-old/ (the netra wheel of c24e368, before it). Call G (call E again, on the wheel the GPU
# tests of call F passed on): the first lookup and doctor of both
# wheels side by side, sample by sample (bench_interleaved), then the new wheel's own breakdowns.
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
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
(cd /tmp && timeout 300 python3 "$here/bench/bench_interleaved.py" /tmp/netra-bench-old/bin/python /tmp/netra-bench-new/bin/python \
   --lookups 40 --doctor-rounds 8) 2>&1 | tee "$OUT/bench-interleaved.log"
echo "interleaved after $(( $(date +%s) - start )) s"
{
  for w in old new; do
    echo "== wheel $w"
    (cd /tmp && timeout 60 /tmp/netra-bench-$w/bin/python "$here/bench/bench_doctor.py" -n 20) 2>&1
    (cd /tmp && timeout 60 /tmp/netra-bench-$w/bin/python "$here/bench/bench_lookup.py" -n 20 --gpu-class sm_90) 2>&1
  done
} > "$OUT/bench-breakdown.log"
grep -E "^==|sha256sum FILES  |doctor.verify|of which|imports excluded" "$OUT/bench-breakdown.log"
echo "done after $(( $(date +%s) - start )) s"
