#!/usr/bin/env bash
# The next device session on main's wheel (under setsid, from .gpu/call.sh; prepared in the twelfth
# session, which got no device). On an H200 first certify --reuse (issues 28 and 30: the MoE contracts'
# candidates, the EARLY and SLOT_TILE ones among them, DeepSeek-V3's router and experts); then, on any
# sm_90 card, issue 28: the access-pattern probe, the MoE bench (the served chain, the EARLY twins and
# the SLOT_TILE chains beside it, vLLM and the read limit in the same rounds), the phase marks of those
# chains, the MoE gpu test (every tactic: the new ones have never run); on an H200 then the rest
# (issues 30 and 31: the integrations, the operator path, decode, every other gpu test).
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
mkdir -p "$R/probe"; step probe start  # what the access pattern costs (bench/probe_moe_reads.py)
for c in Qwen3-30B-A3B Qwen3-235B-A22B; do
  timeout 120 python3 bench/probe_moe_reads.py --contract "$c" --json "$R/probe/$c.json" >> "$R/probe/session.log" 2>&1
  echo "rc $? for $c" >> "$R/probe/session.log"
done
step probe done; pack probe
V=""; HB="$H"
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" \
    && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" && V="--vllm-src $R/vllm/VS" HB="$R/house-bench"
fi
X30=""; X235=""  # the SLOT_TILE chains, where the house wheel's table has them
if python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); sys.exit(0 if any(b"\"d8s\"" in z.read(n) for n in z.namelist() if n.endswith("tables/sm_90.json")) else 1)' "$H"/netra_kernel-*.whl; then
  X30="g4r8+d8s g4o+d8sh g4r8+d8sh"; X235="g4r8+d8s"
fi
echo "slot chains: $X30" >> "$R/progress"
mkdir -p "$R/moe"; step moe-30b start
timeout 420 tools/gpu-session moe-bench "$HB" "$R/moe/Qwen3-30B-A3B" $V --contracts Qwen3-30B-A3B \
  --chains g4r8+d3 g4r8+d3e g4o+d3o g4o+d3oe g4r8y+d3ys g4r8y+d3yse $X30 --tokens 1 4 16 64 --no-compile --rounds 5 \
  > "$R/moe/Qwen3-30B-A3B.log" 2>&1
step moe-30b "rc=$?"; pack moe
step moe-235b start
timeout 300 tools/gpu-session moe-bench "$HB" "$R/moe/Qwen3-235B-A22B" $V --contracts Qwen3-235B-A22B \
  --chains g4r8+d3 g4r8+d3e g4r8y+d3yse $X235 --tokens 1 16 64 --no-compile --rounds 5 \
  > "$R/moe/Qwen3-235B-A22B.log" 2>&1
step moe-235b "rc=$?"; pack moe
mkdir -p "$R/trace"; step trace start  # where one call's time goes (bench/trace_moe.py)
python3 -m venv /tmp/vt  # the image's packages (torch) and pyelftools from the house; netra from the tree
python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
  > "$(/tmp/vt/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
/tmp/vt/bin/python -m pip install -q --no-index --no-deps "$H"/*.whl > "$R/trace/session.log" 2>&1
TR="Qwen3-30B-A3B g4r8+d3e 1 uniform|Qwen3-30B-A3B g4o+d3oe 1 uniform|Qwen3-30B-A3B g4r8+d3 1 uniform"
[ -n "$X30" ] && TR="Qwen3-30B-A3B g4r8+d8s 1 uniform|Qwen3-30B-A3B g4o+d8sh 1 uniform|$TR"
IFS='|' read -ra TRS <<< "$TR"
for t in "${TRS[@]}"; do
  set -- $t
  timeout 120 env PYTHONPATH="$R/tree" /tmp/vt/bin/python bench/trace_moe.py --contract "$1" --chain "$2" --tokens "$3" \
    --routing "$4" --json "$R/trace/$1-$2-$3-$4.json" >> "$R/trace/session.log" 2>&1
  echo "rc $? for $t" >> "$R/trace/session.log"
done
step trace done; pack trace
gs moetest 900 tests tests/test_gpu_moe.py
grep -q H200 "$R/which" || { echo done >> "$R/progress"; exit 0; }
gs integ 600 tests tests/test_gpu_integrations_transformers.py
gs path 300 path-bench
gs decode 300 torch-bench --rows 1 16
gs tests 1800 tests tests/test_gpu_grouped_router.py tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_sanitizer.py tests/test_cli.py tests/test_gpu_sm90.py
echo done >> "$R/progress"
