"""The compile cache (netra/release/compilecache.py) with the real compilers: a hit is the same bytes as
a fresh compile, damaged and foreign entries are never served, the bound evicts, clearing empties it,
concurrent builds share it, a changed include or template misses, and the release route does not use it.

Each test works on a private cache folder (a copy of the session's warm cache where it needs entries),
so what it counts is its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, TIMEOUT, Build, clean_env, copy_repo, log, run_build

from netra import targets
from netra.release import build, compilecache, manifests
from netra.runtime import lockfile
from netra.runtime.layout import PACKAGE_DATA

SUMMARY = re.compile(r"compile cache (.+): (\d+) reused, (\d+) compiled(?:, (\d+) damaged or foreign)?")


def netra(*args: str | Path, cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "netra", *map(str, args)],
        env=clean_env(PYTHONPATH=str(REPO), NETRA_CACHE_DIR=str(cache), **env),
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip


def counts(r: subprocess.CompletedProcess[str]) -> tuple[int, int, int]:
    """(reused, compiled, rejected) from the build's summary line."""
    found = SUMMARY.findall(r.stderr)
    assert len(found) == 1, log(r)
    _, reused, compiled, rejected = found[0]
    return int(reused), int(compiled), int(rejected or 0)


def keys(root: Path) -> dict[str, str]:
    """Each artifact's cache key (by its file: <class>/<name><suffix>), computed as the build computes it."""
    man = manifests.load(root)
    tools = build.discover_all(man.targets())
    return {
        sp.file: compilecache.key_of(
            compilecache.describe(targets.get(sp.target), sp, tools[sp.target], root)
        )
        for sp in man.artifacts
    }


def assembled(tree_keys: dict[str, str]) -> list[str]:
    """The gfx950 artifacts (llvm-mc and ld.lld take milliseconds; nvcc takes about a second)."""
    return sorted(f for f in tree_keys if f.startswith("gfx950/"))


def locked_code(root: Path) -> dict[str, str]:
    return {a.file: a.code_sha256 for a in lockfile.read(root / lockfile.LOCK_PATH).artifacts}


def built(out: Path) -> dict[str, str]:
    return {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in out.rglob("*")
        if p.is_file()
    }


@pytest.fixture(scope="module")
def tree(repo_copy: Path) -> Path:
    return repo_copy


@pytest.fixture(scope="module")
def tree_keys(tree: Path) -> dict[str, str]:
    return keys(tree)


@pytest.fixture
def private_cache(warm_cache: Path, tmp_path: Path) -> Path:
    """A copy of the session's warm cache: this test's own counts, this test's own damage."""
    dest = tmp_path / "cache"
    shutil.copytree(warm_cache, dest)
    return dest


def entry(cache: Path, key: str) -> Path:
    return compilecache.Cache(cache).path(key)


# -- hits are fresh compiles' bytes; the release route compiles ---------------------------------------


def test_a_wheel_built_through_the_cache_is_the_release_wheel_byte_for_byte(
    repo_copy: Path, session_build: Build, private_cache: Path, tmp_path: Path
) -> None:
    """The session's wheel is the release route's (no cache: every code object compiled now, and its
    output says nothing of a cache); the same build through a warm cache reuses every code object and
    gives the same wheel."""
    said = session_build.process.stdout + session_build.process.stderr
    assert "netra: [1/" in said and "compile cache" not in said, log(session_build.process)
    r = run_build(repo_copy, tmp_path / "dist", "--wheel",
                  env=clean_env(NETRA_CACHE_DIR=str(private_cache), NETRA_COMPILE_CACHE="1"))  # fmt: skip
    assert r.returncode == 0, log(r)
    n = len(locked_code(repo_copy))
    assert f"{n} reused, 0 compiled" in r.stdout + r.stderr, log(r)
    wheel = Build(tmp_path / "dist", r).wheel
    assert wheel.read_bytes() == session_build.wheel.read_bytes()


def test_netra_build_warm_gives_the_locked_code_objects_and_keeps_instantiations_and_no_cache_turns_it_off(
    tree: Path, private_cache: Path, tmp_path: Path
) -> None:
    r = netra("build", tmp_path / "warm", "--root", tree, "--keep", tmp_path / "keep", cache=private_cache)
    assert r.returncode == 0, log(r)
    assert counts(r)[1:] == (0, 0)
    assert built(tmp_path / "warm") == locked_code(tree)
    # --keep keeps each instantiation file, as a compile writes it, from hits too.
    man = manifests.load(tree)
    tools = build.discover_all(man.targets())
    want = {}
    for sp in man.artifacts:
        tgt = targets.get(sp.target)
        want[tgt.recipe(sp, tools[sp.target]).source] = tgt.instantiation(sp)
    kept = {p.name: p.read_text() for p in (tmp_path / "keep").iterdir() if p.is_file()}
    assert kept == want
    from netra.cli import commands

    for argv in (["build", "out", "--no-cache"], ["lock", "--no-cache"], ["lock", "--check", "--no-cache"]):
        assert commands._cache(commands.parser().parse_args(argv)) is None, argv
    assert commands._cache(commands.parser().parse_args(["build", "out"])) is not None


# -- damaged and foreign entries ----------------------------------------------------------------------


def test_damaged_and_foreign_entries_are_removed_and_compiled_again(
    tree: Path, tree_keys: dict[str, str], private_cache: Path, tmp_path: Path
) -> None:
    names = assembled(tree_keys)
    flipped, foreign, cut = (entry(private_cache, tree_keys[n]) for n in names[:3])
    data = bytearray(flipped.read_bytes())
    data[-100] ^= 0x01  # one bit of the code object
    flipped.write_bytes(bytes(data))
    foreign.write_bytes(entry(private_cache, tree_keys[names[3]]).read_bytes())  # another key's entry
    cut.write_bytes(cut.read_bytes()[:200])  # a write that never finished
    r = netra("build", tmp_path / "out", "--root", tree, cache=private_cache)
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    assert counts(r) == (len(tree_keys) - 3, 3, 3), log(r)
    assert built(tmp_path / "out") == locked_code(tree)
    r = netra("build", tmp_path / "again", "--root", tree, cache=private_cache)
    assert counts(r) == (len(tree_keys), 0, 0), log(r)  # the compiled ones were stored again, whole


# -- the bound, and emptying it ---------------------------------------------------------------------------


def test_the_size_bound_removes_the_least_recently_used_entries(tmp_path: Path) -> None:
    cache = compilecache.Cache(tmp_path / "c", bound=3 * (1000 + 200))
    made = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(5)]
    for i, key in enumerate(made):
        cache.put(key, bytes([i]) * 1000)
        t = time.time() - 100 + i
        os.utime(cache.path(key), (t, t))
    assert cache.get(made[0]) == b"\0" * 1000  # used now: the newest
    assert cache.trim() == 2
    assert [k for k in made if cache.path(k).exists()] == [made[0], made[3], made[4]]
    assert cache.usage()[1] <= cache.bound


def test_netra_cache_reports_and_clears(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    cache = compilecache.Cache(folder)
    for i in range(3):
        cache.put(hashlib.sha256(str(i).encode()).hexdigest(), b"x" * 10)
    r = netra("cache", "--json", cache=folder)
    assert r.returncode == 0, log(r)
    doc = json.loads(r.stdout)
    assert (doc["folder"], doc["entries"], doc["used_by"]) == (
        str(folder), 3, {"build_and_lock": True, "wheel_hook": True},  # the session opts the hook in
    )  # fmt: skip
    r = netra("cache", "--clear", cache=folder)
    assert r.returncode == 0 and r.stdout.startswith(
        f"removed 3 entries ({doc['bytes']} bytes) from {folder}"
    )
    assert cache.usage() == (0, 0)


def test_netra_cache_clear_fails_naming_what_it_could_not_remove(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry that cannot be unlinked (a read-only folder, an immutable file: as root here, the unlink
    is made to fail) once left `removed 0 entries`, exit 0: the clear failed, and says so with exit 1."""
    from netra.cli.commands import main

    folder = tmp_path / "c"
    cache = compilecache.Cache(folder)
    for i in range(3):
        cache.put(hashlib.sha256(str(i).encode()).hexdigest(), b"x" * 10)
    real_unlink = Path.unlink
    stuck = sorted(p for p in folder.rglob("*") if p.is_file())[0]

    def unlink(self: Path, missing_ok: bool = False) -> None:
        if self == stuck:
            raise PermissionError(1, "Operation not permitted", str(self))
        real_unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", unlink)
    monkeypatch.setenv(compilecache.ENV_DIR, str(folder))
    assert main(["cache", "--clear"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    left = cache.usage()
    assert left[0] == 1, left
    assert err.startswith(
        f"netra: error: {folder}: 1 entries ({left[1]} bytes) could not be removed (2 were)"
    ), err


def test_bad_settings_are_one_line_each(tmp_path: Path) -> None:
    r = netra("cache", cache=tmp_path, NETRA_COMPILE_CACHE="yes")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "NETRA_COMPILE_CACHE='yes'" in r.stderr, log(r)
    r = netra("cache", cache=tmp_path, NETRA_CACHE_MAX_MB="²")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "NETRA_CACHE_MAX_MB" in r.stderr, log(r)
    (tmp_path / "file").write_text("")
    r = netra("cache", cache=tmp_path / "file")
    assert r.returncode == 1 and "Traceback" not in r.stderr and "is not a folder" in r.stderr, log(r)


def test_a_cache_that_cannot_be_written_is_noted_and_never_fails_the_build(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    cache = compilecache.Cache(tmp_path / "file" / "cache")
    key = hashlib.sha256(b"k").hexdigest()
    cache.put(key, b"code")
    assert cache.get(key) is None and "file" in cache.stats.unwritable
    assert "not stored" in cache.summary()


# -- concurrency ------------------------------------------------------------------------------------------


def test_two_builds_at_once_share_one_cache(
    tree: Path, tree_keys: dict[str, str], private_cache: Path, tmp_path: Path
) -> None:
    """Seventeen entries missing: both builds compile and store them at once, and read all the others."""
    missing = assembled(tree_keys)[:15] + sorted(f for f in tree_keys if f.startswith("sm_90/"))[:2]
    for n in missing:
        entry(private_cache, tree_keys[n]).unlink()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "netra",
                "build",
                str(tmp_path / f"out{i}"),
                "--root",
                str(tree),
                "-j",
                "1",
            ],
            env=clean_env(PYTHONPATH=str(REPO), NETRA_CACHE_DIR=str(private_cache)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    done = [
        subprocess.CompletedProcess(p.args, p.returncode, o, e) for p, (o, e) in zip(procs, outs, strict=True)
    ]
    for r in done:
        assert r.returncode == 0, log(r)
        reused, compiled, rejected = counts(r)
        assert rejected == 0 and reused + compiled == len(tree_keys) and compiled <= len(missing), log(r)
    want = locked_code(tree)
    assert built(tmp_path / "out0") == want and built(tmp_path / "out1") == want
    r = netra("build", tmp_path / "again", "--root", tree, cache=private_cache)
    assert counts(r) == (len(tree_keys), 0, 0), log(r)
    assert not [p for p in private_cache.rglob("*") if p.name.endswith(".tmp")]


# -- what the key holds ----------------------------------------------------------------------------------


def changed_keys(tree: Path, tree_keys: dict[str, str], dest: Path, rel: str) -> tuple[Path, set[str]]:
    """A copy of `tree` with a comment appended to `rel`, and the artifacts whose key that changes."""
    root = copy_repo(dest, tree)
    with (root / rel).open("a") as f:
        f.write("\n// a comment: the compiler drops it, the key does not\n")
    after = keys(root)
    return root, {n for n in tree_keys if after[n] != tree_keys[n]}


def templates(root: Path, artifacts: set[str]) -> set[str]:
    return {sp.template.source for sp in manifests.load(root).artifacts if sp.file in artifacts}


def test_a_changed_header_misses_for_exactly_the_templates_that_reach_it(
    tree: Path, tree_keys: dict[str, str], tmp_path: Path
) -> None:
    """netra_rmsnorm_sm90.cuh is #included by the four rmsnorm templates (for both NVIDIA classes), never
    by fp8_group_quant.cu, silu_mul_fp8_quant.cu or moe_topk_softmax.cu, nor by a gfx950 template."""
    root, changed = changed_keys(
        tree, tree_keys, tmp_path / "tree", "kernels/cuda/include/netra_rmsnorm_sm90.cuh"
    )
    assert templates(root, changed) == {
        f"kernels/cuda/{t}.cu"
        for t in (
            "rmsnorm",
            "fused_add_rmsnorm",
            "rmsnorm_fp8_group_quant",
            "fused_add_rmsnorm_fp8_group_quant",
        )
    }
    assert {n.split("/")[0] for n in changed} == {"sm_90", "sm_100"}
    want = {
        sp.file for sp in manifests.load(root).artifacts if sp.template.source in templates(root, changed)
    }
    assert changed == want  # every artifact of those templates
    # Through another include: wave.inc is .included by rmsnorm.s, and by fp8.inc, which
    # fp8_group_quant.s and silu_mul_fp8_quant.s include.
    root, changed = changed_keys(tree, tree_keys, tmp_path / "tree2", "kernels/gfx950/include/wave.inc")
    assert templates(root, changed) == {
        f"kernels/gfx950/{t}.s" for t in ("rmsnorm", "fp8_group_quant", "silu_mul_fp8_quant")
    }


def test_a_changed_include_is_compiled_again_and_only_it(
    tree: Path, tree_keys: dict[str, str], private_cache: Path, tmp_path: Path
) -> None:
    """include/pipeline.inc is .included by gfx950's fp8_group_quant.s and silu_mul_fp8_quant.s, not by
    rmsnorm.s or moe_topk_softmax.s: a build after it changes compiles exactly those two templates'
    artifacts, and takes every other code object from the cache."""
    root, changed = changed_keys(tree, tree_keys, tmp_path / "tree", "kernels/gfx950/include/pipeline.inc")
    assert templates(root, changed) == {
        "kernels/gfx950/fp8_group_quant.s",
        "kernels/gfx950/silu_mul_fp8_quant.s",
    }
    r = netra("lock", "--check", "--root", root, cache=private_cache)
    assert r.returncode == 1 and "kernels/gfx950/include/pipeline.inc" in r.stdout, log(r)
    assert counts(r) == (len(tree_keys) - len(changed), len(changed), 0), log(r)


def test_the_key_holds_flags_toolchain_and_binaries(tree: Path) -> None:
    man = manifests.load(tree)
    spec = man.artifacts[0]
    tools = build.discover_all([spec.target])[spec.target]
    desc = compilecache.describe(targets.get(spec.target), spec, tools, tree)
    assert desc["flags"] and desc["binaries"] and desc["toolchain"]["version"] == tools.identity.version
    assert (
        desc["sources"][spec.template.source]
        == hashlib.sha256((tree / spec.template.source).read_bytes()).hexdigest()
    )
    assert str(tree) not in json.dumps(desc)  # no machine path: one tree's entries serve another's
    for field in ("flags", "binaries", "toolchain", "instantiation"):
        other = {**desc, field: "something else"}
        assert compilecache.key_of(other) != compilecache.key_of(desc), field


def test_a_code_object_in_the_wheel_is_the_cached_one(
    repo_copy: Path, session_build: Build, warm_cache: Path
) -> None:
    """What the warm cache holds for an artifact is, byte for byte, what the release wheel carries."""
    ks = keys(repo_copy)
    cache = compilecache.Cache(warm_cache)
    with zipfile.ZipFile(session_build.wheel) as z:
        for a in lockfile.read(repo_copy / lockfile.LOCK_PATH).artifacts[:10]:
            assert cache.get(ks[a.file]) == z.read(f"{PACKAGE_DATA}/{a.file}"), a.name


def test_the_wheel_hook_uses_no_cache_unless_asked(tmp_path: Path) -> None:
    assert compilecache.open_cache(default=False, env={}) is None
    assert compilecache.open_cache(default=True, env={"NETRA_COMPILE_CACHE": "0"}) is None
    on = compilecache.open_cache(
        default=False, env={"NETRA_COMPILE_CACHE": "1", "NETRA_CACHE_DIR": str(tmp_path)}
    )
    assert on is not None and on.folder == tmp_path
    assert compilecache.location({"XDG_CACHE_HOME": "/x"}) == Path("/x/netra/compile")
