#!/usr/bin/env bash
# The next device run on main's wheel (under setsid, from .gpu/call.sh). On an H100 or an H200 (sm_90 both):
# certify --reuse of the routed MoE, a contract's two stages at a time (--only), each part reusing the table
# of the part before and banked as it finishes: Qwen3-30B-A3B, then Qwen3-235B-A22B, then the rest
# (DeepSeek-V3's router and experts) (issues 28 and 30). The committed table was certified on an H200; on
# another card the parts add --across-devices (docs/certify.md): the contracts carried and held keep the
# H200's runs, the MoE contracts are measured on this card. The twenty-first session's H200 run
# (docs/gpu-runs/session-2026-12-07d/) passed every conformance case and three of the four memory checkers
# for all 65 of Qwen3-30B-A3B's candidates then, and racecheck ran out of its 300 s (about 10 s a
# candidate); the twenty-second session retired the tactics that were not among the H200's fastest
# (docs/ops/fp8_moe.md, "Retired tactics"): 15 candidates a Qwen3 contract, 14 DeepSeek-V3's. The
# sanitizer tests passed with the checkers' worker keeping its inputs on the device on an H100 on
# 2026-12-08 (docs/gpu-runs/session-2026-12-08/san). Then issue 28's end to end (bench/bench_moe_layer.py),
# the fused one-token probe (bench/probe_moe_fused.py), the MoE gpu test and the rest of the gpu tests.
set -u
R=/tmp/run; H="$R/house"
cd "$R/tree"
export PYTHONUNBUFFERED=1
# a step's archive, without certify's tool logs (they can pass the 16 MiB a returned file may have: a
# certify that fails packs them apart, after its table's archive)
pack() { tar -czf "$R/$1.tar.gz.part" --exclude=certify-logs.tar.gz -C "$R" "$1" && mv "$R/$1.tar.gz.part" "$R/$1.tar.gz"; }
step() { echo "$1 $2 $(date +%s)" >> "$R/progress"; }
gs() {  # $1 name, $2 timeout, then tools/gpu-session's mode and arguments (WHEELHOUSE and OUT given here)
  local n=$1 t=$2 mode=$3 hh=$H; shift 3
  mkdir -p "$R/$n"; step "$n" start
  timeout -k 60 "$t" tools/gpu-session "$mode" "$hh" "$R/$n" "$@" > "$R/$n/session.log" 2>&1
  local rc=$?; step "$n" "rc=$rc"; pack "$n"
  if [ "$rc" != 0 ] && [ -f "$R/$n/certify-logs.tar.gz" ]; then cp "$R/$n/certify-logs.tar.gz" "$R/$n-logs.part" && mv "$R/$n-logs.part" "$R/$n-logs.tar.gz"; fi; }
# the fused one-token probe's variants (bench/probe_moe_fused.py, built by prep.sh into .gpu/fused): judged by
# certify's judges, traced and timed beside the read limit and the fastest one-token chain
# the venv the layer bench and the fused probe run in: the image's torch, cupy and transformers, the wheel on top
# (each makes it if it is not there: the H100's run of 2026-12-08 ran the layer first and found none)
vt() {
  [ -x /tmp/vt/bin/python ] || { python3 -m venv /tmp/vt && python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$(/tmp/vt/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth" \
    && /tmp/vt/bin/python -m pip install -q --no-index --no-deps "$H"/*.whl > "$R/$1/install.log" 2>&1; }; }
fused() {
  mkdir -p "$R/fused"; step fused start; vt fused
  (cd bench && timeout -k 30 300 /tmp/vt/bin/python probe_moe_fused.py --cubins "$R/tree/.gpu/fused" \
    --chains g4o+d8sh --trace 10 --json "$R/fused/fused.json" > "$R/fused/session.log" 2>&1)
  step fused "rc=$?"; pack fused; }
# issue 28's end to end: a Qwen3-30B-A3B decoder layer's decode step, netra-served against transformers
layer() {
  mkdir -p "$R/layer"; step layer start; vt layer
  (cd bench && timeout -k 30 300 /tmp/vt/bin/python bench_moe_layer.py --json "$R/layer/layer.json" \
    > "$R/layer/session.log" 2>&1)
  step layer "rc=$?"; pack layer; }
if [ -f "$R/tree/.gpu/short" ]; then  # a lease of a few minutes: no certify part would finish
  layer; fused
  echo done >> "$R/progress"; exit 0
fi
across=(); grep -q H200 "$R/which" || across=(--across-devices)  # the committed table is the H200's
Q30='(experts=128,topk=8,hidden=2048,inter=768)'; Q235='(experts=128,topk=8,hidden=4096,inter=1536)'
prev="$R/tree/release/tables/sm_90.json"
part() {  # $1 name, then certify's --only arguments: banked as it finishes; the next part reuses its table
  local n=$1; shift
  gs "$n" 1800 certify --reuse "$prev" "${across[@]}" --tool-timeout 1500 "$@"
  [ -f "$R/$n/sm_90.json" ] && prev="$R/$n/sm_90.json"
}
part c30 --only "fp8_moe_gate_up$Q30" --only "fp8_moe_down$Q30"
part c235 --only "fp8_moe_gate_up$Q235" --only "fp8_moe_down$Q235"
part crest
layer; fused
gs moetest 1500 tests tests/test_gpu_moe.py
gs tests 1200 tests tests/test_gpu_grouped_router.py tests/test_gpu_torch_ops.py tests/test_gpu_torch_fused.py \
  tests/test_gpu_sanitizer.py tests/test_cli.py tests/test_gpu_sm90.py
echo done >> "$R/progress"
