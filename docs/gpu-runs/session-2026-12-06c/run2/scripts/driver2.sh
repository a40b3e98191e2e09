#!/usr/bin/env bash
# The eleventh session's second device run (issue 28): the MoE bench with the grid-capped and
# activation-staged chains beside the served one and vLLM, the phase marks with the launch gap closed,
# then the MoE gpu test (every tactic on every conformance case) at 30B, then at 235B.
set -u
R=/tmp/run2; H="$R/house"
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
gs() {  # $1 name, $2 timeout, then tools/gpu-session's mode and arguments (WHEELHOUSE and OUT given here)
  local n=$1 t=$2 mode=$3; shift 3
  mkdir -p "$R/$n"; step "$n" start
  timeout "$t" tools/gpu-session "$mode" "$H" "$R/$n" "$@" > "$R/$n/session.log" 2>&1
  step "$n" "rc=$?"; pack "$n"; }
V=""; HB="$H"
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" \
    && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" && V="--vllm-src $R/vllm/VS" HB="$R/house-bench"
fi
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  mkdir -p "$R/moe"; step "moe-$c" start
  timeout 420 tools/gpu-session moe-bench "$HB" "$R/moe/$c" $V --contracts "$c" \
    --chains g4r8+d3 g4r8y+d3y g4r8xy+d3r4xy g4r8xy+d3y g4r8+d3r4 --tokens 1 4 16 64 --no-compile --rounds 5 \
    > "$R/moe/$c.log" 2>&1
  step "moe-$c" "rc=$?"; pack moe
done
mkdir -p "$R/trace"; step trace start
python3 -m venv /tmp/vt
python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
  > "$(/tmp/vt/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
/tmp/vt/bin/python -m pip install -q --no-index --no-deps "$H"/*.whl > "$R/trace/session.log" 2>&1
for t in "Qwen3-30B-A3B g4r8+d3 1 uniform" "Qwen3-30B-A3B g4o+d3o 1 uniform" "Qwen3-30B-A3B g4o+d3ol 1 uniform" \
    "Qwen3-30B-A3B g4r8+d3 64 same" "Qwen3-30B-A3B g4r8y+d3y 64 same" "Qwen3-30B-A3B g4r8xy+d3r4xy 64 same" \
    "Qwen3-30B-A3B g4r8xy+d3r4xy 64 uniform" "Qwen3-235B-A22B g4r8+d3 1 uniform"; do
  set -- $t
  timeout 120 env PYTHONPATH="$R/tree" /tmp/vt/bin/python bench/trace_moe.py --contract "$1" --chain "$2" --tokens "$3" \
    --routing "$4" --json "$R/trace/$1-$2-$3-$4.json" >> "$R/trace/session.log" 2>&1
  echo "rc $? for $t" >> "$R/trace/session.log"
done
step trace done; pack trace
NETRA_TEST_MOE_CONTRACTS=30b gs moetest30 600 tests tests/test_gpu_moe.py
NETRA_TEST_MOE_CONTRACTS=235b gs moetest235 600 tests tests/test_gpu_moe.py
echo done >> "$R/progress"
