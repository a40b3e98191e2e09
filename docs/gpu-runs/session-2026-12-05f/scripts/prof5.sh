#!/usr/bin/env bash
# ncu over nt.fp8_moe's chain at Qwen3-30B-A3B, ONE token (issue 28's target row): where each stage's
# warps stall (WarpStateStats, SourceCounters) -> $1/
o=$1; h=$2; v=/tmp/pv; PROF3=$(cd "$(dirname "$0")" && pwd)/prof3.py; [ -x $v/bin/python ] || {
  python3 -m venv $v
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
  $v/bin/python -m pip install -q --no-index --no-deps $h/*.whl; }
cd /tmp
for c in g4r8+d3 g4t+d3t g4l+d3l; do
  n=m1uniform-${c/+/-}
  timeout 120 ncu --clock-control none --kernel-name regex:netra_fp8_moe --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section SourceCounters -f -o $o/$n \
    $v/bin/python $PROF3 uniform $c 1 > $o/$n.ncu.log 2>&1
  echo "$n rc $?"
  ncu --import $o/$n.ncu-rep --print-summary none --page details > $o/$n.txt 2>&1
  ncu --import $o/$n.ncu-rep --page source --csv --print-source sass > $o/$n.sass.csv 2>/dev/null
  grep -E "netra_fp8|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued" $o/$n.txt | head -16
done
