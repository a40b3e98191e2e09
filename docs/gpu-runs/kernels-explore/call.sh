#!/usr/bin/env bash
# The kernel exploration call on the H200 (run from the repository root with .kx carried): install the
# wheel built from the kernels branch, certify every candidate, check and time the staged fused
# kernels, bench the served kernels against the copy kernels and Liger, print a compact summary.
set -uo pipefail
export PYTHONUNBUFFERED=1
K="$(pwd)/.kx"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,clocks.sm,temperature.gpu --format=csv,noheader
python3 -m venv /tmp/v
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$(/tmp/v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/image.pth"
/tmp/v/bin/python -m pip install -q --no-index --no-deps --disable-pip-version-check "$K"/whl/*.whl || exit 1
cd /tmp
/tmp/v/bin/netra doctor | tail -2
S=$SECONDS
timeout 235 /tmp/v/bin/python "$K/certify_logged.py" "$OUT" > "$OUT/certify.log" 2>&1; echo "certify rc=$? $((SECONDS - S))s"; tail -2 "$OUT/certify.log"
T=(); [ -f "$OUT/sm_90.json" ] && T=(--table "$OUT/sm_90.json")
S=$SECONDS
timeout 55 /tmp/v/bin/python "$K/bench/bench_fused_sm90.py" run "$K/cubins" --json "$OUT/fused.json" "${T[@]}" > "$OUT/fused.log" 2>&1; echo "fused rc=$? $((SECONDS - S))s"
S=$SECONDS
timeout 50 /tmp/v/bin/python "$K/bench/bench_sm90.py" --no-compile --no-eager --rows 1,16,8192,32768 --policy experiment "${T[@]}" --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1; echo "bench rc=$? $((SECONDS - S))s"
tail -3 "$OUT/fused.log" "$OUT/bench.log"
/tmp/v/bin/python "$K/summary.py" "$OUT"
