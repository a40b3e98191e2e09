"""What bounds each sm_90 kernel: Nsight Compute's counters for Netra's kernels, the copy kernels and Liger.

Run on the GPU machine (ncu and torch there, the netra wheel installed; tools/gpu-session profile):

    python bench/profile_sm90.py --out OUT [--rows 8192,32768] [--all-tactics] [--only REGEX]

It starts `ncu --clock-control none` (the clocks as the card runs them) over this same script in its
`launch` mode, which launches, once per row count, each served kernel of the installed sm_90 table
(every candidate with --all-tactics), the bench's copy kernels moving the same bytes, and Liger's
RMSNorm where the op matches, with fresh random inputs. ncu collects the SpeedOfLight, Occupancy,
LaunchStats, WarpStateStats and MemoryWorkloadAnalysis sections of each; the script then writes
OUT/profile.ncu-rep (the report, for ncu-ui), OUT/ncu.csv (its raw page), OUT/profile.json (per launch: what was launched, and the counters that
say what bounds it) and prints a table: duration, DRAM throughput (% of peak) and bytes, achieved and
theoretical occupancy, registers, waves per SM, L2 hit rate, and the top warp stall reasons.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_sm90 as b

SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "WarpStateStats", "MemoryWorkloadAnalysis")
KERNELS = r"regex:^(netra_|_rms_norm|_block_rms_norm|_fused_add_rms_norm)"
WANT = {
    "duration_ns": "gpu__time_duration.sum",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "dram_read_bytes": "dram__bytes_read.sum",
    "dram_write_bytes": "dram__bytes_write.sum",
    "memory_pct": "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    "sm_pct": "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "achieved_occupancy_pct": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "theoretical_occupancy_pct": "sm__maximum_warps_per_active_cycle_pct",
    "registers": "launch__registers_per_thread",
    "waves_per_sm": "launch__waves_per_multiprocessor",
    "block": "launch__block_size",
    "grid": "launch__grid_size",
    "l2_hit_pct": "lts__t_sector_hit_rate.pct",
    "issue_active_pct": "sm__inst_issued.avg.pct_of_peak_sustained_active",
}
PROFILED_COPIES = ("netra_bench_copy_v16x1_cs", "netra_bench_copy_v16x4")  # torch-shaped and 4-in-flight
STALL = re.compile(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio")


def launch_mode(args: argparse.Namespace) -> int:
    """Each kernel once per row count (ncu profiles every launch whose name matches KERNELS)."""
    bench = b.Bench(args)
    torch = bench.torch
    from netra.certify import conformance

    order: list[dict[str, Any]] = []
    keys = [k for k in sorted(bench.cat.contracts()) if not args.only or re.search(args.only, k)]
    for key in keys:
        entry = bench.cat.table.entries[key]
        op, p = entry.op, entry.params
        tactics = [c.tactic for c in entry.candidates] if args.all_tactics else [None]
        lg = None if args.no_liger else b.liger(op, p)
        for rows in args.rows:
            nbytes = conformance.bytes_moved(op, p, rows)
            for t in tactics:
                k = (
                    bench.cat.select(key, args.policy, rows=rows)
                    if t is None
                    else bench.cat.select(key, "experiment", tactic=t)
                )
                if not k:
                    raise SystemExit(f"{key}: {k}")
                names = list(b.input_shapes(op, p, rows))
                ins = bench.inputs(op, p, rows, 1)[0]
                a: dict[str, Any] = {n: x.data_ptr() for n, x in zip(names, ins, strict=True)}
                outs = []
                for name, (dtype, shape) in conformance.outputs(op, p, rows).items():
                    o = torch.empty(
                        max(1, math.prod(shape) * dtype.itemsize), device="cuda", dtype=torch.uint8
                    )
                    outs.append(o)
                    a[name] = o.data_ptr()
                if op == "rmsnorm":
                    a["eps"] = 1e-6
                bench.cu.launch(k, rows, None, {**a, "rows": rows})
                torch.cuda.synchronize()
                order.append({"what": "netra", "contract": key, "rows": rows, "tactic": k.tactic,
                              "kernel": k.symbol, "bytes": nbytes})  # fmt: skip
                del ins, outs
            each = -(-nbytes // 32) * 16
            n = max(16, each)
            src = torch.randn(n // 2, device="cuda", dtype=torch.bfloat16)
            dst = torch.empty_like(src)
            for name in PROFILED_COPIES:
                bench.copies.launcher(name, dst, src, n // 16)(0)
                torch.cuda.synchronize()
                order.append({"what": "copy", "contract": key, "rows": rows, "kernel": name, "bytes": 2 * n})
            del src, dst
            if lg is not None:
                ins = bench.inputs(op, p, rows, 1)[0]
                lg(*ins)  # compiles (the compile's own launches are not profiled: none match)
                torch.cuda.synchronize()
                lg(*ins)
                torch.cuda.synchronize()
                order.append({"what": "liger", "contract": key, "rows": rows, "kernel": "liger", "bytes": nbytes,
                              "launches": 2})  # fmt: skip
                del ins
    Path(args.order).write_text(json.dumps(order, indent=1) + "\n")
    return 0


_SCALE = {  # ncu picks a unit per column: bring times to ns and sizes to bytes
    "ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9,
    "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
}  # fmt: skip


def _num(v: str, unit: str = "") -> float | None:
    try:
        return float(v.replace(",", "")) * _SCALE.get(unit, 1.0)
    except ValueError:
        return None


def parse(csv_text: str, order: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ncu's raw CSV (a header, a units row, one row per profiled launch) joined with the launch order."""
    start = csv_text.find('"ID"')
    rows = list(csv.reader(io.StringIO(csv_text[start:]))) if start >= 0 else []
    if len(rows) < 2:
        return []
    head, units, data = rows[0], rows[1], rows[2:]
    col = {name: i for i, name in enumerate(head)}
    name_col = next((col[n] for n in ("Kernel Name", "Function Name", "Demangled Name") if n in col), None)
    launches = []
    for r in data:
        if len(r) != len(head):
            continue
        rec: dict[str, Any] = {"kernel_name": r[name_col] if name_col is not None else None}
        for k, m in WANT.items():
            rec[k] = _num(r[col[m]], units[col[m]]) if m in col else None
        stalls = {STALL.match(n).group(1): _num(r[i]) for n, i in col.items() if STALL.match(n)}  # type: ignore[union-attr]
        rec["stalls"] = dict(sorted(((k, v) for k, v in stalls.items() if v), key=lambda kv: -kv[1])[:6])
        launches.append(rec)
    out: list[dict[str, Any]] = []
    it = iter(launches)
    for o in order:
        # Liger is launched twice (the first compiles): keep its second launch's counters.
        got = [next(it, None) for _ in range(o.get("launches", 1))]
        rec = got[-1]
        out.append({**o, **(rec or {"missing": True})})
    return out


def table(profile: list[dict[str, Any]]) -> str:
    def f(v: Any, fmt: str) -> str:
        return format(v, fmt) if isinstance(v, (int, float)) else "-"

    lines = [f"{'contract':48} {'rows':>6} {'what':>22} {'us':>8} {'dram%':>6} {'GB':>6} {'occ':>5} {'theo':>5} "
             f"{'reg':>4} {'waves':>6} {'L2hit':>6}  top stalls (cycles per issue)"]  # fmt: skip
    for r in profile:
        what = (
            r["tactic"]
            if r["what"] == "netra"
            else (r["kernel"].replace("netra_bench_copy_", "copy_") if r["what"] == "copy" else "liger")
        )
        dram = (r.get("dram_read_bytes") or 0) + (r.get("dram_write_bytes") or 0)
        stalls = ", ".join(f"{k} {v:.1f}" for k, v in (r.get("stalls") or {}).items())
        lines.append(
            f"{r['contract']:48} {r['rows']:>6} {what:>22} {f((r.get('duration_ns') or 0) / 1e3, '8.2f')} "
            f"{f(r.get('dram_pct'), '6.1f')} {f(dram / 1e9, '6.2f')} {f(r.get('achieved_occupancy_pct'), '5.1f')} "
            f"{f(r.get('theoretical_occupancy_pct'), '5.1f')} {f(r.get('registers'), '4.0f')} "
            f"{f(r.get('waves_per_sm'), '6.2f')} {f(r.get('l2_hit_pct'), '6.1f')}  {stalls}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "mode", nargs="?", default="profile", choices=("profile", "launch"), help=argparse.SUPPRESS
    )
    ap.add_argument("--out", help="folder for ncu.csv and profile.json (profile mode)")
    ap.add_argument("--rows", default="8192,32768", help="row counts, comma-separated (default: %(default)s)")
    ap.add_argument("--only", help="only contracts whose key matches this regular expression")
    ap.add_argument(
        "--policy",
        default="accepted",
        help="the policy Netra's kernels are selected with (default: %(default)s)",
    )
    ap.add_argument(
        "--all-tactics", action="store_true", help="every candidate of each entry, not only the served one"
    )
    ap.add_argument("--no-liger", action="store_true", help="skip Liger-kernel even when it is installed")
    ap.add_argument(
        "--ncu", default=shutil.which("ncu") or "ncu", help="the ncu to run (default: %(default)s)"
    )
    ap.add_argument("--order", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        args.rows = tuple(int(r) for r in args.rows.split(","))
        if any(r < 1 for r in args.rows):
            raise ValueError
    except ValueError:
        ap.error(f"--rows: {args.rows!r} is not a comma-separated list of positive integers")
    if args.mode == "launch":
        return launch_mode(args)
    if not args.out:
        ap.error("--out is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    order_file = out / "order.json"
    report = out / "profile"
    cmd = [args.ncu, "--clock-control", "none", "--kernel-name", KERNELS, "--export", str(report), "--force-overwrite",
           *[x for s in SECTIONS for x in ("--section", s)], "--metrics", "dram__bytes_read.sum,dram__bytes_write.sum",
           sys.executable, __file__, "launch", "--rows", ",".join(map(str, args.rows)), "--order", str(order_file),
           "--policy", args.policy]  # fmt: skip
    cmd += ["--all-tactics"] if args.all_tactics else []
    cmd += ["--no-liger"] if args.no_liger else []
    cmd += ["--only", args.only] if args.only else []
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
    (out / "ncu.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0 or not order_file.exists():
        sys.stderr.write((r.stdout + r.stderr)[-4000:])
        print(f"error: ncu exited {r.returncode}; its log is {out / 'ncu.log'}", file=sys.stderr)
        return 1
    raw = subprocess.run([args.ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw"],
                         capture_output=True, text=True, errors="replace", check=False)  # fmt: skip
    (out / "ncu.csv").write_text(raw.stdout)
    profile = parse(raw.stdout, json.loads(order_file.read_text()))
    (out / "profile.json").write_text(json.dumps(profile, indent=1, sort_keys=True) + "\n")
    print(table(profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
