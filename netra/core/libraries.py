"""Finding a GPU driver library by looking, not loading; and loading one for detection only when it
has every symbol asked for.

Doctor reports what a host has without pulling a GPU runtime into its process, and each loader tries
the same places in the same order. The search is directory listing first (LD_LIBRARY_PATH, the
vendor's own locations, system and driver directories), then the dynamic linker's cache
(`ldconfig -p`) once per process. Only a regular file (through links, as the dynamic linker follows
them) is a library: a FIFO or a device named libcuda.so.1 would block or fail the loader. Which names
and which vendor locations: the vendor objects in netra.targets (`Vendor.libraries`,
`Vendor.library_dirs`).

A host's library is not trusted to be what its name says (an empty libcuda.so.1 loads): `load` checks
every symbol the caller will call before any is called, so one that lacks them is a named, one-line
"unusable" finding, never an AttributeError.
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from netra.errors import RuntimeUnavailableError, ToolError

_SYSTEM_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib/wsl/lib",
)


def search_dirs(extra: Sequence[str] = ()) -> list[Path]:
    """LD_LIBRARY_PATH, then `extra` (the vendor's own locations), then system directories; never a
    link-time stub folder."""
    dirs: list[str] = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs.extend(extra)
    dirs.extend(_SYSTEM_DIRS)
    seen: list[Path] = []
    for d in dirs:
        p = Path(d)
        if "stubs" not in p.parts and p not in seen:
            seen.append(p)
    return seen


@functools.lru_cache(maxsize=1)
def _ldconfig() -> dict[str, str]:
    exe = _which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if exe is None:
        return {}
    from netra.core import proc  # ldconfig runs only when the folders did not have the library

    try:
        out = proc.run([exe, "-p"], tool="ldconfig", what="finding the GPU driver library", timeout=10).stdout
    except ToolError:
        return {}
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, path = line.strip().partition(" => ")
        if sep:
            found.setdefault(name.split(" (", 1)[0], path.strip())
    return found


def find(names: Sequence[str], extra_dirs: Sequence[str] = ()) -> Path | None:
    """The first existing file for these names (in preference order), or None. Loads nothing."""
    dirs = search_dirs(extra_dirs)
    for name in names:
        for d in dirs:
            p = d / name
            if _regular(p):
                return p
    cache = _ldconfig()
    for name in names:
        if name in cache and "stubs" not in Path(cache[name]).parts and _regular(Path(cache[name])):
            return Path(cache[name])
    return None


def load(path: Path, symbols: Sequence[str], what: str) -> Any:
    """The library at `path` (a ctypes.CDLL) once every name in `symbols` resolves in it.
    RuntimeUnavailableError in one line naming the library when it cannot be loaded or lacks any."""
    import ctypes  # detection only: finding a library needs none of it

    hint = f"it is not {what}: remove it or put the real one first on the library path"
    if not _regular(path):
        raise RuntimeUnavailableError(f"{path} is unusable: not a regular file", hint)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        raise RuntimeUnavailableError(f"{path} is unusable: it cannot be loaded ({e})", hint) from None
    missing = [name for name in symbols if not hasattr(lib, name)]
    if missing:
        raise RuntimeUnavailableError(f"{path} is unusable: it lacks {', '.join(missing)}", hint)
    return lib


def _regular(path: Path) -> bool:
    """A regular file, links followed (as the dynamic linker follows them); never opened."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):  # missing, unreadable folder, a NUL in a name from the environment
        return False


def _which(name: str) -> str | None:
    """shutil.which, imported only when a tool is looked for (shutil pulls in the compression modules)."""
    import shutil

    return shutil.which(name)
