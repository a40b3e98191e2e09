#!/usr/bin/env bash
# As it ran (the device's command line), from the repository root; build/gpuwh/ (carried) held the wheel
# tools/release built from c590a38 (sha256 92b6da29...), pyelftools, and jsonschema with its dependencies
# for the image's Python 3.12. Part 1 of the gpu-marked tests, then doctor and the first lookup timed on
# the host: bench_doctor.py (with its floors) and bench_lookup.py for sm_90 and gfx950.
set -u
timeout 400 tools/gpu-session tests build/gpuwh "$OUT/t" tests/test_gpu_sm90.py tests/test_gpu_torch_ops.py \
  > "$OUT/session.log" 2>&1; echo "gpu-session rc=$?" >> "$OUT/session.log"
v=/tmp/netra-bench-venv
python3 -m venv "$v"
python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
  > "$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/image-packages.pth"
"$v/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check build/gpuwh/netra_kernel-*.whl \
  build/gpuwh/pyelftools-*.whl
repo="$PWD"
cd /tmp
{ nproc; lscpu | grep -E 'Model name|Flags' | sed 's/\(Flags:\).*\( sha_ni\).*/\1 ...\2 .../'; sha256sum --version | head -1
  timeout 150 "$v/bin/python" "$repo/bench/bench_doctor.py" -n 20
  for cls in sm_90 gfx950; do timeout 60 "$v/bin/python" "$repo/bench/bench_lookup.py" -n 20 --gpu-class "$cls"; done
} > "$OUT/bench.log" 2>&1
echo "bench rc=$?" >> "$OUT/bench.log"
