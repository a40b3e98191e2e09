#!/usr/bin/env bash
set -u
R=/tmp/run8
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
H="$R/house-bulk"
mkdir -p "$R/smoke"; step smoke start
rm -rf /tmp/vb8; python3 -m venv /tmp/vb8
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$(/tmp/vb8/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
/tmp/vb8/bin/python -m pip install -q --no-index --no-deps "$H"/*.whl > "$R/smoke/session.log" 2>&1
for pair in g4b+d3b:g4r8+d3 g8b+d3b:g8s+d3; do
  for s in 30 235; do
    timeout 120 /tmp/vb8/bin/python "$R/tree/.gpu/s7-smoke.py" $s ${pair%%:*} ${pair##*:} >> "$R/smoke/session.log" 2>&1 || echo "FAILED $s $pair rc $?" >> "$R/smoke/session.log"
  done
done
step smoke done; pack smoke
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  step "bench-$c" start
  timeout 300 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" --vllm-src "$R/vllm/VS" \
    --contracts "$c" --no-compile --policy experiment --chains g4r8+d3 g4b+d3b g8b+d3b g4b+d3 g4r8+d3b g4b+d2b \
    > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
mkdir -p "$R/prof"; step prof start
rm -rf /tmp/pv; bash "$R/tree/.gpu/prof5.sh" "$R/prof" "$H" > "$R/prof/session.log" 2>&1; step prof "rc=$?"
rm -f "$R"/prof/*.ncu-rep; pack prof
mkdir -p "$R/tests"; step tests start
timeout 600 tools/gpu-session tests "$H" "$R/tests" tests/test_gpu_moe.py > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
echo done >> "$R/progress"
