"""Session fixtures for tests that build, install and inspect real release artifacts.

Everything runs the real tools: `python -m build`, hatchling through build_backend/, the AMDGPU
toolchain, `python -m venv` and pip. A full build assembles every locked artifact, so the suite builds
as little as it can: `built_sdist` and `built_wheel` come from ONE `python -m build` of `repo_copy`
(the sdist, then the wheel from the sdist, as a release does) and every test shares them read-only.
A test that breaks something makes its own copy with `make_repo_copy`; a test that changes an install
makes its own venv with `venv_factory`.

Builds use `--no-isolation` (the test venv has hatchling==1.33.0, pyelftools and msgpack) with
`--skip-dependency-check`: [build-system].requires pins pyelftools and msgpack exactly for the isolated
path, while requirements/test.in only asks for compatible versions; neither changes a byte of the
archives (hatchling's version does, and both pin it). One test builds the isolated way.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# `import netra` means this tree's package, however pytest was started; except on the GPU machine, where
# the gpu-marked tests check an installed wheel (NETRA_TEST_INSTALLED=1, docs/gpu.md).
if str(REPO) not in sys.path and os.environ.get("NETRA_TEST_INSTALLED") != "1":
    sys.path.insert(0, str(REPO))
# Never part of a clean clone's contents, even when git does not ignore them.
SKIP_TOP = {".git", "dist", "build"}
SKIP_ANY = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
# Variables that change what a build does; the tests set them explicitly when they mean to.
BUILD_ENV_SWITCHES = (
    "SOURCE_DATE_EPOCH",
    "HATCH_BUILD_NO_HOOKS",
    "HATCH_BUILD_HOOKS_ONLY",
    "HATCH_BUILD_HOOKS_ENABLE",
    "HATCH_BUILD_CLEAN",
    "HATCH_BUILD_LOCATION",
    "NETRA_LLVM_BINDIR",
)
TIMEOUT = 600
# The compile cache every build of the session shares (netra/release/compilecache.py); builds that prove
# reproducibility pass NO_CACHE to compile everything afresh, as a release does.
CACHE_SWITCH = "NETRA_COMPILE_CACHE"
NO_CACHE = {CACHE_SWITCH: "0"}
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def signals_default() -> None:
    """preexec_fn of a child the test will signal: default dispositions, whatever this process inherited
    (a suite started in the background, `tools/test &` or nohup, runs with SIGINT ignored, and a child
    would inherit that and never see the Ctrl-C the test sends)."""
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def within(seconds: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn(*args) run in a daemon thread: a hang (e.g. blocking on a FIFO) fails the test instead of hanging it."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} did not return within {seconds}s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet, e.g. in a container without an init, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


@pytest.fixture
def torch_state() -> Any:
    """netra.torch with strict mode off and no counts before the test, and as it was after it."""
    import netra.torch as nt

    prev = nt.set_strict(False)
    nt.reset_stats()
    yield
    nt.set_strict(prev)
    nt.reset_stats()


def release_table(gpu_class: str, repo: Path = REPO) -> dict[str, Any]:
    """A class's committed table as JSON (release/tables/<class>.json): what this tree's wheel ships."""
    table: dict[str, Any] = json.loads((repo / "release" / "tables" / f"{gpu_class}.json").read_text())
    return table


def accepted(table: dict[str, Any]) -> list[str]:
    """The contracts a table's default policy serves: those with at least one accepted candidate."""
    return sorted(
        e["key"] for e in table["entries"] if any(c["maturity"] == "accepted" for c in e["candidates"])
    )


def repo_files(repo: Path = REPO) -> list[str]:
    """The files a clean clone would have: tracked plus untracked-not-ignored, minus build outputs."""
    names: list[str]
    if (repo / ".git").exists() and shutil.which("git"):
        out = subprocess.run(
            ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        ).stdout
        names = sorted({n for n in out.decode().split("\0") if n})
    else:  # an unpacked sdist: no git, copy what is there
        names = sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())
    keep = []
    for name in names:
        parts = name.split("/")
        if parts[0] in SKIP_TOP or parts[0].startswith(".venv") or SKIP_ANY & set(parts):
            continue
        if name.endswith((".pyc", ".pyo")) or not (repo / name).is_file():
            continue  # deleted in the working tree but still in the index
        keep.append(name)
    return keep


def copy_repo(dest: Path, repo: Path = REPO) -> Path:
    """Copy the clone-visible files with their modes (the executable bit is part of an archive)."""
    for name in repo_files(repo):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / name, target)
    return dest


def clean_env(**overrides: str) -> dict[str, str]:
    """The test's environment minus build switches; no bytecode written into the copies being built."""
    env = {k: v for k, v in os.environ.items() if k not in BUILD_ENV_SWITCHES}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(overrides)
    return env


def run_build(
    src: Path,
    outdir: Path,
    *args: str,
    env: dict[str, str] | None = None,
    isolated: bool = False,
    umask: int | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`python -m build` of src into outdir, for real; returns the finished process (never raises)."""
    flags = [] if isolated else ["--no-isolation", "--skip-dependency-check"]
    cmd = [sys.executable, "-m", "build", *flags, "--outdir", str(outdir), *args, str(src)]
    return subprocess.run(
        cmd,
        cwd=cwd or src,
        env=env if env is not None else clean_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )


def log(r: subprocess.CompletedProcess[str]) -> str:
    """A finished process's output, for assertion messages."""
    return f"exit {r.returncode}\n--- stdout\n{r.stdout[-6000:]}\n--- stderr\n{r.stderr[-6000:]}"


def one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    assert len(found) == 1, f"expected one {pattern} in {folder}, found {[p.name for p in found]}"
    return found[0]


@dataclass(frozen=True)
class Build:
    """One finished `python -m build`: where it wrote, and what it said."""

    outdir: Path
    process: subprocess.CompletedProcess[str]

    @property
    def sdist(self) -> Path:
        return one(self.outdir, "*.tar.gz")

    @property
    def wheel(self) -> Path:
        return one(self.outdir, "*.whl")


@dataclass(frozen=True)
class Venv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def bin(self, name: str) -> Path:
        return self.root / "bin" / name

    def run(self, *args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command from the venv's bin/ (outside the source tree unless cwd says otherwise)."""
        exe = str(args[0]) if "/" in str(args[0]) else str(self.bin(str(args[0])))
        return subprocess.run(
            [exe, *map(str, args[1:])],
            cwd=cwd or self.root,
            env=clean_env(PATH=f"{self.root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )


# -- the compile cache ---------------------------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One compile cache for the whole session, under pytest's tmp, on for every build (the wheel hook
    included) unless a test passes NO_CACHE: each code object is compiled about once per session."""
    from netra.release import compilecache

    folder = tmp_path_factory.mktemp("compile-cache")
    saved = {k: os.environ.get(k) for k in (compilecache.ENV_DIR, CACHE_SWITCH, compilecache.ENV_MAX_MB)}
    os.environ.update({compilecache.ENV_DIR: str(folder), CACHE_SWITCH: "1"})
    os.environ.pop(compilecache.ENV_MAX_MB, None)
    yield folder
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# -- the repository -------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def repo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository as a clean clone has it, copied once per session: do not modify it."""
    return copy_repo(tmp_path_factory.mktemp("repo") / "netra")


@pytest.fixture(scope="session")
def make_repo_copy(tmp_path_factory: pytest.TempPathFactory, repo_copy: Path) -> Callable[[str], Path]:
    """make(name): a fresh, private copy for a test that breaks or changes it.

    Copied from repo_copy, not from the working tree: the tree may change while the suite runs, and
    every copy must be the same snapshot as the session's build.
    """

    def make(name: str = "repo") -> Path:
        return copy_repo(tmp_path_factory.mktemp(name) / "netra", repo_copy)

    return make


# -- one real build, shared ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def session_build(repo_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Build:
    """`python -m build` of repo_copy: the sdist, then the wheel built from that sdist. Built once, as
    a release builds it: every code object compiled now (no compile cache)."""
    outdir = tmp_path_factory.mktemp("dist")
    r = run_build(repo_copy, outdir, env=clean_env(**NO_CACHE))
    assert r.returncode == 0, f"the session build failed\n{log(r)}"
    return Build(outdir, r)


@pytest.fixture(scope="session")
def built_sdist(session_build: Build) -> Path:
    return session_build.sdist


@pytest.fixture(scope="session")
def built_wheel(session_build: Build) -> Path:
    return session_build.wheel


@pytest.fixture(scope="session")
def warm_cache(compile_cache: Path, repo_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session's compile cache holding every code object repo_copy locks (one `netra build` through
    it): a test that interrupts a build at a late moment gets there in seconds, not a full compile."""
    out = tmp_path_factory.mktemp("warm-cache-build")
    r = subprocess.run(
        [sys.executable, "-m", "netra", "build", str(out / "code"), "--root", str(repo_copy)],
        env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert r.returncode == 0 and "compile cache" in r.stderr, f"the cache-warming build failed\n{log(r)}"
    return compile_cache


# -- venvs ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def wheelhouse(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's runtime dependencies, downloaded once so each venv installs offline and fast."""
    house = tmp_path_factory.mktemp("wheelhouse")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    r = subprocess.run(
        [*pip, "download", "-q", "-d", house, built_wheel],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert r.returncode == 0, f"pip download of the wheel's dependencies failed\n{log(r)}"
    (house / built_wheel.name).unlink(missing_ok=True)  # only the dependencies; wheels are passed explicitly
    return house


@pytest.fixture(scope="session")
def venv_factory(tmp_path_factory: pytest.TempPathFactory, wheelhouse: Path) -> Callable[..., Venv]:
    """make(wheel=None, name="venv"): a fresh `python -m venv`, with `wheel` installed by pip if given."""

    def make(wheel: Path | None = None, name: str = "venv") -> Venv:
        venv = Venv(tmp_path_factory.mktemp(name) / "venv")
        r = subprocess.run(
            [sys.executable, "-m", "venv", str(venv.root)], capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, f"python -m venv failed\n{log(r)}"
        if wheel is not None:
            r = venv.run(
                "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-index",
                "--find-links", wheelhouse, wheel,
            )  # fmt: skip
            assert r.returncode == 0, f"pip install {wheel.name} failed\n{log(r)}"
        return venv

    return make


@pytest.fixture(scope="session")
def installed_venv(venv_factory: Callable[..., Venv], built_wheel: Path) -> Venv:
    """A venv with built_wheel installed by pip, shared: tests that change an install make their own."""
    return venv_factory(built_wheel, "installed")


@pytest.fixture
def private_tmpdir(tmp_path: Path) -> Path:
    """A TMPDIR of the test's own, to prove a build leaves no temporary files behind."""
    d = tmp_path / "tmpdir"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def py(installed_venv: Venv) -> str:
    """The interpreter of the shared installed venv (tests that read it, never damage it)."""
    return str(installed_venv.python)


@pytest.fixture(scope="session")
def pkg(py: str) -> Path:
    """The installed netra package directory in the shared venv."""
    from venvtools import package_dir

    return package_dir(py)


# -- the gpu marker ------------------------------------------------------------------------------------

GPU_SKIP_REASON = "needs an sm_90 GPU (an H100 or H200): none on this machine (CI has no GPU; run on the device, docs/gpu.md)"


def _sm90_visible() -> bool:
    """A CUDA device of class sm_90 is visible: through torch.cuda if torch is installed, else nvidia-smi."""
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    if torch is not None and torch.cuda.is_available():
        return any(torch.cuda.get_device_capability(i) == (9, 0) for i in range(torch.cuda.device_count()))
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run(
            [smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and any(line.strip() == "9.0" for line in out.stdout.splitlines())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu and not _sm90_visible():
        skip = pytest.mark.skip(reason=GPU_SKIP_REASON)
        for item in gpu:
            item.add_marker(skip)
