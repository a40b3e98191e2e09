"""Reproducible releases: the same commit gives the same sdist and wheel, byte for byte.

Every build here compiles each code object afresh (NO_CACHE), as the release route does; the session
build too. Compared with the session build: a second build from another directory with other mtimes, file
modes, umask, TMPDIR and working directory; the wheel built straight from the tree (not via the
sdist); and the wheel built the isolated way (`python -m build` installing [build-system].requires).
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import NO_CACHE, REPO, Build, clean_env, log, run_build

from netra.runtime.layout import PACKAGE_DATA

_EPOCH = re.search(
    r'^SOURCE_DATE_EPOCH = "(\d+)"', (REPO / "build_backend/netra_backend.py").read_text(), re.M
)
assert _EPOCH, "build_backend/netra_backend.py must define SOURCE_DATE_EPOCH"
EPOCH = int(_EPOCH.group(1))


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def differences(a: Path, b: Path) -> str:
    """Which members differ between two wheels or sdists, for the assertion message."""

    def members(p: Path) -> dict[str, tuple[bytes, object]]:
        if p.suffix == ".whl":
            with zipfile.ZipFile(p) as z:
                return {i.filename: (z.read(i), (i.date_time, i.external_attr)) for i in z.infolist()}
        with tarfile.open(p) as t:
            out = {}
            for ti in t.getmembers():
                fh = t.extractfile(ti) if ti.isfile() else None
                out[ti.name] = (fh.read() if fh else b"", (ti.mtime, ti.mode, ti.uid, ti.uname))
            return out

    ma, mb = members(a), members(b)
    diff = sorted(n for n in ma.keys() | mb.keys() if ma.get(n) != mb.get(n))
    return (
        f"{a.name}: {len(diff)} member(s) differ: {diff[:20]}"
        if diff
        else f"{a.name}: same members, other bytes"
    )


def assert_same(a: Path, b: Path) -> None:
    assert a.name == b.name
    assert sha(a) == sha(b), differences(a, b)


@pytest.fixture(scope="module")
def elsewhere(make_repo_copy: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The same files built again: other path, 1999 mtimes, 0600/0700 modes, umask 077, own TMPDIR and cwd."""
    root = make_repo_copy("a-different-checkout-location")
    for i, p in enumerate(sorted(root.rglob("*"))):
        if p.is_file():
            p.chmod(0o700 if p.stat().st_mode & 0o100 else 0o600)
            t = 915148800 + 3607 * i  # 1999, a different time for every file
            os.utime(p, (t, t))
    tmpdir = tmp_path_factory.mktemp("other-tmpdir")
    outdir = tmp_path_factory.mktemp("dist-elsewhere")
    cwd = tmp_path_factory.mktemp("other-cwd")
    r = run_build(root, outdir, env=clean_env(TMPDIR=str(tmpdir), **NO_CACHE), umask=0o077, cwd=cwd)
    assert r.returncode == 0, log(r)
    return Build(outdir, r)


def test_two_builds_in_different_directories_are_byte_identical(
    session_build: Build, elsewhere: Build
) -> None:
    assert_same(session_build.sdist, elsewhere.sdist)
    assert_same(session_build.wheel, elsewhere.wheel)


def test_timestamps_are_the_projects_not_the_clocks(built_wheel: Path, built_sdist: Path) -> None:
    """SOURCE_DATE_EPOCH unset in the environment: the backend pins the project's constant."""
    want = time.gmtime(EPOCH)[:6]
    with zipfile.ZipFile(built_wheel) as z:
        assert {i.date_time for i in z.infolist()} == {want}
    with tarfile.open(built_sdist) as t:
        assert {ti.mtime for ti in t.getmembers()} == {EPOCH}


@pytest.fixture(scope="module")
def tree_wheel(
    make_repo_copy: Callable[[str], Path], built_wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The wheel built straight from a tree that also has a stale netra/_data (a leftover of some build)."""
    root = make_repo_copy("tree-wheel")
    stale = root / PACKAGE_DATA
    with zipfile.ZipFile(built_wheel) as z:
        code_object = next(n for n in z.namelist() if n.startswith(PACKAGE_DATA) and n.endswith(".hsaco"))
        blob = z.read(code_object)
    target_dir = stale / Path(code_object).parent.name
    target_dir.mkdir(parents=True)
    (target_dir / "netra_stale_artifact.hsaco").write_bytes(blob)
    (target_dir / Path(code_object).name).write_bytes(blob + b"\0")  # an altered copy of a real member
    (stale / "manifest.lock").write_text("# not the lock\n")
    outdir = tmp_path_factory.mktemp("dist-tree")
    r = run_build(root, outdir, "--wheel", env=clean_env(**NO_CACHE))
    assert r.returncode == 0, log(r)
    return Build(outdir, r).wheel


def test_wheel_from_sdist_equals_wheel_from_tree(built_wheel: Path, tree_wheel: Path) -> None:
    assert_same(built_wheel, tree_wheel)


def test_stale_data_folder_in_the_tree_is_never_shipped(tree_wheel: Path) -> None:
    with zipfile.ZipFile(tree_wheel) as z:
        assert not [n for n in z.namelist() if "netra_stale_artifact" in n]
        assert z.read(f"{PACKAGE_DATA}/manifest.lock") != b"# not the lock\n"


def test_isolated_build_equals_the_no_isolation_build(
    repo_copy: Path, built_wheel: Path, tmp_path: Path
) -> None:
    """`python -m build` as pip would run it: a fresh env with [build-system].requires (hatchling pinned)."""
    r = run_build(repo_copy, tmp_path, "--wheel", isolated=True, env=clean_env(**NO_CACHE))
    assert r.returncode == 0, log(r)
    assert_same(built_wheel, Build(tmp_path, r).wheel)
