"""The release checks and the one command: twine, check-wheel-contents, pip, RECORD, tools/release.

All real: the session's wheel and sdist, the tools as installed, a fresh venv made by `python -m venv`,
and tools/release run end to end on a copy of the repository (it builds its own hash-pinned venv).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import REPO, Build, Venv, clean_env, log
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from netra.core import toml as _toml
from netra.core.hashing import sha256_bytes
from netra.release import wheelgate
from netra.runtime import layout
from netra.runtime.lockfile import LOCK_PATH


def run(*cmd: str | Path, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=clean_env(**env), capture_output=True, text=True, check=False
    )


def test_twine_check_strict_passes(session_build: Build) -> None:
    r = run(sys.executable, "-m", "twine", "check", "--strict", session_build.sdist, session_build.wheel)
    assert r.returncode == 0, log(r)
    assert r.stdout.count("PASSED") == 2, log(r)


def test_check_wheel_contents_passes_with_the_projects_config(built_wheel: Path, repo_copy: Path) -> None:
    r = run(sys.executable, "-m", "check_wheel_contents", built_wheel, cwd=repo_copy)  # reads pyproject.toml
    assert r.returncode == 0, log(r)
    assert r.stdout.strip().endswith("OK"), log(r)


def test_installer_validates_every_record_entry(built_wheel: Path, tmp_path: Path) -> None:
    r = run(sys.executable, "-m", "installer", "--destdir", tmp_path, "--validate-record", "all", built_wheel)
    assert r.returncode == 0, log(r)
    assert list(tmp_path.rglob(f"{layout.PACKAGE_DATA}/manifest.lock"))


def test_pip_installs_the_wheel_into_a_fresh_venv_with_every_locked_file(
    installed_venv: Venv, repo_copy: Path
) -> None:
    """What pip put in site-packages is exactly the lock's members, with the lock's hashes."""
    probe = (
        "import hashlib, json, pathlib, netra; d = pathlib.Path(netra.__file__).parent / '_data'; "
        "print(json.dumps({p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() "
        "for p in d.rglob('*') if p.is_file()}))"
    )
    r = installed_venv.run("python", "-c", probe)  # from the venv's folder: not the source tree
    assert r.returncode == 0, log(r)
    installed = json.loads(r.stdout)
    raw, lock = wheelgate.read_lock(repo_copy / LOCK_PATH)
    members = layout.members(lock)
    assert sorted(installed) == sorted(m.data_path for m in members)
    for m in members:
        if m.sha256 is not None:
            assert installed[m.data_path] == m.sha256, m.data_path
    assert r.stdout and installed["manifest.lock"] == sha256_bytes(raw)
    r = installed_venv.run("netra", "--version")
    assert r.returncode == 0 and r.stdout.strip().startswith("netra "), log(r)
    r = installed_venv.run("python", "-m", "pip", "check")
    assert r.returncode == 0, log(r)


def _requirements(lines: list[str]) -> dict[str, list[Requirement]]:
    """name -> its requirement lines (a universal lock may pin one name once per range of Pythons)."""
    out: dict[str, list[Requirement]] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip().rstrip("\\").strip()
        if line and not line.startswith("-"):
            req = Requirement(line)
            out.setdefault(canonicalize_name(req.name), []).append(req)
    return out


def test_build_requirements_agree_and_are_hash_locked() -> None:
    """[build-system].requires (isolated path) == requirements/build.in, markers included; build.txt (release
    path) pins each of them, every line with its hashes."""
    requires = _requirements(_toml.load(REPO / "pyproject.toml")["build-system"]["requires"])
    assert {"hatchling", "pyelftools", "msgpack", "tomli", "nvidia-cuda-nvcc"} <= requires.keys(), requires
    build_in = _requirements((REPO / "requirements/build.in").read_text().splitlines())
    text = (REPO / "requirements/build.txt").read_text()
    locked = _requirements([ln for ln in text.splitlines() if re.match(r"^[A-Za-z0-9]", ln)])
    for name, (req,) in requires.items():
        (mine,) = build_in.get(name) or [None]
        assert mine is not None and (mine.specifier, mine.marker) == (req.specifier, req.marker), (
            f"requirements/build.in has {mine}, pyproject.toml's [build-system].requires {req}"
        )
        pins = [next(iter(r.specifier)).version for r in locked.get(name, [])]
        assert pins and all(req.specifier.contains(v) for v in pins), (
            f"requirements/build.txt pins {name} {pins}, pyproject.toml wants {req}"
        )
    for name in ("build", "twine", "check-wheel-contents", "installer"):
        assert name in locked and all(str(r.specifier).startswith("==") for r in locked[name]), name
    for reqs in locked.values():
        assert all(len(r.specifier) == 1 and next(iter(r.specifier)).operator == "==" for r in reqs), reqs
    assert re.search(r"^--only-binary :all:$", text, re.M), "the lock installs wheels only"
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 1)[1])
    for block in blocks:
        if re.match(r"^[A-Za-z0-9]", block):
            assert "--hash=sha256:" in block, f"no hash for {block.splitlines()[0]}"


def test_publish_workflow_uploads_what_tools_release_built_by_trusted_publishing() -> None:
    """.github/workflows/publish.yml and docs/release.md's upload procedure name the same things."""
    flow = (REPO / ".github/workflows/publish.yml").read_text()
    docs = (REPO / "docs/release.md").read_text()
    assert re.search(r"^ +run: tools/release$", flow, re.M) and "container: debian:12" in flow
    assert re.findall(r"^ +id-token: write$", flow, re.M) == ["      id-token: write"] * 2, (
        "only the upload jobs"
    )
    assert re.search(r"^permissions: \{\}$", flow, re.M), "no job gets a permission it does not name"
    for env in ("pypi", "testpypi"):
        assert re.search(rf"^ +name: {env}$", flow, re.M) and f"`{env}`" in docs, env
    assert (
        flow.count("uses: pypa/gh-action-pypi-publish@") == 2
        and "repository-url: https://test.pypi.org/legacy/" in flow
    )
    assert (
        "`publish.yml`" in docs
        and "twine upload --repository testpypi" in docs
        and "--extra-index-url" in docs
    )


def test_publish_workflow_pins_every_action_by_commit() -> None:
    """A tag can be moved to other code; a full commit SHA cannot. Every `uses:` in publish.yml names
    one (the tag in a comment), and docs/release.md's table lists the same commits."""
    flow = (REPO / ".github/workflows/publish.yml").read_text()
    docs = (REPO / "docs/release.md").read_text()
    uses = re.findall(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", flow, re.M)
    assert len(uses) == 6, uses
    for ref, rest in uses:
        action, _, pin = ref.partition("@")
        assert re.fullmatch(r"[0-9a-f]{40}", pin), f"{ref}: pin {action} to a full commit SHA"
        assert re.fullmatch(r" # v\d+(\.\d+)*( \(.*\))?", rest), f"{ref}: name its tag in a comment"
        assert f"`{action}`" in docs and f"`{pin}`" in docs, f"docs/release.md lists {action} at {pin}"


def test_tools_are_executable_and_strict() -> None:
    for tool in ("tools/release", "tools/lock-requirements", "tools/supported-pythons"):
        path = REPO / tool
        assert path.stat().st_mode & 0o111, f"{tool} must be executable"
        assert "set -euo pipefail" in path.read_text(), tool


def test_release_command_end_to_end(make_repo_copy: Callable[[str], Path], built_wheel: Path) -> None:
    """tools/release on a copy: it releases the session's wheel, byte for byte; a failure leaves no wheel."""
    root = make_repo_copy("release")
    r = run(root / "tools/release", cwd=root, PYTHON=sys.executable)
    assert r.returncode == 0, log(r)
    dist = sorted((root / "dist").iterdir())
    assert sorted(p.suffix for p in dist) == [".gz", ".whl"], dist
    wheel = root / "dist" / built_wheel.name
    printed = dict(
        ln.split("  ", 1)[::-1] for ln in r.stdout.splitlines() if re.match(r"^[0-9a-f]{64}  ", ln)
    )
    assert printed.get(str(wheel)) == sha256_bytes(wheel.read_bytes()), r.stdout
    # The hash-pinned release venv and this test's environment build the same bytes.
    assert wheel.read_bytes() == built_wheel.read_bytes(), "tools/release built a different wheel"
    assert "RECORD verified" in r.stderr
    assert not (root / "build/release/dist").exists()

    # Now break the tree: the release fails, naming the file, and the previous wheel is gone from dist/.
    _, lock = wheelgate.read_lock(root / LOCK_PATH)
    manifest = next(f.path for f in lock.files if f.role == "manifest")
    (root / manifest).write_bytes((root / manifest).read_bytes() + b"\n")
    r = run(root / "tools/release", cwd=root, PYTHON=sys.executable)
    assert r.returncode != 0, log(r)
    assert manifest in r.stderr and "FAILED" in r.stderr, log(r)
    assert not list(root.glob("dist/*.whl")) and not list(root.glob("build/release/dist/*.whl"))
