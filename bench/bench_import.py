"""What `import netra` costs: `python -c "import netra"` against `python -c "pass"`, run alternately.

Also shown for context (not part of the promise): `import netra.runtime`, the serving API's imports.
Run it with the python of an environment where netra is installed, from any directory:

    /path/to/venv/bin/python bench/bench_import.py [-n 40]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time


def wall(code: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tempfile.gettempdir())
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=40, help="runs of each (alternating)")
    n = ap.parse_args().n
    cases = {"pass": "pass", "import netra": "import netra", "import netra.runtime": "import netra.runtime"}
    for code in cases.values():
        wall(code)  # warm the page cache and .pyc files
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(n):
        for name, code in cases.items():
            times[name].append(wall(code))
    base = statistics.median(times["pass"])
    print(f"python {sys.version.split()[0]} at {sys.executable}, {n} alternating runs each, median wall time")
    for name, ts in times.items():
        med = statistics.median(ts)
        extra = (med - base) * 1e3
        print(f"  python -c {name!r:24} {med * 1e3:7.2f} ms  ratio {med / base:5.2f}  (+{extra:6.2f} ms)")


if __name__ == "__main__":
    main()
