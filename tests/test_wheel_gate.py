"""The release gate, for real: what a built wheel and sdist carry, and every way a build must refuse.

Each refusal test breaks a private copy of the repository, runs a real `python -m build`, and checks
three things: a non-zero exit, one error line that names the file at fault, and no wheel left behind
(nor the hook's temporary directory).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import REPO, Build, Venv, clean_env, log, run_build
from wheeltools import rewrite

from netra import targets
from netra.core.hashing import sha256_bytes
from netra.release import wheelgate
from netra.runtime import layout
from netra.runtime.lockfile import LOCK_PATH, Lock

DATA = layout.PACKAGE_DATA + "/"


def lock_of(root: Path) -> tuple[bytes, Lock]:
    return wheelgate.read_lock(root / LOCK_PATH)


def output(r: object) -> str:
    return r.stdout + r.stderr  # type: ignore[attr-defined]


def error_lines(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if "netra: error:" in ln]


def assert_refused(r: object, outdir: Path, names: list[str], tmpdir: Path | None = None) -> str:
    """Non-zero exit, one `netra: error:` line naming every name with a hint, no wheel left behind."""
    assert r.returncode != 0, f"the build should have failed\n{log(r)}"  # type: ignore[attr-defined]
    lines = error_lines(output(r))
    assert len(lines) == 1, f"expected one error line, got {lines}\n{log(r)}"  # type: ignore[arg-type]
    for name in names:
        assert name in lines[0], f"{name} not named in: {lines[0]}"
    assert "hint:" in lines[0]
    assert not list(outdir.glob("*.whl")), f"a wheel was left in {outdir}: {list(outdir.iterdir())}"
    if tmpdir is not None:
        left = [p.name for p in tmpdir.iterdir() if p.name.startswith("netra-")]
        assert not left, f"temporary directories left behind: {left}"
    return lines[0]


def append_to_pyproject(root: Path, text: str) -> None:
    with open(root / "pyproject.toml", "a") as f:
        f.write("\n" + text + "\n")


def first(lock: Lock, role: str, suffix: str = "", under: str = "") -> str:
    for f in lock.files:
        if f.role == role and f.path.endswith(suffix) and f.path.startswith(under):
            return f.path
    raise AssertionError(f"the lock lists no {role} file {under}*{suffix}")


# -- what a good build carries ----------------------------------------------------------------------


def test_wheel_carries_exactly_the_locked_members_with_locked_hashes(
    built_wheel: Path, repo_copy: Path
) -> None:
    raw, lock = lock_of(repo_copy)
    with zipfile.ZipFile(built_wheel) as z:
        names = z.namelist()
        data = {n[len(DATA) :]: z.read(n) for n in names if n.startswith(DATA)}
        wheel_meta = z.read(next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()
    expected = {m.data_path: m for m in layout.members(lock)}
    assert sorted(data) == sorted(expected), "netra/_data must hold exactly layout.members(lock)"
    assert len(names) == len(set(names)), "no member may be stored twice"
    assert data["manifest.lock"] == raw, "the packaged lock must be the tree's lock, byte for byte"
    code_objects = [m for m in expected.values() if m.kind == "code_object"]
    assert len(code_objects) == len(lock.artifacts) > 0
    for m in expected.values():
        if m.sha256 is not None:
            assert sha256_bytes(data[m.data_path]) == m.sha256, f"{m.data_path}: sha256 differs from the lock"
    for m in code_objects:
        a = lock.artifact(m.origin)
        tgt = targets.get(a.target)
        assert tgt.text_sha256(data[m.data_path], a.name, m.data_path) == a.text_sha256, m.data_path
        assert tgt.launch_digest(data[m.data_path], a.name, m.data_path) == a.launch_sha256, m.data_path
    record = json.loads(data[layout.BUILD_RECORD])
    assert record["lock_sha256"] == sha256_bytes(raw)
    assert {p: e["sha256"] for p, e in record["code_objects"].items()} == {
        m.data_path: sha256_bytes(data[m.data_path]) for m in code_objects
    }
    # Nothing but the package and its metadata; no code object outside the data folder.
    assert all(n.startswith(("netra/", "netra_kernel-")) for n in names), names
    assert not [n for n in names if n.endswith((".hsaco", ".cubin")) and not n.startswith(DATA)]
    assert {m.target for m in code_objects} == set(targets.names())  # one wheel carries every class
    package = sorted(n for n in names if n.startswith("netra/") and not n.startswith(DATA))
    tree = (repo_copy / "netra").rglob("*")
    assert package == sorted(p.relative_to(repo_copy).as_posix() for p in tree if p.is_file()), "netra/ as is"
    # The tag is set explicitly: code objects are not host code.
    assert built_wheel.name.endswith("-py3-none-any.whl")
    assert "Tag: py3-none-any" in wheel_meta and "Root-Is-Purelib: true" in wheel_meta
    assert wheelgate.check_wheel(built_wheel, lock, raw) == []


def _cyclonedx_1_6() -> object:
    """A validator of the official CycloneDX 1.6 JSON schema, as the cyclonedx-python-lib package ships it
    (with the SPDX and JSF schemas it references), read as files: the SBOM is checked against the
    standard's own schema, not a copy written here."""
    import importlib.util

    jsonschema = pytest.importorskip("jsonschema")
    referencing = pytest.importorskip("referencing")
    spec = importlib.util.find_spec("cyclonedx")
    assert spec is not None and spec.submodule_search_locations, (
        "pip install cyclonedx-python-lib (test extra)"
    )
    res = Path(next(iter(spec.submodule_search_locations))) / "schema" / "_res"
    schema = json.loads((res / "bom-1.6.SNAPSHOT.schema.json").read_text())
    assert schema["$id"] == "http://cyclonedx.org/schema/bom-1.6.schema.json"
    registry = referencing.Registry()
    for name in ("spdx.SNAPSHOT.schema.json", "jsf-0.82.SNAPSHOT.schema.json"):
        contents = json.loads((res / name).read_text())
        resource = referencing.Resource.from_contents(
            contents, default_specification=referencing.jsonschema.DRAFT7
        )
        registry = registry.with_resource(f"http://cyclonedx.org/schema/{name}", resource)
    return jsonschema.Draft7Validator(schema, registry=registry)


def test_wheel_carries_the_sbom_its_lock_generates(
    built_wheel: Path, repo_copy: Path, tmp_path: Path
) -> None:
    """PEP 770: <name>.dist-info/sboms/ holds a CycloneDX 1.6 SBOM, listed in RECORD, valid against the
    official schema, naming every locked file and code object by their locked hashes and each class's
    toolchain, deterministic (no timestamp, no machine path) and byte for byte what the lock generates;
    the gate refuses a wheel whose SBOM is missing, not CycloneDX, or not what its lock generates."""
    from netra import __version__
    from netra.release import sbom

    raw, lock = lock_of(repo_copy)
    with zipfile.ZipFile(built_wheel) as z:
        names = z.namelist()
        (dist_info,) = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
        member = f"{dist_info}/sboms/netra-kernel.cdx.json"
        assert member == sbom.member(dist_info) and member in names, names
        blob = z.read(member)
        record = z.read(f"{dist_info}/RECORD").decode()
    assert f"\n{member},sha256=" in "\n" + record, "listed in RECORD"
    assert blob == sbom.generate(lock, raw, __version__) == sbom.generate(lock, raw, __version__)
    doc = json.loads(blob)
    _cyclonedx_1_6().validate(doc)  # type: ignore[attr-defined]
    assert (doc["bomFormat"], doc["specVersion"], doc["version"]) == ("CycloneDX", "1.6", 1)
    assert "timestamp" not in doc["metadata"] and str(repo_copy) not in blob.decode()
    assert doc["serialNumber"].startswith("urn:uuid:")
    props = {p["name"]: p["value"] for p in doc["metadata"]["component"]["properties"]}
    assert props["netra:lock_sha256"] == sha256_bytes(raw)
    by_ref = {c["bom-ref"]: c for c in doc["components"]}
    for a in lock.artifacts:
        c = by_ref[f"artifact:{a.name}"]
        assert c["hashes"] == [{"alg": "SHA-256", "content": a.text_sha256}] and c["name"] == DATA + a.file
    for f in lock.files:
        assert by_ref[f"file:{f.path}"]["hashes"] == [{"alg": "SHA-256", "content": f.sha256}], f.path
    tools = {(c["name"], c["version"]) for c in doc["components"] if c["type"] == "application"}
    assert tools == {(t.flavour, t.version) for t in lock.toolchains.values()} and len(tools) >= 2, tools
    assert [c["bom-ref"] for c in doc["components"]] == sorted(by_ref), "sorted: deterministic"

    def without(m: dict[str, bytes]) -> None:
        del m[member]

    def not_json(m: dict[str, bytes]) -> None:
        m[member] = b"{not json"

    def one_hash(m: dict[str, bytes]) -> None:
        a = lock.artifacts[0]
        m[member] = m[member].replace(a.text_sha256.encode(), b"0" * 64, 1)

    for edit, kind, says in (
        (without, "missing", "the SBOM the lock generates (PEP 770)"),
        (not_json, "altered", "not a CycloneDX 1.6 JSON document"),
        (one_hash, "altered", f"differs from the SBOM its lock generates for version {__version__}"),
    ):
        doctored = rewrite(built_wheel, tmp_path / edit.__name__ / built_wheel.name, edit, reseal=True)
        problems = wheelgate.check_wheel(doctored, lock, raw)
        assert [(p.kind, p.member) for p in problems] == [(kind, member)] and says in problems[0].detail, (
            problems
        )


def test_sbom_names_the_pinned_toolchain_by_package_and_wheel_hashes() -> None:
    """The nvcc toolchain component is pkg:pypi/nvidia-cuda-nvcc at the locked version, with one
    `distribution` reference per wheel requirements/build.txt pins for it (its sha256); every other
    pinned nvidia- package is a component it depends on, the same way; LLVM, which no file pins,
    carries no hash and says why. Valid CycloneDX 1.6, from the repository's lock (no build needed)."""
    from netra.release import sbom

    raw, lock = lock_of(REPO)
    doc = json.loads(sbom.generate(lock, raw, "0.0.0"))
    _cyclonedx_1_6().validate(doc)  # type: ignore[attr-defined]
    text = (REPO / "requirements" / "build.txt").read_text()
    pinned = {
        m[1]: (m[2], sorted(re.findall(r"sha256:([0-9a-f]{64})", m[3])))
        for m in re.finditer(
            r"^(nvidia-\S*)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}.*\n)+)", text, re.M
        )
    }
    by_ref = {c["bom-ref"]: c for c in doc["components"]}

    def wheels(c: dict[str, object]) -> list[str]:
        refs = c["externalReferences"]
        assert isinstance(refs, list) and all(r["type"] == "distribution" for r in refs), refs
        return sorted(h["content"] for r in refs for h in r["hashes"] if h["alg"] == "SHA-256")

    nvcc = by_ref["toolchain:nvcc@13.0.88"]
    assert (
        nvcc["purl"]
        == f"pkg:pypi/nvidia-cuda-nvcc@{pinned['nvidia-cuda-nvcc'][0]}"
        == "pkg:pypi/nvidia-cuda-nvcc@13.0.88"
    )
    assert wheels(nvcc) == pinned["nvidia-cuda-nvcc"][1] and len(wheels(nvcc)) == 3
    others = sorted(f"pkg:pypi/{n}@{v}" for n, (v, _) in pinned.items() if n != "nvidia-cuda-nvcc")
    assert "pkg:pypi/nvidia-nvvm@13.0.88" in others
    deps = {d["ref"]: d["dependsOn"] for d in doc["dependencies"]}
    assert deps["toolchain:nvcc@13.0.88"] == others
    for ref in others:
        name = by_ref[ref]["name"]
        assert by_ref[ref]["purl"] == ref and wheels(by_ref[ref]) == pinned[name][1], ref
    llvm = by_ref["toolchain:llvm@22.1.8"]
    assert "purl" not in llvm and "externalReferences" not in llvm and "hashes" not in llvm
    assert "no file of the project pins by hash" in llvm["description"]


def test_build_reports_through_hatch_display(session_build: Build) -> None:
    """Counts and time come from the hook via hatch's display (they reach the frontend's output)."""
    text = output(session_build.process)
    assert "code objects built and gated in" in text
    assert "release gate passed" in text and session_build.wheel.name in text


def test_sdist_carries_every_locked_and_build_file(built_sdist: Path, repo_copy: Path) -> None:
    raw, lock = lock_of(repo_copy)
    with tarfile.open(built_sdist) as tar:
        files = {ti.name.partition("/")[2]: ti for ti in tar.getmembers() if ti.isfile()}

        def read(rel: str) -> bytes:
            fh = tar.extractfile(files[rel])
            assert fh is not None
            return fh.read()

        assert read(LOCK_PATH) == raw
        for f in lock.files:
            assert f.path in files, f"{f.path} (locked) missing from the sdist"
            assert sha256_bytes(read(f.path)) == f.sha256, f"{f.path}: altered in the sdist"
        for rel in (
            "pyproject.toml",
            *(f"build_backend/{m}.py" for m in ("netra_backend", "hatch_build", "hatch_metadata")),
        ):
            assert read(rel) == (repo_copy / rel).read_bytes(), rel
        for p in (repo_copy / "netra").rglob("*.py"):
            assert p.relative_to(repo_copy).as_posix() in files
        assert files["tools/release"].mode & 0o111, "tools/release must stay executable in the sdist"
    assert not [n for n in files if n.startswith(DATA) or "__pycache__" in n]
    assert wheelgate.check_sdist(built_sdist, repo_copy, lock) == []


# -- refusals: the tree does not match its lock ----------------------------------------------------


@pytest.mark.parametrize("target", [(), ("--wheel",)], ids=["sdist-then-wheel", "wheel-from-tree"])
def test_deleted_table_fails_and_leaves_no_wheel(
    make_repo_copy: Callable[[str], Path], private_tmpdir: Path, target: tuple[str, ...]
) -> None:
    root = make_repo_copy("no-table")
    table = first(lock_of(root)[1], "table")
    (root / table).unlink()
    r = run_build(root, root / "dist", *target, env=clean_env(TMPDIR=str(private_tmpdir)))
    assert_refused(r, root / "dist", [table], private_tmpdir)
    assert not list((root / "dist").glob("*")), "not even an sdist is left for a tree that fails its lock"


@pytest.mark.parametrize("target", [(), ("--wheel",)], ids=["sdist-then-wheel", "wheel-from-tree"])
def test_deleted_template_fails_and_leaves_no_wheel(
    make_repo_copy: Callable[[str], Path], private_tmpdir: Path, target: tuple[str, ...]
) -> None:
    root = make_repo_copy("no-template")
    template = first(lock_of(root)[1], "source", ".s")
    (root / template).unlink()
    r = run_build(root, root / "dist", *target, env=clean_env(TMPDIR=str(private_tmpdir)))
    assert_refused(r, root / "dist", [template], private_tmpdir)


@pytest.mark.parametrize("target", [(), ("--wheel",)], ids=["sdist-then-wheel", "wheel-from-tree"])
def test_one_byte_in_a_manifest_fails_naming_it(
    make_repo_copy: Callable[[str], Path], private_tmpdir: Path, target: tuple[str, ...]
) -> None:
    root = make_repo_copy("manifest-byte")
    manifest = first(lock_of(root)[1], "manifest", ".toml", "manifests/models/")
    data = bytearray((root / manifest).read_bytes())
    data[-1:] = b" " if data.endswith(b"\n") else b"\n"  # same TOML meaning, different bytes
    (root / manifest).write_bytes(bytes(data))
    r = run_build(root, root / "dist", *target, env=clean_env(TMPDIR=str(private_tmpdir)))
    assert_refused(r, root / "dist", [manifest], private_tmpdir)


# -- refusals: the archive does not match the lock -------------------------------------------------


def test_stale_member_forced_into_the_data_folder_is_refused(
    make_repo_copy: Callable[[str], Path], built_wheel: Path, private_tmpdir: Path
) -> None:
    """A real code object the lock does not list, slipped in by build config: the wheel is deleted."""
    root = make_repo_copy("forced-stale")
    _, lock = lock_of(root)
    a = lock.artifacts[0]
    with zipfile.ZipFile(built_wheel) as z:
        (root / "stale.hsaco").write_bytes(z.read(DATA + a.file))
    stale = f"{DATA}{a.target}/netra_stale_artifact.hsaco"
    text = (root / "pyproject.toml").read_text()
    table = "[tool.hatch.build.targets.wheel.force-include]\n"
    assert table in text
    (root / "pyproject.toml").write_text(text.replace(table, f'{table}"stale.hsaco" = "{stale}"\n', 1))
    r = run_build(root, root / "dist", "--wheel", env=clean_env(TMPDIR=str(private_tmpdir)))
    line = assert_refused(r, root / "dist", [stale], private_tmpdir)
    assert "unexpected" in line and "code objects built and gated" in output(r), "refused after the build"


@pytest.mark.parametrize("target", [(), ("--wheel",)], ids=["sdist-then-wheel", "wheel-from-tree"])
def test_hatch_build_no_hooks_yields_no_kernel_less_wheel(
    repo_copy: Path, tmp_path: Path, private_tmpdir: Path, target: tuple[str, ...]
) -> None:
    out = tmp_path / "dist"
    env = clean_env(HATCH_BUILD_NO_HOOKS="true", TMPDIR=str(private_tmpdir))
    r = run_build(repo_copy, out, *target, env=env)
    assert_refused(
        r, out, ["HATCH_BUILD_NO_HOOKS", DATA + "manifest.lock", "cannot be skipped"], private_tmpdir
    )
    assert "code objects assembled" not in output(r) and "Traceback" not in output(r)


HOOK_LINE = 'path = "build_backend/hatch_build.py"'
WHEEL_TABLE = "[tool.hatch.build.targets.wheel]\n"
WHEEL_HOOK = "[tool.hatch.build.targets.wheel.hooks.custom]"
WITHOUT_HOOK = {  # how hatchling is run without the gate hook -> (flags, env, pyproject edit, said)
    "--no-hooks": (["--no-hooks"], {}, None, "HATCH_BUILD_NO_HOOKS=true, which hatchling's --no-hooks sets"),
    "HATCH_BUILD_NO_HOOKS": ([], {"HATCH_BUILD_NO_HOOKS": "1"}, None, "HATCH_BUILD_NO_HOOKS=1"),
    "enable-by-default": (
        [],
        {},
        (HOOK_LINE, HOOK_LINE + "\nenable-by-default = false"),
        "sets enable-by-default = false",
    ),
    "target-table-off": (  # hatchling lets a target's own table replace the global one
        [],
        {},
        (WHEEL_TABLE, f"{WHEEL_HOOK}\n{HOOK_LINE}\nenable-by-default = false\n\n{WHEEL_TABLE}"),
        f"{WHEEL_HOOK} sets enable-by-default = false",
    ),
    "target-table-other-file": (
        [],
        {},
        (WHEEL_TABLE, f'{WHEEL_HOOK}\npath = "build_backend/netra_backend.py"\n\n{WHEEL_TABLE}'),
        f"{WHEEL_HOOK} names path = 'build_backend/netra_backend.py' in place of the gate",
    ),
}


@pytest.mark.parametrize("target", [["-t", "wheel"], []], ids=["wheel", "every-target"])
@pytest.mark.parametrize("how", sorted(WITHOUT_HOOK))
def test_hatchling_itself_builds_nothing_without_the_hook(
    make_repo_copy: Callable[[str], Path], tmp_path: Path, private_tmpdir: Path, how: str, target: list[str]
) -> None:
    """`python -m hatchling build` run on the tree bypasses netra_backend: the gate must not depend on the
    frontend. Hatchling loads build_backend/hatch_metadata.py however its build hooks are switched and
    before any archive exists: one line, exit 1, and nothing written, neither an ungated sdist in the
    output folder nor hatchling's half-written wheel in TMPDIR (where its forced-include guard alone
    left it, with a traceback)."""
    flags, extra, edit, said = WITHOUT_HOOK[how]
    root = make_repo_copy(f"no-hook-{how}")
    if edit is not None:
        anchor, replacement = edit
        text = (root / "pyproject.toml").read_text()
        assert text.count(anchor) == 1, anchor
        (root / "pyproject.toml").write_text(text.replace(anchor, replacement, 1))
    out = tmp_path / "dist"
    r = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", *target, *flags, "-d", str(out)],
        cwd=root, env=clean_env(TMPDIR=str(private_tmpdir), **extra), capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode == 1, log(r)
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("netra: error: ")]
    assert len(errors) == 1 and "Traceback" not in output(r), log(r)
    assert f"{root}: build refused before anything was written" in errors[0], log(r)
    assert said in errors[0] and "release gate" in errors[0] and "hint: " in errors[0], log(r)
    assert not out.exists(), sorted(out.iterdir())
    assert not list(private_tmpdir.iterdir()), sorted(private_tmpdir.iterdir())


def test_hatchling_itself_builds_with_the_hook_switched_back_on(
    make_repo_copy: Callable[[str], Path], tmp_path: Path, private_tmpdir: Path
) -> None:
    """The guard follows hatchling's own enabling rules: `enable-by-default = false` with
    HATCH_BUILD_HOOK_ENABLE_CUSTOM=true runs the hook, and the build goes through the gate."""
    root = make_repo_copy("hook-switched-on")
    text = (root / "pyproject.toml").read_text()
    (root / "pyproject.toml").write_text(
        text.replace(HOOK_LINE, HOOK_LINE + "\nenable-by-default = false", 1)
    )
    out = tmp_path / "dist"
    r = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "sdist", "-d", str(out)],
        cwd=root, env=clean_env(TMPDIR=str(private_tmpdir), HATCH_BUILD_HOOK_ENABLE_CUSTOM="true"),
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and "release gate passed" in output(r), log(r)
    names = [p.name for p in out.iterdir()]
    assert len(names) == 1 and names[0].endswith(".tar.gz"), names
    assert not list(private_tmpdir.iterdir()), sorted(private_tmpdir.iterdir())


def test_hatchling_itself_leaves_nothing_when_the_archive_fails_after_the_hook(
    make_repo_copy: Callable[[str], Path], tmp_path: Path, private_tmpdir: Path
) -> None:
    """Hatchling run directly with the hook: the hook stages the code objects, then hatchling fails while
    writing the archive (here a forced include of a file that does not exist). Hatchling keeps its
    half-written archive, a TMPDIR file; the hook has it made beside the staged files, and both go."""
    root = make_repo_copy("archive-fails")
    text = (root / "pyproject.toml").read_text()
    table = "[tool.hatch.build.targets.wheel.force-include]\n"
    assert table in text
    (root / "pyproject.toml").write_text(
        text.replace(table, f'{table}"no-such-file" = "netra/no-such-file"\n', 1)
    )
    out = tmp_path / "dist"
    r = subprocess.run(
        [sys.executable, "-m", "hatchling", "build", "-t", "wheel", "-d", str(out)],
        cwd=root, env=clean_env(TMPDIR=str(private_tmpdir)), capture_output=True, text=True, timeout=900,
        check=False,
    )  # fmt: skip
    assert r.returncode != 0 and "code objects built and gated" in output(r), log(r)
    assert "Forced include not found" in output(r) and "no-such-file" in output(r), log(r)
    assert not out.exists() or not list(out.iterdir()), sorted(out.iterdir())
    assert not list(private_tmpdir.iterdir()), sorted(private_tmpdir.iterdir())


def test_hook_disabled_in_pyproject_yields_no_wheel(
    make_repo_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    root = make_repo_copy("hook-off")
    text = (root / "pyproject.toml").read_text()
    assert HOOK_LINE in text
    (root / "pyproject.toml").write_text(
        text.replace(HOOK_LINE, HOOK_LINE + "\nenable-by-default = false", 1)
    )
    r = run_build(root, tmp_path / "dist", "--wheel")
    assert_refused(r, tmp_path / "dist", ["did not run", DATA + "manifest.lock"])


def test_unknown_hook_option_is_refused_before_any_work(
    make_repo_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    root = make_repo_copy("hook-typo")
    text = (root / "pyproject.toml").read_text()
    hook = 'path = "build_backend/hatch_build.py"'
    (root / "pyproject.toml").write_text(text.replace(hook, hook + "\njbos = 4", 1))
    r = run_build(root, tmp_path / "dist", "--wheel")
    assert_refused(r, tmp_path / "dist", ["pyproject.toml", "jbos"])
    assert "assembling" not in output(r)


@pytest.mark.parametrize("no_hooks", [False, True], ids=["hook", "backend"])
def test_sdist_missing_a_locked_file_is_refused(
    make_repo_copy: Callable[[str], Path], tmp_path: Path, no_hooks: bool
) -> None:
    """Excluding a locked manifest from the sdist is caught by the hook, and by the backend without it."""
    root = make_repo_copy("sdist-hole")
    manifest = first(lock_of(root)[1], "manifest", ".toml", "manifests/models/")
    text = (root / "pyproject.toml").read_text()
    old = 'exclude = ["/netra/_data", "__pycache__", "*.py[cdo]"]'
    assert old in text
    (root / "pyproject.toml").write_text(text.replace(old, old[:-1] + f', "/{manifest}"]', 1))
    env = clean_env(HATCH_BUILD_NO_HOOKS="true") if no_hooks else clean_env()
    r = run_build(root, tmp_path / "dist", "--sdist", env=env)
    assert_refused(r, tmp_path / "dist", [manifest, "missing"])
    assert not list((tmp_path / "dist").glob("*.tar.gz"))


# -- a wheel someone hands you: `netra verify-wheel` -------------------------------------------------


def test_verify_wheel_accepts_the_built_wheel(
    installed_venv: Venv, built_wheel: Path, repo_copy: Path
) -> None:
    """The installed `netra` checks a wheel against a given lock, and (outside any tree) against its own."""
    r = installed_venv.run("netra", "verify-wheel", built_wheel, "--lock", repo_copy / LOCK_PATH)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("OK (proved against that lock)"), log(r)
    assert "self-consistent" not in r.stdout, log(r)
    r = installed_venv.run("netra", "verify-wheel", built_wheel)
    # Its own lock proves the wheel whole, not authentic: it says which it proved, and how to prove the other.
    assert r.returncode == 0 and "self-consistent" in r.stdout and "the lock it carries" in r.stdout, log(r)
    assert "not that it is an authentic release" in r.stdout and "--lock release/manifest.lock" in r.stdout, (
        log(r)
    )
    for given, proved in (((), "self-consistency"), (("--lock", repo_copy / LOCK_PATH), "lock")):
        r = installed_venv.run("netra", "verify-wheel", built_wheel, *given, "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["proved"] == proved, log(r)


def test_verify_wheel_never_falls_back_to_proving_less_than_was_asked(
    installed_venv: Venv, built_wheel: Path, tmp_path: Path
) -> None:
    """Inside a source tree the tree's lock is the proof: a tree whose lock cannot be read is an error,
    not a quiet fall back to the wheel's own lock (which once answered OK, exit 0, "self-consistency").
    --root must name a tree; a damaged lock inside the wheel says the wheel is the problem, not a tree."""
    tree = tmp_path / "tree"
    for d in ("kernels", "manifests", "release"):
        (tree / d).mkdir(parents=True)
    (tree / LOCK_PATH).write_text("not = [valid\n")
    r = installed_venv.run("netra", "verify-wheel", built_wheel, cwd=tree)
    assert r.returncode == 1 and "OK" not in r.stdout and "Traceback" not in r.stderr, log(r)
    assert r.stderr.startswith(f"netra: error: {tree / LOCK_PATH}: not valid TOML"), log(r)
    (tree / LOCK_PATH).unlink()
    r = installed_venv.run("netra", "verify-wheel", built_wheel, cwd=tree)
    assert r.returncode == 1 and f"{tree / LOCK_PATH}: lock file not found" in r.stderr, log(r)
    r = installed_venv.run("netra", "verify-wheel", built_wheel, "--root", tmp_path)
    assert r.returncode == 1 and f"--root {tmp_path}: not a netra source tree" in r.stderr, log(r)
    r = installed_venv.run("netra", "verify-wheel", tmp_path)
    assert r.returncode == 1 and f"{tmp_path}: is a folder; hint: pass the path of a .whl file" in r.stderr, (
        log(r)
    )

    def damage(m: dict[str, bytes]) -> None:
        m[DATA + "manifest.lock"] = b"not = [valid\n"

    damaged = rewrite(built_wheel, tmp_path / built_wheel.name, damage, reseal=True)
    r = installed_venv.run("netra", "verify-wheel", damaged)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, log(r)
    assert "manifest.lock: not valid TOML" in r.stderr and "the wheel's own lock is damaged" in r.stderr, log(
        r
    )
    assert "netra lock" not in r.stderr and "git checkout" not in r.stderr, log(r)


def test_doctored_wheel_is_refused_naming_every_member(
    installed_venv: Venv, built_wheel: Path, repo_copy: Path, tmp_path: Path
) -> None:
    _, lock = lock_of(repo_copy)
    gone = DATA + lock.artifacts[0].file
    changed = DATA + layout.data_path(first(lock, "manifest", ".toml", "manifests/models/"))  # type: ignore[operator]
    stale = f"{DATA}{lock.artifacts[0].target}/netra_stale_artifact.hsaco"

    def doctor(m: dict[str, bytes]) -> None:
        m[stale] = m.pop(gone)
        m[changed] = m[changed] + b"\n"

    doctored = tmp_path / built_wheel.name
    rewrite(built_wheel, doctored, doctor)
    r = installed_venv.run("netra", "verify-wheel", doctored, "--lock", repo_copy / LOCK_PATH)
    assert r.returncode == 1, log(r)
    lines = error_lines(r.stderr)
    assert len(lines) == 1, log(r)
    for kind, name in (("missing", gone), ("altered", changed), ("unexpected", stale)):
        assert kind in lines[0] and name in lines[0], f"{kind} {name} not named: {lines[0]}"


def test_resealed_wheel_is_refused_although_its_record_is_consistent(
    installed_venv: Venv, built_wheel: Path, repo_copy: Path, tmp_path: Path
) -> None:
    """RECORD only proves self-consistency; the gate checks the lock's hashes, so a resealed edit fails."""
    _, lock = lock_of(repo_copy)
    table = DATA + layout.data_path(first(lock, "table"))  # type: ignore[operator]

    def doctor(m: dict[str, bytes]) -> None:
        m[table] = m[table].replace(b"verified", b"accepted", 1)

    doctored = tmp_path / built_wheel.name
    rewrite(built_wheel, doctored, doctor, reseal=True)
    installer = [sys.executable, "-m", "installer", "--destdir", str(tmp_path / "root")]
    r = subprocess.run(
        [*installer, "--validate-record", "all", str(doctored)], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, f"the resealed wheel should pass RECORD validation\n{log(r)}"
    r = installed_venv.run("netra", "verify-wheel", doctored, "--lock", repo_copy / LOCK_PATH)
    assert r.returncode == 1 and table in r.stderr and "altered" in r.stderr, log(r)


def test_build_record_whose_lock_copy_differs_is_refused(
    installed_venv: Venv, built_wheel: Path, repo_copy: Path, tmp_path: Path
) -> None:
    """build.json's JSON copy of the lock is what installs read: it must equal the lock exactly."""
    record_name = DATA + layout.BUILD_RECORD

    def doctor(m: dict[str, bytes]) -> None:
        record = json.loads(m[record_name])
        record["lock"]["artifacts"][0]["lds_bytes"] += 1024
        del record["record_sha256"]  # a deliberate forger recomputes the record's own hash too
        record["record_sha256"] = hashlib.sha256(layout.canonical(record)).hexdigest()
        m[record_name] = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()

    doctored = tmp_path / built_wheel.name
    rewrite(built_wheel, doctored, doctor, reseal=True)
    r = installed_venv.run("netra", "verify-wheel", doctored, "--lock", repo_copy / LOCK_PATH)
    assert r.returncode == 1 and record_name in r.stderr and "copy of the lock differs" in r.stderr, log(r)


# -- editable installs ---------------------------------------------------------------------------------


def test_editable_build_packages_no_data_and_says_where_to_look(
    make_repo_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    """Editable wheels point at the tree; they carry no netra/_data that could pass for a certified one."""
    root = make_repo_copy("editable")
    code = (
        "import sys; sys.path.insert(0, 'build_backend'); import netra_backend; "
        "print(netra_backend.build_editable(sys.argv[1]))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], cwd=root, env=clean_env(), capture_output=True, text=True
    )
    assert r.returncode == 0, log(r)
    wheel = tmp_path / r.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        pth = [z.read(n).decode() for n in names if n.endswith(".pth")]
    assert not [n for n in names if n.startswith(DATA)]
    assert any(str(root.resolve()) in p for p in pth), pth
    assert "editable install" in r.stderr and "build/kernels" in r.stderr
