#!/usr/bin/env bash
# Here, in the repository root: fill .gpu/ for its driver.sh (main's wheel, the two wheels the image
# lacks, the fused probe's cubins, vLLM 0.34.0's Python files and the twelve wheels its import needs there;
# docs/performance.md, "Routed FP8 MoE"). About a minute with the compile cache warm (58 s on 2026-12-06), 12 without.
set -euo pipefail
grep -qx '/.gpu/' .git/info/exclude || echo '/.gpu/' >> .git/info/exclude
s=docs/gpu-runs/next/scripts
mkdir -p .gpu/house .gpu/vllm/wheels && cp "$s/call.sh" .gpu/ && cp "$s/driver.sh" .gpu/driver.sh
NETRA_COMPILE_CACHE=1 tools/release > /tmp/prep-release.log 2>&1
rm -f .gpu/house/netra_kernel-*.whl && cp dist/netra_kernel-*-py3-none-any.whl .gpu/house/
rm -rf .gpu/fused && python3 bench/probe_moe_fused.py --build .gpu/fused > /tmp/prep-fused.log  # the device has no nvcc
py312=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
       --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_31_x86_64)
python3 -m pip download -q "${py312[@]}" -d .gpu/house pyelftools msgpack
python3 -m pip download -q "${py312[@]}" -d .gpu/vllm/wheels pydantic==2.14.4 pydantic_core==2.50.5 \
  annotated-types==0.8.0 typing-inspection==0.4.5 pyzmq==27.3.0 pybase64==1.5.1 cachetools==8.0.2 cbor2==6.3.0 \
  msgspec==0.23.0 llguidance==1.7.6 xgrammar==0.2.8 apache-tvm-ffi==0.1.11
w=$(mktemp -d) && python3 -m pip download -q vllm==0.34.0 --no-deps --only-binary :all: -d "$w"
mkdir -p "$w/VS" && (cd "$w/VS" && unzip -q "$w"/vllm-0.34.0-*.whl 'vllm-0.34.0.dist-info/*' 'vllm/*.py' 'vllm/*.json')
tar -cJf .gpu/vllm/vs.tar.xz -C "$w" VS && rm -rf "$w"
du -sh .gpu  # under the device's 64 MiB carry
