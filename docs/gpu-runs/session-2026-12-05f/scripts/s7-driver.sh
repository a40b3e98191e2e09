#!/usr/bin/env bash
# Device session of 2026-12-05f, under setsid by .gpu/s7-call.sh. Two wheels: house (branch moe-route-smem)
# and house-bulk (branch moe-bulk: the BULK and TILE tactics and dynamic shared memory).
# 0. smoke the BULK and TILE chains (hang or wrong bits -> certify the moe-route-smem wheel instead);
# 1. on an H200: certify sm_90 --reuse with the chosen wheel; 2. MoE gpu tests; 3. bench_moe with vLLM;
# 4. ncu at one token; 5. the other gpu tests.
set -u
R=/tmp/run
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
venv() {  # $1 venv dir, $2 house
  python3 -m venv "$1"
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
  "$1/bin/python" -m pip install -q --no-index --no-deps "$2"/*.whl; }
mkdir -p "$R/smoke"; step smoke start
venv /tmp/vb "$R/house-bulk" > "$R/smoke/session.log" 2>&1
ok=1
for pair in g4t+d3t:g4r8+d3 g4t+d2t:g4r8+d2 g4b+d3b:g4r8+d3 g8b+d2b:g8s+d2; do
  for s in 30 235; do
    timeout 120 /tmp/vb/bin/python "$R/tree/.gpu/s7-smoke.py" $s ${pair%%:*} ${pair##*:} >> "$R/smoke/session.log" 2>&1 || { ok=0; echo "FAILED $s $pair rc $?" >> "$R/smoke/session.log"; }
  done
done
grep -q DIFFER "$R/smoke/session.log" && ok=0
H="$R/house"; [ $ok = 1 ] && H="$R/house-bulk"
echo "chosen $H" >> "$R/smoke/session.log"; step smoke "ok=$ok"; pack smoke
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$R/certify"; step certify start
  timeout 900 tools/gpu-session certify "$H" "$R/certify" --reuse "$R/tree/release/tables/sm_90.json" \
    --tool-timeout 240 > "$R/certify/session.log" 2>&1
  step certify "rc=$?"; pack certify
fi
mkdir -p "$R/tests"; step tests start
timeout 900 tools/gpu-session tests "$H" "$R/tests" \
  tests/test_gpu_moe.py tests/test_gpu_grouped_router.py tests/test_bench_moe.py > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  step "bench-$c" start
  timeout 420 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" --vllm-src "$R/vllm/VS" \
    --contracts "$c" --no-compile --policy experiment --chains g4r8+d3 g4t+d3t g4r8+d3t g4t+d3 g4l+d3t g4l+d3l g4r8+d3b g4t+d2t \
    > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
mkdir -p "$R/prof"; step prof start
bash "$R/tree/.gpu/prof5.sh" "$R/prof" "$H" > "$R/prof/session.log" 2>&1; step prof "rc=$?"
rm -f "$R"/prof/*.ncu-rep; pack prof
mkdir -p "$R/rest"; step rest start
timeout 1500 tools/gpu-session tests "$H" "$R/rest" tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_integrations_transformers.py tests/test_cli.py tests/test_gpu_sm90.py > "$R/rest/session.log" 2>&1
step rest "rc=$?"; pack rest
echo done >> "$R/progress"
