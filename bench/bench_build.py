"""What the release gate costs on top of assembly, and what the compile cache saves: build wall times
side by side.

These commands, each run --repeat times on private copies of the repository (the tree and dist/ are
never touched) with a private compile cache, wall time of the whole subprocess as a user waits for it:

  release     `python -m build --no-isolation`: sdist, then the wheel from the sdist (what tools/release
              runs: every code object compiled, no cache)
  wheel       `python -m build --no-isolation --wheel`: the gated wheel straight from the tree (no cache)
  wheel-warm  the same with NETRA_COMPILE_CACHE=1 and a warm cache (what the test suite's builds cost)
  netra       `python -m netra build OUT --no-cache`: every code object compiled, the .text/static gates
  netra-warm  `python -m netra build OUT` with a warm cache: the same gates on the cached code objects
  plain       `python -m build --no-isolation --wheel` of the same package with plain hatchling: no backend
              wrapper, no hook, no kernels (the packaging floor)
  check       netra.release.wheelgate.check_wheel on the finished wheel, in process (the hook's finalize step)

Usage: python bench/bench_build.py [--repeat 5] [--jobs N] [--json]
Numbers and the exact command are recorded in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from netra.core import toml as _toml  # noqa: E402

BUILD = [sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check"]
_IGNORE = shutil.ignore_patterns(".git", "dist", "build", ".venv*", "__pycache__", ".*_cache", "*.pyc")
_SWITCHES = ("SOURCE_DATE_EPOCH", "HATCH_BUILD_NO_HOOKS", "HATCH_BUILD_HOOKS_ONLY", "HATCH_BUILD_CLEAN",
             "NETRA_COMPILE_CACHE", "NETRA_CACHE_MAX_MB")  # fmt: skip
ROWS = ("release", "wheel", "wheel-warm", "netra", "netra-warm", "plain")


def copy_repo(dest: Path) -> Path:
    """The tree without VCS data, build outputs or venvs."""
    shutil.copytree(REPO, dest, ignore=_IGNORE)
    return dest


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SWITCHES}
    return {**env, "PYTHONDONTWRITEBYTECODE": "1", **extra}


def plain_package(src: Path, dest: Path) -> Path:
    """The same package and metadata built by stock hatchling: no backend wrapper, no hook, no data."""
    dest.mkdir(parents=True)
    shutil.copytree(src / "netra", dest / "netra")
    for name in ("README.md", "README.pypi.md", "LICENSE"):  # what [project] names (readme, license)
        if (src / name).is_file():
            shutil.copy2(src / name, dest / name)
    text = (src / "pyproject.toml").read_text()
    text = text.replace('build-backend = "netra_backend"', 'build-backend = "hatchling.build"')
    text = re.sub(r"(?m)^backend-path = .*\n", "", text)
    text = re.sub(r"(?ms)^\[tool\.hatch\.build\.hooks\.custom\]\n.*?(?=^\[)", "", text)
    # The guards that refuse a build without the gate go too: the metadata hook (build_backend/
    # hatch_metadata.py) and the forced include only the build hook removes.
    text = re.sub(r"(?ms)^\[tool\.hatch\.build\.targets\.wheel\.force-include\]\n.*?(?=^\[)", "", text)
    text = re.sub(r"(?ms)^\[tool\.hatch\.metadata\.hooks\.custom\]\n.*?(?=^\[)", "", text)
    cfg = _toml.loads(text)
    assert cfg["build-system"]["build-backend"] == "hatchling.build", "could not strip the backend wrapper"
    assert "hooks" not in cfg["tool"]["hatch"]["build"], "could not strip the hook"
    assert "hooks" not in cfg["tool"]["hatch"].get("metadata", {}), "could not strip the metadata hook"
    (dest / "pyproject.toml").write_text(text)
    return dest


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(
            f"bench: `{' '.join(cmd)}` failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        )
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=None, help="netra build -j (default: all cores, as the hook)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="netra-bench-") as tmp:
        work = Path(tmp)
        tree = copy_repo(work / "tree")
        plain = plain_package(tree, work / "plain")
        env = clean_env(PYTHONPATH=str(tree), NETRA_CACHE_DIR=str(work / "cache"))
        cached = {**env, "NETRA_COMPILE_CACHE": "1"}
        jobs = ["-j", str(args.jobs)] if args.jobs else []
        netra = [sys.executable, "-m", "netra", "build"]
        runs: dict[str, list[float]] = {k: [] for k in ROWS}
        # Round-robin so drift (thermal, page cache) spreads over all rows; the warm-up round, discarded,
        # also fills the cache the warm rows read.
        for i in range(args.repeat + 1):
            out = work / f"out{i}"
            t = {
                "release": timed([*BUILD, "--outdir", str(out / "r"), str(tree)], tree, env),
                "wheel": timed([*BUILD, "--wheel", "--outdir", str(out / "w"), str(tree)], tree, env),
                "wheel-warm": timed(
                    [*BUILD, "--wheel", "--outdir", str(out / "ww"), str(tree)], tree, cached
                ),
                "netra": timed(
                    [*netra, str(out / "n"), "--root", str(tree), "-q", "--no-cache", *jobs], work, env
                ),
                "netra-warm": timed([*netra, str(out / "nw"), "--root", str(tree), "-q", *jobs], work, env),
                "plain": timed([*BUILD, "--wheel", "--outdir", str(out / "p"), str(plain)], plain, env),
            }
            if i:
                for k, v in t.items():
                    runs[k].append(v)
        artifacts = len([p for p in (work / "out0" / "n").rglob("*") if p.is_file()])
        same = all(
            (work / f"out{i}" / "nw" / p.relative_to(work / "out0" / "n")).read_bytes() == p.read_bytes()
            for i in range(args.repeat + 1)
            for p in (work / "out0" / "n").rglob("*")
            if p.is_file()
        )
        wheels = {
            w.read_bytes() for i in range(1, args.repeat + 1) for w in (work / f"out{i}").glob("w*/*.whl")
        }
        if not same or len(wheels) != 1:
            raise SystemExit("bench: a build through the cache differs from one without it")
        # The finalize step alone, in process: what checking a finished wheel against the lock costs.
        from netra.release import wheelgate

        wheel = next((work / "out1" / "w").glob("*.whl"))
        raw, lock = wheelgate.read_lock(tree / "release/manifest.lock")
        checks = []
        for _ in range(max(5, args.repeat)):
            t0 = time.perf_counter()
            assert wheelgate.check_wheel(wheel, lock, raw) == []
            checks.append(time.perf_counter() - t0)
        runs["check"] = checks

    med = {k: statistics.median(v) for k, v in runs.items()}
    result = {
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "artifacts": artifacts,
        "repeat": args.repeat,
        "median_s": med,
        "min_s": {k: min(v) for k, v in runs.items()},
        "ratios": {
            "wheel/netra": med["wheel"] / med["netra"],
            "wheel/plain": med["wheel"] / med["plain"],
            "release/plain": med["release"] / med["plain"],
            "gate_overhead_s": med["wheel"] - med["netra"] - med["plain"],
            "netra/netra-warm": med["netra"] / med["netra-warm"],
            "wheel/wheel-warm": med["wheel"] / med["wheel-warm"],
        },
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"{artifacts} artifacts, {result['machine']}, Python {result['python']}, median of {args.repeat}")
    print("| command | median s | min s | x plain | x netra build |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for k in (*ROWS, "check"):
        print(
            f"| {k} | {med[k]:.2f} | {result['min_s'][k]:.2f} | {med[k] / med['plain']:.2f} | "
            f"{med[k] / med['netra']:.2f} |"
        )
    print(f"gate overhead (wheel - netra - plain): {result['ratios']['gate_overhead_s']:+.2f} s")
    r = result["ratios"]
    print(
        f"compile cache: netra build cold/warm {r['netra/netra-warm']:.1f}x, wheel cold/warm "
        f"{r['wheel/wheel-warm']:.1f}x (the warm outputs are byte-identical to the cold ones)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
