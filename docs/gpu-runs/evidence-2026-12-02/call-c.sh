#!/usr/bin/env bash
# As it ran: as call B, with the wheel rebuilt after two message fixes. Call B's blocks of 20 runs per wheel
# moved with the host's load (the same wheel 19 and 29 ms): here each sample of the old wheel (2594e8b) is
# followed by one of the new, so both see the same moment. Then the gpu-marked tests call B's limit cut off.
set -u
cd "$(dirname "$0")/../../.."
start=$(date +%s)
el() { echo $(( $(date +%s) - start )); }
mkdir -p "$OUT"
here=$(pwd)
for w in old new; do
  venv=/tmp/netra-bench-$w
  python3 -m venv "$venv"
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/image-packages.pth"
  whl=$([ $w = old ] && echo .whl-old/netra_kernel-*.whl || echo .whl/netra_kernel-*.whl)
  "$venv/bin/python" -m pip install -q --no-index --no-deps --disable-pip-version-check $whl .whl/pyelftools-*.whl
done
(cd /tmp && timeout 200 python3 "$here/bench/bench_interleaved.py" /tmp/netra-bench-old/bin/python /tmp/netra-bench-new/bin/python \
   --lookups 40 --doctor-rounds 8) 2>&1 | tee "$OUT/bench-interleaved.log"
echo "benches after $(el) s"
timeout 300 tools/gpu-session tests .whl "$OUT" tests/test_gpu_torch_fused.py \
  "tests/test_gpu_torch_ops.py::test_a_cuda_graph_of_all_four_ops_replays_with_the_same_results" \
  tests/test_gpu_torch_ops.py::test_strict_mode_passes_for_every_certified_shape \
  tests/test_gpu_torch_ops.py::test_the_ops_launch_on_the_current_stream_and_from_another_thread 2>&1 \
  | grep -E 'PASS|FAIL|ERROR|SKIP|passed|failed|error|==' | tail -60
echo "tests rc=${PIPESTATUS[0]} after $(el) s"
ls "$OUT"
