"""What `netra doctor` verification costs against `sha256sum` over the same files.

The files are every file doctor reads: what the installed lock implies (netra.runtime.layout.members:
the lock, build.json, tables, manifests and code objects under netra/_data) and the package files the
wheel's RECORD lists with a hash (doctor holds them to RECORD). Side by side, alternately, medians:
  - `sha256sum FILES` (one process hashing every file) and `sha256sum -c SUMS` (checking them),
  - doctor's verification in-process (netra.cli.doctor.verify: hash every file, bind the lock and
    build.json by sha256, hold the tables to their rules and to the lock; bytes the wheel's RECORD
    vouches for are not read through their schemas again), imports already done, and its parts,
  - the same reads through the schemas (what doctor does when nothing vouches for the bytes),
  - the data files hashed the way doctor reads them (no link followed, each folder opened once),
  - two floors no doctor in Python can go below: every file read and hashed by the plainest Python loop
    (open, read, sha256: no checks at all), and that plus json.loads of the JSON doctor must hold to
    the lock (build.json and the tables), with nothing checked,
  - `netra doctor` end to end as a command (interpreter start, imports, GPU and library probes).
Run it with the python of an environment where netra is installed (a wheel install):

    /path/to/venv/bin/python bench/bench_doctor.py [-n 30]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def median_ms(ts: list[float]) -> float:
    return statistics.median(ts) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=30)
    n = ap.parse_args().n

    from netra.cli import doctor
    from netra.core import toml as _toml
    from netra.runtime import installed, layout, tables
    from netra.runtime import lockfile as lock_mod

    inst = installed.locate()
    if inst.kind != "wheel":
        sys.exit(
            f"bench_doctor: {inst.root} is a source checkout; run this with a venv's python (wheel install)"
        )
    lk = lock_mod.read(inst.lock_file)
    files = [str(inst.root / m.data_path) for m in layout.members(lk)]
    package = [str(e.file) for e in doctor.wheel_record(inst) or () if e.sha256 and str(e.file) not in files]
    files += package  # the same files doctor hashes
    size = sum(Path(f).stat().st_size for f in files)
    with tempfile.NamedTemporaryFile("w", suffix=".sha256", delete=False) as sums:
        for f in files:
            sums.write(f"{hashlib.sha256(Path(f).read_bytes()).hexdigest()}  {f}\n")

    def run(argv: list[str]) -> float:
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=tempfile.gettempdir())
        return time.perf_counter() - t0

    def verify() -> float:
        t0 = time.perf_counter()
        r = doctor.verify(inst)
        dt = time.perf_counter() - t0
        assert not r["problems"], r["problems"]
        return dt

    lock_bytes = inst.lock_file.read_bytes()
    record_bytes = (inst.root / layout.BUILD_RECORD).read_bytes()

    def read_record(vouched: bool = True) -> layout.Record:
        return layout.read_record(
            record_bytes, lock_bytes, layout.BUILD_RECORD, "manifest.lock", "", vouched=vouched
        )

    items = doctor._items(inst, lk, read_record())
    table_bytes = {
        cls: (inst.root / layout.data_path(f.path)).read_bytes()
        for f in lk.files_with_role("table")
        if (cls := tables.gpu_class_of(f.path)) and layout.data_path(f.path)
    }

    def read_tables(vouched: bool) -> float:
        t0 = time.perf_counter()
        for cls, raw in table_bytes.items():
            tables.against_lock(tables.loads(raw, cls, cls, vouched=vouched), lk)
        return time.perf_counter() - t0

    def hash_only() -> float:
        from netra.core import files as _files

        t0 = time.perf_counter()
        with _files.Below(inst.root, "install") as below:
            bad = [doctor._check(it, below)[1] for it in items]
        dt = time.perf_counter() - t0
        assert not any(bad)
        return dt

    def parse_lock(vouched: bool) -> float:
        t0 = time.perf_counter()
        read_record(vouched)  # build.json and its bound copy of the lock, as doctor reads them or strictly
        return time.perf_counter() - t0

    def parse_toml() -> float:
        t0 = time.perf_counter()
        lock_mod.from_dict(_toml.loads(inst.lock_file.read_bytes().decode()))
        return time.perf_counter() - t0

    json_files = [str(inst.root / layout.BUILD_RECORD)] + [
        str(inst.root / layout.data_path(f.path))
        for f in lk.files_with_role("table")
        if layout.data_path(f.path)
    ]

    def floor(parse_json: bool) -> float:
        import json

        t0 = time.perf_counter()
        for f in files:
            with open(f, "rb") as fh:
                hashlib.sha256(fh.read()).hexdigest()
        if parse_json:
            for f in json_files:
                with open(f, "rb") as fh:
                    json.loads(fh.read())
        return time.perf_counter() - t0

    cases = {
        "sha256sum FILES": lambda: run(["sha256sum", *files]),
        "floor: open, read, sha256 in Python": lambda: floor(False),
        "floor: that + json.loads of the JSON": lambda: floor(True),
        "sha256sum -c SUMS": lambda: run(["sha256sum", "--quiet", "-c", sums.name]),
        "doctor.verify (in-process)": verify,
        "  of which: read build.json and its lock copy": lambda: parse_lock(True),
        "  of which: read the tables (rules, vs the lock)": lambda: read_tables(True),
        "  of which: hash the data files (lock parsed)": hash_only,
        "  (not on doctor's path) the same, by schema": lambda: parse_lock(False),
        "  (not on doctor's path) the tables by schema": lambda: read_tables(False),
        "  (not on doctor's path) parse the TOML lock": parse_toml,
        "python -c pass": lambda: run([sys.executable, "-c", "pass"]),
        "netra doctor (command)": lambda: run([sys.executable, "-m", "netra", "doctor"]),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    try:
        for f in cases.values():
            f()  # warm-up: page cache, .pyc, lazy imports
        for _ in range(n):
            for name, f in cases.items():
                times[name].append(f())
    finally:
        Path(sums.name).unlink(missing_ok=True)  # nothing left in TMPDIR
    base = median_ms(times["sha256sum FILES"])
    print(
        f"{len(files)} files ({len(package)} of them package files RECORD lists), {size} bytes, "
        f"under {inst.root.parent.parent}; {n} alternating runs, medians"
    )
    for name, ts in times.items():
        m = median_ms(ts)
        print(f"  {name:48} {m:8.2f} ms  x{m / base:6.2f} of sha256sum FILES")


if __name__ == "__main__":
    main()
