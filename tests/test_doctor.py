"""`netra doctor` on the real wheel, pip-installed in a fresh venv (read-only: the shared session venv).
Damage scenarios are in test_runtime_integrity.py, which has a venv of its own to damage."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import TIMEOUT, clean_env
from venvtools import json_of as _code
from venvtools import run_py as _run

from netra import targets
from netra.cli import doctor

# Driving the installed venv: tests/venvtools.py


def _sysfs(root: Path, versions: list[int]) -> Path:
    """KFD topology nodes in the kernel's format (node 0 is the CPU)."""
    for nid, v in enumerate([0, *versions]):
        d = root / str(nid)
        d.mkdir(parents=True)
        (d / "properties").write_text(
            f"simd_count {0 if v == 0 else 256}\ngfx_target_version {v}\nvendor_id 4098\n"
        )
    return root


# ---------------------------------------------------------------------------------------------------


def test_doctor_passes_on_a_fresh_install_and_reports_everything(py: str, pkg: Path) -> None:
    human = _run(py, "-m", "netra", "doctor")
    js = _run(py, "-m", "netra", "doctor", "--json")
    assert human.returncode == 0 and js.returncode == 0, human.stdout + human.stderr
    report = json.loads(js.stdout)
    data = pkg / "_data"
    members = _code(
        py,
        """
        import json, sys
        from netra.runtime import layout
        from netra.runtime import lockfile as lock
        print(json.dumps([m.data_path for m in layout.members(lock.read(sys.argv[1]))]))
        """,
        str(data / "manifest.lock"),
    )
    table = json.loads((data / "tables" / "gfx950.json").read_text())
    counts = dict.fromkeys(("rejected", "experiment", "verified", "accepted"), 0)
    for e in table["entries"]:
        for c in e["candidates"]:
            counts[c["maturity"]] += 1

    assert report["ok"] and report["intact"] and report["problems"] == []
    assert report["install"]["kind"] == "wheel" and report["install"]["root"] == str(data)
    assert report["files"]["checked"] == len(members)
    assert report["files"]["bytes"] == sum((data / m).stat().st_size for m in members)
    assert report["lock"]["sha256"] == hashlib.sha256((data / "manifest.lock").read_bytes()).hexdigest()
    assert report["lock"]["bound_to_build_record"] is True and report["lock"]["record"] == "match"
    gfx = report["certified_classes"]["gfx950"]
    assert gfx["maturity"] == counts and gfx["contracts"] == len(table["entries"])
    assert gfx["certification"] == "static" and gfx["loader"] == "hip"
    assert set(report["runtime_libraries"]) == {"hip", "cuda"}
    assert report["gpu_detection"], "every detection source says what it found"
    text = human.stdout
    assert f"netra-kernel {report['netra_version']} (wheel install" in text
    assert report["lock"]["sha256"] in text and "all intact" in text and text.rstrip().endswith("result: OK")

    jsonschema = pytest.importorskip("jsonschema")
    from netra.cli import schemas

    assert (pkg / "schemas" / "doctor.schema.json").read_bytes() == (
        schemas.FOLDER / "doctor.schema.json"
    ).read_bytes()
    from referencing import Registry, Resource

    registry = Registry()  # the host and needs are env.schema.json's ($ref by $id)
    for name in schemas.names():
        registry = registry.with_resource(f"https://netra-kernel/schemas/{name}.schema.json",
                                          Resource.from_contents(schemas.load(name)))  # fmt: skip
    schema = schemas.load("doctor")  # the registry's vendors, loaders and detection sources filled in
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema, registry=registry).validate(report)
    assert report["host"]["packages"]["netra-kernel"] == report["netra_version"]
    assert sorted(report["needs"]) == sorted(report["certified_classes"])


def test_require_gpu_needs_a_gpu_of_a_certified_class(py: str, tmp_path: Path) -> None:
    cases = {
        "gfx950": (_sysfs(tmp_path / "a", [90500]), True),
        "gfx942": (_sysfs(tmp_path / "b", [90402]), True),
        "gfx942-optional": (tmp_path / "b", False),
        "none": (_sysfs(tmp_path / "c", []), True),
    }
    res = {}
    for name, (nodes, require) in cases.items():
        argv = ["-m", "netra", "doctor", "--json", "--sysfs-nodes", str(nodes)] + (
            ["--require-gpu"] if require else []
        )
        r = _run(py, *argv)
        res[name] = (r.returncode, json.loads(r.stdout))
    # gfx950 is in the install, but its evidence is static: nothing is accepted, so the default policy
    # serves nothing there and --require-gpu says so (an H200 passes it: tests/test_gpu_sm90.py).
    rc, rep = res["gfx950"]
    assert rc == 1 and rep["intact"] and not rep["ok"]
    amd = [g for g in rep["gpus"] if g["vendor"] == "amd"]
    assert [(g["class"], g["certified"], g["serves_by_default"], g["source"]) for g in amd] == [
        ("gfx950", True, False, "kfd-sysfs")
    ]
    assert amd[0]["maturity"] == rep["certified_classes"]["gfx950"]["maturity"]
    assert "gfx950 (0 accepted)" in rep["problems"][-1]
    rc, rep = res["gfx942"]
    assert rc == 1 and rep["intact"] and not rep["ok"]
    assert "gfx942" in rep["problems"][-1] and "gfx950 (0 accepted)" in rep["problems"][-1]
    rc, rep = res["gfx942-optional"]
    assert rc == 0 and rep["ok"] and any(g["class"] == "gfx942" and not g["certified"] for g in rep["gpus"])
    rc, rep = res["none"]
    assert rc == 1 and "no GPU on this host has accepted kernels" in rep["problems"][-1]


def test_expect_lock_proves_the_install_is_the_release_meant(py: str, pkg: Path) -> None:
    """--expect-lock SHA256 (the release's published lock digest): the one anchor outside the install.
    The right digest passes and says so; any other is a one-line problem with a stable code; a
    malformed digest and --expect-wheel (an install cannot know its wheel's hash) are usage errors."""
    digest = hashlib.sha256((pkg / "_data" / "manifest.lock").read_bytes()).hexdigest()
    ok = _run(py, "-m", "netra", "doctor", "--json", "--expect-lock", "SHA256:" + digest.upper())
    rep = json.loads(ok.stdout)
    assert ok.returncode == 0 and rep["ok"], ok.stdout + ok.stderr
    assert rep["expect_lock"] == {"expected": digest, "found": digest, "code": "lock_match"}
    human = _run(py, "-m", "netra", "doctor", "--expect-lock", digest)
    assert human.returncode == 0 and "the expected digest (--expect-lock)" in human.stdout, human.stdout

    other = hashlib.sha256(b"another release's lock").hexdigest()
    bad = _run(py, "-m", "netra", "doctor", "--json", "--expect-lock", other)
    rep = json.loads(bad.stdout)
    assert bad.returncode == 1 and rep["intact"] and not rep["ok"], bad.stdout
    assert rep["expect_lock"] == {"expected": other, "found": digest, "code": "lock_differs"}
    (line,) = rep["problems"]
    assert line.startswith("lock_differs (--expect-lock): ") and other in line and digest in line, line
    human = _run(py, "-m", "netra", "doctor", "--expect-lock", other)
    assert human.returncode == 1 and f"problem: {line}" in human.stdout.splitlines(), human.stdout
    assert human.stdout.rstrip().endswith("result: FAILED (1 problem(s))"), human.stdout
    assert [c for c in doctor.LOCK_CODES] == schemas_codes(), "the schema's codes are doctor's"

    for argv, says in (
        (["--expect-lock", "abc"], "--expect-lock 'abc': not a sha256 (64 hexadecimal digits)"),
        (["--expect-wheel", digest], "an install cannot know the sha256 of the wheel it came from"),
    ):
        r = _run(py, "-m", "netra", "doctor", *argv)
        assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr
        (err,) = r.stderr.strip().splitlines()
        assert err.startswith("netra: error: ") and says in err and "--expect-lock" in err, err


def schemas_codes() -> list[str]:
    from netra.cli import schemas

    expect = schemas.load("doctor")["properties"]["expect_lock"]["oneOf"][1]
    return list(expect["properties"]["code"]["enum"])


def test_doctor_fast_text_reader_agrees_with_pyelftools_on_every_code_object(py: str, pkg: Path) -> None:
    """netra.core.elf's struct reader (the runtime's and doctor's fast path) and pyelftools (the reference)
    find the same machine code in every shipped code object of both classes."""
    out = _code(
        py,
        """
        import hashlib, io, json, sys
        from pathlib import Path
        from elftools.elf.elffile import ELFFile
        from netra.core import elf
        from netra.runtime import lockfile as lock
        data = Path(sys.argv[1])
        lk = lock.read(data / "manifest.lock")
        res = []
        for a in lk.artifacts:
            blob = (data / a.file).read_bytes()
            section = ".text" if a.target == "gfx950" else f".text.{a.name}"
            fast = hashlib.sha256(elf.section_bytes(blob, section)).hexdigest()
            ref = hashlib.sha256(ELFFile(io.BytesIO(blob)).get_section_by_name(section).data()).hexdigest()
            res.append([a.file, a.target, fast, ref, a.text_sha256])
        print(json.dumps(res))
        """,
        str(pkg / "_data"),
    )
    assert {t for _, t, *_ in out} == set(targets.names())  # every registered class
    for file, _, fast, reference, locked in out:
        assert fast == reference == locked, file


def _doctor_in(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m netra doctor` run inside a source tree: that checkout, kind source."""
    return subprocess.run([sys.executable, "-m", "netra", "doctor", *args], cwd=tree, capture_output=True,
                          text=True, timeout=TIMEOUT, check=False, env=clean_env())  # fmt: skip


def test_one_cause_is_one_fix_line_however_many_files_it_breaks(make_repo_copy: Any) -> None:
    """A checkout before `netra build`: every code object is missing, for one cause, with one fix. The
    human report names a few, counts the rest and prints the fix once; --json groups all under it."""
    tree = make_repo_copy("one-cause")
    js = _doctor_in(tree, "--json")
    rep = json.loads(js.stdout)
    (fix,) = rep["fixes"]
    assert js.returncode == 1 and fix.endswith("-m netra build build/kernels"), rep["fixes"]
    (cause,) = rep["causes"]
    assert cause["fix"] == fix and len(cause["problems"]) == len(rep["problems"]) == len(
        rep["files"]["missing"]
    )
    assert len(rep["problems"]) > doctor.SHOWN
    human = _doctor_in(tree)
    assert human.returncode == 1 and human.stdout.count(fix) == 1, human.stdout
    listed = [ln for ln in human.stdout.splitlines() if ln.startswith("problem: ")]
    assert len(listed) == doctor.SHOWN - 1, human.stdout
    more = len(rep["problems"]) - (doctor.SHOWN - 2)
    assert listed[-1].startswith(f"problem: ... and {more} more of the same cause"), human.stdout
    assert human.stdout.rstrip().endswith(f"result: FAILED ({len(rep['problems'])} problem(s))")

    # A second cause (an edited model manifest: restore it) is a second fix, each problem naming its step.
    manifest = next((tree / "manifests" / "models").glob("*.toml"))
    manifest.write_bytes(manifest.read_bytes() + b"\n")
    rep = json.loads(_doctor_in(tree, "--json").stdout)
    assert [c["fix"] for c in rep["causes"]] == rep["fixes"] and len(rep["fixes"]) == 2, rep["fixes"]
    human = _doctor_in(tree).stdout
    assert all(human.count(f) == 1 for f in rep["fixes"]), human
    assert f"manifests/models/{manifest.name}" in human and "; fix 1\n" in human and "; fix 2\n" in human, (
        human
    )
    assert "  1. " + rep["fixes"][0] in human and "  2. " + rep["fixes"][1] in human, human
