#!/usr/bin/env bash
# Thirteenth session, last call (branch moe-cluster-l2 with CLUSTER 2, g4oc2): the 30B MoE gpu test
# (every tactic, g4oc2 among them), the 30B bench of g4oc2+d8sh beside g4o+d8sh, g4oc+d8sh and the
# served chain, then their phase marks.
set -u
R=/tmp/run; H="$R/house"
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
V=""; HB="$H"
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" \
    && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" && V="--vllm-src $R/vllm/VS" HB="$R/house-bench"
fi
mkdir -p "$R/moe"; step moe-30b start
timeout 150 tools/gpu-session moe-bench "$HB" "$R/moe/Qwen3-30B-A3B" $V --contracts Qwen3-30B-A3B \
  --chains g4r8+d3 g4o+d8sh g4oc2+d8sh --tokens 1 16 --no-compile --rounds 3 \
  > "$R/moe/Qwen3-30B-A3B.log" 2>&1
step moe-30b "rc=$?"; pack moe
mkdir -p "$R/trace"; step trace start
python3 -m venv /tmp/vt
python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
  > "$(/tmp/vt/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
/tmp/vt/bin/python -m pip install -q --no-index --no-deps "$H"/*.whl > "$R/trace/session.log" 2>&1
for ch in g4oc2+d8sh; do
  timeout 60 env PYTHONPATH="$R/tree" /tmp/vt/bin/python bench/trace_moe.py --contract Qwen3-30B-A3B --chain $ch --tokens 1 \
    --routing uniform --json "$R/trace/${ch/+/-}.json" >> "$R/trace/session.log" 2>&1
  echo "rc $? for $ch" >> "$R/trace/session.log"
done
step trace done; pack trace
echo done >> "$R/progress"
