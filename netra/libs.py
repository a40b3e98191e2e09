"""Finding GPU runtime libraries (HIP, the CUDA driver) by looking, not loading.

Doctor reports what a host has without pulling a GPU runtime into its process, and the HIP loader
tries the same places in the same order. The search is directory listing first (ROCm and driver
locations, LD_LIBRARY_PATH), then the dynamic linker's cache (`ldconfig -p`) once per process.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from pathlib import Path

# Runtime packages often ship only the versioned name; the unversioned one comes with -dev packages.
HIP = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6")
CUDA = ("libcuda.so.1", "libcuda.so")
LIBRARIES = {"hip": HIP, "cuda": CUDA}
_SYSTEM_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/local/nvidia/lib64",  # NVIDIA container runtime
    "/usr/lib/wsl/lib",
)


def search_dirs() -> list[Path]:
    """LD_LIBRARY_PATH, then ROCm locations, then system and driver directories; never CUDA stubs."""
    dirs: list[str] = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    for var in ("ROCM_PATH", "HIP_PATH"):
        if os.environ.get(var):
            dirs.append(os.path.join(os.environ[var], "lib"))
    dirs.append("/opt/rocm/lib")
    with contextlib.suppress(OSError):
        dirs.extend(sorted((str(p / "lib") for p in Path("/opt").glob("rocm-*")), reverse=True))
    dirs.extend(_SYSTEM_DIRS)
    seen: list[Path] = []
    for d in dirs:
        p = Path(d)
        if "stubs" not in p.parts and p not in seen:
            seen.append(p)
    return seen


@functools.lru_cache(maxsize=1)
def _ldconfig() -> dict[str, str]:
    exe = shutil.which("ldconfig") or ("/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None)
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    found: dict[str, str] = {}
    for line in out.splitlines():
        name, sep, path = line.strip().partition(" => ")
        if sep:
            found.setdefault(name.split(" (", 1)[0], path.strip())
    return found


def find(names: tuple[str, ...]) -> Path | None:
    """The first existing file for these names (in preference order), or None. Loads nothing."""
    dirs = search_dirs()
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
