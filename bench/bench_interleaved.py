"""Two installs of netra side by side, sample by sample: the first lookup and doctor's verification.

bench_lookup.py and bench_doctor.py time one install in blocks of runs; on a shared host the load moves
between blocks (the same wheel measured 19 and 29 ms a minute apart), so comparing two installs block by
block measures the host. Here every sample of install A is followed at once by one of install B:

  - the first lookup, imports excluded (bench_lookup.py's cold case), per class: one fresh process of A,
    then one of B, --lookups times; with a plain read of the same code object as the baseline;
  - doctor: bench_doctor.py -n 5 in A, then in B, --doctor-rounds times; each round gives doctor.verify
    as a ratio of sha256sum over the same files in that same process's run.

Run it with any python, naming each install's python (e.g. a venv of the previous wheel and one of this):

    python bench/bench_interleaved.py OLD/bin/python NEW/bin/python [--lookups 40] [--doctor-rounds 8]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import _entry
from bench_lookup import COLD_NO_IMPORT, PLAIN

KEY = "fp8_group_quant(hidden=2048,group=128)"  # served `verified` by every class
CODE = """
import sys
from netra.runtime import open_catalog
k = open_catalog(sys.argv[1]).select(sys.argv[2], policy="verified")
print(k.candidate.file, open_catalog(sys.argv[1]).install.code_object(k.candidate.file))
"""


def run(python: str, code: str, *args: str) -> str:
    out = subprocess.run(
        [python, "-c", code, *args], check=True, capture_output=True, text=True, cwd=tempfile.gettempdir()
    )
    return out.stdout.strip()


def lookups(pythons: list[str], cls: str, n: int) -> None:
    path = run(pythons[0], CODE, cls, KEY).split()[1]
    times: list[list[float]] = [[] for _ in pythons]
    plain: list[float] = []
    for _ in range(n):
        plain.append(float(run(pythons[0], PLAIN, path)))
        for i, py in enumerate(pythons):
            times[i].append(float(run(py, COLD_NO_IMPORT, path, KEY, cls)))
    base = statistics.median(plain)
    print(f"{cls}: first lookup of {KEY}, imports excluded; {n} interleaved fresh processes each, medians")
    print(f"  {'plain read of the code object':32} {base * 1e3:8.3f} ms")
    for name, ts in zip("AB", times, strict=True):
        m = statistics.median(ts)
        print(f"  {name}: {m * 1e3:8.2f} ms  (p25 {_q(ts, 1):.2f}, p75 {_q(ts, 3):.2f})")
    a, b = (statistics.median(t) for t in times)
    pairwise = statistics.median(y - x for x, y in zip(*times, strict=True))
    print(f"  B / A: {b / a:.2f}; pairwise B - A, median: {pairwise * 1e3:+.2f} ms")


def _q(ts: list[float], k: int) -> float:
    return statistics.quantiles(ts, n=4)[k - 1] * 1e3


def doctor(pythons: list[str], rounds: int) -> None:
    here = Path(__file__).resolve().parent
    ratios: list[list[float]] = [[] for _ in pythons]
    verify: list[list[float]] = [[] for _ in pythons]
    for _ in range(rounds):
        for i, py in enumerate(pythons):
            out = subprocess.run(
                [py, str(here / "bench_doctor.py"), "-n", "5"], check=True, capture_output=True, text=True,
                cwd=tempfile.gettempdir(),
            ).stdout  # fmt: skip
            m = re.search(r"doctor\.verify \(in-process\)\s+([0-9.]+) ms\s+x\s+([0-9.]+)", out)
            assert m, out
            verify[i].append(float(m.group(1)))
            ratios[i].append(float(m.group(2)))
    print(f"doctor.verify, {rounds} interleaved rounds of bench_doctor.py -n 5 each, medians over the rounds")
    for name, v, r in zip("AB", verify, ratios, strict=True):
        print(f"  {name}: {statistics.median(v):6.2f} ms, x {statistics.median(r):.2f} of sha256sum FILES "
              f"(rounds: {', '.join(f'{x:.2f}' for x in r)})")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", help="the python of install A (the baseline)")
    ap.add_argument("b", help="the python of install B")
    ap.add_argument("--lookups", type=int, default=40)
    ap.add_argument("--doctor-rounds", type=int, default=8, help="0 leaves doctor out (default: %(default)s)")
    ap.add_argument("--gpu-class", action="append", help="classes to look up in (default: sm_90 and gfx950)")
    args = ap.parse_args()
    pythons = [args.a, args.b]
    print(f"A: {args.a}\nB: {args.b}")
    for cls in args.gpu_class or ["sm_90", "gfx950"]:
        lookups(pythons, cls, args.lookups)
    if args.doctor_rounds > 0:  # 0: the lookups alone
        doctor(pythons, args.doctor_rounds)
    sys.stdout.flush()


if __name__ == "__main__":
    _entry.run(main)
