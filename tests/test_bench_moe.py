"""bench/bench_moe.py (issue 28's benchmark) end to end on CPU: its --cpu-smoke run and its bad arguments.

The timed run needs the H200 (docs/performance.md gives the command); here the script runs its tiny
shapes through the data generation, the composite, the correctness guard, Netra's fallback reporting
and the alignment it makes for vLLM's kernel, with the tree's netra and the test venv's torch, and the
JSON it writes is checked field by field.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, TIMEOUT, clean_env, log

SCRIPT = REPO / "bench" / "bench_moe.py"
SMOKE = {"experts": 8, "topk": 2, "hidden": 256, "inter": 128}
IMPLS = ["read_limit", "netra", "vllm", "eager", "compile"]


def bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=tmp_path, env=clean_env(PYTHONPATH=str(REPO)),
                          capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip


def expert_bytes(p: dict[str, int]) -> int:
    h, i = p["hidden"], p["inter"]
    return 3 * h * i + 4 * (2 * i // 128) * (h // 128) + 4 * (h // 128) * (i // 128)


def test_the_cpu_smoke_run_writes_every_row_and_says_why_nothing_is_timed(tmp_path: Path) -> None:
    out = tmp_path / "moe.json"
    r = bench(tmp_path, "--cpu-smoke", "--json", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    doc = json.loads(out.read_text())
    assert doc["bench"] == "bench_moe" and doc["mode"] == "cpu-smoke" and doc["impls"] == IMPLS, doc
    assert doc["complete"] is True and sorted(p.name for p in tmp_path.iterdir()) == ["moe.json"], doc
    env = doc["environment"]
    assert env["gpu"] is None and env["netra_install"]["kind"] == "source", env
    assert env["torch"] and env["python"] and env["netra"] and len(env["commit"]) == 40, env
    rows = doc["rows"]
    assert [(x["tokens"], x["routing"]) for x in rows] == [
        (m, mode) for m in (1, 2, 3) for mode in ("uniform", "same")
    ], rows
    for row in rows:
        assert row["contract"] == "smoke" and row["params"] == SMOKE, row
        assert list(row["impls"]) == sorted(IMPLS), row  # sort_keys
        hit = row["experts_hit"]
        if row["routing"] == "same":
            assert hit == SMOKE["topk"], row
        else:
            assert SMOKE["topk"] <= hit <= min(SMOKE["experts"], SMOKE["topk"] * row["tokens"]), row
        assert row["bytes_read"] == int(hit * expert_bytes(SMOKE)), row
        assert row["layer_copies"] == 2 and row["calls_per_graph"] % row["layer_copies"] == 0, row
        assert row["bytes_per_rotation"] == row["bytes_read"] * row["layer_copies"], row
        im = row["impls"]
        assert all("us" not in e for e in im.values()), im  # nothing is timed on CPU
        eager = im["eager"]
        assert eager["status"] == "checked" and eager["guard"]["deterministic"] is True, eager
        assert eager["guard"]["rel_to_composite"] == 0.0 and "failed" not in eager["guard"], eager
        net = im["netra"]
        assert net["status"] == "skipped" and net["served"]["served"] is False, net
        assert net["served"]["policies_tried"] == ["accepted: device", "experiment: device"], net
        assert "cpu tensor" in net["reason"], net  # the reason nt.fallback_reasons() gave
        (key,) = net["served"]["fallback_reasons"]
        assert key == "fp8_moe(experts=8,topk=2,hidden=256,inter=128)", net
        assert im["vllm"]["status"] == "skipped" and "--vllm-src" in im["vllm"]["reason"], im
        assert im["vllm"]["alignment"].startswith("checked"), im
        assert im["read_limit"]["status"] == im["compile"]["status"] == "skipped", im
    assert r.stdout.count(" M=") == len(rows) and f"wrote {out}" in r.stdout, log(r)


def test_bad_arguments_are_one_line_each_and_nothing_is_written(tmp_path: Path) -> None:
    out = tmp_path / "moe.json"
    checkout = tmp_path / "vllm-checkout"  # vLLM's layout without the wheel's metadata, as a git clone is
    (checkout / "vllm/model_executor/layers/fused_moe").mkdir(parents=True)
    (checkout / "vllm/model_executor/layers/fused_moe/fused_moe.py").write_text("")
    for args, code, want in [
        (["--cpu-smoke", "--tokens", "65"], 2, "--tokens 65: each M must be 1 to 64"),
        (["--cpu-smoke", "--vllm-src", str(checkout)], 2, "no vllm-*.dist-info beside vllm/"),
        (
            ["--cpu-smoke", "--vllm-src", str(tmp_path)],
            2,
            "no vllm/model_executor/layers/fused_moe/fused_moe.py",
        ),
        (["--cpu-smoke", "--bound", "2"], 2, "--bound 2.0: a fraction"),
        (["--cpu-smoke", "--json", str(tmp_path / "no" / "x.json")], 2, "its folder does not exist"),
    ]:
        r = bench(tmp_path, *args)
        assert r.returncode == code and "Traceback" not in r.stderr, log(r)
        errors = [ln for ln in r.stderr.splitlines() if want in ln]
        assert len(errors) == 1, log(r)
    assert not out.exists()


def test_without_a_gpu_the_timed_run_says_so_in_one_line(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():  # there, this would be the real run: docs/performance.md's command
        pytest.skip("a CUDA device is visible: the timed run is not a CPU test")
    out = tmp_path / "moe.json"
    r = bench(tmp_path, "--json", str(out))
    assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
    assert (
        r.stderr.strip() == "bench_moe: no CUDA device visible to torch (--cpu-smoke runs the CPU check)"
    ), log(r)
    assert not out.exists()


@pytest.mark.gpu
def test_on_the_h200_the_timed_rows_run_and_l2_does_not_serve_the_read_limit(tmp_path: Path) -> None:
    """The smallest timed run against the installed wheel (`tools/gpu-session tests WHEELHOUSE OUT
    tests/test_bench_moe.py`): Qwen3-30B-A3B at one token, both routings, no vLLM, no torch.compile.
    One token's 8 experts are 37.7 MB: read from HBM that is about 10.5 us on the H200
    (docs/gpu-runs/moe-explore-2026-12-04); under 6 us would mean L2 served the rotation."""
    out = tmp_path / "moe.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--contracts", "Qwen3-30B-A3B", "--tokens", "1", "--rounds", "3",
                        "--no-compile", "--json", str(out)], cwd=tmp_path, env=clean_env(), capture_output=True,
                       text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    doc = json.loads(out.read_text())
    assert doc["complete"] is True and doc["mode"] == "gpu" and doc["environment"]["gpu"], doc["environment"]
    assert [(x["tokens"], x["routing"]) for x in doc["rows"]] == [(1, "uniform"), (1, "same")], doc["rows"]
    for row in doc["rows"]:
        im = row["impls"]
        assert row["experts_hit"] == 8 and row["bytes_per_rotation"] >= 3 * 50 * 2**20, row  # past L2, 3x
        assert im["read_limit"]["status"] == "timed" and 6 < im["read_limit"]["us"] < 40, im["read_limit"]
        assert im["eager"]["status"] == "timed" and im["eager"]["us"] > im["read_limit"]["us"], im["eager"]
        net = im["netra"]
        if net["status"] == "timed":  # served at some policy: guarded, then timed in strict mode
            assert net["guard"]["deterministic"] is True and net["guard"]["rel_to_composite"] <= 0.05, net
            assert net["served"]["policy"] in ("accepted", "experiment") and net["us"] > 0, net
        else:
            assert net["status"] == "skipped" and net["reason"].startswith("not served: "), net
        assert im["vllm"]["status"] == "skipped" and im["compile"]["status"] == "skipped", im
