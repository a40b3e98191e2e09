#!/usr/bin/env bash
# Diagnostics on the branch moe-cluster-l2's tree and wheel: the phase marks at one token under a
# shared-memory carveout (is the cluster's multiply slower for its 42 KB of shared memory?), then ncu per
# kernel of four chains -> $OUT/
o=$OUT; h=$(pwd)/.gpu/house; v=/tmp/pv
python3 -m venv $v
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
$v/bin/python -m pip install -q --no-index --no-deps $h/*.whl
nvidia-smi --query-gpu=name --format=csv,noheader
for run in "g4o+d8sh 100" "g4o+d8sh 0" "g4oc+d8sh 100" "g4oc+d8sh 0"; do
  set -- $run
  timeout 60 env PYTHONPATH=$(pwd) $v/bin/python bench/trace_moe.py --contract Qwen3-30B-A3B --chain $1 --tokens 1 \
    --routing uniform --carveout $2 --json $o/trace-$1-c$2.json > $o/trace-$1-c$2.log 2>&1
  echo "trace $1 carveout $2 rc $?"; grep -E "^  (gate|down)" $o/trace-$1-c$2.log
done
P=$(pwd)/docs/gpu-runs/session-2026-12-06/scripts/prof3.py  # nt.fp8_moe pinned to a chain, as it ran then
cd /tmp
for c in g4o+d8sh g4ol+d8sh g4oc+d8sh g4r8+d3; do
  n=uniform1-${c/+/-}
  timeout 100 ncu --clock-control none --kernel-name regex:netra_fp8_moe --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats -f -o $o/$n \
    $v/bin/python $P uniform $c 1 > $o/$n.ncu.log 2>&1
  echo "$n rc $?"
  ncu --import $o/$n.ncu-rep --print-summary none --page details > $o/$n.txt 2>&1
  rm -f $o/$n.ncu-rep
  grep -E "netra_fp8|Duration|DRAM Throughput|L2 Hit|Achieved Occupancy|No Eligible|Warp Cycles Per Issued" $o/$n.txt | head -20
done
