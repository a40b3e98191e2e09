"""bench/bench_operator_path.py (issue 31's benchmark) on CPU: its --cpu-smoke run, its guard, its bad arguments.

The timed run needs the H200 (docs/performance.md gives the command); here the script builds every variant
(functional, functional-kept, out=, out= at each placement) for real contracts with the tree's netra and the
test venv's torch, where netra.torch falls back to its composite: strict mode must refuse each call, every
variant's outputs must equal the reference byte for byte, and certify's record is read from the tree's
certified table. A variant whose outputs are corrupted must stop the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TIMEOUT, clean_env, log

SCRIPT = REPO / "bench" / "bench_operator_path.py"
RMS = "rmsnorm(hidden=4096,weight_offset=0)"
FUSED = "fused_add_rmsnorm(hidden=4096,weight_offset=0)"
QUANT = "fp8_group_quant(hidden=4096,group=128)"
PLACED = ["out@0", "out@256", "out@4096", "out@65536", "out@2097664"]
VARIANTS = ["functional", "functional-kept", "out", "out-reused", *PLACED, "raw"]


def bench(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp_path,
                          env=env or clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)  # fmt: skip


def test_the_cpu_smoke_run_checks_every_variant_against_the_reference(tmp_path: Path) -> None:
    out = tmp_path / "op.json"
    r = bench(tmp_path, "--cpu-smoke", "--contracts", RMS, QUANT, FUSED, "--json", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    doc = json.loads(out.read_text())
    assert doc["bench"] == "bench_operator_path" and doc["mode"] == "cpu-smoke" and doc["complete"] is True, (
        doc
    )
    assert doc["variants"] == [*VARIANTS, "copy", "record"], doc
    assert sorted(p.name for p in tmp_path.iterdir()) == ["op.json"], doc
    env = doc["environment"]
    assert env["gpu"] is None and env["netra_install"]["kind"] == "source" and len(env["commit"]) == 40, env
    runs = json.loads((REPO / "release" / "tables" / "sm_90.json").read_text())["certification"]["runs"]
    (certify_device,) = {run["device"] for run in runs}
    rows = doc["rows"]
    assert [(x["contract"], x["rows"]) for x in rows] == [
        (k, n) for k in (RMS, QUANT, FUSED) for n in (1, 16)
    ]
    for row in rows:
        assert row["strict"] == "refused" and row["code"] == "device", row  # strict mode refuses a fallback
        assert row["reference"] == ("functional call" if row["contract"] == FUSED else "composite"), row
        assert row["copies"] == 2 and row["calls_per_graph"] % row["copies"] == 0, row
        im = row["impls"]
        assert all("us" not in e for e in im.values()), im  # nothing is timed on CPU
        assert all(im[v]["status"] == "checked" for v in VARIANTS[:-1]), im
        assert im["raw"]["status"] == im["copy"]["status"] == "skipped", im
        rec = row["record"]  # certify's medians, from the tree's certified table and its evidence
        assert rec["status"] == "recorded" and rec["us"] > 0 and rec["timing"]["rows"] == row["rows"], rec
        # the card certify timed it on (the table's runs, read here from the file), never this CPU run's
        assert rec["device"] == certify_device and rec["same_device"] is False, rec
    width = {RMS: 4096 * 2, QUANT: 4096 * 2, FUSED: 2 * 4096 * 2}
    written = {RMS: 4096 * 2, QUANT: 4096 + 4096 // 128 * 4, FUSED: 2 * 4096 * 2}
    for row in rows:
        assert row["bytes_read"] == width[row["contract"]] * row["rows"] + (
            0 if row["contract"] == QUANT else 8192
        )
        assert row["bytes_written"] == written[row["contract"]] * row["rows"], row
    assert r.stdout.count(" record ") == len(rows) and f"wrote {out}" in r.stdout, log(r)
    assert r.stdout.count(f"on {certify_device}, not this one: not comparable") == len(rows), log(r)


def test_a_variant_whose_outputs_differ_stops_the_run_in_one_line(tmp_path: Path) -> None:
    """The guard is not vacuous: one flipped byte in any variant's outputs is the run's end."""
    for key, variant, against in [
        (RMS, "functional", "composite"),
        (RMS, "functional-kept", "composite"),
        (QUANT, "out", "composite"),
        (QUANT, "out-reused", "composite"),
        (QUANT, "out@2097664", "composite"),
        (FUSED, "out@256", "functional call"),
    ]:
        out = tmp_path / "op.json"
        r = bench(tmp_path, "--cpu-smoke", "--contracts", key, "--corrupt", variant, "--json", str(out))
        assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
        want = (
            f"bench_operator_path: {key} at 1 rows: {variant}'s outputs (copy 0) differ from the {against}'s"
        )
        assert r.stderr.strip().splitlines()[-1] == want, log(r)
        assert not out.exists()


def test_bad_arguments_are_one_line_each_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "op.json"
    for args, want in [
        (["--rows", "0"], "--rows 0: each must be at least 1"),
        (["--graph-calls", "0"], "--rounds and --graph-calls must be at least 1"),
        (["--contracts", "rmsnorm(hidden=4096"], "--contracts rmsnorm(hidden=4096: "),
        (
            ["--contracts", "fp8_moe_down(experts=128,topk=8,hidden=2048,inter=768)"],
            "is not an operator this bench",
        ),
        (["--json", str(tmp_path / "no" / "x.json")], "its folder does not exist"),
    ]:
        r = bench(tmp_path, "--cpu-smoke", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, log(r)
        assert len([ln for ln in r.stderr.splitlines() if want in ln]) == 1, log(r)
    r = bench(
        tmp_path, "--cpu-smoke", "--contracts", "rmsnorm(hidden=4000,weight_offset=0)", "--json", str(out)
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
    assert r.stderr.strip().endswith(
        "not in the install's certified sm_90 table (`netra catalog` lists its keys)"
    )
    assert not out.exists()


def test_without_a_gpu_the_timed_run_says_so_in_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():  # there, this would be the real run: docs/performance.md's command
        pytest.skip("a CUDA device is visible: the timed run is not a CPU test")
    r = bench(tmp_path, "--json", str(tmp_path / "op.json"))
    assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
    assert r.stderr.strip() == (
        "bench_operator_path: no CUDA device visible to torch (--cpu-smoke runs the CPU check)"
    ), log(r)


@pytest.mark.gpu
def test_on_the_h200_every_variant_is_timed_past_l2_beside_the_copy_limit(tmp_path: Path) -> None:
    """The smallest timed run against the installed wheel (`tools/gpu-session tests WHEELHOUSE OUT
    tests/test_bench_operator_path.py`): rmsnorm 4096 at 8192 rows, 3 rounds. 8192 rows read and write
    128 MiB: past L2 with 2 copies; the copy limit is then HBM's, under 4.8 TB/s (about 28 us)."""
    out = tmp_path / "op.json"
    r = bench(
        tmp_path, "--contracts", RMS, "--rows", "8192", "--rounds", "3", "--json", str(out), env=clean_env()
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    doc = json.loads(out.read_text())
    assert doc["complete"] is True and doc["mode"] == "gpu" and doc["environment"]["gpu"], doc["environment"]
    (row,) = doc["rows"]
    assert row["strict"] == "served" and row["reference"] == "raw launch" and row["tactic"], row
    assert row["bytes_per_rotation"] > 3 * 50 * 2**20, row
    im = row["impls"]
    assert im["copy"]["us"] > 64 * 2**20 * 2 / 4.8e6, im["copy"]  # not served from L2
    for v in VARIANTS:
        assert im[v]["status"] == "timed" and im[v]["us"] > 0 and len(im[v]["samples_us"]) == 3, im[v]
        assert 0 < im[v]["of_copy_limit"] < 1.2, im[v]
    assert im["out-reused"]["placement"]["distinct_output_addresses"] == 1, im["out-reused"]
    assert im["out"]["placement"]["distinct_output_addresses"] == row["copies"], im["out"]
    for v in PLACED:
        offset = int(v.removeprefix("out@"))
        assert im[v]["placement"]["outs_mod_2mib"] == [offset % (2 * 2**20)], im[v]["placement"]
    assert row["record"]["status"] == "recorded" and row["record"]["tactic"] == row["tactic"], row["record"]


def test_a_record_faster_than_this_runs_copy_limit_is_named_as_another_cards() -> None:
    """On the H200 of 2026-12-07 certify's record of rmsnorm 4096 x 32768 (131.15 us, another H200's) was
    below that run's copy limit (137.59): the record row gives its fraction of this run's limit and says
    such a record was timed elsewhere; a record slower than the limit is only given its fraction."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_operator_path", SCRIPT)
    assert spec is not None and spec.loader is not None
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        b = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(b)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    rec: dict[str, object] = {"contract": RMS, "rows": 32768,
                              "impls": {v: {"us": 139.96, "of_copy_limit": 0.983} for v in VARIANTS}}  # fmt: skip
    rec["impls"]["copy"] = {"us": 137.59, "best": "cs/8xSM"}  # type: ignore[index]
    rec["record"] = {
        "status": "recorded",
        "us": 131.15,
        "tactic": "t128s",
        "same_device": True,
        "device": "H200",
    }
    last = b.line(rec)[-1]
    assert "104.9% of this run's copy: faster than it, so timed on another card or day" in last, last
    rec["record"]["us"] = 140.0  # type: ignore[index]
    last = b.line(rec)[-1]
    assert "98.3% of this run's copy)" in last and "faster" not in last, last
