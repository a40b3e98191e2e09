"""What `netra build` costs on top of the assembler, and how lock/build cost grows with the catalog.

Part 1: `netra build` of the real gfx950 catalog against a plain shell loop of llvm-mc + ld.lld over the
same instantiation files (made by `netra build --keep`), at the same parallelism, run alternately. The
tree is a copy holding the gfx950 class alone (its templates, tactics and the model manifests, locked
afresh), so neither side compiles another class's code objects.
Part 2: a synthetic catalog of N specializations of one template (N up to 2000): `netra lock` time and
`netra lock --check` time.

Run: python bench/bench_assemble.py [--repeat 5] [--sizes 250,500,1000,2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from netra.targets.gfx950.toolchain import TRIPLE, discover  # noqa: E402


def timed(argv: list[str], **kw: object) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - t0


def netra(*args: str) -> list[str]:
    return [sys.executable, "-m", "netra", *args]


def part1(repeat: int, jobs: int, root: Path) -> None:
    tools = discover()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        keep = t / "keep"
        subprocess.run(
            netra("build", str(t / "warm"), "--root", str(root), "--keep", str(keep), "-q"),
            env=env,
            check=True,
        )
        sources = sorted(keep.glob("*.s"))
        script = t / "loop.sh"
        script.write_text(
            "set -e\n"
            f"ls {keep}/*.s | xargs -P {jobs} -I{{}} sh -c 'b=$(basename {{}} .s); "
            f"{tools['llvm-mc']} -triple={TRIPLE} -mcpu=gfx950 -filetype=obj -I {root}/kernels/gfx950 {{}} -o {t}/sh/$b.o "
            f"&& {tools['ld.lld']} -shared --no-undefined --build-id=none -o {t}/sh/$b.hsaco {t}/sh/$b.o'\n"
        )
        shell, ours = [], []
        for i in range(repeat):
            shutil.rmtree(t / "sh", ignore_errors=True)
            (t / "sh").mkdir()
            shell.append(timed(["bash", str(script)]))
            ours.append(
                timed(netra("build", str(t / f"out{i}"), "--root", str(root), "-q", "-j", str(jobs)), env=env)
            )
        s, n = statistics.median(shell), statistics.median(ours)
        print(f"catalog: {len(sources)} artifacts, jobs={jobs}, {repeat} alternating runs (median)")
        print(f"  shell loop llvm-mc + ld.lld : {s:.3f} s")
        print(
            f"  netra build (whole command): {n:.3f} s   ratio {n / s:.2f}  overhead {100 * (n / s - 1):+.0f}%"
        )


def gfx950_tree(dest: Path) -> None:
    """The real gfx950 catalog alone: its templates and tactics, and one model manifest needing every
    contract the release's gfx950 table holds (the real models also need contracts only other classes
    build), locked afresh."""
    import json

    from netra.runtime import Contract

    shutil.copytree(REPO / "kernels" / "gfx950", dest / "kernels" / "gfx950")
    shutil.copytree(REPO / "manifests" / "gfx950", dest / "manifests" / "gfx950")
    table = json.loads((REPO / "release" / "tables" / "gfx950.json").read_text())
    ops = ""
    for e in table["entries"]:
        c = Contract.parse(e["key"])
        ops += f'\n[[ops]]\nop = "{c.op}"\nuse = "the gfx950 catalog"\n'
        ops += "".join(f"{k} = {v}\n" for k, v in c.params.items())
    (dest / "manifests" / "models").mkdir(parents=True)
    (dest / "manifests" / "models" / "gfx950-catalog.toml").write_text(f'model = "gfx950-catalog"\n{ops}')
    (dest / "release" / "tables").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(netra("lock", "--root", str(dest), "-q"), env=env, check=True, stdout=subprocess.DEVNULL)


def synthetic_tree(dest: Path, n: int) -> None:
    """One template (fp8_group_quant), n contracts x tactics, in a throwaway source tree."""
    shutil.copytree(REPO / "kernels" / "gfx950", dest / "kernels" / "gfx950")
    (dest / "manifests" / "models").mkdir(parents=True)
    (dest / "manifests" / "gfx950").mkdir(parents=True)
    (dest / "release" / "tables").mkdir(parents=True)
    blocks = (64, 128, 192, 256)
    hiddens = [128 * (k + 1) for k in range((n + len(blocks) - 1) // len(blocks))]
    ops = "".join(f'\n[[ops]]\nop = "fp8_group_quant"\nhidden = {h}\ngroup = 128\n' for h in hiddens)
    (dest / "manifests" / "models" / "synthetic.toml").write_text(f'model = "synthetic"\n{ops}')
    tactics = "".join(
        f'\n[[tactics]]\nop = "fp8_group_quant"\nname = "b{b}"\ntemplate = "fp8_group_quant"\nblock = {b}\n'
        f'maturity = "experiment"\nwhy = "synthetic: block {b}"\n'
        for b in blocks
    )
    (dest / "manifests" / "gfx950" / "tactics.toml").write_text(
        f'target = "gfx950"\ncertification = "static"\n{tactics}'
    )


def part2(sizes: list[int], jobs: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    print(f"synthetic catalog (fp8_group_quant x 4 block sizes), jobs={jobs}")
    print(f"  {'artifacts':>9} {'netra lock':>11} {'per artifact':>13} {'lock --check':>13}")
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            synthetic_tree(root, n)
            lock_s = timed(netra("lock", "--root", str(root), "-q", "-j", str(jobs)), env=env)
            count = sum(
                1 for ln in (root / "release/manifest.lock").read_text().splitlines() if ln == "[[artifacts]]"
            )
            check_s = timed(netra("lock", "--check", "--root", str(root), "-q", "-j", str(jobs)), env=env)
            print(f"  {count:>9} {lock_s:>10.2f}s {1000 * lock_s / count:>11.1f}ms {check_s:>12.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--sizes", default="250,500,1000,2000")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument(
        "--compare-synthetic", type=int, default=0, help="also part 1 on a synthetic catalog of N"
    )
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        gfx950_tree(Path(tmp))
        part1(a.repeat, a.jobs, Path(tmp))
    if a.compare_synthetic:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            synthetic_tree(root, a.compare_synthetic)
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            subprocess.run(netra("lock", "--root", str(root), "-q"), env=env, check=True)
            part1(a.repeat, a.jobs, root)
    if not a.skip_synthetic:
        part2([int(s) for s in a.sizes.split(",")], a.jobs)


if __name__ == "__main__":
    main()
