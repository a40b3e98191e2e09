#!/usr/bin/env bash
# The eighth session of 2026-12-05 (prepared by the seventh, which had no device), under setsid by
# .gpu/w-call.sh; the wheel of branch moe-bulk (main + BULK, TILE) in .gpu/house (with its dependency wheels).
# 0. a quick smoke of the TILE and WGMMA chains; 1. bench_moe (its guard checks each chain first), both Qwen3 contracts (vLLM beside it where .gpu/vllm has its source); 2. every MoE gpu
#    test (every tactic, WGMMA included, on every conformance case, judged by its accumulation;
#    deterministic, batch invariant); 3. ncu of the WGMMA chains at 1 and 64 tokens; 4. on an H200 only:
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
# A quick smoke first, under a short timeout (TILE and WGMMA never ran on a GPU: a hang must not eat the
# bench's time): a chain that fails, times out or differs LARGE drops every bench chain sharing a tactic.
mkdir -p "$R/smoke"; step smoke start
venv /tmp/vw "$H" > "$R/smoke/session.log" 2>&1
BAD=""
for c in "30 g4t+d3t" "30 g8w8+d4w8" "30 g8w64+d4w64" "235 g4t+d3t"; do
  set -- $c
  timeout 60 /tmp/vw/bin/python "$R/tree/.gpu/w-smoke.py" "$1" "$2" g4r8+d3 > "$R/smoke/$1-$2.log" 2>&1
  rc=$?; cat "$R/smoke/$1-$2.log" >> "$R/smoke/session.log"
  if [ $rc -ne 0 ] || grep -q LARGE "$R/smoke/$1-$2.log"; then
    echo "FAILED $c rc $rc" >> "$R/smoke/session.log"; BAD="$BAD ${2%+*} ${2#*+}"
  fi
done
step smoke "bad=[${BAD# }]"; pack smoke
keep() { for ch in "$@"; do ok=1; for t in $BAD; do case "+$ch+" in *"+$t+"*) ok=0;; esac; done; [ $ok = 1 ] && printf '%s ' "$ch"; done; }
mkdir -p "$R/bench" "$R/house-bench"; cp "$H"/*.whl "$R/house-bench/"
V=""
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" \
    && V="--vllm-src $R/vllm/VS"
fi
for cc in "Qwen3-30B-A3B g4r8+d3 g4t+d3t g8w8+d4w8 g8w64+d4w64 g4t+d4w64" \
          "Qwen3-235B-A22B g4r8+d3 g4t+d3t g8w8+d4w8q g8w32+d4w64q g4t+d4w64q"; do
  set -- $cc; c=$1; shift; set -- $(keep "$@")
  step "bench-$c" start
  timeout 420 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/$c" $V --contracts "$c" --no-compile \
    --policy experiment --tokens 1 4 16 64 --rounds 5 --chains "$@" > "$R/bench/$c.log" 2>&1
  step "bench-$c" "rc=$?"; pack bench
done
mkdir -p "$R/tests"; step tests start
timeout 600 tools/gpu-session tests "$H" "$R/tests" tests/test_gpu_moe.py > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
mkdir -p "$R/prof"; step prof start
bash "$R/tree/.gpu/prof-w.sh" "$R/prof" "$H" > "$R/prof/session.log" 2>&1; step prof "rc=$?"
rm -f "$R"/prof/*.ncu-rep; pack prof
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  mkdir -p "$R/certify"; step certify start
  timeout 900 tools/gpu-session certify "$H" "$R/certify" --reuse "$R/tree/release/tables/sm_90.json" \
    --tool-timeout 240 > "$R/certify/session.log" 2>&1
  step certify "rc=$?"; pack certify
fi
mkdir -p "$R/path"; step path start
timeout 300 tools/gpu-session path-bench "$H" "$R/path" > "$R/path/session.log" 2>&1; step path "rc=$?"; pack path
mkdir -p "$R/rest"; step rest start
timeout 1500 tools/gpu-session tests "$H" "$R/rest" tests/test_gpu_grouped_router.py tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_integrations_transformers.py tests/test_cli.py tests/test_gpu_sm90.py > "$R/rest/session.log" 2>&1
step rest "rc=$?"; pack rest
echo done >> "$R/progress"
