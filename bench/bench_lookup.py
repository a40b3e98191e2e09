"""What the first kernel lookup costs (cold, with verification) against a plain read of the same file.

Each cold case runs in a fresh process and times itself from before its first netra import:
  - plain read: open(code object).read()
  - cold lookup: import netra.runtime, open_catalog(class) (lock + table read and checked against the
    lock), select(contract) (code object read and its sha256 checked against build.json); the class is
    --gpu-class (default gfx950; on a GPU host, its class), the contract its first one served `verified`
  - the same with the imports excluded (the file work alone)
and, in one process, the warm lookup (select again: a dict hit) against a dict lookup.
Run it with the python of an environment where netra is installed:

    /path/to/venv/bin/python bench/bench_lookup.py [-n 30] [--gpu-class sm_90]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import timeit

import _entry

PLAIN = """
import time, sys
t0 = time.perf_counter()
with open(sys.argv[1], "rb") as f:
    data = f.read()
print(time.perf_counter() - t0)
"""
COLD = """
import time, sys
t0 = time.perf_counter()
from netra.runtime import open_catalog
k = open_catalog(sys.argv[3]).select(sys.argv[2], policy="verified")
assert k, k
print(time.perf_counter() - t0)
"""
COLD_NO_IMPORT = """
import time, sys
from netra.runtime import open_catalog
t0 = time.perf_counter()
k = open_catalog(sys.argv[3]).select(sys.argv[2], policy="verified")
assert k, k
print(time.perf_counter() - t0)
"""


def child(code: str, *args: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        check=True,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    return float(out.stdout.strip())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=30)
    ap.add_argument("--gpu-class", default="gfx950", help="the catalog to open (default: %(default)s)")
    args = ap.parse_args()
    n, cls = args.n, args.gpu_class

    from netra.runtime import open_catalog

    cat = open_catalog(cls)
    key = next(k for k in cat.contracts() if cat.select(k, policy="verified"))
    kernel = cat.select(key, policy="verified")
    path = str(cat.install.code_object(kernel.candidate.file))
    cases = {
        "plain read of the code object": (PLAIN, path, key, cls),
        "cold lookup incl. imports": (COLD, path, key, cls),
        "cold lookup, imports excluded": (COLD_NO_IMPORT, path, key, cls),
    }
    for c in cases.values():
        child(*c)
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(n):
        for name, c in cases.items():
            times[name].append(child(*c))
    base = statistics.median(times["plain read of the code object"])
    print(
        f"{cls}: {key} -> {kernel.artifact} ({len(kernel.code_object)} bytes); {n} fresh processes each, medians"
    )
    for name, ts in times.items():
        m = statistics.median(ts)
        print(f"  {name:34} {m * 1e6:10.1f} us  x{m / base:8.1f} of the plain read")
    reps = 200_000
    d = {key: kernel}
    warm = min(timeit.repeat(lambda: cat.select(key, policy="verified"), number=reps, repeat=5)) / reps
    dict_hit = min(timeit.repeat(lambda: d[key], number=reps, repeat=5)) / reps
    print(
        f"  {'warm lookup (select again)':34} {warm * 1e9:10.1f} ns  x{warm / dict_hit:8.1f} of a dict lookup"
    )
    print(json.dumps({"key": key, "artifact": kernel.artifact}))


if __name__ == "__main__":
    _entry.run(main)
