#!/usr/bin/env bash
# Second (last) exploration call: finish.py for what call 1's certify did not reach, and the fused
# kernels again with the CACHE = 2 tactics (checks at 515 rows; copies were measured in call 1).
set -uo pipefail
export PYTHONUNBUFFERED=1
K="$(pwd)/.kx"
python3 -m venv /tmp/v
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$(/tmp/v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/image.pth"
/tmp/v/bin/python -m pip install -q --no-index --no-deps --disable-pip-version-check "$K"/whl/*.whl || exit 1
cd /tmp
S=$SECONDS
timeout 105 /tmp/v/bin/python "$K/finish.py" "$OUT" > "$OUT/finish.log" 2>&1; echo "finish rc=$? $((SECONDS - S))s"
S=$SECONDS
timeout 45 /tmp/v/bin/python "$K/bench/bench_fused_sm90.py" run "$K/cubins" --check-rows 515 --no-copies --json "$OUT/fused2.json" > "$OUT/fused2.log" 2>&1; echo "fused rc=$? $((SECONDS - S))s"
grep -v " ok$" "$OUT/finish.log" | tail -8; tail -2 "$OUT/fused2.log"
/tmp/v/bin/python "$K/summary2.py" "$OUT"
