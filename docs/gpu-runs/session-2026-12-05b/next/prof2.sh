#!/usr/bin/env bash
# ncu over nt.fp8_moe's kernels (the chain the installed table serves) at one contract: $1 hidden, $2 inter, $3 name.
v=/tmp/pv; [ -x $v/bin/python ] || {
  python3 -m venv $v
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
  $v/bin/python -m pip install -q --no-index --no-deps /tmp/run/house/*.whl; }
cd /tmp
timeout 150 ncu --clock-control none --kernel-name regex:netra_fp8_moe --launch-skip 2 --launch-count 8 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section WarpStateStats --section SchedulerStats --section SourceCounters -f -o $OUT/$3 $v/bin/python /tmp/run/tree/.gpu/prof.py $1 $2 > $OUT/$3.ncu.log 2>&1
echo rc $?
ncu --import $OUT/$3.ncu-rep --print-summary none --page details > $OUT/$3.txt 2>&1
grep -E "netra_fp8|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|No Eligible|Warp Cycles Per Issued" $OUT/$3.txt | head -60
