"""Certification's memory-checker and profiler evidence, on the CPU: the table format (schema and the
strict reader) accepts and refuses it, it is bound to the candidate's .text, a finding rejects, skipped
or unavailable evidence is never served by default, ranking is reproduced from the evidence alone, the
tools' output is read and attributed to the right candidate (on samples written from the tools'
documented formats), a missing tool is one line, and the host-side pipeline judges exactly as the judge.

The GPU runs of the same tools are tests/test_gpu_sanitizer.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import certevidence
import pytest
from conftest import REPO

from netra.certify import plan as planfile
from netra.certify import ranking, sanitizer
from netra.errors import CertificationError, ToolOutputError
from netra.runtime import catalog, tables
from netra.targets import nvidia_tools


def _table(memory: str, maturity: str, **over: Any) -> dict[str, Any]:
    """The tree's sm_90 table, its first candidate with hardware evidence of this memory-checker result."""
    t = certevidence.read_certified(REPO)
    t["certification"] = {
        "kind": "hardware",
        "note": tables.HARDWARE_NOTE.format(target="sm_90"),
        "runs": [certevidence.run_info()],
    }
    t["entries"][0]["dispatch"] = None  # its row dispatch may name the candidate this demotes
    c = t["entries"][0]["candidates"][0]
    c["maturity"] = maturity
    c["evidence"]["hardware"] = certevidence.hardware(c["text_sha256"], memory=memory, **over)
    return t


def _refused(t: dict[str, Any]) -> str:
    with pytest.raises(tables.TableError) as e:
        tables.parse_certified(t, "sm_90.json", "sm_90")
    return str(e.value) + " ".join(e.value.details)


class _Files:
    """The JSON schemas of the two files a certified table is written to, applied to those files."""

    def __init__(self) -> None:
        jsonschema = pytest.importorskip("jsonschema")
        from netra.cli import schemas

        self.table = jsonschema.Draft202012Validator(schemas.load("table"))
        self.evidence = jsonschema.Draft202012Validator(schemas.load("evidence"))

    def validate(self, certified: dict[str, Any]) -> None:
        table, evidence = tables.split(certified)
        self.table.validate(table)
        if evidence is not None:
            self.evidence.validate(evidence)

    def is_valid(self, certified: dict[str, Any]) -> bool:
        try:
            table, evidence = tables.split(certified)
        except (KeyError, TypeError):  # a record without the fields its summary takes: no file holds it
            return False
        return self.table.is_valid(table) and (evidence is None or self.evidence.is_valid(evidence))


def _validator() -> _Files:
    return _Files()


# -- the table format -------------------------------------------------------------------------------


def test_clean_evidence_is_accepted_by_the_schema_and_the_reader() -> None:
    t = _table("clean", "accepted")
    _validator().validate(t)
    parsed = tables.parse_certified(t, "sm_90.json", "sm_90")
    c = next(iter(parsed.entries.values())).candidates[0]
    assert c.maturity == "accepted" and c.hardware is not None
    assert (c.hardware.sanitizer, c.hardware.profile) == ("clean", "measured")


@pytest.mark.parametrize("memory", ["skipped", "unavailable", "findings"])
def test_accepted_needs_clean_memory_checkers_in_schema_and_reader(memory: str) -> None:
    t = _table(memory, "accepted")
    assert not _validator().is_valid(t)
    assert "claims 'accepted' but its memory-checker evidence is" in _refused(t)


def test_a_finding_rejects_and_says_which_tool_found_what() -> None:
    assert "maturity 'verified' but its hardware evidence gives 'rejected'" in _refused(
        _table("findings", "verified")
    )
    t = _table("findings", "rejected")
    parsed = tables.parse_certified(t, "sm_90.json", "sm_90")
    c = next(iter(parsed.entries.values())).candidates[0]
    assert c.maturity == "rejected" and c.hardware is not None and c.hardware.sanitizer == "findings"
    t["entries"][0]["candidates"][0]["evidence"]["hardware"]["reason"] = ""
    assert "a memory-checker finding rejects the candidate" in _refused(t)


@pytest.mark.parametrize("memory", ["skipped", "unavailable"])
def test_skipped_or_unavailable_is_at_most_verified_and_never_served_by_default(memory: str) -> None:
    t = _table(memory, "verified")
    _validator().validate(t)
    parsed = tables.parse_certified(t, "sm_90.json", "sm_90")
    entry = next(iter(parsed.entries.values()))
    assert entry.candidates[0].maturity == "verified"
    # that candidate alone (the certified table's others are accepted): the default does not serve it,
    # a caller who opts into verified gets it
    assert catalog.choose(entry.candidates[:1], catalog.DEFAULT_POLICY) is None
    assert catalog.choose(entry.candidates[:1], "verified") is entry.candidates[0]
    # a passing candidate with clean checks must be accepted; verified needs evidence that is not clean
    assert "maturity 'verified' but its hardware evidence gives 'accepted'" in _refused(
        _table("clean", "verified")
    )


def test_tool_evidence_of_other_machine_code_is_refused() -> None:
    for part in ("sanitizer", "profile"):
        t = _table("clean", "accepted")
        t["entries"][0]["candidates"][0]["evidence"]["hardware"][part]["text_sha256"] = "0" * 64
        assert f"hardware.{part}: was measured on other machine code" in _refused(t)


def test_memory_checker_results_must_agree_with_their_checks() -> None:
    t = _table("clean", "accepted")
    sz = t["entries"][0]["candidates"][0]["evidence"]["hardware"]["sanitizer"]
    sz["checks"][2].update(result="findings", findings=2, first="Uninitialized __global__ memory read")
    assert "result 'clean' but its checks give 'findings'" in _refused(t)
    t = _table("clean", "accepted")
    t["entries"][0]["candidates"][0]["evidence"]["hardware"]["sanitizer"]["checks"][0]["version"] = None
    assert "names its tool and version" in _refused(t)
    t = _table("skipped", "verified")
    t["entries"][0]["candidates"][0]["evidence"]["hardware"]["sanitizer"]["note"] = ""
    assert "a 'skipped' result says why" in _refused(t)
    t = _table("clean", "accepted")
    t["entries"][0]["candidates"][0]["evidence"]["hardware"]["profile"]["dram_throughput_pct"] = None
    assert "a 'measured' profile lacks dram_throughput_pct" in _refused(t)
    t = _table("clean", "accepted")
    del t["entries"][0]["candidates"][0]["evidence"]["hardware"]["sanitizer"]
    assert not _validator().is_valid(t) and "missing required field 'sanitizer'" in _refused(t)


# -- ranking ----------------------------------------------------------------------------------------


def _results(cat: Any) -> dict[str, list[ranking.Result]]:
    """Every candidate of the table with made-up measurements and, per contract, every kind of evidence."""
    out: dict[str, list[ranking.Result]] = {}
    for i, (key, e) in enumerate(sorted(cat.table.entries.items())):
        rs = []
        for j, c in enumerate(e.candidates):
            kind = ("clean", "clean", "findings", "skipped", "failed")[(i + j) % 5]
            passed = kind != "failed"
            timings = [
                {"rows": r, "median_us": 10.0 + j + (r / 1000) * ((j * 7 + i) % 5)} for r in (1, 16, 8192)
            ]
            r = ranking.Result(c, passed, "" if passed else "case x (rows 1): wrong", 1e-3 if passed else None,
                               4e-3, 7, {}, timings if passed else [])  # fmt: skip
            r.sanitizer = certevidence.sanitizer(c.text_sha256, "skipped" if kind == "failed" else kind)
            r.profile = certevidence.profile(c.text_sha256, "measured" if passed else "skipped")
            if kind == "findings":
                r.reason = sanitizer.reason(r.sanitizer)
            rs.append(r)
        out[key] = rs
    return out


def test_certify_table_is_reproduced_by_rerank_and_maturity_follows_the_evidence() -> None:
    from netra.certify import certified
    from netra.runtime import open_catalog

    cat = open_catalog("sm_90", install=_source_install())
    t = certified.table(cat, certevidence.run_info(), _results(cat))
    assert isinstance(t, tables.Table) and ranking.rerank(t) == t
    seen = set()
    for e in t.entries.values():
        dispatch = {d.tactic for d in e.dispatch}
        for c in e.candidates:
            hw = c.evidence["hardware"]
            assert c.hardware == tables.HardwareEvidence.of(hw)
            want = tables.maturity_of(hw["passed"], hw["sanitizer"]["result"])
            assert c.maturity == want
            seen.add(want)
            if hw["sanitizer"]["result"] == "findings":
                assert hw["reason"].startswith("compute-sanitizer memcheck: 1 finding; first:")
            if c.tactic in dispatch:
                assert c.maturity == "accepted"
    assert seen == {"accepted", "verified", "rejected"}


def test_certify_writes_the_table_and_evidence_a_lock_reads_back(tmp_path: Path) -> None:
    """The typed certified table, written as its two files, reads back as the same table."""
    from netra.certify import certified
    from netra.runtime import open_catalog

    cat = open_catalog("sm_90", install=_source_install())
    t = certified.table(cat, certevidence.run_info(), _results(cat))
    out = tmp_path / "sm_90.json"
    certified.write(t, out)
    ev = certified.evidence_out(out)
    assert tables.read_certified(out.read_bytes(), ev.read_bytes(), str(out), str(ev), "sm_90") == t
    assert out.read_text() == tables.dumps(tables.split(tables.to_json(t))[0])


def test_a_table_that_cannot_be_written_leaves_the_previous_two_files_as_they_were(tmp_path: Path) -> None:
    """The table and its evidence are written both or neither: with the table's path a folder, the
    previous evidence beside it was once deleted (written first, then unlinked when the table failed),
    and the error named a temporary file. Now nothing changes and the error names the table's path."""
    from netra.certify import certified

    cat = open_catalog_source()
    t = certified.table(cat, certevidence.run_info(), _results(cat))
    out = tmp_path / "sm_90.json"
    out.mkdir()
    ev = certified.evidence_out(out)
    ev.write_text("the previous evidence")
    with pytest.raises(IsADirectoryError) as e:
        certified.write(t, out)
    assert e.value.filename == str(out)
    assert ev.read_text() == "the previous evidence" and list(out.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sm_90.evidence.json", "sm_90.json"]
    with pytest.raises(FileNotFoundError) as e:  # a folder that does not exist: named as the file asked for
        certified.write(t, tmp_path / "nope" / "sm_90.json")
    assert e.value.filename == str(tmp_path / "nope" / "sm_90.evidence.json")


def open_catalog_source() -> Any:
    from netra.runtime import open_catalog

    return open_catalog("sm_90", install=_source_install())


def _source_install() -> Any:
    from netra.runtime import installed

    return installed.Install(kind="source", root=REPO)


def test_certify_records_skipped_and_unavailable_tools_as_such() -> None:
    from netra import targets
    from netra.certify import tools

    vendor = targets.get("sm_90").vendor
    c = next(iter(sorted(_source_catalog().table.entries.items())))[1].candidates[0]
    r = ranking.Result(c, True, "", 1e-3, 4e-3, 7, {}, [{"rows": 8192, "median_us": 10.0}])
    skipped = tools.Tools(vendor.name, list(vendor.memory_checkers()), True, True)
    tools.evidence(r, skipped, {}, {})
    assert r.sanitizer is not None and r.sanitizer["result"] == "skipped"
    assert [x["check"] for x in r.sanitizer["checks"]] == ["memcheck", "racecheck", "initcheck", "synccheck"]
    assert r.profile is not None and r.profile["result"] == "skipped" and r.maturity == "verified"
    none = tools.Tools("somevendor", [], False, False)  # a vendor with no memory checker or profiler
    tools.evidence(r, none, {}, {})
    assert r.sanitizer["result"] == "unavailable" and "somevendor" in r.sanitizer["note"]
    assert r.profile["result"] == "unavailable" and r.maturity == "verified"
    ran = tools.Tools(vendor.name, list(vendor.memory_checkers()), False, True)
    ran.checkers = [(ch, Path("/x"), "2025.3.1.0") for ch in vendor.memory_checkers()]
    found = {ch.check: {c.artifact: sanitizer.Checked(c.artifact, c.text_sha256, 0, "", 7)}
             for ch in vendor.memory_checkers()}  # fmt: skip
    found["initcheck"][c.artifact] = sanitizer.Checked(c.artifact, c.text_sha256, 3, "Uninitialized read", 7)
    tools.evidence(r, ran, found, {})
    assert r.sanitizer["result"] == "findings" and r.maturity == "rejected"
    assert r.reason == "compute-sanitizer initcheck: 3 findings; first: Uninitialized read"
    other = {k: dict(v) for k, v in found.items()}
    other["memcheck"][c.artifact] = sanitizer.Checked(c.artifact, "f" * 64, 0, "", 7)
    with pytest.raises(CertificationError, match="ran machine code"):
        tools.evidence(r, ran, other, {})


def _source_catalog() -> Any:
    from netra.runtime import open_catalog

    return open_catalog("sm_90", install=_source_install())


# -- compute-sanitizer's output, read and attributed ------------------------------------------------

A, B, C = "netra_rmsnorm_h128_wo0_w8", "netra_rmsnorm_h128_wo0_t128s", "netra_rmsnorm_h128_wo0_t128"
SHA = "ab" * 32


def _items() -> list[planfile.Item]:
    launch = planfile.Launch(3, {}, {}, {})
    return [planfile.Item(a, (launch, launch)) for a in (A, B, C)]


def _worker(i: int, artifact: str, body: str = "", *, fault: str = "") -> str:
    end = planfile.end_fault(i, artifact, fault) if fault else planfile.end_ok(i, artifact, 2)
    return f"{planfile.begin(i, artifact, SHA)}\n{body}{end}\n"


# Samples written from compute-sanitizer's documented output (its manual's examples of a memcheck
# error, a racecheck analysis report, an initcheck and a synccheck report, a CUDA API error and the
# summaries), with our kernels' symbols: the layout is the manual's, the values are made up.
MEMCHECK_B = f"""\
========= Invalid __global__ write of size 4 bytes
=========     at {B}+0x160
=========     by thread (3,0,0) in block (1,0,0)
=========     Address 0x7f6510c00101 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f6510c00000 of size 256 bytes
=========
"""
RACECHECK_C = f"""\
========= Error: Race reported between Write access at {C}+0xf0
=========     and Read access at {C}+0x280 [4 hazards]
=========
"""
INITCHECK_A = f"""\
========= Uninitialized __global__ memory read of size 4 bytes
=========     at {A}+0x70
=========     by thread (31,0,0) in block (1,0,0)
=========     Address 0x7f3c7ec000fc
=========
"""
SYNCCHECK_B = f"""\
========= Barrier error detected. Divergent thread(s) in warp
=========     at {B}+0xf0
=========     by thread (37,0,0) in block (0,0,0)
=========
"""
API_ERROR = """\
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to "unspecified launch failure" on CUDA API call to cuCtxSynchronize.
=========
"""


def _settle(checker: str, text: str, rc: int) -> sanitizer.Settled:
    tool = next(c for c in nvidia_tools.CHECKERS if c.check == checker)
    return sanitizer.settle(tool.read(text), rc, _items(), [A, B, C], check=checker, log="LOG")


def _findings(s: sanitizer.Settled) -> dict[str, int]:
    return {r.artifact: r.findings for r in s.results}


def test_clean_run_is_clean_for_every_candidate() -> None:
    out = (
        "========= COMPUTE-SANITIZER\n"
        + _worker(0, A)
        + _worker(1, B)
        + _worker(2, C)
        + planfile.done(3)
        + "\n"
    )
    s = _settle("memcheck", out + "========= ERROR SUMMARY: 0 errors\n", 0)
    assert _findings(s) == {A: 0, B: 0, C: 0} and s.next_start is None
    assert all(r.launches == 2 and r.text_sha256 == SHA and r.first == "" for r in s.results)
    s = _settle(
        "racecheck", out + "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", 0
    )
    assert _findings(s) == {A: 0, B: 0, C: 0}


@pytest.mark.parametrize(
    ("checker", "report", "owner", "summary"),
    [
        ("memcheck", MEMCHECK_B, B, "========= ERROR SUMMARY: 1 error"),
        (
            "racecheck",
            RACECHECK_C,
            C,
            "========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)",
        ),
        ("initcheck", INITCHECK_A, A, "========= ERROR SUMMARY: 1 error"),
        ("synccheck", SYNCCHECK_B, B, "========= ERROR SUMMARY: 1 error"),
    ],
)
def test_a_report_is_attributed_to_the_candidate_it_names(
    checker: str, report: str, owner: str, summary: str
) -> None:
    # printed after the next candidate began (the tool's frontend prints on its own): the name decides
    out = _worker(0, A) + _worker(1, B) + report + _worker(2, C) + planfile.done(3) + "\n" + summary + "\n"
    s = _settle(checker, "========= COMPUTE-SANITIZER\n" + out, sanitizer.EXIT_FINDINGS)
    assert _findings(s) == {x: int(x == owner) for x in (A, B, C)}
    first = next(r.first for r in s.results if r.artifact == owner)
    assert first.startswith(report.splitlines()[0].removeprefix("========= ")) and owner in first


def test_a_report_naming_no_kernel_belongs_to_the_launch_it_was_printed_in() -> None:
    out = _worker(0, A) + _worker(1, B, API_ERROR) + _worker(2, C) + planfile.done(3) + "\n"
    s = _settle("memcheck", out + "========= ERROR SUMMARY: 1 error\n", sanitizer.EXIT_FINDINGS)
    assert _findings(s) == {A: 0, B: 1, C: 0}


def test_racecheck_warnings_are_findings_whatever_the_exit_status_and_tool_warnings_are_not() -> None:
    warning = RACECHECK_C.replace("Error: Race", "Warning: Race")
    out = _worker(0, A) + _worker(1, B) + _worker(2, C, warning) + planfile.done(3) + "\n"
    summary = "========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warnings)\n"
    for rc in (0, sanitizer.EXIT_FINDINGS):  # the manual does not say whether a warning sets --error-exitcode
        assert _findings(_settle("racecheck", out + summary, rc)) == {A: 0, B: 0, C: 1}
    note = "========= Warning: the tool's own remark about this host\n"
    clean = note + _worker(0, A) + _worker(1, B) + _worker(2, C) + planfile.done(3) + "\n"
    assert _findings(_settle("memcheck", clean + "========= ERROR SUMMARY: 0 errors\n", 0)) == {
        A: 0,
        B: 0,
        C: 0,
    }


def test_memchecks_dropped_records_count_is_a_note_after_a_summary_of_errors_only() -> None:
    # As memcheck printed it on the H200 for certify's deliberately bad preflight launch: the device-side
    # error buffer overflowed, the launch carries the tool's warning, the count follows the summary.
    overflow = "========= Warning: Error buffer overflow has been detected. Some records have been dropped\n"
    dropped = "=========\n========= 16128 errors were skipped (error buffer overflow).\n"
    out = _worker(0, A) + _worker(1, B, MEMCHECK_B + overflow) + _worker(2, C) + planfile.done(3) + "\n"
    s = _settle("memcheck", out + "========= ERROR SUMMARY: 2 errors\n" + dropped, sanitizer.EXIT_FINDINGS)
    assert _findings(s) == {A: 0, B: 2, C: 0}
    clean = _worker(0, A) + _worker(1, B) + _worker(2, C) + planfile.done(3) + "\n"
    for text in (clean + "========= ERROR SUMMARY: 0 errors\n" + dropped, dropped + clean):
        with pytest.raises(CertificationError, match="outside every launch: 16128 errors were skipped"):
            _settle("memcheck", text + "========= ERROR SUMMARY: 0 errors\n", 0)


def test_what_cannot_be_attributed_or_trusted_fails_the_run() -> None:
    done = planfile.done(3) + "\n"
    every = _worker(0, A) + _worker(1, B) + _worker(2, C)
    bad = {
        "outside every launch": every + API_ERROR + done + "========= ERROR SUMMARY: 1 error\n",
        "no summary": every + done,
        "counted 3 errors but printed 1": every + MEMCHECK_B + done + "========= ERROR SUMMARY: 3 errors\n",
        "died while launching": _worker(0, A)
        + planfile.begin(1, B, SHA)
        + "\n========= ERROR SUMMARY: 0 errors\n",
        "tool error": "========= Error: Target application terminated before first instrumented API call\n"
        "========= ERROR SUMMARY: 0 errors\n",
    }
    for what, text in bad.items():
        with pytest.raises(CertificationError) as e:
            _settle("memcheck", text, 0)
        assert e.value.message.startswith("memcheck: ") and "LOG" in e.value.message, what
    with pytest.raises(CertificationError, match="exit status 0 with a summary of 1 errors"):
        _settle("memcheck", every + MEMCHECK_B + done + "========= ERROR SUMMARY: 1 error\n", 0)
    with pytest.raises(CertificationError, match="exit status 86 with a summary of 0"):
        _settle("memcheck", every + done + "========= ERROR SUMMARY: 0 errors\n", sanitizer.EXIT_FINDINGS)


def test_a_lost_context_continues_in_a_new_worker_after_the_candidate() -> None:
    out = _worker(0, A) + _worker(1, B, MEMCHECK_B, fault="cuCtxSynchronize: CUDA_ERROR_LAUNCH_FAILED (719)")
    s = _settle("memcheck", out + "========= ERROR SUMMARY: 1 error\n", 3)
    assert _findings(s) == {A: 0, B: 1} and s.next_start == 2
    # a device error the tool did not report is still a finding of that candidate, never clean
    s = _settle(
        "memcheck", _worker(0, A, fault="illegal instruction") + "========= ERROR SUMMARY: 0 errors\n", 3
    )
    assert _findings(s) == {A: 1} and s.results[0].first.startswith("the launch failed under memcheck")


def test_past_the_print_limit_the_candidates_after_the_last_report_run_again() -> None:
    tool = nvidia_tools.CHECKERS[0]
    out = _worker(0, A) + _worker(1, B, MEMCHECK_B * 2) + _worker(2, C) + planfile.done(3) + "\n"
    s = sanitizer.settle(tool.read(out + "========= ERROR SUMMARY: 900 errors\n"), sanitizer.EXIT_FINDINGS,
                         _items(), [A, B, C], check="memcheck", log="LOG", print_limit=2)  # fmt: skip
    assert _findings(s) == {A: 0, B: 2} and s.next_start == 2


def test_the_checkers_are_run_with_the_options_docs_certify_names() -> None:
    memcheck = nvidia_tools.CHECKERS[0]
    argv = memcheck.argv(Path("/cs"), ["python", "-m", "w"], error_exitcode=86, print_limit=1000)
    assert argv[:3] == ["/cs", "--tool", "memcheck"] and argv[-4:] == ["--", "python", "-m", "w"]
    for opt in (
        "--error-exitcode",
        "--print-limit",
        "--destroy-on-device-error",
        "--padding",
        "--show-backtrace",
    ):
        assert opt in argv
    assert [c.check for c in nvidia_tools.CHECKERS] == ["memcheck", "racecheck", "initcheck", "synccheck"]
    assert {c.check: c.canary for c in nvidia_tools.CHECKERS} == {
        "memcheck": "overrun", "racecheck": None, "initcheck": "uninitialized", "synccheck": None,
    }  # fmt: skip


# -- ncu's raw page, read ---------------------------------------------------------------------------

# Written from ncu's documented raw CSV (`ncu --import r.ncu-rep --csv --page raw`): a header row, a
# units row (units as ncu picks them per column), one row per profiled launch; values made up.
NCU_RAW = f'''==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes_read.sum","dram__bytes_write.sum","gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum"
"","","","","","","","","","","","Mbyte","Gbyte","%","us"
"0","4242","python3.12","127.0.0.1","{A}","1","13","(128, 1, 1)","(8192, 1, 1)","0","9.0","33.56","0.03","52.31","14.56"
"1","4242","python3.12","127.0.0.1","{B}","1","13","(128, 1, 1)","(8192, 1, 1)","0","9.0","1,033.10","1.05","91.20","516.00"
'''


def test_ncu_raw_page_is_read_in_base_units() -> None:
    rows = nvidia_tools.PROFILER.read(NCU_RAW)
    assert [r.kernel for r in rows] == [A, B]
    assert rows[0].dram_read_bytes == 33_560_000 and rows[0].dram_write_bytes == 30_000_000
    assert rows[0].dram_throughput_pct == pytest.approx(52.31) and rows[0].duration_us == pytest.approx(14.56)
    assert rows[1].dram_read_bytes == 1_033_100_000 and rows[1].duration_us == pytest.approx(516.0)
    bad = NCU_RAW.replace('"52.31"', '"n/a"')
    with pytest.raises(ToolOutputError, match=r"gpu__dram_throughput.*'n/a'"):
        nvidia_tools.PROFILER.read(bad)
    with pytest.raises(ToolOutputError, match=r"lacks the columns dram__bytes_read\.sum"):
        nvidia_tools.PROFILER.read(NCU_RAW.replace("dram__bytes_read.sum", "other"))
    argv = nvidia_tools.PROFILER.argv(Path("/ncu"), ["py"], symbols=[B, A], report=Path("/o/profile.ncu-rep"))
    assert "--clock-control" in argv and argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--kernel-name") + 1] == f"regex:^({'|'.join(sorted([A, B]))})$"
    assert argv[argv.index("--metrics") + 1].split(",") == list(nvidia_tools.METRICS.values())


# -- the worker's plan --------------------------------------------------------------------------------


def test_the_plan_is_read_back_through_its_schema(tmp_path: Path) -> None:
    launch = planfile.Launch(5, {"eps": 1e-6}, {"x": ("/s/in.x.npy", True)}, {"y": ("uint16", (5, 128))})
    p = planfile.Plan("sm_90", "wheel", "/site/netra/_data", (planfile.Item(A, (launch,), extra_rows=64),))
    p.write(tmp_path / "plan.json")
    assert planfile.read(tmp_path / "plan.json") == p
    raw = json.loads((tmp_path / "plan.json").read_text())
    raw["items"][0]["launches"][0]["outputs"]["y"]["dtype"] = "float64"
    (tmp_path / "plan.json").write_text(json.dumps(raw))
    with pytest.raises(CertificationError, match="float64"):
        planfile.read(tmp_path / "plan.json")
    assert planfile.marker(planfile.end_fault(3, A, "cuLaunch:\n bad")) == planfile.Marker(
        "end", 3, A, status="fault", message="cuLaunch: bad"
    )


# -- missing tools ----------------------------------------------------------------------------------


@pytest.mark.skipif(
    Path("/usr/local/cuda/bin/compute-sanitizer").exists(), reason="this machine has compute-sanitizer"
)
def test_certify_without_the_tools_is_one_line_naming_the_tool_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "sm_90.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": str(Path(sys.executable).parent),
           "CUDA_HOME": str(tmp_path / "none"), "CUDA_PATH": str(tmp_path / "none")}  # fmt: skip

    def certify(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "netra", "certify", "--gpu-class", "sm_90", "--out", str(out),
                               *extra], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)  # fmt: skip

    for extra, tool, skip in (((), "compute-sanitizer (memcheck", "--skip-sanitizer"),
                              (("--skip-sanitizer",), "ncu (the profiler", "--skip-profile")):  # fmt: skip
        r = certify(*extra)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and not out.exists(), r.stderr
        assert len(lines) == 1 and lines[0].startswith(f"netra: error: {tool}"), r.stderr
        assert "is not found" in lines[0] and "CUDA_HOME" in lines[0] and skip in lines[0]


# -- the host-side pipeline judges as the judge does ------------------------------------------------


@pytest.mark.parametrize(
    "key",
    [
        "rmsnorm(hidden=128,weight_offset=0)",
        "silu_mul_fp8_quant(inter=768,group=128)",
        "fp8_moe_gate_up(experts=8,topk=2,hidden=256,inter=128)",
        "fp8_moe_down(experts=8,topk=2,hidden=256,inter=128)",
    ],
)
def test_judging_from_files_equals_judging_in_process(key: str, tmp_path: Path) -> None:
    import numpy as np

    from netra.certify import conformance, measure, prepare
    from netra.certify import reference as ref

    op, rest = key.split("(")
    params = {k: int(v) for k, v in (x.split("=") for x in rest.rstrip(")").split(","))}
    made = prepare.cases(op, params, [1, 4], 0, str(tmp_path))
    if op.startswith("fp8_moe"):  # the experts every case shares are written once
        w = "w13" if op == "fp8_moe_gate_up" else "w2"
        assert len({cf.inputs[w][0] for cf in made.cases.values()}) == 1
    for cf in made.cases.values():
        for a, b in prepare.spans(cf):
            prepare.expected(op, params, cf, a, b)
    for rpb, keys in made.by_rows_per_block.items():
        cfs = [made.cases[k] for k in keys]
        assert [(c.name, c.rows) for c in conformance.cases(op, params, rows_per_block=rpb)] == [
            (c.name, c.rows) for c in cfs
        ]
        for spoil in (False, True):
            outs, fences, direct = [], [], []
            for j, cf in enumerate(cfs):
                case = cf.load()
                exp = conformance.expected(op, params, case)
                for k, a in cf.expected.items():
                    assert np.array_equal(prepare.load(a), exp[k], equal_nan=True), (cf.key, k)
                if op == "rmsnorm":
                    got = {"y": ref.f64_to_bf16_rne(exp["y"])}
                elif op == "fp8_moe_gate_up":  # pair-indexed outputs: topk rows per token
                    got = {"hq": exp["hq"].copy(), "hs": exp["hs"].astype(np.float32)}
                elif op == "fp8_moe_down":
                    got = {"out": exp["out"].copy()}
                else:
                    got = {"q": exp["q"].copy(), "scales": exp["scales"].astype(np.float32)}
                if spoil and j == len(cfs) - 1:
                    first = next(iter(got))
                    got[first] = got[first].copy()
                    got[first].flat[7] ^= 0x11
                files = {}
                for name, arr in got.items():
                    f = tmp_path / f"out.{rpb}.{spoil}.{j}.{name}.bin"
                    f.write_bytes(np.ascontiguousarray(arr).tobytes())
                    files[name] = (str(f), arr.dtype.name, arr.shape)
                outs.append(files)
                fences.append(["y: bytes after the output were written"] if spoil and j == 0 else [])
                direct.append((case, conformance.judge(op, params, case, got, exp), fences[-1]))
            via_files = prepare.judge(op, params, cfs, outs, fences)
            assert via_files == measure.aggregate(direct)
            assert via_files[0] is (not spoil)
