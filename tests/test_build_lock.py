"""requirements/build.txt, the release's one lock: pip installs it with --require-hashes on every Python the
project supports, it is exactly what tools/lock-requirements makes (keeping the pins that still fit), and tools/release refuses a Python it
was not made for.

All real: for each supported Python, a venv of a real interpreter of that version and its own pip, resolving
the lock against PyPI alone (`pip install --dry-run --report`: every pin, hash and wheel checked for that
Python, nothing installed, no 300 MB of compilers unpacked); uv resolving build.in again. Like the other
tests that install from an index (the wheelhouse, tools/release), they need PyPI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, TIMEOUT, clean_env, log
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from netra.core import toml as _toml

PYPROJECT = _toml.load(REPO / "pyproject.toml")
LOCK = REPO / "requirements/build.txt"
PYPI = "https://pypi.org/simple"
SUPPORTED = sorted(
    (c.rsplit(" ", 1)[1] for c in PYPROJECT["project"]["classifiers"]
     if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)),
    key=lambda v: int(v.split(".")[1]),
)  # fmt: skip


def pypi_only_env(**overrides: str) -> dict[str, str]:
    """This machine's pip configuration, find-links and constraints left out: PyPI is what a fresh machine sees."""
    env = {k: v for k, v in clean_env().items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **overrides)
    return env


def version_of(python: str) -> str | None:
    try:
        r = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    except OSError:
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def _uv() -> str | None:
    return shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")


def interpreter(version: str, downloads: Path) -> str | None:
    """A real Python `version`: this one, python3.N on PATH, pyenv's, or else one `uv python install` fetches."""
    if version_of(sys.executable) == version:
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(pyenv.glob(f"versions/{version}.*/bin/python{version}"), reverse=True)
    for candidate in [shutil.which(f"python{version}"), *map(str, found)]:
        # A pyenv shim of a version that is not selected exists but fails here.
        if candidate and version_of(candidate) == version:
            return candidate
    uv = _uv()
    if uv is None:
        return None
    env = clean_env(UV_PYTHON_INSTALL_DIR=str(downloads))
    r = subprocess.run([uv, "python", "install", "--no-bin", version], env=env, capture_output=True, text=True,
                       timeout=TIMEOUT, check=False)  # fmt: skip
    if r.returncode != 0:
        return None
    r = subprocess.run([uv, "python", "find", "--managed-python", "--no-python-downloads", version], env=env,
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    return r.stdout.strip() if r.returncode == 0 and version_of(r.stdout.strip()) == version else None


def resolve_lock(
    python: str, venv: Path, lock: Path
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """What tools/release's `pip install --require-hashes -r lock` would install with this Python, from PyPI.

    The venv's own pip, as tools/release uses it; without --no-deps, so a dependency this Python needs and
    the lock lacks (tomli on 3.10) fails hash-checking mode, as a pin without a wheel for it fails
    the lock's --only-binary."""
    r = subprocess.run(
        [python, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=TIMEOUT, check=False
    )
    assert r.returncode == 0, log(r)
    report = venv / "report.json"
    r = subprocess.run(
        [str(venv / "bin/python"), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--require-hashes",
         "--quiet", "--index-url", PYPI, "--report", str(report), "-r", str(lock)],
        env=pypi_only_env(), capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    return r, json.loads(report.read_text()) if r.returncode == 0 else {}


def _requirements(lines: list[str]) -> list[Requirement]:
    kept = [ln.split("#", 1)[0].strip() for ln in lines]
    return [Requirement(ln) for ln in kept if ln and not ln.startswith("-")]


@pytest.fixture(scope="session")
def python_downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("uv-pythons")


def test_supported_pythons_are_the_classifiers() -> None:
    """tools/release and tools/lock-requirements read the classifiers as text: the same list tomllib reads."""
    r = subprocess.run([str(REPO / "tools/supported-pythons")], capture_output=True, text=True, check=False)
    assert r.returncode == 0, log(r)
    assert r.stdout.split() == SUPPORTED and SUPPORTED[0] == "3.10", (r.stdout, SUPPORTED)


@pytest.mark.parametrize("version", SUPPORTED)
def test_the_lock_installs_with_require_hashes_on_every_supported_python(
    version: str, python_downloads: Path, tmp_path: Path
) -> None:
    python = interpreter(version, python_downloads)
    if python is None:
        pytest.skip(
            f"no Python {version} here: put python{version} on PATH, or let `uv python install` download it"
        )
    r, report = resolve_lock(python, tmp_path / "venv", LOCK)
    assert r.returncode == 0, (
        f"requirements/build.txt does not install on Python {version}; fix requirements/build.in, then run "
        f"tools/lock-requirements\n{log(r)}"
    )
    env = report["environment"]
    assert env["python_version"] == version, env
    installed = {
        canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]
    }
    not_wheels = [
        i["download_info"]["url"] for i in report["install"] if not i["download_info"]["url"].endswith(".whl")
    ]
    assert not not_wheels, f"not wheels: {not_wheels}"
    # What the backend and the release need, on this Python, markers evaluated by its own pip.
    build_in = _requirements((REPO / "requirements/build.in").read_text().splitlines())
    requires = [Requirement(s) for s in PYPROJECT["build-system"]["requires"]]
    for req in build_in + requires:
        if req.marker is None or req.marker.evaluate(env):  # tomli: on 3.10 only
            got = installed.get(canonicalize_name(req.name))
            assert got is not None, f"Python {version}: the lock does not install {req}"
            assert req.specifier.contains(got, prereleases=True), (
                f"Python {version}: {req.name}=={got}, want {req}"
            )


def test_the_lock_is_what_lock_requirements_makes() -> None:
    """Reproducible by the command that made it: build.in, PyPI before the cutoff, the pinned uv."""
    script = (REPO / "tools/lock-requirements").read_text()
    (uv_pin,) = re.findall(r'^UV_VERSION="([^"]+)"$', script, re.M)
    test_in = _requirements((REPO / "requirements/test.in").read_text().splitlines())
    (uv_req,) = [r for r in test_in if r.name == "uv"]
    assert str(uv_req.specifier) == f"=={uv_pin}", (
        f"requirements/test.in has {uv_req}; the lock is made by uv {uv_pin}"
    )
    r = subprocess.run([str(REPO / "tools/lock-requirements"), "--check"], cwd=REPO, capture_output=True, text=True,
                       env=clean_env(PYTHON=sys.executable), timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0, log(r)
    assert "requirements/build.txt is up to date" in r.stdout, log(r)


def test_lock_requirements_check_names_a_stale_lock_and_its_fix(
    make_repo_copy: Callable[[str], Path],
) -> None:
    root = make_repo_copy("stale-lock")
    build_in = root / "requirements/build.in"
    build_in.write_text(build_in.read_text().replace("installer>=0.7", "installer>=0.7,<1.1"))
    before = (root / "requirements/build.txt").read_bytes()
    tool = root / "tools/lock-requirements"
    r = subprocess.run([str(tool), "--check"], cwd=root, capture_output=True, text=True,
                       env=clean_env(PYTHON=sys.executable), timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 1, log(r)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("lock-requirements: error: requirements/build.txt is not what"), log(r)
    assert last.endswith("fix: tools/lock-requirements") and "-installer==" in r.stderr, log(r)
    assert (root / "requirements/build.txt").read_bytes() == before, "--check wrote the lock"
    # The fix, followed: the lock is rewritten and then up to date.
    for argv in ([str(tool)], [str(tool), "--check"]):
        r = subprocess.run(argv, cwd=root, capture_output=True, text=True, env=clean_env(PYTHON=sys.executable),
                           timeout=TIMEOUT, check=False)  # fmt: skip
        assert r.returncode == 0, log(r)
    assert re.search(r"^installer==1\.0\.\d+ \\$", (root / "requirements/build.txt").read_text(), re.M)


def test_lock_requirements_keeps_pins_that_still_fit_and_upgrade_takes_the_newest(
    make_repo_copy: Callable[[str], Path],
) -> None:
    """A newer release before CUTOFF does not make a correct lock stale (an index may show one late, as a
    mirror back-filling releases did with tomlkit 0.15.3, failing CI); --upgrade takes it."""
    root = make_repo_copy("keep-pins")
    build_in = root / "requirements/build.in"
    text = build_in.read_text()
    tool = root / "tools/lock-requirements"

    def lock(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(tool), *args], cwd=root, capture_output=True, text=True,
                              env=clean_env(PYTHON=sys.executable), timeout=TIMEOUT, check=False)  # fmt: skip

    def installer_pin() -> str:
        (pin,) = re.findall(r"^installer==(\S+) \\$", (root / "requirements/build.txt").read_text(), re.M)
        return pin

    build_in.write_text(text.replace("installer>=0.7", "installer>=0.7,<1.1"))
    assert lock().returncode == 0
    older = installer_pin()
    assert older.startswith("1.0."), older
    build_in.write_text(text)  # 1.1.0 (before CUTOFF) is allowed again; the lock's 1.0.x still fits
    r = lock("--check")
    assert r.returncode == 0 and "is up to date" in r.stdout, log(r)
    r = lock()
    assert r.returncode == 0 and installer_pin() == older, log(r)
    r = lock("--upgrade")
    assert r.returncode == 0, log(r)
    assert installer_pin() == "1.1.0"
    r = lock("--check", "--upgrade")
    assert r.returncode == 1 and r.stderr.startswith("lock-requirements: error: one argument at most"), log(r)


def test_release_refuses_a_python_the_lock_is_not_made_for(make_repo_copy: Callable[[str], Path]) -> None:
    """One line naming the Python, the lock and the fix, before any venv is made."""
    root = make_repo_copy("release-other-python")
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    line = f'  "Programming Language :: Python :: {mine}",\n'
    assert line in text
    pyproject.write_text(text.replace(line, ""))
    r = subprocess.run([str(root / "tools/release")], cwd=root, capture_output=True, text=True,
                       env=clean_env(PYTHON=sys.executable), timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 1, log(r)
    error, failed = r.stderr.strip().splitlines()
    newest = [v for v in SUPPORTED if v != mine][-1]
    assert error.startswith(
        f"release: error: {sys.executable} is Python {mine}, and requirements/build.txt"
    ), log(r)
    assert error.endswith(f"fix: PYTHON=python{newest} tools/release (or another of those)"), log(r)
    assert failed.startswith("release: FAILED"), log(r)
    assert "Traceback" not in r.stderr and not r.stdout, log(r)
    assert not (root / ".venv-release").exists() and not (root / "dist").exists()
