#!/usr/bin/env bash
v=/tmp/pv; python3 -m venv $v
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
$v/bin/python -m pip install -q --no-index --no-deps /tmp/run/house/*.whl
cd /tmp
timeout 150 ncu --clock-control none --kernel-name regex:netra_fp8_moe --launch-skip 2 --launch-count 8 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
  --section WarpStateStats --section SchedulerStats -f -o $OUT/moe30b $v/bin/python /tmp/run/tree/.gpu/prof.py 2048 768 > $OUT/ncu.log 2>&1
echo rc $?
ncu --import $OUT/moe30b.ncu-rep --print-summary none --page details > $OUT/moe30b.txt 2>&1
grep -E "netra_fp8|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Waves|Theoretical Occ|Warp Cycles Per Issued|Eligible Warps|No Eligible|Shared Memory Config|Dynamic Shared" $OUT/moe30b.txt | head -120
tail -5 $OUT/ncu.log
