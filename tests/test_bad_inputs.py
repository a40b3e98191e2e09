"""One test per class of bad input, with the real tools and real files (issue 7).

Every error a user can cause ends as one line naming the file, entry and field (or the artifact and
the tool, or the GPU class) and the fix, a non-zero exit, and nothing half-written: no output folder,
no wheel in the outdir, the lock untouched, no temporary folder left in a private TMPDIR. Nothing
here mocks the OS, the toolchain or packaging: FIFOs are os.mkfifo, links are symlinks, signals are
sent to real processes, wheels are built by `python -m build`, installed by pip into real venvs, and
broken tools are shell scripts around the real llvm-mc / nvcc.

The expensive parts are shared: one `netra lock` of a private copy of the repository (which also
gives the derivation every in-process lock comparison is checked against), one wheel of that copy
and one venv. Classes that can be checked by calling the reader are parametrized in-process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Venv, clean_env, copy_repo, log, run_build, signals_default
from elftools.elf.elffile import ELFFile  # the test's own ELF reader, independent of netra's
from venvtools import package_dir
from wheeltools import rewrite

from netra.core import toml
from netra.errors import LockError, NetraError
from netra.release import build, compilecache, manifests
from netra.runtime import layout
from netra.runtime import lockfile as lock_mod

REPO = Path(__file__).resolve().parents[1]
LOCK = lock_mod.LOCK_PATH
LLVM_BIN = Path("/usr/lib/llvm-22/bin")
NVCC = shutil.which("nvcc") or "/usr/local/bin/nvcc"
TIMEOUT = 180  # "did not hang" guard for one command; a command here takes seconds
DATA = layout.PACKAGE_DATA + "/"


# -- running netra and the build for real -------------------------------------------------------------


def netra(*args: str, tmpdir: Path | None = None, env: dict[str, str] | None = None,
          timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:  # fmt: skip
    e = clean_env(PYTHONPATH=str(REPO), **({"TMPDIR": str(tmpdir)} if tmpdir else {}))
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "netra", *args],
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def refused(r: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """A one-line refusal: exit 1, no traceback, `netra: error:` then every fragment on that line."""
    assert r.returncode == 1, log(r)
    assert "Traceback" not in r.stderr, log(r)
    first = next((ln for ln in r.stderr.splitlines() if ln.startswith("netra: error:")), None)
    assert first is not None, log(r)
    for f in fragments:
        assert f in first, f"{f!r} not in the error line\n{first}\n{log(r)}"
    return first


def misused(r: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """A usage error: exit 2, no traceback, one line on stderr holding every fragment."""
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stdout == "", log(r)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and " error: " in lines[0], log(r)
    for f in fragments:
        assert f in lines[0], f"{f!r} not in the error line\n{lines[0]}"
    return lines[0]


def empty_eventually(folder: Path, seconds: float = 30) -> list[str]:
    """What is left in a private TMPDIR once every process has gone (a janitor may still be removing)."""
    deadline = time.monotonic() + seconds
    while True:
        left = sorted(p.name for p in folder.iterdir())
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def sources(root: Path, dest: Path) -> Path:
    """kernels/, manifests/, release/ and requirements/ of `root`: what `netra lock` and `netra build` read."""
    for d in ("kernels", "manifests", "release", "requirements"):
        shutil.copytree(root / d, dest / d, symlinks=True)
    return dest


def private(tmp_path: Path, name: str = "tmpdir") -> Path:
    d = tmp_path / name
    d.mkdir()
    return d


@pytest.fixture(scope="module")
def locked(make_repo_copy: Callable[[str], Path]) -> tuple[Path, build.Derived]:
    """A private copy of the repository with a lock made from its own sources now (the working tree's
    lock may be stale while kernels are edited), and that derivation, for in-process comparisons."""
    root = make_repo_copy("bad-inputs")
    fresh = build.make_lock(root, cache=compilecache.open_cache(default=True))  # the session's cache
    build.write_lock(root, fresh)
    assert fresh.derived is not None
    return root, fresh.derived


@pytest.fixture(scope="module")
def tree(locked: tuple[Path, build.Derived]) -> Path:
    return locked[0]


@pytest.fixture(scope="module")
def lock_text(tree: Path) -> str:
    return (tree / LOCK).read_text()


@pytest.fixture(scope="module")
def wheel(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bad-inputs-dist")
    r = run_build(tree, out, "--wheel")
    assert r.returncode == 0, log(r)
    return next(out.glob("*.whl"))


@pytest.fixture(scope="module")
def venv(venv_factory: Callable[..., Venv], wheel: Path) -> Venv:
    return venv_factory(wheel, "bad-inputs-venv")


def _blocks(text: str, header: str) -> list[tuple[int, int]]:
    """(start, end) of every `header` block of a lock's text (to its next [[...]] header)."""
    starts = [m.start() for m in re.finditer(rf"^\[\[{re.escape(header)}\]\]$", text, re.M)]
    heads = [m.start() for m in re.finditer(r"^\[\[", text, re.M)] + [len(text)]
    return [(s, next(h for h in heads if h > s)) for s in starts]


# -- the lock: damaged in its shape ----------------------------------------------------------------


def _first_artifact(t: str) -> str:
    return re.search(r'^name = "(netra_[a-z0-9_]+)"', t, re.M).group(1)  # type: ignore[union-attr]


def _sub1(pattern: str, repl: str) -> Callable[[str], str]:
    def f(t: str) -> str:
        out, n = re.subn(pattern, lambda m: repl, t, count=1, flags=re.M)
        assert n == 1, pattern
        return out

    return f


def _dup_last_artifact(t: str) -> str:
    s, e = _blocks(t, "artifacts")[-1]
    return t + "\n" + t[s:e]


def _dup_first_file(t: str) -> str:
    s, e = _blocks(t, "files")[0]
    return t + "\n" + t[s:e]


def _artifacts_list(t: str) -> str:
    head = t[: _blocks(t, "artifacts")[0][0]]
    return head.replace("schema = 3\n", "schema = 3\nartifacts = [1, 2]\n", 1)


SHAPE_DAMAGE: dict[str, tuple[Callable[[str], Any], list[str]]] = {
    "duplicated [[artifacts]]": (_dup_last_artifact, ["artifacts[", "(netra_", "duplicate of entry"]),
    "duplicated [[files]]": (_dup_first_file, ["files[", "): duplicate of entry 0 (kernels/"]),
    "symbols is a string": (
        _sub1(r"^symbols = \[[^\]]*\]", 'symbols = "x"'),
        ["artifacts[0] (netra_", ".symbols: must be a list"],
    ),
    "artifacts = [1, 2]": (_artifacts_list, ["artifacts[0]: must be a table"]),
    "unknown field": (
        _sub1(r"^\[\[artifacts\]\]$", "[[artifacts]]\nbogus = 1"),
        ["artifacts[0] (netra_", "unknown field 'bogus'"],
    ),
    "missing field": (
        _sub1(r"^kernarg_bytes = \d+\n", ""),
        ["artifacts[0] (netra_", "missing required field 'kernarg_bytes'"],
    ),
    "hash in upper case": (
        _sub1(r'^text_sha256 = "[0-9a-f]{64}"', 'text_sha256 = "' + "A" * 64 + '"'),
        [".text_sha256:", "does not match"],
    ),
    "hash too short": (
        _sub1(r'^code_sha256 = "[0-9a-f]{64}"', 'code_sha256 = "abc"'),
        [".code_sha256:", "does not match"],
    ),
    "boolean for an integer": (
        _sub1(r"^kernarg_bytes = \d+", "kernarg_bytes = true"),
        [".kernarg_bytes: must be an integer"],
    ),
    "negative size": (_sub1(r"^lds_bytes = \d+", "lds_bytes = -1"), [".lds_bytes: -1 is outside"]),
    "huge integer": (
        _sub1(r"^hidden = \d+", "hidden = 99999999999999999999"),
        [".contract.hidden:", "outside"],
    ),
    "absolute tracked path": (
        _sub1(r'^path = "kernels/gfx950/rmsnorm.s"', 'path = "/etc/hostname"'),
        ["files[", ".path: '/etc/hostname' is absolute"],
    ),
    "tracked path climbing out": (
        _sub1(r'^path = "kernels/gfx950/rmsnorm.s"', 'path = "kernels/../../etc/hostname"'),
        [".path:", "has a '..' component"],
    ),
    "untracked folder": (
        _sub1(r'^path = "kernels/gfx950/rmsnorm.s"', 'path = "netra/cli.py"'),
        [".path: only kernels/, manifests/, release/evidence/ and release/tables/ files are tracked"],
    ),
    "unknown GPU class": (
        _sub1(r'^target = "gfx950"', 'target = "gfx999"'),
        ["target: 'gfx999' is not a GPU class"],
    ),
    "toolchain of the wrong vendor": (
        _sub1(r'^flavour = "llvm"', 'flavour = "nvcc"'),
        ["toolchains.gfx950: flavour 'nvcc' cannot build"],
    ),
    "NUL in a string": (_sub1(r'^flavour = "llvm"', 'flavour = "ll\\u0000vm"'), ["contains a NUL"]),
    "newer schema": (_sub1(r"^schema = 3", "schema = 4"), ["lock schema 4 is not the supported schema 3"]),
    "schema as a string": (_sub1(r"^schema = 3", 'schema = "3"'), ["schema: must be 3"]),
    "a toolchain package that is not one of its pins": (
        _sub1(r'^package = "nvidia-cuda-nvcc"', 'package = "nvidia-cuda-nvcc-x"'),
        ["toolchains.sm_100.package: 'nvidia-cuda-nvcc-x' is not one of its pins"],
    ),
    "a toolchain package at another version than the toolchain": (
        _sub1(r'^version = "13.0.88"\nsha256 = \[\n    "56fe', 'version = "13.0.89"\nsha256 = [\n    "56fe'),
        ["toolchains.sm_100.package: nvidia-cuda-nvcc is pinned at 13.0.89, the toolchain is 13.0.88"],
    ),
    "empty file": (lambda t: "", ["missing required field 'schema'"]),
    "cut mid-line": (lambda t: t[: t.index('text_sha256 = "') + 30], ["not valid TOML"]),
    "not UTF-8": (lambda t: t.encode().replace(b"flavour", b"flav\xffour", 1), ["not UTF-8"]),
    "nested thousands deep": (lambda t: t + "x = " + "[" * 20000 + "]" * 20000 + "\n", ["nested too deeply"]),
    # tomllib raises a plain ValueError here (int()'s digit limit), not its TOMLDecodeError
    "an integer of 5000 digits": (
        _sub1(r"^schema = 3", "schema = " + "9" * 5000),
        ["not valid TOML", "digits"],
    ),
}


@pytest.mark.parametrize("case", sorted(SHAPE_DAMAGE))
def test_lock_damaged_in_its_shape_is_refused_naming_file_entry_and_field(lock_text: str, case: str) -> None:
    damage, fragments = SHAPE_DAMAGE[case]
    raw = damage(lock_text)
    raw = raw if isinstance(raw, bytes) else raw.encode()
    with pytest.raises(LockError) as e:
        lock_mod.loads(raw, LOCK)
    msg = str(e.value)
    assert msg.startswith(LOCK) and "\n" not in msg, msg
    assert "netra lock" in (e.value.hint or ""), msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"
    if case == "toolchain of the wrong vendor":  # said once, not once per artifact of the class
        assert len([d for d in (e.value.details or (msg,)) if "cannot build" in d]) == 1, e.value.details


# -- the lock: well formed, but not what the sources declare ---------------------------------------


def _truncate_last_artifact(t: str) -> str:
    return t[: _blocks(t, "artifacts")[-1][0]]


def _drop_first_file(t: str) -> str:
    s, e = _blocks(t, "files")[0]
    return t[:s] + t[e:]


def _rename_first_artifact(t: str) -> str:
    name = _first_artifact(t)
    return t.replace(f'"{name}"', f'"{name}_x"')


def _bump(field: str) -> Callable[[str], str]:
    return _sub1(rf"^{field} = (\d+)", f"{field} = 7777")


def _flip_hash(field: str) -> Callable[[str], str]:
    def f(t: str) -> str:
        m = re.search(rf'^{field} = "([0-9a-f])', t, re.M)
        assert m
        c = "0" if m.group(1) != "0" else "1"
        return t[: m.start(1)] + c + t[m.end(1) :]

    return f


CONTENT_DAMAGE: dict[str, tuple[Callable[[str], str], str]] = {
    "last [[artifacts]] cut off (a bad merge)": (
        _truncate_last_artifact,
        "the sources declare it but the lock lacks it",
    ),
    "an artifact renamed": (_rename_first_artifact, "locked but the sources no longer declare it"),
    "vgprs changed": (_bump("vgprs"), ": facts locked"),
    "contract parameter changed": (_bump("hidden"), ": contract locked"),
    "kernarg size changed": (
        _sub1(r"^kernarg_bytes = \d+", "kernarg_bytes = 4000"),
        ": kernarg_bytes locked",
    ),
    "max threads changed": (_sub1(r"^max_threads = \d+", "max_threads = 1"), ": max_threads locked"),
    "definitions changed": (_bump("NETRA_BLOCK"), ": definitions locked"),
    ".text hash changed": (_flip_hash("text_sha256"), ": text_sha256 locked"),
    "launch digest changed": (_flip_hash("launch_sha256"), ": launch_sha256 locked"),
    "code object hash changed": (_flip_hash("code_sha256"), ": code_sha256 locked"),
    "a source's hash changed": (_flip_hash("sha256"), "file kernels/"),
    "a [[files]] entry dropped": (_drop_first_file, "in the tree but not in the lock"),
    "a role changed": (_sub1(r'^role = "source"', 'role = "manifest"'), "role locked manifest, now source"),
    "toolchain version changed": (
        _sub1(r'^version = "([0-9.]+)"', 'version = "1.2.3"'),
        "toolchain gfx950: locked with llvm LLVM 1.2.3",
    ),
}


@pytest.mark.parametrize("case", sorted(CONTENT_DAMAGE))
def test_lock_that_is_not_what_the_sources_declare_is_refused_naming_the_entry(
    locked: tuple[Path, build.Derived], lock_text: str, case: str
) -> None:
    """Parses, but build.differences (what `netra build`, `--check` and the wheel build run on the
    derivation of the tree) names the difference: a smaller lock is a refusal, never a smaller wheel."""
    root, derived = locked
    damage, fragment = CONTENT_DAMAGE[case]
    damaged = lock_mod.loads(damage(lock_text).encode(), LOCK)
    _, diffs = build.differences(root, derived, damaged)
    assert any(fragment in d for d in diffs), diffs
    assert not build.differences(root, derived, lock_mod.loads(lock_text.encode(), LOCK))[1]  # the control


def test_edited_table_with_its_new_sha256_in_the_lock_is_refused(
    locked: tuple[Path, build.Derived], lock_text: str
) -> None:
    """A static-class table is regenerated and compared: editing it and its hash in the lock is caught."""
    root, derived = locked
    rel = "release/tables/gfx950.json"
    old = derived.tree_tables[rel]
    table = json.loads(old)
    table["entries"][0]["candidates"][0]["maturity"] = "experiment"
    new = (json.dumps(table, indent=1, sort_keys=True) + "\n").encode()
    damaged = lock_mod.loads(
        lock_text.replace(hashlib.sha256(old).hexdigest(), hashlib.sha256(new).hexdigest()).encode(), LOCK
    )
    edited = dataclasses.replace(derived, tree_tables={**derived.tree_tables, rel: new})
    _, diffs = build.differences(root, edited, damaged)
    assert f"table {rel}: out of date with the lock and sources (`netra lock` regenerates it)" in diffs, diffs


@pytest.mark.parametrize("case", ["last [[artifacts]] cut off (a bad merge)", "symbols is a string"])
def test_netra_build_refuses_a_damaged_lock_and_leaves_nothing(
    tree: Path, lock_text: str, tmp_path: Path, case: str
) -> None:
    damage = CONTENT_DAMAGE[case][0] if case in CONTENT_DAMAGE else SHAPE_DAMAGE[case][0]
    root = sources(tree, tmp_path / "tree")
    (root / LOCK).write_text(damage(lock_text))
    before = (root / LOCK).read_bytes()
    tmpdir = private(tmp_path)
    r = netra("build", str(tmp_path / "out"), "--root", str(root), "-q", tmpdir=tmpdir)
    line = refused(r, "netra lock")
    assert ("lacks it" in line and "netra_" in line) or ".symbols: must be a list" in line, line
    assert not (tmp_path / "out").exists()
    assert (root / LOCK).read_bytes() == before
    assert empty_eventually(tmpdir) == []


def test_netra_lock_repairs_a_lock_cut_off_by_a_bad_merge(tree: Path, lock_text: str, tmp_path: Path) -> None:
    root = sources(tree, tmp_path / "tree")
    (root / LOCK).write_text(_truncate_last_artifact(lock_text))
    r = netra("lock", "--root", str(root), "-q")
    assert r.returncode == 0, log(r)
    assert (root / LOCK).read_text() == lock_text  # deterministic: exactly the lock the sources make


@pytest.mark.parametrize(
    "case", ["last [[artifacts]] cut off (a bad merge)", "duplicated [[artifacts]]", "lock is a FIFO"]
)
def test_wheel_build_refuses_a_damaged_lock_with_no_wheel_and_no_temporaries(
    tree: Path, lock_text: str, tmp_path: Path, case: str
) -> None:
    root = copy_repo(tmp_path / "src", tree)
    lock = root / LOCK
    if case == "lock is a FIFO":
        lock.unlink()
        os.mkfifo(lock)
    else:
        damage = CONTENT_DAMAGE[case][0] if case in CONTENT_DAMAGE else SHAPE_DAMAGE[case][0]
        lock.write_text(damage(lock_text))
    outdir, tmpdir = tmp_path / "dist", private(tmp_path)
    r = run_build(root, outdir, "--wheel", env=clean_env(TMPDIR=str(tmpdir)))
    assert r.returncode != 0, log(r)
    assert "Traceback" not in r.stdout + r.stderr, log(r)
    line = next((ln for ln in (r.stdout + r.stderr).splitlines() if "netra: error:" in ln), "")
    want = {
        "lock is a FIFO": "is a FIFO, not a regular file",
        "duplicated [[artifacts]]": "duplicate of entry",
    }
    assert want.get(case, "the sources declare it but the lock lacks it") in line and "netra lock" in line, (
        log(r)
    )
    assert not list(outdir.glob("*")) if outdir.exists() else True, sorted(outdir.iterdir())
    assert empty_eventually(tmpdir) == []


# -- manifests and template manifests through their schemas -----------------------------------------


MANIFEST_DAMAGE: dict[str, tuple[str, Callable[[str], str], list[str]]] = {
    "template: missing field": (
        "kernels/gfx950/rmsnorm.toml",
        _sub1(r"^source = .*\n", ""),
        ["kernels/gfx950/rmsnorm.toml", "missing required field 'source'"],
    ),
    "template: unknown field": (
        "kernels/gfx950/rmsnorm.toml",
        _sub1(r"^vgprs = ", "vgpr = 1\nvgprs = "),
        ["kernels/gfx950/rmsnorm.toml", "unknown field 'vgpr'"],
    ),
    "template: wrong type": (
        "kernels/gfx950/rmsnorm.toml",
        _sub1(r"^vgprs = \d+", 'vgprs = "96"'),
        ["kernels/gfx950/rmsnorm.toml", "vgprs: must be an integer"],
    ),
    "template: budget out of range": (
        "kernels/gfx950/rmsnorm.toml",
        _sub1(r"^vgprs = \d+", "vgprs = 4096"),
        ["vgprs: 4096 is outside [1, 512]"],
    ),
    "template: argument of a wrong type": (
        "kernels/cuda/rmsnorm.toml",
        _sub1(r'^type = "bf16\*"', 'type = "bf17*"'),
        ["kernels/cuda/rmsnorm.toml", "args[0] (y).type"],
    ),
    "tactics: duplicate tactic": (
        "manifests/gfx950/tactics.toml",
        lambda t: (
            t + '\n[[tactics]]\nop = "rmsnorm"\nname = "b256"\ntemplate = "rmsnorm"\n'
            'block = 256\nmaturity = "verified"\nwhy = "again"\n'
        ),
        ["manifests/gfx950/tactics.toml", "(b256): duplicate of entry 0"],
    ),
    "tactics: rows_per_block where the grid does not read it": (
        "manifests/sm_90/tactics.toml",
        _sub1(
            r'^name = "d3"\ntemplate = "fp8_moe_down"\n',
            'name = "d3"\ntemplate = "fp8_moe_down"\nrows_per_block = 1\n',
        ),
        ["manifests/sm_90/tactics.toml", "rows_per_block does not apply to fp8_moe_down"],
    ),
    "tactics: no rows_per_block where the grid reads it": (
        "manifests/sm_90/tactics.toml",
        _sub1(
            r'^name = "t256s"\ntemplate = "rmsnorm"\nblock = 256\nrows_per_block = 1\n',
            'name = "t256s"\ntemplate = "rmsnorm"\nblock = 256\n',
        ),
        ["manifests/sm_90/tactics.toml", "rows_per_block is required on sm_90"],
    ),
    "tactics: wrong type": (
        "manifests/gfx950/tactics.toml",
        _sub1(r"^block = 256", 'block = "256"'),
        ["tactics[0] (b256).block: must be an integer"],
    ),
    "model: missing field": (
        "manifests/models/gemma-2-9b.toml",
        _sub1(r'^model = "Gemma-2-9B"\n', ""),
        ["manifests/models/gemma-2-9b.toml", "missing required field 'model'"],
    ),
    "model: unknown parameter": (
        "manifests/models/gemma-2-9b.toml",
        _sub1(r"^weight_offset = 1", "weight_offset = 1\nwidth = 2"),
        ["manifests/models/gemma-2-9b.toml", "ops[0] (rmsnorm)", "width"],
    ),
    "model: dimension 2**40": (
        "manifests/models/gemma-2-9b.toml",
        _sub1(r"^hidden = 3584", "hidden = 1099511627776"),
        ["manifests/models/gemma-2-9b.toml", "hidden", "outside"],
    ),
    "model: dimension 1048576": (
        "manifests/models/gemma-2-9b.toml",
        _sub1(r"^hidden = 3584", "hidden = 1048576"),
        ["rmsnorm(hidden=1048576,weight_offset=1)", "hidden = 1048576 is not", "HIDDEN"],
    ),
    "model: not TOML": (
        "manifests/models/gemma-2-9b.toml",
        lambda t: t + "\n[[ops]\n",
        ["gemma-2-9b.toml: not valid TOML"],
    ),
    "model: nested thousands deep": (
        "manifests/models/gemma-2-9b.toml",
        lambda t: t + "x = " + "[" * 20000 + "\n",
        ["gemma-2-9b.toml: not valid TOML"],
    ),
    "model: a dimension of 5000 digits": (
        "manifests/models/gemma-2-9b.toml",
        _sub1(r"^hidden = 3584", "hidden = " + "7" * 5000),
        ["gemma-2-9b.toml: not valid TOML", "digits"],
    ),
    "template: a constant of 5000 digits": (
        "kernels/gfx950/rmsnorm.toml",
        lambda t: t + "\nx = " + "7" * 5000 + "\n",
        ["kernels/gfx950/rmsnorm.toml: not valid TOML", "digits"],
    ),
    "model: a contract neither built for a class nor documented as not built": (
        "manifests/models/gemma-2-9b.toml",
        lambda t: t[: t.index('[[fallbacks]]\nop = "fused_add_rmsnorm"\n')],
        ["fused_add_rmsnorm(hidden=3584,weight_offset=1)", "Gemma-2-9B", "no gfx950 tactic", "gpu_class"],
    ),
    "model: a per-class fallback for a contract the model does not need": (
        "manifests/models/gemma-2-9b.toml",
        lambda t: t.replace(
            'op = "fused_add_rmsnorm"\ngpu_class = "gfx950"\nhidden = 3584',
            'op = "fused_add_rmsnorm"\ngpu_class = "gfx950"\nhidden = 4096',
        ),
        ["gemma-2-9b.toml", "fallbacks[", "fused_add_rmsnorm(hidden=4096,weight_offset=1)", "not among"],
    ),
    "model: a per-class fallback for an unknown class": (
        "manifests/models/gemma-2-9b.toml",
        _sub1(r'gpu_class = "gfx950"', 'gpu_class = "gfx951"'),
        ["Gemma-2-9B", "gfx951", "no kernels/ folder"],
    ),
    "model: a per-class fallback for a contract the class builds": (
        "manifests/models/gemma-2-9b.toml",
        lambda t: (
            t + '\n[[fallbacks]]\nop = "rmsnorm"\ngpu_class = "gfx950"\nhidden = 3584\n'
            'weight_offset = 1\nreason = "none"\n'
        ),
        ["Gemma-2-9B", "rmsnorm(hidden=3584,weight_offset=1)", "manifests/gfx950/tactics.toml builds it"],
    ),
    "model: contract parameters on a fallback without a class": (
        "manifests/models/gemma-2-9b.toml",
        lambda t: t.replace(
            'op = "gelu_tanh_mul_fp8_quant"\n', 'op = "gelu_tanh_mul_fp8_quant"\ninter = 14336\n'
        ),
        ["gemma-2-9b.toml", "fallbacks[", "unknown inter", "gpu_class"],
    ),
    "model: larger than the read limit": (
        "manifests/models/gemma-2-9b.toml",
        lambda t: t + "#" * (5 << 20) + "\n",
        ["gemma-2-9b.toml", "over the 4 MiB limit"],
    ),
    "model: not UTF-8": (
        "manifests/models/gemma-2-9b.toml",
        lambda t: t.replace("Gemma", "Gemma\udcff", 1),
        ["gemma-2-9b.toml", "not UTF-8"],
    ),
}


@pytest.mark.parametrize("case", sorted(MANIFEST_DAMAGE))
def test_manifests_are_read_through_their_schemas_naming_file_entry_and_field(
    tree: Path, tmp_path: Path, case: str
) -> None:
    rel, damage, fragments = MANIFEST_DAMAGE[case]
    root = sources(tree, tmp_path / "tree")
    path = root / rel
    path.write_bytes(damage(path.read_text()).encode("utf-8", "surrogateescape"))
    with pytest.raises(NetraError) as e:
        manifests.load(root)
    msg = str(e.value)
    assert "\n" not in msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"


@pytest.mark.parametrize("value", ["1099511627776", "1048576"])
def test_out_of_range_dimension_is_refused_before_anything_is_compiled(
    tree: Path, tmp_path: Path, value: str
) -> None:
    root = sources(tree, tmp_path / "tree")
    model = root / "manifests/models/gemma-2-9b.toml"
    model.write_text(model.read_text().replace("hidden = 3584", f"hidden = {value}", 1))
    tmpdir = private(tmp_path)
    r = netra("lock", "--root", str(root), tmpdir=tmpdir)
    refused(r, "gemma-2-9b.toml" if len(value) > 10 else "Gemma-2-9B", "hidden")
    assert "[1/" not in r.stderr and "building" not in r.stderr  # nothing was compiled
    assert (root / LOCK).read_bytes() == (tree / LOCK).read_bytes()
    assert empty_eventually(tmpdir) == []


# -- tracked paths: links, outside the tree, not regular files ---------------------------------------


def _link_file_outside(root: Path, out: Path) -> str:
    p = root / "manifests/models/gemma-2-9b.toml"
    shutil.copy(p, out / "gemma-2-9b.toml")
    p.unlink()
    p.symlink_to(out / "gemma-2-9b.toml")  # identical content, outside the tree
    return "manifests/models/gemma-2-9b.toml"


def _link_folder_outside(root: Path, out: Path) -> str:
    p = root / "kernels/gfx950/include"
    shutil.copytree(p, out / "include")
    shutil.rmtree(p)
    p.symlink_to(out / "include")
    return "kernels/gfx950/include"


def _link_file_inside(root: Path, out: Path) -> str:
    p = root / "kernels/gfx950/rmsnorm.s"
    shutil.copy(p, root / "rmsnorm.s")
    p.unlink()
    p.symlink_to("../../rmsnorm.s")  # relative, to a copy inside the tree
    return "kernels/gfx950/rmsnorm.s"


def _link_top_folder(root: Path, out: Path) -> str:
    shutil.copytree(root / "manifests", out / "manifests")
    shutil.rmtree(root / "manifests")
    (root / "manifests").symlink_to(out / "manifests")
    return "manifests"


LINKS = {"file outside": _link_file_outside, "folder outside": _link_folder_outside,
         "file inside": _link_file_inside, "top folder": _link_top_folder}  # fmt: skip


@pytest.mark.parametrize("case", sorted(LINKS))
def test_tracked_paths_are_never_followed_through_a_symlink(tree: Path, tmp_path: Path, case: str) -> None:
    root = sources(tree, tmp_path / "tree")
    (tmp_path / "outside").mkdir()
    shown = LINKS[case](root, tmp_path / "outside")
    for check in (
        lambda: manifests.load(root),
        lambda: build.verify_tracked(root, lock_mod.read(root / LOCK)),
    ):
        with pytest.raises(NetraError) as e:
            check()
        assert f"{shown} (" in str(e.value) and "is a symlink" in str(e.value), e.value


def test_wheel_build_refuses_a_symlinked_folder_with_no_wheel(tree: Path, tmp_path: Path) -> None:
    root = copy_repo(tmp_path / "src", tree)
    (tmp_path / "outside").mkdir()
    _link_folder_outside(root, tmp_path / "outside")
    outdir, tmpdir = tmp_path / "dist", private(tmp_path)
    r = run_build(root, outdir, "--wheel", env=clean_env(TMPDIR=str(tmpdir)))
    assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr, log(r)
    assert "netra: error: kernels/gfx950/include (kernels) is a symlink" in r.stdout + r.stderr, log(r)
    assert not outdir.exists() or not list(outdir.iterdir())
    assert empty_eventually(tmpdir) == []


# -- FIFOs where files should be: refused at once, never waited on -----------------------------------


@pytest.mark.parametrize(
    ("rel", "command"),
    [(LOCK, "build"), (LOCK, "lock --check"), ("manifests/models/gemma-2-9b.toml", "lock"),
     ("kernels/gfx950/include/wave.inc", "build")],
)  # fmt: skip
def test_a_fifo_in_place_of_a_file_is_refused_without_hanging(
    tree: Path, tmp_path: Path, rel: str, command: str
) -> None:
    root = sources(tree, tmp_path / "tree")
    (root / rel).unlink()
    os.mkfifo(root / rel)
    args = command.split() + ([str(tmp_path / "out")] if command == "build" else [])
    r = netra(*args, "--root", str(root), "-q", timeout=120)  # a hang fails here
    refused(r, rel.rsplit("/", 1)[-1], "FIFO")
    assert (root / rel).is_fifo() and not (tmp_path / "out").exists()


# -- tools that crash, hang or run away --------------------------------------------------------------


def _shims(folder: Path, misbehave: str, tool: str = "llvm-mc") -> Path:
    """llvm-mc/ld.lld/llvm-objdump that run the real tools, except `tool` when it assembles or links for
    real (not for `--version` or the gfx950 probe): then it crashes (SIGSEGV) or sleeps (writing its
    pid first, so the test can prove it was killed)."""
    folder.mkdir()
    act = "kill -SEGV $$" if misbehave == "crash" else f'echo $$ > "{folder}/sleeper.pid"; exec sleep 600'
    for t in ("llvm-mc", "ld.lld", "llvm-objdump"):
        trigger = {"llvm-mc": "-filetype=obj", "ld.lld": "-shared", "llvm-objdump": "-d"}[t]
        body = f'for a in "$@"; do [ "$a" = "{trigger}" ] && {{ {act}; }}; done\n' if t == tool else ""
        (folder / t).write_text(f'#!/bin/sh\n{body}exec {LLVM_BIN / t} "$@"\n')
        (folder / t).chmod(0o755)
    return folder


def _nvcc_shim(folder: Path) -> Path:
    """nvcc that proves itself (version, the sm_90a probe) with the real nvcc and crashes on a kernel."""
    folder.mkdir()
    shim = folder / "nvcc"
    shim.write_text(
        f'#!/bin/sh\ncase " $* " in *" --version "*|*" probe.cu "*) exec {NVCC} "$@";; esac\nkill -SEGV $$\n'
    )
    shim.chmod(0o755)
    return shim


@pytest.mark.parametrize("tool", ["llvm-mc", "ld.lld", "llvm-objdump", "nvcc"])
def test_a_crashing_tool_is_one_line_naming_the_artifact_and_the_tool(
    tree: Path, tmp_path: Path, tool: str
) -> None:
    root = sources(tree, tmp_path / "tree")
    if tool == "nvcc":
        env = {"NETRA_NVCC": str(_nvcc_shim(tmp_path / "bin"))}
    else:
        env = {"NETRA_LLVM_BINDIR": str(_shims(tmp_path / "bin", "crash", tool))}
    tmpdir = private(tmp_path)
    r = netra("build", str(tmp_path / "out"), "--root", str(root), "-q", tmpdir=tmpdir, env=env)
    line = refused(r, f"{tool} crashed (SIGSEGV)", "netra_")
    if tool != "llvm-objdump":  # one disassembler process reads several code objects: it names the first
        assert re.search(r"netra_[a-z0-9_]+ \(kernels/[a-z0-9_]+/[a-z0-9_]+\.(s|cu)\)", line), line
    assert not (tmp_path / "out").exists()
    assert empty_eventually(tmpdir) == []


HUNG = r"""
import sys
from netra import cli
from netra.core import proc
proc.TOOL_TIMEOUT_S = 5  # the real limit is 120 s; the behaviour at the limit is what is tested
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_hanging_assembler_is_killed_at_its_time_limit_naming_the_artifact(
    tree: Path, tmp_path: Path
) -> None:
    root = sources(tree, tmp_path / "tree")
    bindir = _shims(tmp_path / "bin", "sleep")
    tmpdir = private(tmp_path)
    env = clean_env(PYTHONPATH=str(REPO), TMPDIR=str(tmpdir), NETRA_LLVM_BINDIR=str(bindir))
    r = subprocess.run(
        [sys.executable, "-c", HUNG, "build", str(tmp_path / "out"), "--root", str(root), "-q"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    refused(r, "llvm-mc did not finish within 5s (killed)", "netra_")
    pid = int((bindir / "sleeper.pid").read_text())
    assert (
        not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    )
    assert not (tmp_path / "out").exists()
    assert empty_eventually(tmpdir) == []


CYCLES = {
    "a file that includes itself": (
        {"kernels/gfx950/include/netra.inc": '.include "include/netra.inc"\n'},
        "kernels/gfx950/include/netra.inc -> kernels/gfx950/include/netra.inc",
    ),
    "two files that include each other (behind their guards)": (
        {"kernels/gfx950/include/bf16.inc": '.include "include/wave.inc"\n',
         "kernels/gfx950/include/wave.inc": '.include "include/bf16.inc"\n'},
        "include/wave.inc -> kernels/gfx950/include/bf16.inc -> kernels/gfx950/include/wave.inc",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CYCLES))
def test_an_include_cycle_is_recognised_and_named_before_the_assembler_runs(
    tree: Path, tmp_path: Path, case: str
) -> None:
    """llvm-mc follows `.include` without a depth limit: a cycle used to recurse until the address-space
    limit stopped it (gigabytes, seconds per job). The include graph is now checked first: the cycle is
    refused naming its files, in one line, and the assembler never sees it."""
    edits, chain = CYCLES[case]
    root = sources(tree, tmp_path / "tree")
    for rel, line in edits.items():
        (root / rel).write_text(line + (root / rel).read_text())
    tmpdir = private(tmp_path)
    r = netra("lock", "--check", "--root", str(root), "-q", tmpdir=tmpdir)
    line = refused(r, "include cycle", chain, "netra_", "acyclic")
    assert re.search(r"netra_[a-z0-9_]+ \(kernels/gfx950/[a-z0-9_]+\.s\)", line), line
    assert "crashed" not in r.stderr and "did not finish" not in r.stderr  # no tool ran into its limits
    assert empty_eventually(tmpdir) == []


# -- tracebacks that used to escape ----------------------------------------------------------------


def test_causes_a_user_can_fix_never_end_in_a_traceback(tree: Path, tmp_path: Path) -> None:
    cases: list[tuple[str, Callable[[Path], list[str]], str]] = []

    def lock_dir(root: Path) -> list[str]:
        (root / LOCK).unlink()
        (root / LOCK).mkdir()
        return ["build", str(root.parent / "out")]

    def lock_dir_lock(root: Path) -> list[str]:
        lock_dir(root)
        return ["lock"]

    def lock_not_utf8(root: Path) -> list[str]:
        (root / LOCK).write_bytes((root / LOCK).read_bytes().replace(b"llvm", b"ll\xffm", 1))
        return ["build", str(root.parent / "out")]

    def out_is_a_file(root: Path) -> list[str]:
        (root.parent / "out").write_text("not a folder")
        return ["build", str(root.parent / "out")]

    def out_below_a_file(root: Path) -> list[str]:
        (root.parent / "out").mkdir()
        (root.parent / "out" / "gfx950").write_text("not a folder")
        return ["build", str(root.parent / "out")]

    def lock_too_large(root: Path) -> list[str]:
        with (root / LOCK).open("ab") as f:
            f.write(b"#" * (17 << 20) + b"\n")  # a comment: valid TOML, but no lock is that large
        return ["build", str(root.parent / "out")]

    def table_is_a_folder(root: Path) -> list[str]:
        (root / "release/tables/gfx950.json").unlink()
        (root / "release/tables/gfx950.json").mkdir()
        return ["lock"]

    cases = [
        ("the lock is a directory (build)", lock_dir, "manifest.lock: lock file is a folder"),
        (
            "the lock is a directory (lock)",
            lock_dir_lock,
            "manifest.lock: is a folder where netra writes a file",
        ),
        ("the lock is not UTF-8", lock_not_utf8, "manifest.lock: not UTF-8"),
        (
            "a regular file where the output folder should be",
            out_is_a_file,
            "out: exists and is not a folder",
        ),
        (
            "a regular file inside the output folder",
            out_below_a_file,
            "out/gfx950: exists and is not a folder",
        ),
        (
            "a folder where netra writes a table",
            table_is_a_folder,
            "gfx950.json: is a folder where netra writes",
        ),
        ("a lock over the size limit", lock_too_large, "over the 16 MiB limit"),
    ]
    for i, (what, make, fragment) in enumerate(cases):
        root = sources(tree, tmp_path / f"case{i}" / "tree")
        args = make(root)
        r = netra(*args, "--root", str(root), "-q")
        assert "Traceback" not in r.stderr, f"{what}\n{log(r)}"
        refused(r, fragment)
        if args[0] == "build" and what.startswith("the lock"):
            assert not (root.parent / "out").exists(), what


def _without_dac_override() -> Callable[[], None] | None:
    """As root, permission bits stop nothing: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
    bounding set of the child, so the exec'd netra reads with ordinary permission checks."""
    if os.geteuid() != 0:
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP

    return drop


@pytest.mark.parametrize("what", ["file", "folder"])
def test_an_unreadable_tracked_file_or_folder_is_one_line_naming_it(
    tree: Path, tmp_path: Path, what: str
) -> None:
    root = sources(tree, tmp_path / "tree")
    rel = "manifests/models/gemma-2-9b.toml" if what == "file" else "kernels/gfx950/include"
    (root / rel).chmod(0)
    r = subprocess.run(
        [sys.executable, "-m", "netra", "lock", "--check", "--root", str(root), "-q"],
        env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=TIMEOUT, check=False,
        preexec_fn=_without_dac_override(),
    )  # fmt: skip
    (root / rel).chmod(0o755)
    refused(r, rel, "permission denied", "chmod")


# -- tables edited, with their new sha256 put in the lock, in a wheel ---------------------------------


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def reseal(wheel: Path, dest: Path, edit: Callable[[dict[str, bytes]], None]) -> Path:
    """A copy of `wheel` with members edited, then build.json (code-object hashes, lock binding, lock
    copy, record_sha256) and RECORD recomputed: what someone who knows the formats can produce."""

    def edit_and_record(members: dict[str, bytes]) -> None:
        edit(members)
        rec = json.loads(members[DATA + layout.BUILD_RECORD])
        for path, entry in rec["code_objects"].items():
            entry["sha256"] = _sha(members[DATA + path])
        lock_bytes = members[DATA + "manifest.lock"]
        rec["lock_sha256"] = _sha(lock_bytes)
        # the lock's TOML as data (what to_dict gives for a valid lock), so an inconsistent one reseals too
        rec["lock"] = toml.loads(lock_bytes.decode())
        body = {k: v for k, v in rec.items() if k != "record_sha256"}
        rec["record_sha256"] = _sha(layout.canonical(body))
        members[DATA + layout.BUILD_RECORD] = (json.dumps(rec, indent=1, sort_keys=True) + "\n").encode()

    return rewrite(wheel, dest / wheel.name, edit_and_record, reseal=True)


def _edit_table(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, bytes]], None]:
    def edit(m: dict[str, bytes]) -> None:
        name = DATA + "tables/gfx950.json"
        old = m[name]
        if change is _not_json:
            new = b"{not json\n"
        else:
            t = json.loads(old)
            change(t)
            new = (json.dumps(t, indent=1, sort_keys=True) + "\n").encode()
        m[name] = new
        m[DATA + "manifest.lock"] = m[DATA + "manifest.lock"].replace(_sha(old).encode(), _sha(new).encode())

    return edit


def _not_json(t: dict[str, Any]) -> None:  # a marker: the table is replaced by bytes that are not JSON
    pass


TABLE_EDITS: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "names an artifact the lock lacks": (
        lambda t: t["entries"][0]["candidates"][0].update(artifact="netra_rmsnorm_h64_wo0_b256"),
        "netra_rmsnorm_h64_wo0_b256: in the table but not a locked gfx950 artifact",
    ),
    "two entries for one contract": (lambda t: t["entries"].append(t["entries"][0]), "duplicate of entry 0"),
    "accepted on the static class": (
        lambda t: t["entries"][0]["candidates"][0].update(maturity="accepted"),
        "claims 'accepted' in a table certified 'static'",
    ),
    "not JSON": (_not_json, "not valid JSON"),
}


@pytest.fixture(scope="module")
def table_wheels(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("table-wheels")
    return {
        case: reseal(wheel, base / str(i), _edit_table(change))
        for i, (case, (change, _)) in enumerate(TABLE_EDITS.items())
    }


@pytest.mark.parametrize("case", sorted(TABLE_EDITS))
def test_an_edited_table_with_its_hash_in_the_lock_is_refused_by_the_wheel_gate(
    table_wheels: dict[str, Path], tmp_path: Path, case: str
) -> None:
    """Checked on its own (outside a source tree, so against the lock the wheel carries)."""
    r = subprocess.run(
        [sys.executable, "-m", "netra", "verify-wheel", str(table_wheels[case])],
        cwd=tmp_path, env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    refused(
        r,
        "refused (checked against the lock it carries)",
        "netra/_data/tables/gfx950.json",
        TABLE_EDITS[case][1],
    )


def _pip_install(venv: Venv, wheel: Path) -> None:
    r = venv.run("python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index", "--no-deps",
                 "--force-reinstall", wheel)  # fmt: skip
    assert r.returncode == 0, log(r)


def test_doctor_exits_1_on_an_install_whose_table_was_edited(
    venv: Venv, wheel: Path, table_wheels: dict[str, Path]
) -> None:
    try:
        for case, w in sorted(table_wheels.items()):
            _pip_install(venv, w)
            r = venv.run("netra", "doctor")
            assert r.returncode == 1, f"{case}\n{log(r)}"
            problems = [
                ln
                for ln in r.stdout.splitlines()
                if ln.startswith("problem: invalid table tables/gfx950.json")
            ]
            assert problems and TABLE_EDITS[case][1] in problems[0], f"{case}\n{log(r)}"
            assert r.stdout.rstrip().endswith("result: FAILED (1 problem(s))"), f"{case}\n{log(r)}"
            rt = venv.run("python", "-c", RUNTIME_OPEN)
            assert rt.stdout.startswith("TableError ") and "pip install --force-reinstall" in rt.stdout, log(
                rt
            )
    finally:
        _pip_install(venv, wheel)
    assert venv.run("netra", "doctor").returncode == 0


# Open the catalog and select every contract: an entry is held to the rules and the lock when it is
# first read (a first lookup builds only the entry it serves), so nothing may be served from a broken one.
RUNTIME_OPEN = """
from netra.errors import NetraError
from netra.runtime import open_catalog
try:
    cat = open_catalog("gfx950")
    for key in cat.contracts():
        cat.select(key, policy="verified")
    print("opened")
except NetraError as e:
    print(type(e).__name__, e)
"""


def test_a_resealed_build_record_naming_a_code_object_at_another_file_is_refused(
    venv: Venv, wheel: Path, tmp_path: Path
) -> None:
    """build.json's entry for one gfx950 code object moved to another suffix (the bytes copied there),
    build.json and RECORD resealed. The first lookup matches a vouched build.json to the lock by
    artifact name (no other class's module imported): it must still refuse the entry its class does not
    name, as doctor (which holds every class's entries to their files) does."""
    moved = f"gfx950/{GFX}.hsaco"

    def edit(m: dict[str, bytes]) -> None:
        rec = json.loads(m[DATA + layout.BUILD_RECORD])
        rec["code_objects"][moved + "x"] = rec["code_objects"].pop(moved)
        m[DATA + layout.BUILD_RECORD] = (json.dumps(rec, indent=1, sort_keys=True) + "\n").encode()
        m[DATA + moved + "x"] = m[DATA + moved]

    w = reseal(wheel, tmp_path, edit)
    try:
        _pip_install(venv, w)
        rt = venv.run("python", "-c", RUNTIME_OPEN)
        assert (
            rt.stdout.startswith("AlteredFileError ") and f"build.json: does not record {moved}" in rt.stdout
        ), log(rt)
        assert "pip install --force-reinstall" in rt.stdout, log(rt)
        r = venv.run("netra", "doctor")
        assert r.returncode == 1 and f"does not record {moved}" in r.stdout, log(r)
    finally:
        _pip_install(venv, wheel)


# -- issue 29: an install re-sealed consistently whose files disagree with each other ----------------


def _lock_edit(m: dict[str, bytes], old: bytes, new: bytes) -> None:
    lock = m[DATA + "manifest.lock"]
    assert lock.count(old) == 1, old
    m[DATA + "manifest.lock"] = lock.replace(old, new)


def _member_edit(rel: str, change: Callable[[bytes], bytes]) -> Callable[[dict[str, bytes]], None]:
    """The shipped file `rel` (a lock path) changed, its new sha256 put in the lock."""

    def edit(m: dict[str, bytes]) -> None:
        name = DATA + str(layout.data_path(rel))
        old = m[name]
        m[name] = change(old)
        _lock_edit(m, _sha(old).encode(), _sha(m[name]).encode())

    return edit


def _drop_toolchain(m: dict[str, bytes]) -> None:
    """[toolchains.sm_90] gone, with its pins ([[toolchains.sm_90.pins]]): up to the next other table."""
    lock = m[DATA + "manifest.lock"]
    found = re.search(rb"^\[toolchains\.sm_90\]\n(?:(?!\[(?!\[toolchains\.sm_90\.)).*\n)*", lock, re.M)
    assert found is not None and b'flavour = "nvcc"' in found[0]
    _lock_edit(m, found[0], b"")


def _drop_evidence(m: dict[str, bytes]) -> None:
    rel = "release/evidence/sm_90.json"
    data = m.pop(DATA + str(layout.data_path(rel)))
    _lock_edit(m, f'[[files]]\npath = "{rel}"\nsha256 = "{_sha(data)}"\nrole = "evidence"\n\n'.encode(), b"")


def _contradict_a_summary(data: bytes) -> bytes:
    ev = json.loads(data)
    first = sorted(ev["hardware"])[0]
    ev["hardware"][first]["max_rel_deviation"] = 0.5
    return (json.dumps(ev, indent=1, sort_keys=True) + "\n").encode()


GEMMA = "manifests/models/gemma-2-9b.toml"
GAP = (
    '\n[[fallbacks]]\nop = "rmsnorm"\ngpu_class = "gfx950"\nhidden = 3584\nweight_offset = 1\n'
    'reason = "said not built, though it is"\n'
)

# edit, what doctor's problem line says, what `netra catalog`'s error line says (its paths are absolute),
# what `netra verify-wheel`'s says (its paths are the wheel's members)
RESEALED: dict[str, tuple[Callable[[dict[str, bytes]], None], str, list[str], list[str]]] = {
    "a lock without the sm_90 toolchain section": (
        _drop_toolchain,
        "no [toolchains.sm_90] entry records what built it",
        ["no [toolchains.sm_90] entry records what built it"],
        ["manifest.lock: ", "no [toolchains.sm_90] entry records what built it"],
    ),
    "the sm_90 evidence file and its lock entry removed": (
        _drop_evidence,
        "missing: the sm_90 table is certified on hardware and its evidence lives here",
        ["missing: the sm_90 table is certified on hardware and its evidence lives here"],
        [
            "invalid 1: netra/_data/evidence/sm_90.json (missing: the sm_90 table is certified on hardware and "
            "its evidence lives here",
        ],
    ),
    "an sm_90 evidence record contradicting its table summary": (
        _member_edit("release/evidence/sm_90.json", _contradict_a_summary),
        "differs from its summary in tables/sm_90.json (max_rel_deviation)",
        ["evidence/sm_90.json", "differs from its summary in ", "tables/sm_90.json (max_rel_deviation)"],
        [
            "invalid 1: netra/_data/evidence/sm_90.json (",
            "differs from its summary in ",
            "netra/_data/tables/sm_90.json (max_rel_deviation)",
        ],
    ),
    "a gfx950 fallback for a contract gfx950 builds": (
        _member_edit(GEMMA, lambda b: b + GAP.encode()),
        "the install's files disagree: manifests/models/gemma-2-9b.toml: the Gemma-2-9B fallback says gfx950 does not "
        "build rmsnorm(hidden=3584,weight_offset=1), but the lock has ",
        [
            "the install's files disagree: ",
            "gemma-2-9b.toml: the Gemma-2-9B fallback says gfx950 does not "
            "build rmsnorm(hidden=3584,weight_offset=1), but the lock has",
        ],
        [
            "invalid 1: netra/_data/manifests/models/gemma-2-9b.toml (the Gemma-2-9B fallback says gfx950 does not "
            "build rmsnorm(hidden=3584,weight_offset=1), but the lock has"
        ],
    ),
}


@pytest.fixture(scope="module")
def resealed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("resealed")
    return {case: reseal(wheel, base / str(i), edit) for i, (case, (edit, *_)) in enumerate(RESEALED.items())}


@pytest.mark.parametrize("case", sorted(RESEALED))
def test_doctor_and_catalog_say_where_a_resealed_installs_own_files_disagree(
    venv: Venv, wheel: Path, resealed: dict[str, Path], case: str
) -> None:
    """Each install re-sealed consistently (lock, build.json and RECORD recomputed after the edit), so
    every hash vouches for it; `verify-wheel --lock` refused each, doctor accepted each (issue 29).
    What the files say to each other is checked whatever the hashes vouch for: doctor fails naming the
    disagreement, `netra catalog` refuses rather than list both sides of it, and `verify-wheel` on the
    wheel alone refuses it for the same reason (one verifier; it accepted the fallback case before)."""
    _, says, catalog_says, gate_says = RESEALED[case]
    try:
        _pip_install(venv, resealed[case])
        r = venv.run("netra", "doctor")
        assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
        problems = [ln for ln in r.stdout.splitlines() if ln.startswith("problem: ")]
        assert any(says in ln for ln in problems), log(r)
        c = venv.run("netra", "catalog")
        assert c.returncode == 1 and "Traceback" not in c.stderr and c.stdout == "", log(c)
        (line,) = [ln for ln in c.stderr.splitlines() if ln.startswith("netra: error: ")]
        assert all(f in line for f in catalog_says), log(c)
        # One verifier (netra.runtime.verifier): the wheel gate, checking the resealed wheel against the
        # lock it carries, refuses it for what doctor names, by construction.
        refused(venv.run("netra", "verify-wheel", resealed[case]), *gate_says)
        # The anchor outside the install: the release's lock digest, which no reseal can keep.
        with zipfile.ZipFile(wheel) as z:
            released = _sha(z.read(DATA + "manifest.lock"))
        e = venv.run("netra", "doctor", "--json", "--expect-lock", released)
        assert e.returncode == 1 and json.loads(e.stdout)["expect_lock"]["code"] == "lock_differs", log(e)
    finally:
        _pip_install(venv, wheel)
    assert venv.run("netra", "doctor").returncode == 0


# -- a code object's launch data changed in a built wheel (descriptor, kernel attributes) -------------


def _kd_offset(blob: bytes, symbol: str) -> int:
    elf = ELFFile(io.BytesIO(blob))
    for tab in (".symtab", ".dynsym"):
        st = elf.get_section_by_name(tab)
        found = st.get_symbol_by_name(f"{symbol}.kd") if st is not None else None
        if found:
            addr = found[0]["st_value"]
            sec = next(s for s in elf.iter_sections()
                       if s["sh_type"] != "SHT_NOBITS" and s["sh_addr"] <= addr < s["sh_addr"] + s["sh_size"])  # fmt: skip
            return sec["sh_offset"] + addr - sec["sh_addr"]
    raise AssertionError(f"no {symbol}.kd")


def _max_threads_offset(blob: bytes, symbol: str) -> int:
    """The x of EIATTR_MAX_THREADS (0x05, a 12-byte record) in .nv.info.<kernel>."""
    elf = ELFFile(io.BytesIO(blob))
    sec = elf.get_section_by_name(f".nv.info.{symbol}")
    raw, i = sec.data(), 0
    while i < len(raw):
        fmt, attr = raw[i], raw[i + 1]
        i += 2
        if fmt in (2, 3):
            i += 2
        elif fmt == 4:
            (size,) = struct.unpack_from("<H", raw, i)
            i += 2
            if attr == 0x05:
                return sec["sh_offset"] + i
            i += size
    raise AssertionError(f"no max-threads attribute for {symbol}")


GFX = "netra_rmsnorm_h4096_wo0_b256"


@pytest.fixture(scope="module")
def launch_tampered(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The wheel with gfx950 LDS 0 -> 65536 in one descriptor and max threads changed in the first cubin
    it ships (of whichever NVIDIA class sorts first), build.json (and its record_sha256) and RECORD
    recomputed. Returns it and {artifact: data path}."""
    with zipfile.ZipFile(wheel) as z:
        cubins = sorted(n for n in z.namelist() if n.endswith(".cubin"))
    sm = cubins[0][len(DATA) :]
    targets = {GFX: f"gfx950/{GFX}.hsaco", Path(sm).stem: sm}

    def edit(m: dict[str, bytes]) -> None:
        b = bytearray(m[DATA + targets[GFX]])
        off = _kd_offset(bytes(b), GFX)
        assert struct.unpack_from("<I", b, off)[0] == 0  # group_segment_fixed_size: no LDS
        struct.pack_into("<I", b, off, 65536)
        m[DATA + targets[GFX]] = bytes(b)
        name = Path(sm).stem
        c = bytearray(m[DATA + sm])
        off = _max_threads_offset(bytes(c), name)
        struct.pack_into("<I", c, off, struct.unpack_from("<I", c, off)[0] * 2)
        m[DATA + sm] = bytes(c)

    return reseal(wheel, tmp_path_factory.mktemp("launch-tampered"), edit), targets


def test_verify_wheel_refuses_changed_launch_data_against_the_tree_lock(
    tree: Path, launch_tampered: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    w, targets = launch_tampered
    r = netra("verify-wheel", str(w), "--lock", str(tree / LOCK))
    line = refused(r, "altered 2:", "launch digest (descriptor and metadata)")
    for path in targets.values():
        assert DATA + path in line, line


RUNTIME_SELECT = """
import json, sys
from netra.errors import NetraError
from netra.runtime import open_catalog
out = {}
for cls, artifact in json.loads(sys.argv[1]):
    cat = open_catalog(cls)
    cand = next(c for e in cat.table.entries.values() for c in e.candidates if c.artifact == artifact)
    try:
        out[artifact] = ["served", cat.kernel(cand).artifact]  # any maturity: the policy is not tested here
    except NetraError as e:
        out[artifact] = [type(e).__name__, e.message]
    other = next(c for e in cat.table.entries.values() for c in e.candidates if c.artifact != artifact)
    out[artifact + " (another kernel)"] = ["served", cat.kernel(other).artifact]
print(json.dumps(out))
"""


def test_doctor_and_the_runtime_refuse_changed_launch_data(
    venv: Venv, wheel: Path, launch_tampered: tuple[Path, dict[str, str]]
) -> None:
    w, targets = launch_tampered
    _pip_install(venv, w)
    try:
        r = venv.run("netra", "doctor")
        assert r.returncode == 1, log(r)
        for path in targets.values():
            assert f"problem: altered code_object {path}: launch_sha256" in r.stdout, log(r)
        picks = [[path.split("/")[0], artifact] for artifact, path in targets.items()]  # [class, artifact]
        rt = venv.run("python", "-c", RUNTIME_SELECT, json.dumps(picks))
        assert rt.returncode == 0, log(rt)
        got = json.loads(rt.stdout.strip().splitlines()[-1])
        for _, artifact in picks:
            kind, message = got[artifact]
            assert kind == "AlteredFileError", got
            assert "what it launches with (descriptor and metadata)" in message and artifact in message, (
                message
            )
            assert got[artifact + " (another kernel)"][0] == "served", got  # only that kernel is refused
    finally:
        _pip_install(venv, wheel)


def test_doctor_names_a_truncated_code_object_without_a_traceback(venv: Venv) -> None:
    data = (
        Path(
            venv.run(
                "python", "-c", "import netra, os; print(os.path.dirname(netra.__file__))"
            ).stdout.strip()
        )
        / "_data"
    )
    victim = data / "gfx950" / f"{GFX}.hsaco"
    original = victim.read_bytes()
    try:
        for cut in (0, 64, 100, len(original) // 2, len(original) - 1):
            victim.write_bytes(original[:cut])
            r = venv.run("netra", "doctor")
            assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
            assert f"problem: altered code_object gfx950/{GFX}.hsaco" in r.stdout, log(r)
    finally:
        victim.write_bytes(original)
    assert venv.run("netra", "doctor").returncode == 0


# -- concurrency ------------------------------------------------------------------------------------


def test_two_builds_into_one_folder_never_fail_or_corrupt_each_other(
    tree: Path, tmp_path: Path, warm_cache: Path
) -> None:
    root = sources(tree, tmp_path / "tree")
    locked = lock_mod.read(root / LOCK)
    want = {a.file: a.code_sha256 for a in locked.artifacts}
    env = clean_env(PYTHONPATH=str(REPO))
    for round_ in range(2):
        out = tmp_path / f"out{round_}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-m", "netra", "build", str(out), "--root", str(root), "-q", "-j", "1"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        results = [(p.wait(timeout=TIMEOUT), p.stderr.read() if p.stderr else "") for p in procs]
        for p in procs:
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()
        assert all(rc == 0 for rc, _ in results), results
        found = {p.relative_to(out).as_posix(): _sha(p.read_bytes()) for p in out.rglob("*") if p.is_file()}
        assert found == want  # every code object, whole, and nothing else (no temporary names)


def test_two_netra_lock_at_once_end_with_one_valid_lock(tree: Path, tmp_path: Path) -> None:
    root = sources(tree, tmp_path / "tree")
    expected = (root / LOCK).read_bytes()
    (root / LOCK).write_text(_truncate_last_artifact(expected.decode()))  # both have work to do
    env = clean_env(PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "netra", "lock", "--root", str(root)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert any("waiting for the release lock held by pid" in err for _, err in outs), (
        outs
    )  # they were serialized
    assert (root / LOCK).read_bytes() == expected
    lock_mod.read(root / LOCK)
    assert sorted(p.name for p in (root / "release").iterdir()) == [
        ".netra-lock",
        "evidence",
        "manifest.lock",
        "tables",
    ]


# -- SIGINT and SIGTERM during every command ----------------------------------------------------------


def _release(root: Path) -> dict[str, bytes]:
    """release/ as netra writes it (the writelock's own file, created empty and kept, aside)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in (root / "release").rglob("*")
            if p.is_file() and p.name != ".netra-lock"}  # fmt: skip


def _signal_when(cmd: list[str], marker: str, sig: int, *, env: dict[str, str], group: bool, cwd: Path | None = None,
                 delay: float = 0.0) -> tuple[subprocess.CompletedProcess[str], bool]:  # fmt: skip
    """Run cmd, send `sig` (to its process group with `group`) once `marker` appears in its output."""
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, preexec_fn=signals_default)  # fmt: skip
    seen, sent = [], False
    assert p.stdout is not None
    for line in p.stdout:
        seen.append(line)
        if marker in line and not sent:
            time.sleep(delay)
            if group:
                os.killpg(p.pid, sig)
            else:
                p.send_signal(sig)
            sent = True
            break
    seen.append(p.stdout.read())
    p.stdout.close()
    rc = p.wait(timeout=TIMEOUT)
    return subprocess.CompletedProcess(cmd, rc, "".join(seen), ""), sent


@pytest.mark.parametrize(
    ("command", "marker", "sig"),
    [("build", "[5/", signal.SIGINT), ("build", "[40/", signal.SIGTERM), ("lock", "[5/", signal.SIGTERM),
     ("lock", "[50/", signal.SIGINT)],
)  # fmt: skip
def test_an_interrupted_netra_command_leaves_nothing(
    tree: Path, tmp_path: Path, command: str, marker: str, sig: int, warm_cache: Path
) -> None:
    root = sources(tree, tmp_path / "tree")
    (root / LOCK).write_text(_truncate_last_artifact((root / LOCK).read_text()))  # `lock` would rewrite it
    release = _release(root)
    tmpdir, out = private(tmp_path), tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "netra",
        command,
        *([str(out)] if command == "build" else []),
        "--root",
        str(root),
    ]
    r, sent = _signal_when(
        cmd, marker, sig, env=clean_env(PYTHONPATH=str(REPO), TMPDIR=str(tmpdir)), group=False
    )
    assert sent, r.stdout
    assert r.returncode == 128 + sig, r.stdout
    assert "netra: interrupted: nothing was written" in r.stdout and "Traceback" not in r.stdout, r.stdout
    assert not out.exists()
    assert _release(root) == release  # the lock and the tables untouched
    assert empty_eventually(tmpdir) == []


@pytest.mark.parametrize(
    ("marker", "sig", "group"),
    [("[5/", signal.SIGINT, True), ("[5/", signal.SIGTERM, False), ("[30/", signal.SIGTERM, True),
     ("code objects built and gated", signal.SIGTERM, False)],
)  # fmt: skip
def test_an_interrupted_wheel_build_leaves_no_wheel_and_no_temporaries(
    tree: Path, tmp_path: Path, marker: str, sig: int, group: bool, warm_cache: Path
) -> None:
    """`python -m build --no-isolation`, signalled like Ctrl-C (SIGINT to the process group) or a
    supervisor (SIGTERM to the frontend or its group), at several moments."""
    root = copy_repo(tmp_path / "src", tree)
    before = (root / LOCK).read_bytes()
    outdir, tmpdir = tmp_path / "dist", private(tmp_path)
    cmd = [sys.executable, "-m", "build", "--no-isolation", "--skip-dependency-check", "--wheel", "--outdir",
           str(outdir), str(root)]  # fmt: skip
    r, sent = _signal_when(cmd, marker, sig, env=clean_env(TMPDIR=str(tmpdir)), group=group, cwd=root)
    assert sent, r.stdout
    assert r.returncode != 0, r.stdout
    # The frontend prints its own KeyboardInterrupt traceback (build/__main__.py): nothing else may.
    ours = [
        t for t in r.stdout.split("Traceback (most recent call last)")[1:] if "/build/__main__.py" not in t
    ]
    assert not ours, r.stdout
    assert not outdir.exists() or not list(outdir.iterdir()), sorted(outdir.iterdir())
    assert empty_eventually(tmpdir) == [], r.stdout  # ours, hatchling's and the frontend's temporaries
    assert (root / LOCK).read_bytes() == before


@pytest.mark.parametrize(
    ("marker", "sig", "group"),
    [("[5/", signal.SIGINT, True), ("[30/", signal.SIGTERM, False),
     ("code objects built and gated", signal.SIGTERM, False),
     ("code objects built and gated", signal.SIGKILL, False),
     ("netra: checking ", signal.SIGTERM, False), ("netra: checking ", signal.SIGKILL, False)],
)  # fmt: skip
def test_hatchling_run_directly_and_interrupted_leaves_nothing(
    tree: Path, tmp_path: Path, marker: str, sig: int, group: bool, warm_cache: Path
) -> None:
    """`python -m hatchling build -t wheel` on the tree, without netra_backend: the hook keeps the
    build's temporaries (the staged files, the tools' files, hatchling's half-written archive) in one
    scratch folder. SIGINT, SIGTERM: removed, one line, the process ends by that signal; SIGKILL, after
    which nothing runs in the process, the scratch folder's janitor removes it. "netra: checking" is
    the gate at work on the archive hatchling has already put in the output folder: it goes too."""
    root = copy_repo(tmp_path / "src", tree)
    before = (root / LOCK).read_bytes()
    outdir, tmpdir = tmp_path / "dist", private(tmp_path)
    cmd = [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(outdir)]
    r, sent = _signal_when(cmd, marker, sig, env=clean_env(TMPDIR=str(tmpdir)), group=group, cwd=root)
    assert sent, r.stdout
    assert r.returncode == -sig, r.stdout
    assert "Traceback" not in r.stdout, r.stdout
    if sig != signal.SIGKILL:
        name = signal.Signals(sig).name
        assert f"netra: error: the wheel build was interrupted ({name}); no wheel was written" in r.stdout
    assert empty_eventually(tmpdir) == [], r.stdout
    assert not outdir.exists() or empty_eventually(outdir) == [], r.stdout
    assert (root / LOCK).read_bytes() == before


# -- issue 14: tracked inputs that are not regular files, or are duplicated ---------------------------


def _folder_for(rel: str) -> Callable[[Path], None]:
    """The tracked file `rel` replaced by a folder (empty, or holding a file: both were skipped once)."""

    def make(root: Path) -> None:
        (root / rel).unlink()
        (root / rel).mkdir()
        if rel.startswith("kernels/"):
            (root / rel / "x.toml").write_text("")

    return make


def _append(rel: str, text: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        with (root / rel).open("a") as f:
            f.write(text)

    return make


def _folder_in_place(rel: str, inner: str) -> Callable[[Path], None]:
    """The tracked file `rel` moved into a folder of its own name (`x.toml/x.toml`)."""

    def make(root: Path) -> None:
        data = (root / rel).read_bytes()
        (root / rel).unlink()
        (root / rel).mkdir()
        (root / rel / inner).write_bytes(data)

    return make


NOT_FILES: dict[str, tuple[Callable[[Path], None], list[str]]] = {
    "model manifest replaced by an empty folder": (
        _folder_for("manifests/models/gemma-2-9b.toml"),
        ["manifests/models/gemma-2-9b.toml", "is a folder, not a regular file"],
    ),
    "template manifest replaced by a folder": (
        _folder_for("kernels/cuda/rmsnorm.toml"),
        ["kernels/cuda/rmsnorm.toml", "is a folder, not a regular file"],
    ),
    "template source replaced by a folder": (
        _folder_for("kernels/gfx950/rmsnorm.s"),
        ["kernels/gfx950/rmsnorm.s", "is a folder, not a regular file"],
    ),
    "a model manifest replaced by a folder of manifests": (
        _folder_in_place("manifests/models/gemma-2-9b.toml", "gemma.toml"),
        ["manifests/models/gemma-2-9b.toml", "is a folder, not a regular file"],
    ),
    "a duplicate [[ops]] entry in a model manifest": (
        _append(
            "manifests/models/gemma-2-9b.toml",
            '\n[[ops]]\nop = "rmsnorm"\nhidden = 3584\nweight_offset = 1\n',
        ),
        ["manifests/models/gemma-2-9b.toml", "duplicate of entry 0", "rmsnorm(hidden=3584,weight_offset=1)"],
    ),
    "a duplicate [[ops]] entry that differs only in its note": (
        _append(
            "manifests/models/gemma-2-9b.toml",
            '\n[[ops]]\nop = "rmsnorm"\nuse = "again"\nweight_offset = 1\nhidden = 3584\n',
        ),
        ["manifests/models/gemma-2-9b.toml", "duplicate of entry 0"],
    ),
    "a duplicate [[fallbacks]] entry in a model manifest": (
        _append(
            "manifests/models/gemma-2-9b.toml",
            '\n[[fallbacks]]\nop = "softcap"\nreason = "a"\n[[fallbacks]]\nop = "softcap"\nreason = "b"\n',
        ),
        ["manifests/models/gemma-2-9b.toml", "fallbacks", "duplicate of entry"],
    ),
}


@pytest.mark.parametrize("case", sorted(NOT_FILES))
def test_a_tracked_input_that_is_not_a_regular_file_or_is_duplicated_is_refused_naming_itself(
    tmp_path: Path, case: str
) -> None:
    """Never skipped: a folder where a manifest or source was once made `netra lock` write a lock with
    one model's contracts silently gone, and a repeated [[ops]] entry was accepted."""
    make, fragments = NOT_FILES[case]
    root = sources(REPO, tmp_path / "tree")
    make(root)
    with pytest.raises(NetraError) as e:
        manifests.load(root)
    msg = str(e.value)
    assert "\n" not in msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"


def test_two_fallbacks_for_two_contracts_of_one_family_with_one_use_are_two_fallbacks(tmp_path: Path) -> None:
    """A valid manifest was refused (issue 29): fallbacks were told apart by op and `use` text, so a
    second gfx950 contract of fused_add_rmsnorm noted like the first was "a duplicate". A fallback
    is its contract on its class; the same contract twice on one class is still one slip."""
    root = sources(REPO, tmp_path / "tree")
    gemma = "manifests/models/gemma-2-9b.toml"
    op = 'op = "fused_add_rmsnorm"\nhidden = 4096\nweight_offset = 1\n'
    gap = 'gpu_class = "gfx950"\nreason = "no gfx950 template for fused_add_rmsnorm"\n'
    _append(gemma, f'\n[[ops]]\n{op}use = "the final residual add + norm"\n')(root)
    _append(gemma, f'\n[[fallbacks]]\n{op}{gap}use = "the final residual add + norm"\n')(root)
    m = manifests.load(root)
    gaps = {
        (f.contract, f.gpu_class)
        for f in m.fallbacks
        if f.model == "Gemma-2-9B" and f.op == "fused_add_rmsnorm"
    }
    assert gaps == {
        ("fused_add_rmsnorm(hidden=3584,weight_offset=1)", "gfx950"),
        ("fused_add_rmsnorm(hidden=4096,weight_offset=1)", "gfx950"),
    }
    _append(gemma, f'\n[[fallbacks]]\n{op}{gap}use = "noted otherwise"\n')(root)  # that contract again
    with pytest.raises(NetraError) as e:
        manifests.load(root)
    msg = str(e.value)
    assert (
        "duplicate of entry" in msg and "(fused_add_rmsnorm(hidden=4096,weight_offset=1) on gfx950)" in msg
    ), msg


def test_netra_lock_refuses_a_manifest_replaced_by_a_folder_and_leaves_the_lock(tmp_path: Path) -> None:
    root = sources(REPO, tmp_path / "tree")
    before = _release(root)
    _folder_for("manifests/models/qwen3-30b-a3b.toml")(root)
    tmpdir = private(tmp_path)
    r = netra("lock", "--root", str(root), "-q", tmpdir=tmpdir)
    refused(r, "manifests/models/qwen3-30b-a3b.toml", "is a folder, not a regular file", "git checkout")
    assert "[1/" not in r.stderr  # refused before anything was compiled
    assert _release(root) == before
    assert empty_eventually(tmpdir) == []


# -- issue 14: tool output and host files decoded by one policy; detection never crashes or hangs -----


def _version_shim(folder: Path, real: str, name: str, garbage: bytes, *, keep_version: bool) -> Path:
    """`name` that runs the real tool, except `--version`: the real version's text with bytes that are not
    UTF-8 around it (keep_version), or only those bytes."""
    folder.mkdir(exist_ok=True)
    (folder / "garbage").write_bytes(garbage)
    version = f"{real} --version; " if keep_version else ""
    shim = folder / name
    shim.write_text(
        f'#!/bin/sh\ncase " $* " in *" --version "*) cat "{folder}/garbage"; {version}'
        f'cat "{folder}/garbage"; exit 0;; esac\nexec {real} "$@"\n'
    )
    shim.chmod(0o755)
    return shim


NOT_UTF8 = b"\xff\xfe\xc3(\xa0\xa1 \xe2\x28\xa1\r\n\x00\x80\n"


@pytest.mark.parametrize("tool", ["nvcc", "llvm-mc"])
@pytest.mark.parametrize("keep_version", [True, False], ids=["with-version", "garbage-only"])
def test_a_tool_printing_bytes_that_are_not_utf8_is_read_by_the_one_decoding_policy(
    tmp_path: Path, tool: str, keep_version: bool
) -> None:
    """nvcc whose `--version` printed non-UTF-8 bytes ended in a UnicodeDecodeError traceback. Now its
    version is read through the bytes (the toolchain proves itself), or the candidate is refused in one
    line naming the variable that chose it."""
    from netra.errors import ToolchainError
    from netra.targets.gfx950 import toolchain as gfx_tc
    from netra.targets.sm_90 import toolchain as sm_tc

    bindir = tmp_path / "bin"
    if tool == "nvcc":
        shim = _version_shim(bindir, NVCC, "nvcc", NOT_UTF8, keep_version=keep_version)
        env, discover, var = {**os.environ, "NETRA_NVCC": str(shim)}, sm_tc.discover, "NETRA_NVCC"
    else:
        _version_shim(bindir, str(LLVM_BIN / "llvm-mc"), "llvm-mc", NOT_UTF8, keep_version=keep_version)
        for t in ("ld.lld", "llvm-objdump"):
            (bindir / t).symlink_to(LLVM_BIN / t)
        env, discover, var = (
            {**os.environ, "NETRA_LLVM_BINDIR": str(bindir)},
            gfx_tc.discover,
            "NETRA_LLVM_BINDIR",
        )
    if keep_version:
        tools = discover(env)
        assert tools.identity.version[:2].isdigit(), tools.identity
    else:
        with pytest.raises(ToolchainError) as e:
            discover(env)
        assert f"{var}={bindir if tool != 'nvcc' else shim}" in str(e.value) and "\n" not in str(e.value)


def _kfd(root: Path) -> Path:
    """A KFD topology as a broken host shows it: one good gfx950 node (whose name and properties carry
    bytes that are not UTF-8), a node whose properties are a FIFO, one whose properties are a folder,
    and an entry whose name is not UTF-8."""
    nodes = root / "nodes"
    for nid in range(4):
        (nodes / str(nid)).mkdir(parents=True)
    (nodes / "0" / "properties").write_bytes(b"simd_count 0\ngfx_target_version 0\n")
    (nodes / "1" / "properties").write_bytes(
        b"simd_count 256\nmarketing \xff\xfe\x80\ngfx_target_version 90500\nvendor_id 4098\n"
    )
    (nodes / "1" / "name").write_bytes(b"MI355\xffX\n")
    os.mkfifo(nodes / "2" / "properties")
    (nodes / "3" / "properties").mkdir()
    os.mkdir(os.fsencode(nodes) + b"/4\xff")
    return nodes


def test_gpu_detection_on_a_broken_sysfs_reports_each_source_and_never_hangs(tmp_path: Path) -> None:
    from netra.runtime import gpus

    nodes = _kfd(tmp_path)
    found = gpus.detect(nodes, tools=False)  # a hang fails the suite's timeout; it used to, on the FIFO
    amd = [g for g in found.gpus if g.source == "kfd-sysfs"]
    assert [(g.gpu_class, g.index, g.name) for g in amd] == [("gfx950", 1, "MI355\ufffdX")], found
    note = next(n for n in found.notes if n.startswith("kfd sysfs"))
    assert "node 2: unreadable" in note and "FIFO" in note, note
    assert "node 3: unreadable" in note and "is a folder, not a regular file" in note, note
    assert "not a node: 4\\xff" in note, note
    note.encode("utf-8")  # printable: nothing of the host's bytes leaks into it undecoded


GARBAGE_SMI = {
    "not UTF-8": "printf '\\377\\376 garbage, 9.0\\n0, H\\377200, 9.0\\n'",
    "crashes": "kill -SEGV $$",
    "fails": "echo 'NVIDIA-SMI has failed' >&2; exit 9",
    "prints random lines": "printf 'a,b\\n,,,\\n9999999999, x, 9.0\\n\\n¹, x, 9.0\\n0, x, 9.0.1\\n'",
    # every query (GPUs, driver version, clocks) answered with numbers int() refuses to convert
    "prints numbers of 5000 digits": f"printf '{'7' * 5000}.0, H200, {'9' * 5000}.0\\n'",
}


@pytest.mark.parametrize("case", sorted(GARBAGE_SMI))
def test_doctor_with_a_garbage_nvidia_smi_and_a_broken_sysfs_reports_them_and_still_counts_the_rest(
    tmp_path: Path, case: str
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\n{GARBAGE_SMI[case]}\n")
    (bindir / "nvidia-smi").chmod(0o755)
    nodes = _kfd(tmp_path)
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    r = netra("doctor", "--json", "--sysfs-nodes", str(nodes), env=env, timeout=120)
    assert "Traceback" not in r.stderr, log(r)
    report = json.loads(r.stdout)
    seen = {(g["vendor"], g["class"], g["source"]) for g in report["gpus"]}
    assert ("amd", "gfx950", "kfd-sysfs") in seen, report["gpus"]  # the sysfs node still counts
    smi = next(n for n in report["gpu_detection"] if n.startswith("nvidia-smi"))
    if case == "not UTF-8":
        assert ("nvidia", "sm_90", "nvidia-smi") in seen and "1 line(s) of its output not understood" in smi
        assert any(g["name"] == "H\ufffd200" for g in report["gpus"])
    elif case == "prints random lines":
        assert smi == "nvidia-smi: 0 GPU(s) (5 line(s) of its output not understood)", smi
    elif case == "prints numbers of 5000 digits":
        assert smi == "nvidia-smi: 0 GPU(s) (1 line(s) of its output not understood)", smi
    else:
        assert smi.startswith("nvidia-smi: failed") and ("SIGSEGV" in smi or "exit status 9" in smi), smi
    # nvidia-smi showed nothing it could read: the driver API was asked too, and says so
    if case != "not UTF-8":
        assert any(n.startswith("CUDA driver") for n in report["gpu_detection"]), report["gpu_detection"]


def test_a_tool_version_with_numbers_of_5000_digits_is_refused_in_one_line(tmp_path: Path) -> None:
    """int() raises ValueError past 4300 digits: nvcc or llvm-mc printing such a version ended in that
    traceback. Now the candidate is not a toolchain, said in one line naming the variable that chose it."""
    from netra.errors import ToolchainError
    from netra.targets.gfx950 import toolchain as gfx_tc
    from netra.targets.sm_90 import toolchain as sm_tc

    huge = "9" * 5000
    nvcc = _version_shim(tmp_path / "cuda", NVCC, "nvcc", f"Cuda compilation tools, release {huge}.0, V{huge}.0.1\n".encode(),
                         keep_version=False)  # fmt: skip
    llvm = tmp_path / "llvm"
    _version_shim(
        llvm, str(LLVM_BIN / "llvm-mc"), "llvm-mc", f"LLVM version {huge}.1.8\n".encode(), keep_version=False
    )
    for t in ("ld.lld", "llvm-objdump"):
        (llvm / t).symlink_to(LLVM_BIN / t)
    for discover, var, value in (
        (sm_tc.discover, "NETRA_NVCC", nvcc),
        (gfx_tc.discover, "NETRA_LLVM_BINDIR", llvm),
    ):
        with pytest.raises(ToolchainError) as e:
            discover({**os.environ, var: str(value)})
        assert f"{var}={value}" in str(e.value) and "\n" not in str(e.value), e.value


def test_doctor_reads_a_record_whose_size_fields_are_not_numbers(venv: Venv) -> None:
    """str.isdigit() holds for '²', which int() refuses, and int() refuses 5000 digits: a RECORD row with
    either size ended doctor in a ValueError traceback. The sizes are only a hint; the hashes decide."""
    (record,) = package_dir(str(venv.python)).parent.glob("netra_kernel-*.dist-info/RECORD")
    original = record.read_bytes()
    rows = original.decode().splitlines()
    for i, size in ((0, "²"), (1, "7" * 5000)):
        path, digest, _ = rows[i].rsplit(",", 2)
        rows[i] = f"{path},{digest},{size}"
    try:
        record.write_text("\n".join(rows) + "\n")
        r = venv.run("netra", "doctor")
        assert "Traceback" not in r.stderr and r.returncode == 0, log(r)
        assert r.stdout.rstrip().endswith("result: OK"), log(r)
    finally:
        record.write_bytes(original)


def test_netra_own_code_damaged_in_an_install_is_one_line_with_the_reinstall(venv: Venv) -> None:
    """A module of netra deleted or edited after pip installed it: the command that imports it ended in
    an ImportError or SyntaxError traceback. It is the install that is damaged: one line, the fix."""
    pkg = package_dir(str(venv.python))
    inventory, environment = pkg / "cli" / "inventory.py", pkg / "cli" / "environment.py"
    saved = {p: p.read_bytes() for p in (inventory, environment)}
    try:
        inventory.unlink()
        environment.write_bytes(saved[environment] + b"\ndef (\n")
        for argv, says in ((["catalog"], "ImportError: cannot import name 'inventory'"),
                           (["env"], "SyntaxError: invalid syntax (environment.py")):  # fmt: skip
            r = venv.run("netra", *argv)
            line = refused(r, "netra's own code in", "failed to load", says, "this install is damaged",
                           "--force-reinstall --no-deps netra-kernel==")  # fmt: skip
            assert r.stderr == line + "\n", log(r)
    finally:
        for p, data in saved.items():
            p.write_bytes(data)
    assert venv.run("netra", "env").returncode == 0


def test_doctor_counts_one_altered_lock_once_with_every_check_that_found_it(venv: Venv) -> None:
    """One flipped byte in the installed lock fails its RECORD hash, its binding to build.json and its
    parse: once three problems and "3 altered" files, now one altered file, one line, every check."""
    lock = package_dir(str(venv.python)) / "_data" / "manifest.lock"
    original = lock.read_bytes()
    try:
        lock.write_bytes(bytes([original[0] ^ 0x20]) + original[1:])
        r = venv.run("netra", "doctor", "--json")
        assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
        doc = json.loads(r.stdout)
        (altered,) = doc["files"]["altered"]
        assert (altered["path"], altered["kind"]) == ("manifest.lock", "lock")
        assert set(altered["checks"]) == {"build_record", "sha256", "parse"}, altered
        problems = [p for p in doc["problems"] if "manifest.lock" in p]
        assert len(problems) == 1 and problems[0].startswith("altered lock manifest.lock: "), doc["problems"]
    finally:
        lock.write_bytes(original)


def test_doctor_blames_a_record_that_lost_the_locks_line_not_the_lock(venv: Venv) -> None:
    """RECORD without its manifest.lock row (the lock itself intact) once read as `altered lock
    manifest.lock: sha256 ... (expected None from RECORD)`, with the note that reinstalling the wheel
    changes nothing. The lock is fine; RECORD is damaged, and a reinstall rewrites it."""
    (record,) = package_dir(str(venv.python)).parent.glob("netra_kernel-*.dist-info/RECORD")
    original = record.read_bytes()
    rows = [r for r in original.decode().splitlines() if not r.startswith("netra/_data/manifest.lock,")]
    assert len(rows) == len(original.decode().splitlines()) - 1
    try:
        record.write_text("\n".join(rows) + "\n")
        r = venv.run("netra", "doctor")
        assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
        problems = [ln for ln in r.stdout.splitlines() if ln.startswith("problem:")]
        assert problems == [
            "problem: RECORD lists no sha256 for manifest.lock: the install's RECORD is damaged, not the file"
        ], log(r)
        assert "None" not in r.stdout and "install --force-reinstall" in r.stdout, log(r)
        assert "did not pass the release gate" not in r.stdout, log(r)
    finally:
        record.write_bytes(original)


# -- issue 14: the Python API given wrong types -------------------------------------------------------

API_MISUSE: dict[str, tuple[str, type, list[str]]] = {
    "open_catalog with a list": ("open_catalog(['sm_90'])", TypeError, ["open_catalog", "gpu_class", "list"]),
    "select with an unhashable policy": (
        "open_catalog('sm_90').select('rmsnorm(hidden=4096,weight_offset=0)', ['accepted'])",
        TypeError,
        ["select", "policy", "list"],
    ),
    "select with an unhashable tactic": (
        "open_catalog('sm_90').select('rmsnorm(hidden=4096,weight_offset=0)', tactic={'b': 1})",
        TypeError,
        ["select", "tactic", "dict"],
    ),
    "select with rows as a string": (
        "open_catalog('sm_90').select('rmsnorm(hidden=4096,weight_offset=0)', tactic='w8', rows='8')",
        TypeError,
        ["select", "rows", "str"],
    ),
    "select with an unknown policy": (
        "open_catalog('sm_90').select('rmsnorm(hidden=4096,weight_offset=0)', 'gold')",
        ValueError,
        ["select", "policy", "'gold'"],
    ),
    "a Contract with a string parameter": (
        "Contract('rmsnorm', {'hidden': '4096', 'weight_offset': 0})",
        TypeError,
        ["Contract", "parameter hidden", "str '4096'"],
    ),
    "Contract.of with a float": (
        "Contract.of('rmsnorm', hidden=4096.0, weight_offset=0)",
        TypeError,
        ["hidden"],
    ),
    "a contract key with a parameter of 5000 digits": (
        "open_catalog('sm_90').select('rmsnorm(hidden=' + '9' * 5000 + ',weight_offset=0)')",
        ValueError,
        ["rmsnorm(hidden=999", "is not name=integer", "at most 18 digits"],
    ),
    "a contract key with digits of another script": (
        "Contract.parse('rmsnorm(hidden=\\u0664\\u0660\\u0669\\u0666,weight_offset=0)')",
        ValueError,
        ["parameter 'hidden=", "is not name=integer"],
    ),
    "a contract that is an int": (
        "open_catalog('sm_90').select(4096)",
        TypeError,
        ["select", "contract", "int"],
    ),
    "kernel with something that is no candidate": (
        "open_catalog('sm_90').kernel('netra_x')",
        TypeError,
        ["Catalog.kernel", "Candidate"],
    ),
    "kernel_for with rows as a string": (
        "__import__('netra.torch').torch.kernel_for('rmsnorm(hidden=4096,weight_offset=0)', '1')",
        TypeError,
        ["kernel_for", "rows", "str"],
    ),
}


@pytest.mark.parametrize("case", sorted(API_MISUSE))
def test_the_python_api_given_wrong_types_raises_the_projects_error_naming_the_argument(case: str) -> None:
    """Each once escaped as a bare TypeError from a dict lookup, torch's AssertionError, or was accepted."""
    expr, kind, fragments = API_MISUSE[case]
    if "torch" in expr:
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available() and "without CUDA" in case:
            pytest.skip("this torch has CUDA")
    from netra.runtime import Contract, open_catalog

    with pytest.raises(NetraError) as e:
        eval(expr, {"open_catalog": open_catalog, "Contract": Contract})
    assert isinstance(e.value, kind), type(e.value).__mro__
    msg = str(e.value)
    assert "\n" not in msg
    for f in fragments:
        assert f in msg, f"{f!r} not in {msg!r}"


def test_kernel_for_on_a_torch_without_cuda_answers_the_falsy_device_route_not_an_exception() -> None:
    """One behaviour, as docs/torch.md says (issue 29): the composite serves the call, so kernel_for
    says so with the route a call on CPU tensors takes; it raised RuntimeUnavailableError before."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    import netra.torch as nt

    for device in (None, "cuda", "cuda:1"):
        r = nt.kernel_for("rmsnorm(hidden=4096,weight_offset=0)", 1, device)
        assert not r and r.code == "device", r
        assert r.reason.startswith(f"this torch {torch.__version__} has no usable CUDA device"), r.reason
        assert r.contract == "rmsnorm(hidden=4096,weight_offset=0)"
    with pytest.raises(NetraError, match="not a CUDA device"):  # a wrong argument still raises
        nt.kernel_for("rmsnorm(hidden=4096,weight_offset=0)", 1, "cpu")


def test_prepare_on_a_torch_without_cuda_answers_the_device_fallback_not_an_exception() -> None:
    """Issue 30: an engine that prepares at start-up needs no guard on a CPU-only torch. prepare() answers
    what kernel_for answers, the `device` fallback with its reason ("*" for the whole table); it raised
    RuntimeUnavailableError before. Wrong arguments still raise."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this torch has CUDA")
    import netra.torch as nt

    key = "rmsnorm(hidden=4096,weight_offset=0)"
    reason = nt.kernel_for(key).reason
    assert reason.startswith(f"this torch {torch.__version__} has no usable CUDA device"), reason
    for device in (None, "cuda", "cuda:1"):
        assert nt.prepare(device) == {"*": f"fallback device: {reason}"}
        assert nt.prepare(device, [key, "fp8_group_quant(hidden=2048,group=128)"]) == {
            key: f"fallback device: {reason}",
            "fp8_group_quant(hidden=2048,group=128)": f"fallback device: {reason}",
        }
    for bad in ((None, ["layernorm(hidden=4096)"]), ("cpu", None), (None, key)):
        with pytest.raises(NetraError) as e:
            nt.prepare(*bad)
        assert "\n" not in str(e.value)


# -- issue 14: where `netra build` writes: '' paths, full and read-only filesystems, --reference ------


@pytest.fixture
def mount(tmp_path: Path) -> Any:
    """mount(name, options): a real tmpfs of its own (a small one fills up for real; `ro` is read-only
    even for root), unmounted afterwards. Skipped where this process may not mount."""
    mounted: list[Path] = []

    def make(name: str, options: str) -> Path:
        point = tmp_path / name
        point.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                           capture_output=True, text=True, check=False)  # fmt: skip
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        mounted.append(point)
        return point

    yield make
    for point in reversed(mounted):
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_netra_build_refuses_an_empty_output_path_and_writes_nothing_in_the_cwd(
    tree: Path, tmp_path: Path
) -> None:
    here = private(tmp_path, "cwd")
    for args in (["build", ""], ["build", str(tmp_path / "out"), "--keep", ""], ["build", "x", "--root", ""]):
        r = subprocess.run(
            [sys.executable, "-m", "netra", *args, *(["--root", str(tree)] if "--root" not in args else []), "-q"],
            env=clean_env(PYTHONPATH=str(REPO)), cwd=here, capture_output=True, text=True, timeout=TIMEOUT,
            check=False,
        )  # fmt: skip
        misused(r, "'' is not a path")
        assert "[1/" not in r.stderr and list(here.iterdir()) == [] and not (tmp_path / "out").exists()


def test_doctor_refuses_a_sysfs_nodes_that_is_no_folder(tmp_path: Path) -> None:
    """--sysfs-nodes /etc/passwd (or a path that does not exist) was reported as the host having no
    amdgpu driver, exit 0: the path typed is wrong, and doctor says so."""
    (tmp_path / "file").write_text("")
    for path, says in ((tmp_path / "file", "not a folder"), (tmp_path / "nope", "no such folder")):
        r = netra("doctor", "--sysfs-nodes", str(path))
        refused(r, f"--sysfs-nodes {path}: {says}", "KFD topology's nodes folder")


def test_certify_refuses_an_out_it_could_not_write_before_any_work(tmp_path: Path) -> None:
    """The table is written at the end of a run that can take an hour on the device: a --out in a
    folder that does not exist, a folder, or beside an evidence path that is a folder once failed only
    then, losing the run. Each is refused first, naming --out (and no GPU is looked for)."""
    here = private(tmp_path, "cwd")
    (tmp_path / "t.evidence.json").mkdir()
    for out, says in (
        (tmp_path / "nope" / "t.json", f"--out {tmp_path / 'nope' / 't.json'}: its folder {tmp_path / 'nope'} does not exist"),
        (tmp_path, f"--out {tmp_path}: is a folder"),
        (tmp_path / "t.json", f"--out {tmp_path / 't.evidence.json'}: is a folder"),
    ):  # fmt: skip
        r = subprocess.run(
            [sys.executable, "-m", "netra", "certify", "--gpu-class", "sm_90", "--out", str(out)],
            env=clean_env(PYTHONPATH=str(REPO)), cwd=here, capture_output=True, text=True, timeout=TIMEOUT,
            check=False,
        )  # fmt: skip
        line = refused(r, says)
        assert "compute-sanitizer" not in line and list(here.iterdir()) == [], line


def test_every_path_option_refuses_an_empty_path_instead_of_reading_it_as_not_given(tmp_path: Path) -> None:
    """`--lock ''` once meant "no --lock" to `if args.lock` (verify-wheel then proved only the wheel's
    self-consistency, exit 0), `--root ''` the installed package, `--sysfs-nodes ''` the current folder,
    `certify --out ''` ./<class>.json: each is now a usage error naming the option, before any work."""
    here = private(tmp_path, "cwd")
    for args in (
        ["verify-wheel", "x.whl", "--lock", ""],
        ["verify-wheel", "x.whl", "--root", ""],
        ["verify-wheel", ""],
        ["catalog", "--root", ""],
        ["explain", "rmsnorm", "--root", ""],
        ["doctor", "--sysfs-nodes", ""],
        ["certify", "--gpu-class", "sm_90", "--out", ""],
        ["certify", "--gpu-class", "sm_90", "--reuse", ""],
        ["certify", "--gpu-class", "sm_90", "--logs", ""],
        ["lock", "--root", ""],
    ):
        r = subprocess.run(
            [sys.executable, "-m", "netra", *args], env=clean_env(PYTHONPATH=str(REPO)), cwd=here,
            capture_output=True, text=True, timeout=TIMEOUT, check=False,
        )  # fmt: skip
        line = misused(r, "'' is not a path")
        assert f"argument {args[-2] if args[-1] == '' and args[-2].startswith('--') else 'wheel'}" in line, (
            line
        )
        assert list(here.iterdir()) == [], args


def test_netra_build_refuses_a_reference_that_does_not_exist_before_any_work(
    tree: Path, tmp_path: Path
) -> None:
    r = netra("build", str(tmp_path / "out"), "--root", str(tree), "--reference", str(tmp_path / "nope"))
    refused(r, f"--reference {tmp_path / 'nope'}: does not exist")
    assert "[1/" not in r.stderr and not (tmp_path / "out").exists()


def test_netra_build_into_a_full_filesystem_leaves_no_partial_output_and_names_it(
    tree: Path, tmp_path: Path, mount: Callable[[str, str], Path]
) -> None:
    """The code objects take more than 100 KiB: the disk fills up half way through publishing."""
    disk = mount("small", "size=100k")
    r = netra("build", str(disk / "out"), "--root", str(tree), "-q")
    refused(r, f"{disk / 'out'}/", "No space left on device")
    assert list(disk.iterdir()) == [], sorted(disk.rglob("*"))  # nothing published, no temporaries


def test_netra_build_with_tmpdir_on_a_full_filesystem_names_tmpdir(
    tree: Path, tmp_path: Path, mount: Callable[[str, str], Path]
) -> None:
    """It used to say no nvcc was found (the probe could not write its kernel)."""
    disk = mount("tmp", "size=64k")
    r = netra("build", str(tmp_path / "out"), "--root", str(tree), "-q", tmpdir=disk)
    refused(r, f"{disk} (TMPDIR", "filesystem is full", "point TMPDIR")
    assert not (tmp_path / "out").exists()
    assert empty_eventually(disk) == []


def test_netra_build_with_a_read_only_keep_folder_is_one_line_and_publishes_nothing(
    tree: Path, tmp_path: Path, mount: Callable[[str, str], Path]
) -> None:
    disk = mount("ro", "ro")
    for keep in (disk, disk / "keep"):
        r = netra("build", str(tmp_path / "out"), "--root", str(tree), "--keep", str(keep), "-q")
        refused(r, f"--keep {keep}: cannot be written", "Read-only file system")
        assert not (tmp_path / "out").exists()
