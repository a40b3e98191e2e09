#!/usr/bin/env bash
# Where 64 tokens on the same 8 experts spend their time (issue 28: the best chain, g8x64p+d8x64s3m, 48.2 us
# against vLLM's 38.9 to 40.4 on an H100): the phase marks of four tensor-core chains, then ncu per kernel
# of three, on main's wheel in .gpu/house -> one archive in $OUT. Run from the tree's root:
#   run (carry .gpu): bash docs/gpu-runs/next/scripts/diag.sh
o=/tmp/diag; mkdir -p $o; h=$(pwd)/.gpu/house; v=/tmp/pv
python3 -m venv $v
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/img.pth"
$v/bin/python -m pip install -q --no-index --no-deps $h/*.whl
nvidia-smi --query-gpu=name --format=csv,noheader | tee $o/which
for c in g8x64p+d8x64s3m g8x64k2e16+d8x64s3me16 g8x16c+d8x32cm g8x8s3+d8x8s3; do
  timeout 90 env PYTHONPATH=$(pwd) $v/bin/python bench/trace_moe.py --contract Qwen3-30B-A3B --chain $c --tokens 64 \
    --routing same --json $o/trace-$c.json > $o/trace-$c.log 2>&1
  echo "trace $c rc $?"; grep -E "^  (gate|down)" $o/trace-$c.log
done
P=$(pwd)/docs/gpu-runs/session-2026-12-06/scripts/prof3.py  # nt.fp8_moe pinned to a chain
cd /tmp
for c in g8x64p+d8x64s3m g8x64k2e16+d8x64s3me16 g8x16c+d8x32cm; do
  n=same64-${c/+/-}
  timeout 120 ncu --clock-control none --kernel-name regex:netra_fp8_moe --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis -f -o $o/$n \
    $v/bin/python $P same $c 64 > $o/$n.ncu.log 2>&1
  echo "$n rc $?"
  ncu --import $o/$n.ncu-rep --print-summary none --page details > $o/$n.txt 2>&1
  rm -f $o/$n.ncu-rep
  grep -E "netra_fp8|Duration|DRAM Throughput|Compute \(SM\)|L2 Hit|Achieved Occupancy|No Eligible|Warp Cycles Per Issued|Grid Size" $o/$n.txt | head -24
done
tar -czf $OUT/diag.tar.gz -C /tmp diag
