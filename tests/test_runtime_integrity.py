"""Damage to an installed wheel: doctor names it and the runtime refuses it, from a fresh venv.

One fresh venv (venv_factory + the real wheel) for this module; each test damages one thing and
restores it before the next. Everything runs through that venv's python in a subprocess.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.elffile import ELFFile  # the test's own ELF reader, independent of netra's
from venvtools import json_of as _code
from venvtools import package_dir
from venvtools import python_of as _python
from venvtools import run_py as _run

# Driving the installed venv: tests/venvtools.py


@pytest.fixture(scope="module")
def venv(venv_factory: Any, built_wheel: Any) -> tuple[str, Path]:
    """A fresh venv of our own: these tests damage it (and restore it after each test)."""
    py = _python(venv_factory(built_wheel))
    pkg = package_dir(py)
    return py, pkg


def _reinstalls_the_wheel(hint: str, wheel: Path) -> bool:
    """The runtime's fix: that venv's pip puts back the very wheel it was installed from (direct_url.json)."""
    return "-m pip install --force-reinstall --no-deps" in hint and hint.endswith(str(wheel))


@contextmanager
def damaged(path: Path, change: str, offset: int = 0) -> Iterator[None]:
    """Delete a file, flip one byte of it, or append to it; restore it exactly afterwards."""
    original = path.read_bytes()
    try:
        if change == "delete":
            path.unlink()
        elif change == "flip":
            b = bytearray(original)
            b[offset] ^= 0x01
            path.write_bytes(bytes(b))
        elif change == "append":
            path.write_bytes(original + b"\n# appended\n")
        yield
    finally:
        path.write_bytes(original)


RUNTIME = """
    import json, sys
    from netra.errors import NetraError
    from netra.runtime import open_catalog
    out = {}
    try:
        cat = open_catalog("gfx950")
        for key, tactic in json.loads(sys.argv[1]):
            try:
                k = cat.select(key, policy="experiment", tactic=tactic)
                out[key + "/" + tactic] = ["served", k.artifact]
            except NetraError as e:
                out[key + "/" + tactic] = [type(e).__name__, e.message, e.hint]
    except NetraError as e:
        out["open"] = [type(e).__name__, e.message, e.hint]
    print(json.dumps(out))
    """


def _runtime(py: str, picks: list[tuple[str, str]]) -> dict[str, Any]:
    return _code(py, RUNTIME, json.dumps(picks))


def _doctor(py: str) -> tuple[int, dict[str, Any], str]:
    j = _run(py, "-m", "netra", "doctor", "--json")
    h = _run(py, "-m", "netra", "doctor")
    assert j.returncode == h.returncode, (j.stderr, h.stderr)
    return j.returncode, json.loads(j.stdout), h.stdout


def _table(pkg: Path) -> dict[str, Any]:
    return json.loads((pkg / "_data" / "tables" / "gfx950.json").read_text())


def _two_candidates(pkg: Path) -> tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]:
    entries = _table(pkg)["entries"]
    a, b = entries[0], entries[-1]
    return (a["key"], a["candidates"][0]), (b["key"], b["candidates"][0])


def _region(blob: bytes, symbol: str, region: str) -> int:
    """A byte offset inside .text, inside the kernel descriptor (<symbol>.kd), or inside the metadata note."""
    elf = ELFFile(io.BytesIO(blob))
    if region == "text":
        sec = elf.get_section_by_name(".text")
        return sec["sh_offset"] + sec["sh_size"] // 2
    if region == "metadata":
        sec = next(s for s in elf.iter_sections() if s["sh_type"] == "SHT_NOTE")
        return sec["sh_offset"] + sec["sh_size"] // 2
    for tab in (".symtab", ".dynsym"):
        st = elf.get_section_by_name(tab)
        syms = st.get_symbol_by_name(f"{symbol}.kd") if st is not None else None
        if syms:
            addr = syms[0]["st_value"]
            sec = next(s for s in elf.iter_sections() if s["sh_addr"] <= addr < s["sh_addr"] + s["sh_size"])
            return sec["sh_offset"] + (addr - sec["sh_addr"]) + 48  # COMPUTE_PGM_RSRC1
    raise AssertionError(f"no {symbol}.kd symbol")


# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change", ["delete", "flip"])
def test_missing_or_altered_table_fails_doctor_and_the_runtime_names_it(
    venv: tuple[str, Path], change: str, built_wheel: Path
) -> None:
    py, pkg = venv
    table = pkg / "_data" / "tables" / "gfx950.json"
    (key, cand), _ = _two_candidates(pkg)
    with damaged(table, change, offset=table.stat().st_size // 2):
        rc, report, text = _doctor(py)
        rt = _runtime(py, [(key, cand["tactic"])])
    assert rc == 1 and not report["ok"] and not report["intact"]
    bucket = report["files"]["missing" if change == "delete" else "altered"]
    assert [(m["path"], m["kind"]) for m in bucket] == [("tables/gfx950.json", "table")]
    assert f"{'missing' if change == 'delete' else 'altered'} table tables/gfx950.json" in text
    assert "result: FAILED" in text
    name, message, hint = rt["open"]
    assert name == ("MissingFileError" if change == "delete" else "AlteredFileError")
    assert str(table) in message and "gfx950" in message and "sha256" in message
    assert _reinstalls_the_wheel(hint, built_wheel), hint


@pytest.mark.parametrize("region", ["text", "descriptor", "metadata"])
def test_flipped_byte_in_a_code_object_is_refused(
    venv: tuple[str, Path], region: str, built_wheel: Path
) -> None:
    py, pkg = venv
    (key, cand), (other_key, other) = _two_candidates(pkg)
    path = pkg / "_data" / cand["file"]
    offset = _region(path.read_bytes(), cand["symbol"], region)
    with damaged(path, "flip", offset):
        rc, report, text = _doctor(py)
        rt = _runtime(py, [(key, cand["tactic"]), (other_key, other["tactic"])])
    assert rc == 1 and not report["ok"]
    (altered,) = report["files"]["altered"]
    assert (altered["path"], altered["kind"]) == (cand["file"], "code_object")
    # The whole-file hash catches every region; then what changed is named against the lock: the
    # machine code (.text), what the kernel launches with (descriptor, the launch digest), or a metadata
    # note that no longer decodes.
    expected = {"text": {"sha256", "text_sha256"}, "descriptor": {"sha256", "launch_sha256"}}
    if region == "metadata":
        assert set(altered["checks"]) in ({"sha256", "launch_sha256"}, {"sha256", "parse"}), altered["checks"]
    else:
        assert set(altered["checks"]) == expected[region], altered["checks"]
    if region == "text":
        assert altered["checks"]["text_sha256"]["expected"] == cand["text_sha256"]
    assert f"altered code_object {cand['file']}" in text
    name, message, hint = rt[f"{key}/{cand['tactic']}"]
    assert name == "AlteredFileError"
    assert (
        str(path) in message and "gfx950" in message and cand["artifact"] in message and "expected" in message
    )
    assert _reinstalls_the_wheel(hint, built_wheel), hint
    assert rt[f"{other_key}/{other['tactic']}"] == ["served", other["artifact"]]  # refusal is per code object


def test_altered_lock_breaks_its_binding_to_the_build(venv: tuple[str, Path]) -> None:
    py, pkg = venv
    (key, cand), _ = _two_candidates(pkg)
    with damaged(pkg / "_data" / "manifest.lock", "append"):
        rc, report, _ = _doctor(py)
        rt = _runtime(py, [(key, cand["tactic"])])
    assert rc == 1 and report["lock"]["bound_to_build_record"] is False
    # The lock is what changed: it is blamed, and build.json (intact) is not.
    altered = {a["path"] for a in report["files"]["altered"]}
    assert "manifest.lock" in altered and "build.json" not in altered
    name, message, _ = rt["open"]
    assert name == "AlteredFileError" and "disagree" in message


def test_unexpected_file_in_the_package_data_fails_doctor(venv: tuple[str, Path]) -> None:
    py, pkg = venv
    extra = pkg / "_data" / "gfx950" / "extra.hsaco"
    extra.write_bytes(b"\x7fELF")
    try:
        rc, report, _ = _doctor(py)
    finally:
        extra.unlink()
    assert rc == 1 and report["files"]["unexpected"] == ["gfx950/extra.hsaco"]


def test_import_netra_works_without_the_data_and_the_runtime_names_what_is_missing(
    venv: tuple[str, Path], built_wheel: Path
) -> None:
    py, pkg = venv
    data = pkg / "_data"
    aside = pkg.parent / "_netra_data_aside"
    data.rename(aside)
    try:
        imp = _run(py, "-c", "import netra; print(netra.__version__)")
        rt = _runtime(py, [])
        rc, report, _ = _doctor(py)
    finally:
        aside.rename(data)
    assert imp.returncode == 0 and imp.stdout.strip()
    name, message, hint = rt["open"]
    assert name == "MissingFileError" and str(data / "manifest.lock") in message
    assert _reinstalls_the_wheel(hint, built_wheel), hint
    assert rc == 1 and report["files"]["missing"][0]["path"] == "manifest.lock"


@pytest.mark.parametrize(
    "rel",
    ["_data/tables/gfx950.json", "_data/manifest.lock", "_data/build.json", "code object", "cli/commands.py"],
)
def test_a_symlink_in_the_install_is_refused_even_to_identical_content(
    venv: tuple[str, Path], rel: str, built_wheel: Path, tmp_path: Path
) -> None:
    """pip installs no links: one in the package (here to a byte-identical copy outside it) is damage.
    doctor names it and its fix (a reinstall) puts the file back; the runtime refuses to read it."""
    py, pkg = venv
    if rel == "code object":
        rel = (
            "_data/"
            + sorted(p.relative_to(pkg / "_data").as_posix() for p in (pkg / "_data").rglob("*.hsaco"))[0]
        )
    path = pkg / rel
    name = rel.removeprefix("_data/")
    copy = tmp_path / path.name
    shutil.copyfile(path, copy)
    original = path.read_bytes()
    path.unlink()
    path.symlink_to(copy)
    try:
        rc, report, text = _doctor(py)
        picks = [(key, cand["tactic"]) for key, cand in _two_candidates(pkg)]
        if rel.endswith(".hsaco"):  # the kernel whose code object is linked
            entry = next(e for e in _table(pkg)["entries"] for c in e["candidates"] if c["file"] == name)
            picks = [(entry["key"], next(c["tactic"] for c in entry["candidates"] if c["file"] == name))]
        rt = _runtime(py, picks)
    finally:
        if path.is_symlink():
            path.unlink()
            path.write_bytes(original)
    assert rc == 1 and not report["ok"] and "result: FAILED" in text
    if rel == "cli/commands.py":
        assert report["package_files"]["altered"] == ["netra/cli/commands.py"], report["package_files"]
        return
    altered = {a["path"]: a for a in report["files"]["altered"]}
    assert name in altered and "is a symlink" in altered[name].get("detail", ""), report["files"]
    # the runtime: opening the catalog (lock, build.json, table) or serving the kernel reads it
    (err,) = [v for v in rt.values() if v[0] != "served"] or [None]
    assert err is not None and err[0] == "AlteredFileError" and "is a symlink" in err[1], rt
    assert _reinstalls_the_wheel(err[2], built_wheel), err[2]


def test_restored_install_passes_doctor_again(venv: tuple[str, Path]) -> None:
    """Runs last: every damage above was undone exactly, and doctor's verdict follows the files."""
    py, pkg = venv
    rc, report, text = _doctor(py)
    assert rc == 0 and report["ok"] and "result: OK" in text, report["problems"]
    assert not (pkg.parent / "_netra_data_aside").exists()
    shutil.rmtree(pkg / "__pycache__", ignore_errors=True)
