#!/usr/bin/env bash
# The short last call of 2026-12-05b: the MoE bench with vLLM's kernel side by side, then the quick gpu tests
# of the newly certified table. Output in /tmp/run/<step>/, packed as /tmp/run/<step>.tar.gz.
set -u
R=/tmp/run
cd "$R/tree"
export PYTHONUNBUFFERED=1
pack() { tar -czf "$R/$1.tar.gz.part" -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
mkdir -p "$R/bench" "$R/vllm" "$R/house-bench"
tar -xJf "$R/tree/.gpu/vllm/vs.tar.xz" -C "$R/vllm" && cp "$R"/house/*.whl "$R"/tree/.gpu/vllm/wheels/*.whl "$R/house-bench/"
step bench start
timeout 150 tools/gpu-session moe-bench "$R/house-bench" "$R/bench/both" --vllm-src "$R/vllm/VS" \
  --contracts Qwen3-30B-A3B Qwen3-235B-A22B --no-compile > "$R/bench/both.log" 2>&1
step bench "rc=$?"; pack bench
mkdir -p "$R/tests"; step tests start
timeout 200 tools/gpu-session tests "$R/house" "$R/tests" --durations=10 \
  tests/test_gpu_sm90.py::test_a_deleted_table_and_a_flipped_text_byte_are_refused_by_name \
  tests/test_gpu_torch_ops.py::test_the_installed_wheel_with_a_certified_sm_90_table_is_used \
  tests/test_gpu_torch_ops.py::test_strict_mode_passes_for_every_certified_shape \
  tests/test_gpu_torch_ops.py::test_batch_invariant_mode_gives_a_row_the_same_bits_at_every_row_count \
  tests/test_gpu_torch_fused.py::test_the_sm_90_table_lists_every_fused_contract \
  tests/test_gpu_moe.py::test_the_chain_through_the_operator > "$R/tests/session.log" 2>&1
step tests "rc=$?"; pack tests
echo done >> "$R/progress"
