#!/usr/bin/env bash
# ncu over nt.fp8_moe's served chain at Qwen3-30B-A3B, 64 tokens, same-8 and uniform routing -> $1/
o=$1; v=/tmp/pv; [ -x $v/bin/python ] || {
  python3 -m venv $v
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
  $v/bin/python -m pip install -q --no-index --no-deps /tmp/run/house/*.whl; }
cd /tmp
for rc in same:g4r8+d3 uniform:g4r8+d3 same:g2a2r4+d2a2r4; do
  r=${rc%%:*}; c=${rc#*:}; n=m64$r-${c/+/-}
  timeout 120 ncu --clock-control none --kernel-name regex:netra_fp8_moe --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section SourceCounters -f -o $o/$n \
    $v/bin/python /tmp/run/tree/.gpu/prof3.py $r $c > $o/$n.ncu.log 2>&1
  echo "$n rc $?"
  ncu --import $o/$n.ncu-rep --print-summary none --page details > $o/$n.txt 2>&1
  grep -E "netra_fp8|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|No Eligible|Warp Cycles Per Issued" $o/$n.txt | head -24
done
