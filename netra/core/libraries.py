"""Finding a GPU driver library by looking, not loading.

Doctor reports what a host has without pulling a GPU runtime into its process, and each loader tries
the same places in the same order. The search is directory listing first (LD_LIBRARY_PATH, the
vendor's own locations, system and driver directories), then the dynamic linker's cache
(`ldconfig -p`) once per process. Which names and which vendor locations: the vendor objects in
netra.targets (`Vendor.libraries`, `Vendor.library_dirs`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

from netra.errors import ToolError

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
            if p.exists():
                return p
    cache = _ldconfig()
    for name in names:
        if name in cache and "stubs" not in Path(cache[name]).parts:
            return Path(cache[name])
    return None


def _which(name: str) -> str | None:
    """shutil.which, imported only when a tool is looked for (shutil pulls in the compression modules)."""
    import shutil

    return shutil.which(name)
