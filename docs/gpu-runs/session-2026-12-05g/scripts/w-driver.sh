#!/usr/bin/env bash
# The next device session (prepared 2026-12-05, seventh session, which had no device), under setsid by
# .gpu/w-call.sh; the wheel of branch moe-bulk in .gpu/house (with its dependency wheels).
# 0. smoke the WGMMA chains against g4r8+d3 (a wrong layout gives garbage, a hang times out);
# 1. every MoE gpu test (every tactic, WGMMA included, on every conformance case, judged by its
#    accumulation; deterministic, batch invariant); 2. bench_moe, both Qwen3 contracts (vLLM beside it
#    where .gpu/vllm has its source); 3. ncu of the WGMMA chains at 1 and 64 tokens; 4. on an H200 only:
#    certify --reuse; 5. the other gpu tests.
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
H="$R/house"
mkdir -p "$R/smoke"; step smoke start
venv /tmp/vw "$H" > "$R/smoke/session.log" 2>&1
for c in "30 g8w64+d4w64" "30 g8w8+d4w8" "30 g8w32+d3" "30 g4r8+d4w64" "235 g8w32+d4w64q" "235 g8w8+d4w8q"; do
  set -- $c
  timeout 120 /tmp/vw/bin/python "$R/tree/.gpu/w-smoke.py" "$1" "$2" g4r8+d3 >> "$R/smoke/session.log" 2>&1 \
    || echo "FAILED $c rc $?" >> "$R/smoke/session.log"
done
step smoke "large=$(grep -c LARGE "$R/smoke/session.log")"; pack smoke
mkdir -p "$R/tests"; step tests start
timeout 900 tools/gpu-session tests "$H" "$R/tests" tests/test_gpu_moe.py > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
mkdir -p "$R/bench" "$R/house-bench"; cp "$H"/*.whl "$R/house-bench/"
V=""
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" \
    && V="--vllm-src $R/vllm/VS"
fi
for cc in "Qwen3-30B-A3B g4r8+d3 g8w8+d4w8 g8w32+d4w64 g8w64+d4w64 g4r8+d4w64 g8w64+d3 g4l+d3l" \
          "Qwen3-235B-A22B g4r8+d3 g8w8+d4w8q g8w32+d4w64q g4r8+d4w64q g8w32+d3 g4l+d3l"; do
  set -- $cc; c=$1; shift
  step "bench-$c" start
  timeout 420 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" $V --contracts "$c" --no-compile \
    --policy experiment --chains "$@" > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"
done
pack bench
mkdir -p "$R/prof"; step prof start
bash "$R/tree/.gpu/prof-w.sh" "$R/prof" "$H" > "$R/prof/session.log" 2>&1; step prof "rc=$?"
rm -f "$R"/prof/*.ncu-rep; pack prof
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$R/certify"; step certify start
  timeout 900 tools/gpu-session certify "$H" "$R/certify" --reuse "$R/tree/release/tables/sm_90.json" \
    --tool-timeout 240 > "$R/certify/session.log" 2>&1
  step certify "rc=$?"; pack certify
fi
mkdir -p "$R/rest"; step rest start
timeout 1500 tools/gpu-session tests "$H" "$R/rest" tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_integrations_transformers.py tests/test_cli.py tests/test_gpu_sm90.py > "$R/rest/session.log" 2>&1
step rest "rc=$?"; pack rest
echo done >> "$R/progress"
