"""bench/trace_moe.py's build, with the real nvcc: the trace build of the MoE chain's two kernels takes the
trace buffer as one more argument and has other machine code, while the release build of the same
sources still has the lock's .text (the phase marks compile to nothing there); a mark that reached the
release build is refused in one line naming the artifact and the header. Timing it needs an sm_90 GPU
(docs/gpu-runs/next/)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tactic_variants as variants
from conftest import REPO, TIMEOUT, clean_env, log

from netra.release import manifests
from netra.runtime import lockfile

SCRIPT = Path("bench") / "trace_moe.py"


def trace(root: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / SCRIPT), *args], cwd=cwd,
                          env=clean_env(PYTHONPATH=str(root)), capture_output=True, text=True, timeout=TIMEOUT,
                          check=False)  # fmt: skip


def test_the_trace_build_differs_and_the_release_build_keeps_the_locks_text(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    r = trace(
        REPO,
        tmp_path,
        "--cpu-smoke",
        "--contract",
        "Qwen3-235B-A22B",
        "--chain",
        "g4r8+d3",
        "--tokens",
        "3",
        "--json",
        str(out),
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    doc = json.loads(out.read_text())
    assert "trace" not in doc, doc  # nothing ran
    locked = {a.name: a.text_sha256 for a in lockfile.read(REPO / "release" / "manifest.lock").artifacts}
    names = [a["artifact"] for a in doc["artifacts"]]
    assert names == [
        "netra_fp8_moe_gate_up_e128_k8_h4096_i1536_g4r8",
        "netra_fp8_moe_down_e128_k8_h4096_i1536_d3",
    ]
    for a in doc["artifacts"]:
        assert a["release_text_sha256"] == locked[a["artifact"]] != a["trace_text_sha256"], a
        assert a["release_is_locked"] is True, a  # the test venv's nvcc is the lock's
    assert [a["block"] for a in doc["artifacts"]] == [128, 96], doc
    # what the GPU run launches with, from the family records: the grids the kernels' headers give at 3
    # tokens (INTER / 16 and HIDDEN / 32 columns, min(EXPERTS, tokens * TOPK) experts) and the template's
    # 76 bytes of arguments, then the trace pointer 8-aligned
    assert [a["grid"] for a in doc["artifacts"]] == [[1536 // 16, 24, 1], [4096 // 32, 24, 1]], doc
    assert [a["kernarg_bytes"] for a in doc["artifacts"]] == [88, 88], doc


def test_a_slot_tile_down_stage_launches_one_row_of_sixteen_column_ctas(tmp_path: Path) -> None:
    """The family record's grid at a SLOT_TILE tactic (d8sh): HIDDEN / 16 CTAs of one row, whatever the
    tokens, where every other tactic launches HIDDEN / 32 columns by the experts hit."""
    for tokens, gate_rows in (("1", 8), ("64", 128)):
        out = tmp_path / f"t{tokens}.json"
        r = trace(REPO, tmp_path, "--cpu-smoke", "--contract", "Qwen3-30B-A3B", "--chain", "g4o+d8sh",
                  "--tokens", tokens, "--json", str(out))  # fmt: skip
        assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
        doc = json.loads(out.read_text())
        assert [a["grid"] for a in doc["artifacts"]] == [[768 // 16, gate_rows, 1], [2048 // 16, 1, 1]], doc
        assert [a["block"] for a in doc["artifacts"]] == [128, 256], doc
        assert all(a["release_is_locked"] for a in doc["artifacts"]), doc


def test_a_tactic_at_its_register_budget_is_traced_with_the_marks_recomputed(tmp_path: Path) -> None:
    """d3ys uses 168 of its 168 registers: with the CTA's slot held across the kernel its trace build
    spills (the build refuses local memory), so the script rebuilds it with NETRA_TRACE_RECOMPUTE; its
    grid is capped at GRID_EXPERTS rows (8 where 64 tokens could hit 128 experts). No built tactic is at
    its budget since d3ys and g4r8y were retired, so a copy of the tree adds them back and locks."""
    root = tmp_path / "tree"
    for d in ("bench", "kernels", "manifests", "netra", "release", "requirements"):
        shutil.copytree(REPO / d, root / d, symlinks=True)
    variants.add_to_manifest(root, manifests.load(REPO), ("g4r8y", "d3ys"))
    locked = subprocess.run([sys.executable, "-m", "netra", "lock", "-q", "--root", str(root)],
                            env=clean_env(PYTHONPATH=str(root)), capture_output=True, text=True,
                            timeout=TIMEOUT, check=False)  # fmt: skip
    assert locked.returncode == 0, log(locked)
    out = tmp_path / "t.json"
    args = ("--cpu-smoke", "--contract", "Qwen3-30B-A3B", "--chain", "g4r8y+d3ys", "--tokens", "64")
    r = trace(root, tmp_path, *args, "--json", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    assert (
        "netra_fp8_moe_down_e128_k8_h2048_i768_d3ys: the trace build spills; built with NETRA_TRACE_RECOMPUTE"
        in (r.stdout)
    ), log(r)
    assert "g4r8y: the trace build spills" not in r.stdout, log(r)
    doc = json.loads(out.read_text())
    assert [a["grid"] for a in doc["artifacts"]] == [[768 // 16, 8, 1], [2048 // 32, 8, 1]], doc
    assert all(a["release_is_locked"] for a in doc["artifacts"]), doc


def test_a_mark_in_the_release_build_is_refused_naming_the_artifact(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    for d in ("bench", "kernels", "manifests", "netra", "release", "requirements"):
        shutil.copytree(REPO / d, root / d, symlinks=True)
    header = root / "kernels" / "cuda" / "include" / "netra_trace.cuh"
    header.write_text(
        header.read_text().replace("#pragma once\n", "#pragma once\n#define NETRA_TRACE 1\n", 1)
    )
    r = trace(root, tmp_path, "--cpu-smoke", "--chain", "g4r8+d3")
    assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "trace_moe: netra_fp8_moe_gate_up_e128_k8_h2048_i768_g4r8: "
    ), log(r)
    assert "not the lock's" in lines[0] and "netra_trace.cuh" in lines[0], log(r)


def test_a_cta_that_never_wrote_a_mark_stops_the_gpu_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the GPU run reads back (slots per CTA, 0 where never written): the earliest, median and latest
    busy CTA per mark from the call's start, CTAs that returned after routing left out; a busy CTA missing
    a mark is a kernel path without it, which must stop the run rather than shrink the statistics."""
    torch = pytest.importorskip("torch")  # the test extra's CPU torch
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import trace_moe

    marks = trace_moe.GATE_MARKS
    t = torch.zeros((4, trace_moe.SLOTS), dtype=torch.int64)
    for cta, start in enumerate((1000, 1100, 1300)):  # three busy CTAs, 10 ns between marks
        t[cta, : len(marks)] = torch.arange(len(marks)) * 10 + start
    t[3, :2] = torch.tensor([1050, 1060])  # routed to no expert: returned before multiplying
    got = trace_moe.summarize("gate/up", t, marks, 1000)
    assert got["entry"] == [0.0, 100.0, 300.0] and got["exit"] == [50.0, 150.0, 350.0], got
    t[1, 4] = 0
    with pytest.raises(trace_moe.TraceError, match=r"^1 of 3 gate/up CTAs never wrote mark 4 \(counter\)"):
        trace_moe.summarize("gate/up", t, marks, 1000)


def test_the_overlap_counts_the_down_ctas_that_entered_before_gate_up_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The count that tells whether the down stage's weights can stream during gate/up: down CTAs whose
    entry precedes the last gate/up CTA's exit (an early-returning gate/up CTA's exit included), of the
    down CTAs that entered; a slot never written (0) is no entry."""
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import trace_moe

    gate = torch.zeros((3, trace_moe.SLOTS), dtype=torch.int64)
    gate[:, 0], gate[:, 5] = torch.tensor([100, 110, 120]), torch.tensor([900, 1500, 300])
    down = torch.zeros((5, trace_moe.SLOTS), dtype=torch.int64)
    down[:4, 0] = torch.tensor([800, 1499, 1500, 2000])  # the fifth CTA never ran
    assert trace_moe.overlap(gate, down) == {"down_ctas": 4, "down_early": 2}
    gate[1, 5] = 700  # gate/up over at 900: only the CTA that entered at 800 overlapped it
    assert trace_moe.overlap(gate, down) == {"down_ctas": 4, "down_early": 1}


def test_a_reader_that_goes_away_ends_the_script_quietly(tmp_path: Path) -> None:
    """As every bench script (bench/_entry.py): `| head` closing stdout ends it with 141 and nothing on
    stderr, not the one-line error a toolchain failure gets."""
    p = subprocess.Popen(
        [sys.executable, str(REPO / SCRIPT), "--cpu-smoke", "--chain", "g4r8+d3"], cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=TIMEOUT) == 141 and err == "", err
