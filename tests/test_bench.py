"""Every bench script runs: its imports resolve against today's netra and its arguments parse.

The measurements themselves take minutes (and some need the GPU machine): docs/performance.md gives
each one's command. Here each script answers `--help` from a folder outside the tree, so a script
that imports a module netra no longer has, or fails before parsing, is caught by the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TIMEOUT, clean_env, log

BENCH = sorted(p for p in (REPO / "bench").glob("*.py") if not p.name.startswith("_"))  # _*.py: helpers


def test_there_are_bench_scripts() -> None:
    assert len(BENCH) >= 5, BENCH


@pytest.mark.parametrize("script", BENCH, ids=lambda p: p.name)
def test_every_bench_script_answers_help(script: Path, tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, env=clean_env(),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and r.stdout.startswith("usage: ") and "Traceback" not in r.stderr, log(r)
    assert not any(tmp_path.iterdir()), sorted(tmp_path.iterdir())  # --help does no work


def test_every_bench_command_in_the_docs_names_a_script_that_exists() -> None:
    import re

    docs = "\n".join(p.read_text() for p in sorted((REPO / "docs").glob("*.md")))
    named = set(re.findall(r"python3? (bench/[\w.]+\.py)", docs))
    assert named, "docs/ names no bench command"
    assert sorted(n for n in named if not (REPO / n).is_file()) == []


def test_bench_assemble_measures_on_the_real_catalog_and_a_synthetic_one(tmp_path: Path) -> None:
    """The smallest real run of docs/performance.md's first table: both parts, one repetition."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_assemble.py"), "--repeat", "1", "--jobs", "2",
                        "--sizes", "4"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                       timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    assert "shell loop llvm-mc + ld.lld" in r.stdout and "ratio" in r.stdout, log(r)
    (row,) = [ln.split() for ln in r.stdout.splitlines() if ln.strip().startswith("4 ")]
    assert row[0] == "4" and row[1].endswith("s"), r.stdout


@pytest.mark.parametrize("script", ["bench_doctor.py", "bench_lookup.py"])
def test_the_install_benches_measure_a_real_install(script: str, py: str, tmp_path: Path) -> None:
    """docs/performance.md's doctor and first-lookup tables, one repetition, on the session's pip-installed
    wheel: every case runs (doctor.verify finds nothing wrong, the cold lookup finds its kernel)."""
    r = subprocess.run([py, str(REPO / "bench" / script), "-n", "1"], cwd=tmp_path, env=clean_env(),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    want = (
        [
            "sha256sum FILES",
            "doctor.verify (in-process)",
            "read the tables (rules, vs the lock)",
            "netra doctor",
        ]
        if script == "bench_doctor.py"
        else ["plain read of the code object", "cold lookup, imports excluded", "warm lookup"]
    )
    assert all(w in r.stdout for w in want), log(r)
    assert not any(tmp_path.iterdir()), sorted(tmp_path.iterdir())


def test_the_interleaved_bench_compares_two_installs(py: str, tmp_path: Path) -> None:
    """docs/performance.md's side-by-side table, the smallest run, with the session's install as both A
    and B: every case runs and reports both and their ratio."""
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_interleaved.py"), py, py, "--lookups", "2",
                        "--doctor-rounds", "1", "--gpu-class", "gfx950"], cwd=tmp_path, env=clean_env(),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    for want in (
        "gfx950: first lookup of",
        "  A: ",
        "  B: ",
        "B / A:",
        "doctor.verify, 1 interleaved rounds",
    ):
        assert want in r.stdout, log(r)
    assert not any(tmp_path.iterdir()), sorted(tmp_path.iterdir())


def test_the_read_probe_builds_its_kernels_with_the_locks_nvcc(tmp_path: Path) -> None:
    """bench/probe_moe_reads.py times on the device (docs/performance.md); here its CUDA source is built for
    sm_90a by the real nvcc at both contracts, and without CuPy it says so in one line."""
    script = str(REPO / "bench" / "probe_moe_reads.py")
    r = subprocess.run([sys.executable, script, "--cpu-smoke"], cwd=tmp_path, env=clean_env(),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    assert r.stdout.count("15 kernels built for sm_90a") == 2, log(r)
    r = subprocess.run([sys.executable, script, "--cpu-smoke"], cwd=tmp_path,
                       env=clean_env(NETRA_NVCC=str(tmp_path / "no-nvcc")),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
    assert r.stderr.startswith("probe_moe_reads: NETRA_NVCC=") and r.stderr.count("\n") == 1, log(r)
    import importlib.util

    if importlib.util.find_spec("cupy") is None:  # the device image has it; the suite's venv does not
        r = subprocess.run([sys.executable, script], cwd=tmp_path, env=clean_env(),
                           capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
        assert r.returncode == 1 and r.stderr.strip().splitlines() == [
            "probe_moe_reads: needs CuPy and a CUDA GPU (the device image has both); --cpu-smoke builds only"
        ], log(r)


def test_the_fused_probe_builds_every_variant_with_the_locks_nvcc(tmp_path: Path) -> None:
    """bench/probe_moe_fused.py judges and times on the device (docs/performance.md); here each variant of its
    CUDA source, with and without phase marks, is built for sm_90a by the real nvcc, which refuses a spill;
    without an nvcc it says so in one line, and --cubins names a folder that lacks a variant."""
    script = str(REPO / "bench" / "probe_moe_fused.py")
    out = tmp_path / "cubins"
    r = subprocess.run([sys.executable, script, "--build", str(out)], cwd=tmp_path, env=clean_env(),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    built = sorted(p.name for p in out.iterdir())
    assert built == ["s8b3p1.cubin", "s8b3p1.trace.cubin", "s8b4p2.cubin", "s8b4p2.trace.cubin"], built
    for p in out.iterdir():
        data = p.read_bytes()
        assert data[:4] == b"\x7fELF" and b"netra_probe_moe_fused" in data, p
    # the trace build takes one more argument than the plain one: they differ
    assert (out / "s8b3p1.cubin").read_bytes() != (out / "s8b3p1.trace.cubin").read_bytes()
    r = subprocess.run([sys.executable, script, "--build", str(tmp_path / "x")], cwd=tmp_path,
                       env=clean_env(NETRA_NVCC=str(tmp_path / "no-nvcc")),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
    assert r.stderr.startswith("probe_moe_fused: NETRA_NVCC=") and r.stderr.count("\n") == 1, log(r)
    (out / "s8b4p2.cubin").unlink()
    r = subprocess.run([sys.executable, script, "--cubins", str(out)], cwd=tmp_path, env=clean_env(),
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 2 and "no s8b4p2.cubin there" in r.stderr and "Traceback" not in r.stderr, log(r)


def test_the_layer_bench_runs_every_variant_of_the_shrunk_layer_on_cpu(tmp_path: Path) -> None:
    """bench/bench_moe_layer.py (issue 28's end to end) times on the device; here its --cpu-smoke run builds the
    shrunk Qwen3-MoE layer with transformers' FP8Experts, its bf16 twin and the netra-served model, runs each
    variant once and writes their agreement; transformers' own FP8 paths, which need the `kernels` package,
    are named as failed rather than ending the run."""
    out = tmp_path / "layer.json"
    r = subprocess.run([sys.executable, str(REPO / "bench" / "bench_moe_layer.py"), "--cpu-smoke", "--json", str(out)],
                       cwd=tmp_path, env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                       timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    rows = json.loads(out.read_text())["rows"]
    assert [row["batch"] for row in rows] == [1, 3]
    for row in rows:
        v = row["variants"]
        assert v["torch-bf16 default"]["rel_to_torch_bf16"] == 0.0
        assert 0.0 < v["netra"]["rel_to_torch_bf16"] < 0.2, v  # FP8 activations: a few percent, never garbage
        assert not any("eager_us" in e or "graph_us" in e for e in v.values())  # nothing timed on CPU
