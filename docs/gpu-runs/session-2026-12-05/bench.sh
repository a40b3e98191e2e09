#!/usr/bin/env bash
# MoE bench, each contract on its own so one's result survives the other's limit.
export PYTHONUNBUFFERED=1
timeout 170 tools/gpu-session moe-bench .gpu/house2 "$OUT/30b" --contracts Qwen3-30B-A3B --no-compile > "$OUT/30b.log" 2>&1; echo "30b rc $?"
timeout 170 tools/gpu-session moe-bench .gpu/house2 "$OUT/235b" --contracts Qwen3-235B-A22B --no-compile > "$OUT/235b.log" 2>&1; echo "235b rc $?"
tail -c 5000 "$OUT/30b.log"; tail -c 4000 "$OUT/235b.log"
