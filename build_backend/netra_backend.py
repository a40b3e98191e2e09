"""netra-kernel's PEP 517 backend: hatchling, plus a release gate that no environment variable turns off.

Everything is hatchling.build's, except:
- build_wheel and build_sdist re-check the archive hatchling produced unless this process's build hook
  already vouched for those exact bytes (netra.release.wheelgate.vouch). HATCH_BUILD_NO_HOOKS=true, a hook
  disabled in pyproject.toml or a hook that never ran all end the same way: the archive is checked
  against release/manifest.lock, and deleted and refused if it is not exactly what the lock implies.
  There is no switch to get an unchecked wheel; `netra build` and editable installs are the
  development paths (docs/release.md).
- SOURCE_DATE_EPOCH defaults to the project's constant below, not the clock, so two builds of one
  commit are byte-identical wherever and whenever they run.
- An archive half-written by a failing build is removed: nothing is left in the output folder.

Every frontend goes through this module: pip, `python -m build`, `uv build` and `hatch build` (hatch
runs [build-system]'s backend in its build environment; pyproject.toml's hatch-build environment puts
build_backend/ on its path), so each gets the same gate and the same bytes (docs/release.md).
`python -m hatchling build` calls hatchling directly and bypasses this module; a wheel still needs
the hook there: pyproject.toml force-includes a path that never exists and only the hook removes the
entry, so without it hatchling fails and writes nothing. Release with `python -m build` or
tools/release.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hatchling import build as _hatchling
from hatchling.build import (  # re-exported unchanged
    build_editable,
    get_requires_for_build_editable,
    get_requires_for_build_sdist,
    get_requires_for_build_wheel,
)

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
]
# hatchling leaves these out when pip drives the build (see hatchling.build); so do we.
for _name in ("prepare_metadata_for_build_wheel", "prepare_metadata_for_build_editable"):
    if hasattr(_hatchling, _name):
        globals()[_name] = getattr(_hatchling, _name)
        __all__.append(_name)

# 2026-01-01T00:00:00Z. The timestamp of every file in the sdist and wheel. Changing it changes the
# bytes of every release artifact, so it is a constant of the project, not of the build machine.
SOURCE_DATE_EPOCH = "1767225600"
_SWITCHES = ("HATCH_BUILD_NO_HOOKS",)
_GUARD = "the-netra-build-hook-did-not-run"  # pyproject.toml [tool.hatch.build.targets.wheel.force-include]


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    """hatchling's wheel, then the gate: a wheel leaves here only if it carries exactly the lock."""
    _prepare_environment()
    with _interruptible() as scratch:
        name = _build(_hatchling.build_wheel, str(scratch), config_settings, metadata_directory)
        _gate(scratch / name, "wheel")
        _deliver(scratch / name, Path(wheel_directory))
    return name


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """hatchling's sdist, then the check that it carries every locked and build file."""
    _prepare_environment()
    with _interruptible() as scratch:
        name = _build(_hatchling.build_sdist, str(scratch), config_settings)
        _gate(scratch / name, "sdist")
        _deliver(scratch / name, Path(sdist_directory))
    return name


@contextlib.contextmanager
def _interruptible() -> Iterator[Path]:
    """SIGINT/SIGTERM/SIGHUP, and the death of the frontend that started this backend, unwind the build:
    every temporary folder is removed and no archive is left in the output folder.

    The frontend runs this backend in a child process; if the frontend is killed, Linux sends this
    process SIGTERM (PR_SET_PDEATHSIG), so a wheel never appears after the build command has exited.
    Everything temporary (netra's folders, hatchling's half-written archive, the tools' files) lives
    in one scratch folder, yielded here: the archive is built there and moved into the output folder
    only once gated. A janitor process removes the scratch folder when this process ends, however it
    ends: a frontend interrupted itself SIGKILLs its backend (subprocess.call does), and a frontend
    killed by SIGTERM never removes its own hook folder, which the janitor then removes too.
    """
    _import_netra(Path.cwd().resolve())
    from netra.core import interrupts
    from netra.core.scratch import Scratch

    parent = os.getppid()
    orphans = _frontend_temporaries()
    scratch = Scratch(
        "netra-backend-", abandoned=(lambda: _remove_if_orphaned(orphans, parent)) if orphans else None
    )
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    try:
        tempfile.tempdir = str(scratch.path)
        os.environ["TMPDIR"] = str(scratch.path)  # the tools' temporaries too (nvcc, llvm)
        with interrupts.handled():
            _die_with_parent()
            if os.getppid() != parent:  # the frontend died before the request took effect
                raise interrupts.Interrupted(signal.SIGTERM)
            try:
                yield scratch.path
            except KeyboardInterrupt as e:
                print(f"netra: error: the build was interrupted ({e}); nothing was written", file=sys.stderr)
                raise SystemExit(interrupts.ending(e)) from None
        scratch.finished()  # the janitor only removes the (empty) scratch folder
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
        scratch.remove()


def _frontend_temporaries() -> list[Path]:
    """What the frontend made for this call and removes itself unless it is killed: pyproject_hooks'
    hook folder (argv[2] of its _in_process script, holding input.json) and `build`'s sdist extraction
    folder (TMPDIR/build-via-sdist-*, which this backend runs in)."""
    out = []
    if len(sys.argv) > 2 and Path(sys.argv[2], "input.json").is_file():
        out.append(Path(sys.argv[2]))
    here = Path.cwd().resolve()
    top = Path(tempfile.gettempdir()).resolve()
    if here.parent.name.startswith("build-via-sdist-") and here.parent.parent == top:
        out.append(here.parent)
    return out


def _remove_if_orphaned(folders: list[Path], frontend: int) -> None:
    """Remove the frontend's temporaries once the frontend has exited (a live one removes them itself)."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{frontend}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            state = "gone"
        if state in ("gone", "Z", "X"):
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)
            return
        time.sleep(0.05)


def _deliver(archive: Path, directory: Path) -> None:
    """Move a gated archive into the output folder as one rename: it is there whole, or not at all."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{archive.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out, open(archive, "rb") as src:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fchmod(out.fileno(), 0o666 & ~_umask())  # mkstemp's 0600 would hide it from others
            os.fsync(out.fileno())
        os.replace(tmp, directory / archive.name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _die_with_parent() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _prepare_environment() -> None:
    """SOURCE_DATE_EPOCH: an explicit value is respected (a rebuilder may need one), else the project's.

    HATCH_BUILD_HOOKS_ONLY is refused up front: hatchling would run the hooks and build nothing,
    failing later with a bare StopIteration.
    """
    if os.environ.get("HATCH_BUILD_HOOKS_ONLY") in ("1", "true"):
        _refuse(
            f"HATCH_BUILD_HOOKS_ONLY={os.environ['HATCH_BUILD_HOOKS_ONLY']} builds no archive; "
            "hint: unset it (the release gate runs inside the normal build)"
        )
    os.environ.setdefault("SOURCE_DATE_EPOCH", SOURCE_DATE_EPOCH)


def _build(hook: Any, directory: str, *args: Any) -> str:
    """Run a hatchling build; if it fails, remove any archive it wrote (new, or replacing an old one).

    A wheel build whose hook did not run stops inside hatchling at the guard pyproject.toml
    force-includes (a path that never exists; the hook removes the entry): that is this gate's
    refusal, said in one line, not hatchling's FileNotFoundError."""
    before = _archives(Path(directory))
    try:
        return hook(directory, *args)
    except BaseException as e:
        for p, stamp in _archives(Path(directory)).items():
            if before.get(p) != stamp:
                p.unlink(missing_ok=True)
        if isinstance(e, FileNotFoundError) and _GUARD in str(e):
            switched = [f"{v}={os.environ[v]}" for v in _SWITCHES if os.environ.get(v) in ("1", "true")]
            why = (
                f"{', '.join(switched)} skipped the build hook"
                if switched
                else "the netra build hook did not run"
            )
            hint = (
                f"unset {', '.join(v.split('=')[0] for v in switched)}: the release gate cannot be skipped"
                if switched
                else "enable the hook in pyproject.toml [tool.hatch.build.hooks.custom]: it is the release gate"
            )
            _refuse(
                f"wheel refused ({why}): it would carry none of netra/_data/ (netra/_data/manifest.lock, "
                f"build.json, the tables, every code object); hint: {hint}"
            )
        raise


def _archives(folder: Path) -> dict[Path, tuple[int, int]]:
    if not folder.is_dir():
        return {}
    out = {}
    for p in folder.iterdir():
        if p.name.endswith((".whl", ".tar.gz")) and p.is_file():
            st = p.stat()
            out[p] = (st.st_ino, st.st_mtime_ns)
    return out


def _gate(archive: Path, kind: str) -> None:
    """Re-check an archive the build hook did not vouch for; delete and refuse it on any problem."""
    root = Path.cwd().resolve()  # PEP 517: hooks run in the source tree
    _import_netra(root)
    from netra.errors import NetraError
    from netra.release import wheelgate

    if wheelgate.vouched(archive):
        return
    switched = [f"{v}={os.environ[v]}" for v in _SWITCHES if os.environ.get(v) in ("1", "true")]
    why = f"{', '.join(switched)} skipped the build hook" if switched else "the netra build hook did not run"
    try:
        from netra.runtime.lockfile import LOCK_PATH

        lock_bytes, lock = wheelgate.read_lock(root / LOCK_PATH)
        if kind == "sdist":
            problems = wheelgate.check_sdist(archive, root, lock)
            hint = wheelgate.SDIST_HINT
        else:
            problems = wheelgate.check_wheel(archive, lock, lock_bytes)
            hint = None  # chosen from the problems
    except (NetraError, OSError) as e:
        archive.unlink(missing_ok=True)
        _refuse(f"{archive.name} refused ({why}) and cannot be checked: {e}")
    if problems:
        archive.unlink(missing_ok=True)
        if switched:
            hint = f"unset {', '.join(v.split('=')[0] for v in switched)}: the release gate cannot be skipped"
        _refuse(str(wheelgate.error(archive, problems, why=why, hint=hint)))
    print(f"netra: {archive.name}: checked against the lock by the backend ({why})", file=sys.stderr)


def _refuse(message: str) -> None:
    """One line, like the hook's abort: the frontend reports the failed backend call after it."""
    print(f"netra: error: {message}", file=sys.stderr)
    raise SystemExit(1)


def _import_netra(root: Path) -> None:
    """Make `import netra` mean the package in the tree being built, never an installed copy."""
    here = str(root)
    if not sys.path or sys.path[0] != here:
        sys.path.insert(0, here)
    pkg = root / "netra"
    loaded = sys.modules.get("netra")
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "/").resolve().parent != pkg:
        for name in [n for n in sys.modules if n == "netra" or n.startswith("netra.")]:
            del sys.modules[name]
    import netra

    if Path(netra.__file__).resolve().parent != pkg:
        _refuse(f"`import netra` resolved to {netra.__file__}, not the tree being built ({pkg})")
