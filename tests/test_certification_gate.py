"""A certification is bound to machine code: lock, build, wheel gate and runtime refuse a table whose
certified .text differs from the locked one, and `netra lock` voids (and says so) a certification whose
kernel changed. Also: certify's ranking is deterministic, and certify refuses to run without a GPU.

The hardware evidence here is synthetic (device "test-device"): these tests exercise the gate's rules,
not a GPU. Real certification runs on the H200 (tests/test_gpu_sm90.py, docs/gpu.md).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import certevidence
import pytest

from netra import certify
from netra.runtime import tables

REPO = Path(__file__).resolve().parents[1]
TABLE = "release/tables/sm_90.json"


def netra(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "netra", *args, "--root", str(root)],
        env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip


def certified(raw: dict[str, Any], *, text: str | None = None) -> dict[str, Any]:
    """The table with its first entry's first candidate accepted on synthetic evidence."""
    t = json.loads(json.dumps(raw))
    t["certification"]["runs"] = [{
        "device": "test-device", "driver": "0", "runtime": "CUDA 13.0", "toolchain": {"flavour": "nvcc", "version": "13.0.88"},
        "clocks": None, "netra": "0.1.0", "seed": 0,
        "protocol": {"rows": [1, 8192], "warmup": 1, "replays": 1, "prefill_rows": 8192},
    }]  # fmt: skip
    t["certification"]["note"] = tables.HARDWARE_NOTE.format(target="sm_90")
    t["entries"][0]["dispatch"] = None  # its row dispatch names tactics whose evidence this replaces
    c = t["entries"][0]["candidates"][0]
    c["maturity"] = "accepted"
    c["evidence"]["hardware"] = certevidence.hardware(text or c["text_sha256"])
    return t


@pytest.fixture
def tree(make_repo_copy: Any) -> Path:
    root = make_repo_copy("certgate")
    return root


def write_table(root: Path, t: dict[str, Any]) -> None:
    certevidence.write_certified(root, t)


def test_lock_keeps_evidence_bound_to_the_locked_machine_code(tree: Path) -> None:
    t = certified(certevidence.read_certified(tree))
    write_table(tree, t)
    r = netra(tree, "lock", "-q")
    assert r.returncode == 0, r.stderr
    kept = certevidence.read_certified(tree)
    assert kept["entries"][0]["candidates"][0]["maturity"] == "accepted"
    assert kept["certification"]["runs"][0]["device"] == "test-device"
    assert netra(tree, "lock", "--check", "-q").returncode == 0


def test_a_changed_instruction_voids_the_certification(tree: Path) -> None:
    t = certified(certevidence.read_certified(tree))
    write_table(tree, t)
    assert netra(tree, "lock", "-q").returncode == 0
    entry = t["entries"][0]
    op = entry["contract"]["op"]
    cand = entry["candidates"][0]["artifact"]
    src = tree / "kernels" / "cuda" / f"{op}.cu"
    # One more instruction in every instantiation of the template: a clock read whose result is used.
    text = src.read_text()
    marker = 'extern "C" __global__'
    assert marker in text
    src.write_text(
        text.replace(
            marker,
            '__device__ __forceinline__ void netra_probe_nop() { asm volatile("nanosleep.u32 0;"); }\n'
            + marker,
            1,
        )
    )
    body = src.read_text()
    i = body.index("{", body.index(marker))
    src.write_text(body[: i + 1] + "\n  netra_probe_nop();" + body[i + 1 :])
    r = netra(tree, "lock", "--check", "-q")
    assert r.returncode == 1 and f"certification void: {cand}: certified with .text" in r.stdout, (
        r.stdout + r.stderr
    )
    r = netra(tree, "build", str(tree / "out"), "-q")
    assert r.returncode == 1 and cand in r.stderr and not (tree / "out").exists()
    r = netra(tree, "lock")
    assert r.returncode == 0 and f"certification void: {cand}" in r.stderr, r.stderr
    voided = certevidence.read_certified(tree)
    for e in voided["entries"]:
        for x in e["candidates"]:
            if e["contract"]["op"] == op:  # every instantiation of the changed template lost its evidence
                assert x["maturity"] == "experiment" and x["evidence"]["hardware"] is None, x["artifact"]
            elif x["evidence"]["hardware"] is not None:
                assert x["evidence"]["hardware"]["run"] < len(voided["certification"]["runs"])


def test_a_table_certified_with_other_machine_code_is_refused_everywhere(tree: Path) -> None:
    raw = certevidence.read_certified(tree)
    t = certified(raw, text="0" * 64)  # evidence names other machine code than the candidate
    with pytest.raises(tables.TableError, match="other machine code"):
        tables.parse_certified(t, TABLE, "sm_90")
    write_table(tree, t)
    r = netra(tree, "lock", "-q")
    assert r.returncode == 1 and "other machine code" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = netra(tree, "build", str(tree / "out"), "-q")
    assert r.returncode == 1 and "other machine code" in r.stderr


def test_a_table_whose_candidate_text_differs_from_the_lock_fails_against_lock(tree: Path) -> None:
    from netra.runtime import lockfile as lock

    locked = lock.read(tree / "release/manifest.lock")
    raw = certevidence.read_certified(tree)
    c = raw["entries"][0]["candidates"][0]
    c["text_sha256"] = "f" * 64  # a table consistent in itself, certified with machine code never locked

    def rebind(node: object) -> None:  # every piece of its evidence names the same never-locked code
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "text_sha256":
                    node[k] = "f" * 64
                else:
                    rebind(v)
        elif isinstance(node, list):
            for v in node:
                rebind(v)

    rebind(c["evidence"])
    t = tables.parse_certified(raw, TABLE, "sm_90")
    wrong = tables.against_lock(t, locked)
    assert any(c["artifact"] in w and "text_sha256" in w for w in wrong)
    del raw["entries"][0]
    wrong = tables.against_lock(tables.parse_certified(raw, TABLE, "sm_90"), locked)
    assert any("missing from the sm_90 table" in w for w in wrong)


def _result(
    tactic: str, timings: dict[int, float], passed: bool = True, memory: str = "clean"
) -> certify.Result:
    cand = type("C", (), {"tactic": tactic})()
    return certify.Result(
        candidate=cand, passed=passed, reason="" if passed else "case x: wrong", max_rel_deviation=0.0,
        tolerance=1.0, cases=1, counts={}, timings=[{"rows": r, "median_us": us} for r, us in timings.items()],
        sanitizer=certevidence.sanitizer("a" * 64, memory),
    )  # fmt: skip


def test_the_committed_table_is_ranked_by_its_own_measurements() -> None:
    """The shipped sm_90 table's order, maturities and dispatch follow from the timings it records."""
    committed = tables.parse_certified(certevidence.read_certified(REPO), "sm_90", "sm_90")
    assert committed.certification == "hardware" and committed.runs
    assert certify.rerank(committed) == committed


def test_a_tactic_added_after_certification_is_ranked_after_the_measured_ones() -> None:
    """`netra lock` appends a tactic added since the class was certified (no evidence, experiment) to its
    measured contract; rerank keeps it there, whatever its place in the table, and ranks the rest."""
    committed = tables.parse_certified(certevidence.read_certified(REPO), "sm_90", "sm_90")
    key, e = next((k, e) for k, e in sorted(committed.entries.items()) if len(e.candidates) >= 3)
    new = dataclasses.replace(
        e.candidates[1], maturity="experiment", evidence={**e.candidates[1].evidence, "hardware": None}
    )
    moved = (e.candidates[0], new, *e.candidates[2:])  # put first among the measured
    table = dataclasses.replace(
        committed, entries={**committed.entries, key: dataclasses.replace(e, candidates=moved, dispatch=())}
    )
    got = certify.rerank(table).entries[key].candidates
    assert got[-1] == new and [c.tactic for c in got[:-1]] == [c.tactic for c in certify.rerank(
        dataclasses.replace(committed, entries={key: dataclasses.replace(
            e, candidates=tuple(c for c in e.candidates if c.tactic != new.tactic))})
    ).entries[key].candidates]  # fmt: skip


def test_ranking_is_deterministic_and_dispatch_follows_the_measurements() -> None:
    decode = _result("dec", {1: 2.0, 16: 2.1, 512: 6.0, 8192: 60.0})
    prefill = _result("pre", {1: 3.0, 16: 3.2, 512: 5.0, 8192: 40.0})
    broken = _result("bad", {}, passed=False)
    ranked, dispatch = certify.rank([broken, decode, prefill])
    assert [r.candidate.tactic for r in ranked] == [
        "pre",
        "dec",
        "bad",
    ]  # accepted by prefill time, rejected last
    assert dispatch == (tables.Dispatch(16, "dec"), tables.Dispatch(None, "pre"))
    assert certify.rank([prefill, broken, decode]) == (ranked, dispatch)  # input order does not matter
    # Within the hysteresis the earlier winner stays: no flip-flopping on noise.
    close = _result("close", {1: 2.05, 16: 2.07, 512: 7.0, 8192: 90.0})  # 1.4% faster at 16 rows: noise
    _, d = certify.rank([decode, close])
    assert d == ()  # dec wins everywhere once noise within 3% is ignored
    only = certify.rank([decode, broken])
    assert only[1] == () and [r.candidate.tactic for r in only[0]] == ["dec", "bad"]
    # Fastest everywhere but not memory-checked (skipped): verified, after the accepted, out of the dispatch;
    # a memory-checker finding rejects a candidate that passed conformance.
    unchecked = _result("fast", {1: 1.0, 16: 1.0, 512: 1.0, 8192: 1.0}, memory="skipped")
    found = _result("leak", {1: 0.5, 16: 0.5, 512: 0.5, 8192: 0.5}, memory="findings")
    ranked2, dispatch2 = certify.rank([unchecked, found, decode, prefill])
    assert [(r.candidate.tactic, r.maturity) for r in ranked2] == [
        ("pre", "accepted"), ("dec", "accepted"), ("fast", "verified"), ("leak", "rejected"),
    ]  # fmt: skip
    assert dispatch2 == dispatch


def test_certify_without_a_gpu_is_one_line_and_writes_nothing(installed_venv: Any, tmp_path: Path) -> None:
    out = tmp_path / "sm_90.json"  # --quick: no memory checker or profiler is looked for (CI has neither)
    r = installed_venv.run("netra", "certify", "--gpu-class", "sm_90", "--out", out, "--quick")
    assert r.returncode == 1 and not out.exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("netra: error:"), r.stderr
    assert "libcuda.so.1" in lines[0] or "netra-kernel[certify]" in lines[0]


def test_certify_refuses_a_statically_certified_class_in_one_line(tmp_path: Path) -> None:
    """The gfx950 path runs through the HIP loader once its tactics declare hardware certification;
    while the class is static, certify says so before looking for a GPU (tested up to the GPU)."""
    out = tmp_path / "gfx950.json"
    r = subprocess.run(
        [sys.executable, "-m", "netra", "certify", "--gpu-class", "gfx950", "--out", str(out)],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 1 and not out.exists()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "certified 'static'" in lines[0] and 'certification = "hardware"' in lines[0]


# -- the evidence file: the records the table summarizes -----------------------------------------------

EVIDENCE = "release/evidence/sm_90.json"


def _refused_join(table: bytes, evidence: bytes | None) -> str:
    with pytest.raises(tables.TableError) as e:
        tables.read_certified(table, evidence, TABLE, EVIDENCE, "sm_90")
    return str(e.value) + " ".join(e.value.details)


def test_the_evidence_file_holds_exactly_the_records_the_table_summarizes() -> None:
    """One record per summary, each saying what its summary says, nothing else; a hardware table has an
    evidence file and a static one none. Each refusal names the evidence file and the artifact."""
    table, evidence = (REPO / TABLE).read_bytes(), (REPO / EVIDENCE).read_bytes()
    whole = tables.read_certified(table, evidence, TABLE, EVIDENCE, "sm_90")
    served = tables.loads(table, TABLE, "sm_90")
    assert [c.hardware for c in whole.candidates()] == [c.hardware for c in served.candidates()]
    measured = [c for c in whole.candidates() if c.evidence["hardware"] is not None]
    assert measured and all(c.evidence["hardware"]["timings"] for c in measured)  # the records, in place
    # a contract added since the last certification run has no evidence yet: an experiment, not served
    assert all(c.maturity == "experiment" for c in whole.candidates() if c.evidence["hardware"] is None)
    assert all("timings" not in (c.evidence["hardware"] or {}) for c in served.candidates())  # the summaries
    ev = json.loads(evidence)
    name = sorted(ev["hardware"])[0]

    assert f"{EVIDENCE}: missing" in _refused_join(table, None)
    changed = json.loads(evidence)
    changed["hardware"][name]["max_rel_deviation"] = 0.0
    assert (
        f"{EVIDENCE}: hardware.{name}: differs from its summary in {TABLE} (max_rel_deviation)"
        in _refused_join(table, json.dumps(changed).encode())
    )
    dropped = json.loads(evidence)
    del dropped["hardware"][name]
    assert f"hardware.{name}: no record, but {TABLE} summarizes one" in _refused_join(
        table, json.dumps(dropped).encode()
    )
    extra = json.loads(evidence)
    extra["hardware"]["netra_rmsnorm_h1_wo0_zz"] = ev["hardware"][name]
    assert "hardware.netra_rmsnorm_h1_wo0_zz: a record" in _refused_join(table, json.dumps(extra).encode())
    # A record's own rules hold where the evidence is read (the table's summary cannot show them).
    untimed = json.loads(evidence)
    untimed["hardware"][name]["timings"] = []
    assert "claims 'accepted' without timings" in _refused_join(table, json.dumps(untimed).encode())
    gfx = REPO / "release/tables/gfx950.json"
    with pytest.raises(tables.TableError, match="which has none"):
        tables.read_certified(gfx.read_bytes(), evidence, str(gfx), "release/evidence/gfx950.json", "gfx950")


def test_lock_refuses_a_missing_or_stray_evidence_file_naming_it(tree: Path) -> None:
    """The evidence of a hardware-certified table is not optional, and no other class has any."""
    ev = tree / EVIDENCE
    records = ev.read_bytes()
    ev.unlink()
    r = netra(tree, "lock", "-q")
    assert (
        r.returncode == 1 and f"{EVIDENCE}: missing" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    ), r.stderr
    assert "git checkout --" in r.stderr
    ev.write_bytes(records)
    (tree / "release/evidence/gfx950.json").write_bytes(records)
    r = netra(tree, "lock", "-q")
    assert r.returncode == 1 and "release/evidence/gfx950.json: no GPU class gfx950" in r.stderr, r.stderr
    (tree / "release/evidence/gfx950.json").unlink()
    assert netra(tree, "lock", "--check", "-q").returncode == 0
