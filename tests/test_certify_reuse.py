"""`netra certify --reuse TABLE` on CPU: which contracts a reused certified table carries and which are
certified again, and the table the two make, on the committed sm_90 table and evidence and this tree's
catalog (a source install). The merge is netra.certify.reuse.carry and netra.certify.certified.table;
the measurements of the contracts certified again are made up (device "test-device" in run 0), the
carried ones are the committed H200 evidence, bit for bit. The run on a GPU: tests/test_cli.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import certevidence
import pytest
from conftest import REPO

from netra.certify import certified, ranking, reuse
from netra.errors import CertificationError
from netra.runtime import tables

TABLE = REPO / tables.table_path("sm_90")
EVIDENCE = REPO / tables.evidence_path("sm_90")


def _catalog() -> Any:
    from netra.runtime import installed, open_catalog

    return open_catalog("sm_90", install=installed.Install(kind="source", root=REPO))


def _results(entries: list[tables.Entry]) -> dict[str, list[ranking.Result]]:
    """Made-up clean measurements of every candidate of these entries (as certify would return them): the
    first candidate fastest at 1 row, the last at 64, every time positive however many candidates."""
    out = {}
    for e in entries:
        out[e.key] = []
        n = len(e.candidates)
        for j, c in enumerate(e.candidates):
            r = ranking.Result(c, True, "", 1e-3, 4e-3, 7, {},
                               [{"rows": rows, "median_us": 10.0 + (j if rows < 64 else n - j)} for rows in (1, 64)])  # fmt: skip
            r.sanitizer = certevidence.sanitizer(c.text_sha256)
            r.profile = certevidence.profile(c.text_sha256)
            out[e.key].append(r)
    return out


def _device() -> str:
    return str(reuse.read(TABLE, "sm_90").table.runs[0]["device"])


def _renumbered(entry: dict[str, Any], by: int) -> dict[str, Any]:
    e = json.loads(json.dumps(entry))
    for c in e["candidates"]:
        c["evidence"]["hardware"]["run"] += by
    return e


def _written_reads_back_and_is_locked(t: tables.Table, out: Path) -> None:
    """Written as its two files, the table reads back as itself through the runtime's reader and,
    committed, is what `netra lock` writes from it (`netra lock --check` finds it up to date)."""
    from netra.release import manifests, tablegen
    from netra.runtime import lockfile

    certified.write(t, out)
    ev = certified.evidence_out(out)
    assert tables.read_certified(out.read_bytes(), ev.read_bytes(), str(out), str(ev), "sm_90") == t
    tree = {tables.table_path("sm_90"): out.read_bytes(), tables.evidence_path("sm_90"): ev.read_bytes()}
    files = tablegen.tables_of(manifests.load(REPO), lockfile.read(REPO / lockfile.LOCK_PATH), tree).files
    assert files[tables.table_path("sm_90")] == out.read_text()
    assert files[tables.evidence_path("sm_90")] == ev.read_text()


def test_unchanged_contracts_are_carried_bit_for_bit_and_the_rest_certified_again(tmp_path: Path) -> None:
    """The committed table reused by this tree's install: every contract whose candidates all carry
    hardware evidence for the install's machine code is carried as committed (its runs after this one);
    a contract with a tactic added since (no evidence yet) is certified again, every candidate of it."""
    cat = _catalog()
    reused = reuse.read(TABLE, "sm_90")  # its evidence found in release/evidence/, as a tree commits it
    assert reused.evidence == EVIDENCE
    committed = certevidence.read_certified(REPO)
    unmeasured = {e["key"] for e in committed["entries"]
                  if any(c["evidence"]["hardware"] is None for c in e["candidates"])}  # fmt: skip
    carried = reuse.carry(cat.table, reused, _device())
    assert set(carried.rerun) == unmeasured and set(carried.entries) == set(cat.table.entries) - unmeasured
    assert carried.entries and carried.runs == reused.table.runs
    t = certified.table(
        cat, certevidence.run_info(), _results([cat.table.entries[k] for k in carried.rerun]), carried=carried
    )
    assert t.runs == (certevidence.run_info(), *reused.table.runs)
    assert certified.carried(t) == sorted(carried.entries)
    made = tables.to_json(t)
    assert [e["key"] for e in made["entries"]] == [e["key"] for e in committed["entries"]]
    for e, was in zip(made["entries"], committed["entries"], strict=True):
        runs = {c["evidence"]["hardware"]["run"] for c in e["candidates"]}
        if e["key"] in unmeasured:
            assert runs == {0} and {c["artifact"] for c in e["candidates"]} == {
                c["artifact"] for c in was["candidates"]
            }
        else:
            assert e == _renumbered(was, 1), e["key"]  # evidence, maturity, order and dispatch as committed
    _written_reads_back_and_is_locked(t, tmp_path / "sm_90.json")


def test_only_certifies_what_it_names_and_a_second_run_reusing_that_table_certifies_the_rest(
    tmp_path: Path,
) -> None:
    """--only banks a part of a certification: of the contracts the reused table cannot carry, those it
    names (an op family here) are certified and the others held as that table has them (some
    candidates without evidence), so the table written is what `netra lock` writes from it; reused in
    turn, it carries what the first run certified and leaves exactly the held contracts to certify."""
    from netra.certify import run

    cat = _catalog()
    reused = reuse.read(TABLE, "sm_90")
    rerun = reuse.carry(cat.table, reused, _device()).rerun
    assert len({cat.table.entries[k].op for k in rerun}) > 1  # else nothing would be held
    op = cat.table.entries[rerun[0]].op
    asked = run.selected(cat.table, (op,))
    assert asked == {k for k, e in cat.table.entries.items() if e.op == op}
    carried = reuse.carry(cat.table, reused, _device(), asked)
    assert set(carried.rerun) == set(rerun) & asked and set(carried.held) == set(rerun) - asked
    committed = {e.key: e for e in reused.table.entries.values()}
    here = {**certevidence.run_info(), "device": _device()}  # the runs of one device, as --reuse needs
    t = certified.table(cat, here, _results([cat.table.entries[k] for k in carried.rerun]), carried=carried)
    assert certified.held(t) == sorted(carried.held) and certified.carried(t) == sorted(carried.entries)
    for k in carried.held:  # as committed: order, maturity, dispatch; the evidence's runs renumbered
        assert [(c.artifact, c.maturity) for c in t.entries[k].candidates] == [
            (c.artifact, c.maturity) for c in committed[k].candidates
        ] and t.entries[k].dispatch == committed[k].dispatch, k
        assert any(c.hardware is None for c in t.entries[k].candidates), k
    for k in carried.rerun:
        assert {c.hardware.run for c in t.entries[k].candidates if c.hardware} == {0}, k
    out = tmp_path / "sm_90.json"
    _written_reads_back_and_is_locked(t, out)
    # The second run, reusing the first's table, certifies exactly what the first held.
    assert set(reuse.carry(cat.table, reuse.read(out, "sm_90"), _device()).rerun) == set(carried.held)
    # A name of no contract, and a held contract the reused table lacks, are refused before any launch.
    with pytest.raises(CertificationError, match="--only rmsnorm_v9: no contract or op family") as e:
        run.selected(cat.table, (op, "rmsnorm_v9"))
    assert "netra catalog --gpu-class sm_90" in str(e.value.hint)
    key = sorted(carried.held)[0]
    fewer = dataclasses.replace(
        reused.table, entries={k: v for k, v in reused.table.entries.items() if k != key}
    )
    with pytest.raises(CertificationError, match=f"--only: {re.escape(key)} is not in"):
        reuse.carry(cat.table, dataclasses.replace(reused, table=fewer), _device(), asked)


def _replace(table: tables.Table, key: str, **changes: Any) -> tables.Table:
    return dataclasses.replace(
        table, entries={**table.entries, key: dataclasses.replace(table.entries[key], **changes)}
    )


def test_a_changed_candidate_or_a_new_contract_is_certified_again() -> None:
    cat = _catalog()
    reused = reuse.read(TABLE, "sm_90")
    device = _device()
    base = set(reuse.carry(cat.table, reused, device).rerun)
    key = next(
        k for k in sorted(cat.table.entries) if k not in base and len(cat.table.entries[k].candidates) > 1
    )
    e = cat.table.entries[key]
    first, *rest = e.candidates
    launch = dataclasses.replace(first.launch, block=(first.launch.block[0] * 2, 1, 1))
    installs = {
        "its .text changed": _replace(cat.table, key, candidates=(dataclasses.replace(first, text_sha256="f" * 64), *rest)),
        "launched otherwise, same .text": _replace(cat.table, key, candidates=(dataclasses.replace(first, launch=launch), *rest)),
        "a candidate removed": _replace(cat.table, key, candidates=tuple(rest)),
    }  # fmt: skip
    for why, installed in installs.items():
        got = reuse.carry(installed, reused, device)
        assert set(got.rerun) == base | {key}, why
        assert key not in got.entries and len(got.entries) == len(cat.table.entries) - len(base) - 1, why
    fewer = dataclasses.replace(
        reused.table, entries={k: v for k, v in reused.table.entries.items() if k != key}
    )
    got = reuse.carry(cat.table, dataclasses.replace(reused, table=fewer), device)
    assert set(got.rerun) == base | {key}, "a contract new to the install"


def test_another_device_is_refused_unless_across_devices_and_then_each_contract_keeps_its_device() -> None:
    cat, reused = _catalog(), reuse.read(TABLE, "sm_90")
    with pytest.raises(CertificationError) as e:
        reuse.carry(cat.table, reused, "NVIDIA H100 80GB HBM3")
    assert str(TABLE) in e.value.message and "certified on NVIDIA H200" in e.value.message
    assert "without --reuse" in str(e.value.hint) and "--across-devices" in str(e.value.hint)
    here = reuse.carry(cat.table, reused, _device())
    there = reuse.carry(cat.table, reused, "NVIDIA H100 80GB HBM3", across_devices=True)
    assert there == here, "what is carried and what is certified do not depend on the device"
    assert there.devices == (_device(),), "the carried entries keep the H200's runs"


def _certify(tmp_path: Path, reused: Path | None, *more: str) -> subprocess.CompletedProcess[str]:
    """This tree's `netra certify --reuse`, on a machine without a GPU or the vendor's tools: the reused
    table (and --only's names) are read before anything else."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": str(Path(sys.executable).parent),
           "CUDA_HOME": str(tmp_path / "none"), "CUDA_PATH": str(tmp_path / "none")}  # fmt: skip
    reusing = ["--reuse", str(reused)] if reused is not None else []
    return subprocess.run([sys.executable, "-m", "netra", "certify", "--gpu-class", "sm_90", "--out",
                           str(tmp_path / "out.json"), *reusing, *more], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=120)  # fmt: skip


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Reused files that are refused, with what the error says."""
    cut = tmp_path / "cut.json"
    cut.write_bytes(TABLE.read_bytes()[:1000])
    (tmp_path / "cut.evidence.json").write_bytes(EVIDENCE.read_bytes())
    lone = tmp_path / "lone.json"  # no evidence beside it
    lone.write_bytes(TABLE.read_bytes())
    other = tmp_path / "other.json"  # one summary differs from its record
    other.write_bytes(TABLE.read_bytes())
    ev = json.loads(EVIDENCE.read_text())
    name = sorted(ev["hardware"])[0]
    ev["hardware"][name]["max_rel_deviation"] = 0.0
    (tmp_path / "other.evidence.json").write_text(tables.dumps(ev))
    return {
        "not JSON": (cut, f"--reuse {cut}: not valid JSON"),
        "no evidence": (lone, f"--reuse {tmp_path / 'lone.evidence.json'}: missing"),
        "evidence disagrees": (other, f"hardware.{name}: differs from its summary"),
        "another class": (REPO / tables.table_path("sm_100"), "the sm_100 table, not the sm_90 table"),
    }


def _refused(tmp_path: Path, r: subprocess.CompletedProcess[str], starts: str, says: str, why: str) -> None:
    """certify stopped with exit 1 and one line (what, with a hint), no traceback, nothing written."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, (why, r.stderr)
    assert lines[0].startswith(starts) and says in lines[0] and "hint: " in lines[0], (why, lines)
    assert "Traceback" not in r.stderr and not (tmp_path / "out.json").exists(), why


def test_a_bad_or_foreign_reused_table_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    for why, (path, says) in _bad_files(tmp_path).items():
        with pytest.raises(CertificationError, match="--reuse"):
            reuse.read(path, "sm_90")
        _refused(tmp_path, _certify(tmp_path, path), "netra: error: --reuse ", says, why)


def test_only_without_reuse_or_naming_nothing_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    for why, (reused, more, says) in {
        "no --reuse": (None, ("--only", "fp8_moe_down"), "--only needs --reuse"),
        "--across-devices, no --reuse": (None, ("--across-devices",), "--across-devices needs --reuse"),
        "no such contract": (TABLE, ("--only", "rmsnorm_v9"), "--only rmsnorm_v9: no contract or op family"),
    }.items():
        _refused(tmp_path, _certify(tmp_path, reused, *more), "netra: error: ", says, why)


def test_netra_lock_keeps_the_order_of_the_runs_and_drops_those_no_evidence_refers_to() -> None:
    """A table of three runs whose first entry refers to the last and no candidate to the middle one:
    `netra lock`'s merge keeps the first and the last in that order, renumbered (the first stays run 0,
    as certify's own run must before the runs it carried)."""
    from netra.release import manifests, tablegen
    from netra.runtime import lockfile

    raw = certevidence.read_certified(REPO)
    first = raw["certification"]["runs"][0]
    runs = [first, {**first, "seed": 1}, {**first, "seed": 2}]
    raw["certification"]["runs"] = runs
    for c in raw["entries"][0]["candidates"]:
        if c["evidence"]["hardware"] is not None:
            c["evidence"]["hardware"]["run"] = 2
    existing = tables.parse_certified(raw, "sm_90.json", "sm_90")
    lock = lockfile.read(REPO / lockfile.LOCK_PATH)
    merged, _ = tablegen.merge(tablegen.skeleton(manifests.load(REPO), "sm_90", lock), existing)
    assert merged["certification"]["runs"] == [runs[0], runs[2]]
    for i, e in enumerate(merged["entries"]):
        got = {
            c["evidence"]["hardware"]["run"] for c in e["candidates"] if c["evidence"]["hardware"] is not None
        }
        assert got == ({1} if i == 0 else {0}) or not got, e["key"]
