#!/usr/bin/env bash
set -u
R=/tmp/run; H="$R/house"
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
mkdir -p "$R/probe"; step probe start
timeout 100 python3 bench/probe_moe_reads.py --contract Qwen3-30B-A3B --json "$R/probe/30b.json" >> "$R/probe/session.log" 2>&1
echo "rc $?" >> "$R/probe/session.log"; step probe done; pack probe
V=""; HB="$H"
if [ -f "$R/tree/.gpu/vllm/vs.tar.xz" ]; then
  mkdir -p "$R/vllm" "$R/house-bench" && tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" \
    && cp "$H"/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/" && V="--vllm-src $R/vllm/VS" HB="$R/house-bench"
fi
mkdir -p "$R/moe"; step moe-30b start
timeout 150 tools/gpu-session moe-bench "$HB" "$R/moe/Qwen3-30B-A3B" $V --contracts Qwen3-30B-A3B \
  --chains g4r8+d3 g4r8+d3e g4o+d3oe g4r8+d8s g4o+d8sh --tokens 1 16 --no-compile --rounds 3 \
  > "$R/moe/Qwen3-30B-A3B.log" 2>&1
step moe-30b "rc=$?"; pack moe
mkdir -p "$R/moetest"; step moetest start
timeout 150 tools/gpu-session tests "$H" "$R/moetest" tests/test_gpu_moe.py -k "30B" > "$R/moetest/session.log" 2>&1
step moetest "rc=$?"; pack moetest
echo done >> "$R/progress"
