#!/usr/bin/env bash
# ncu over nt.fp8_moe's chain at Qwen3-30B-A3B: one token uniform and 64 tokens on the same 8 experts (the
# rows vLLM leads most), for g4r8+d3 and the WGMMA chains: duration, DRAM throughput, stalls -> $1/
o=$1; h=$2; v=/tmp/pv; PROF3=$(cd "$(dirname "$0")" && pwd)/prof3.py; [ -x $v/bin/python ] || {
  python3 -m venv $v
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
  $v/bin/python -m pip install -q --no-index --no-deps $h/*.whl; }
cd /tmp
for run in "uniform 1" "same 64"; do
  set -- $run
  for c in g4r8+d3 g4t+d3t g8w64+d4w64 g8w8+d4w8; do
    n=$1$2-${c/+/-}
    timeout 120 ncu --clock-control none --kernel-name regex:netra_fp8_moe --launch-skip 2 --launch-count 2 \
      --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
      --section WarpStateStats --section SchedulerStats --section SourceCounters -f -o $o/$n \
      $v/bin/python $PROF3 $1 $c $2 > $o/$n.ncu.log 2>&1
    echo "$n rc $?"
    ncu --import $o/$n.ncu-rep --print-summary none --page details > $o/$n.txt 2>&1
    grep -E "netra_fp8|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued" $o/$n.txt | head -16
  done
done
