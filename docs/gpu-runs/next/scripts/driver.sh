#!/usr/bin/env bash
# The next device session on main's wheel (under setsid, from .gpu/call.sh), ordered by what only that card
# can give: on an H200, certify --reuse first (issues 28 and 30: the MoE contracts' new candidates,
# DeepSeek-V3's router and experts), then the phase marks of g4r8y+d3y against g4r8+d3 (1.7 us apart at
# one token on an H100 with the same grids; 64 uniform tokens, where the capped grid loses), the MoE
# bench at both Qwen3 contracts with the grid-capped and slot-sum chains beside the served one and vLLM
# (the issue's targets are the H200's), the MoE gpu test (its 235B half was cut in the eleventh
# session), then the operator-path and decode benches (issue 31) and every other gpu test.
set -u
R=/tmp/run; H="$R/house"
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
gs() {  # $1 name, $2 timeout, then tools/gpu-session's mode and arguments (WHEELHOUSE and OUT given here)
  local n=$1 t=$2 mode=$3; shift 3
  mkdir -p "$R/$n"; step "$n" start
  timeout "$t" tools/gpu-session "$mode" "$H" "$R/$n" "$@" > "$R/$n/session.log" 2>&1
  step "$n" "rc=$?"; pack "$n"; }
if grep -q H200 "$R/which"; then
  gs certify 900 certify --reuse "$R/tree/release/tables/sm_90.json" --tool-timeout 240
fi
mkdir -p "$R/trace"; step trace start  # issue 28: where one call's time goes (bench/trace_moe.py)
python3 -m venv /tmp/vt  # the image's packages (torch) and pyelftools from the house; netra from the tree
python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
  > "$(/tmp/vt/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
/tmp/vt/bin/python -m pip install -q --no-index --no-deps "$H"/*.whl > "$R/trace/session.log" 2>&1
for t in "Qwen3-30B-A3B g4r8+d3 1 uniform" "Qwen3-30B-A3B g4r8y+d3y 1 uniform" "Qwen3-30B-A3B g4r8y+d3y 64 same" "Qwen3-30B-A3B g4r8y+d3ys 64 same" \
    "Qwen3-30B-A3B g4r8y+d3y 64 uniform" "Qwen3-30B-A3B g4r8+d3 64 uniform" "Qwen3-235B-A22B g4r8+d3 1 uniform"; do
  set -- $t
  timeout 120 env PYTHONPATH="$R/tree" /tmp/vt/bin/python bench/trace_moe.py --contract "$1" --chain "$2" --tokens "$3" \
    --routing "$4" --json "$R/trace/$1-$2-$3-$4.json" >> "$R/trace/session.log" 2>&1
  echo "rc $? for $t" >> "$R/trace/session.log"
done
step trace done; pack trace
V=""; HB="$H"
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" \
    && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" && V="--vllm-src $R/vllm/VS" HB="$R/house-bench"
fi
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do  # the served chain and the co-resident ones, vLLM, the read limit
  mkdir -p "$R/moe"; step "moe-$c" start
  timeout 480 tools/gpu-session moe-bench "$HB" "$R/moe/$c" $V --contracts "$c" \
    --chains g4r8+d3 g4r8y+d3ys g4r8y+d3y g4r8+d3r4 g4r8+d3ys --tokens 1 2 4 8 16 32 64 --no-compile --rounds 5 \
    > "$R/moe/$c.log" 2>&1
  step "moe-$c" "rc=$?"; pack moe
done
gs moetest 900 tests tests/test_gpu_moe.py
gs integ 600 tests tests/test_gpu_integrations_transformers.py
gs path 300 path-bench
gs decode 300 torch-bench --rows 1 16
gs tests 1800 tests tests/test_gpu_grouped_router.py tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_sanitizer.py tests/test_cli.py tests/test_gpu_sm90.py
echo done >> "$R/progress"
