"""netra-kernel's PEP 517 backend: hatchling, plus a release gate that no environment variable turns off.

Everything is hatchling.build's, except:
- build_wheel and build_sdist re-check the archive hatchling produced unless this process's build hook
  already vouched for those exact bytes (netra.wheelgate.vouch). HATCH_BUILD_NO_HOOKS=true, a hook
  disabled in pyproject.toml or a hook that never ran all end the same way: the archive is checked
  against release/manifest.lock, and deleted and refused if it is not exactly what the lock implies.
  There is no switch to get an unchecked wheel; `netra build` and editable installs are the
  development paths (docs/release.md).
- SOURCE_DATE_EPOCH defaults to the project's constant below, not the clock, so two builds of one
  commit are byte-identical wherever and whenever they run.
- An archive half-written by a failing build is removed: nothing is left in the output folder.

`hatch build` calls hatchling directly and bypasses this module; release with `python -m build` or
tools/release.
"""

from __future__ import annotations

import os
import sys
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


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    """hatchling's wheel, then the gate: a wheel leaves here only if it carries exactly the lock."""
    _prepare_environment()
    name = _build(_hatchling.build_wheel, wheel_directory, config_settings, metadata_directory)
    _gate(Path(wheel_directory) / name, "wheel")
    return name


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """hatchling's sdist, then the check that it carries every locked and build file."""
    _prepare_environment()
    name = _build(_hatchling.build_sdist, sdist_directory, config_settings)
    _gate(Path(sdist_directory) / name, "sdist")
    return name


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
    """Run a hatchling build; if it fails, remove any archive it wrote (new, or replacing an old one)."""
    before = _archives(Path(directory))
    try:
        return hook(directory, *args)
    except BaseException:
        for p, stamp in _archives(Path(directory)).items():
            if before.get(p) != stamp:
                p.unlink(missing_ok=True)
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
    from netra import wheelgate
    from netra.errors import NetraError

    if wheelgate.vouched(archive):
        return
    switched = [f"{v}={os.environ[v]}" for v in _SWITCHES if os.environ.get(v) in ("1", "true")]
    why = f"{', '.join(switched)} skipped the build hook" if switched else "the netra build hook did not run"
    try:
        from netra.lock import LOCK_PATH

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
