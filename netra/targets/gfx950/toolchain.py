"""gfx950's toolchain: an AMDGPU assembler and linker that can target gfx950, proven before use.

Search order: $NETRA_LLVM_BINDIR if set (an explicit choice, used as is or refused), then ROCm's LLVM
at $ROCM_PATH/llvm/bin (default /opt/rocm), then an upstream LLVM >= 20: versioned tools on PATH
(llvm-mc-22, ld.lld-22, ...), unversioned ones on PATH, then <root>/llvm-N/bin, newest first, for each
root in $NETRA_LLVM_ROOTS (default /usr/lib; e.g. /usr/lib:/opt for a hand-built /opt/llvm-21).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from netra.core.text import integer
from netra.core.types import Toolchain
from netra.errors import ToolchainError, ToolError

if TYPE_CHECKING:
    from netra.targets.target import Tools

MIN_LLVM = 20
TOOLS = ("llvm-mc", "ld.lld", "llvm-objdump")
# The flavours a gfx950 toolchain is (upstream LLVM, ROCm's LLVM), as messages name them.
FLAVOURS = {"llvm": "llvm LLVM", "rocm": "rocm LLVM"}
INSTALL_HINT = "apt-get install -y llvm-22 lld-22 (or install ROCm and set ROCM_PATH)"
TRIPLE = "amdgcn-amd-amdhsa"
PROBE_TIMEOUT_S = 30
_VERSION_RE = re.compile(r"LLVM version ([0-9]{1,4})\.([0-9]{1,4})\.([0-9]{1,6})(\S*)")


def _prove(llvm_mc: str) -> tuple[int, str] | None:
    """Version and gfx950 support: a target list can claim AMDGPU without gfx950.

    The probe assembles one gfx950-only instruction (the OCP FP8 conversion the kernels rely on). A
    candidate that cannot run, crashes or hangs is not a toolchain: give up on it, never on the search.
    """
    from netra.core import proc  # a tool run: imported by the build only

    probe = "v_cvt_pk_fp8_f32 v0, v1, v2\ns_endpgm\n"
    try:
        ver = proc.run(
            [llvm_mc, "--version"], tool="llvm-mc", what="proving llvm-mc", timeout=PROBE_TIMEOUT_S
        )
        asm = proc.run(
            [llvm_mc, f"-triple={TRIPLE}", "-mcpu=gfx950", "-show-encoding"],
            tool="llvm-mc", what="proving llvm-mc", timeout=PROBE_TIMEOUT_S, input=probe,
        )  # fmt: skip
    except ToolError:
        return None
    ver_out, asm_out = ver.stdout, asm.stdout
    m = _VERSION_RE.search(ver_out)
    if not m or asm.returncode != 0 or "v_cvt_pk_fp8_f32" not in asm_out:
        return None
    return int(m.group(1)), f"{m.group(1)}.{m.group(2)}.{m.group(3)}{m.group(4)}"


def _candidate(
    bindir: Path | None, names: dict[str, str], flavour: str, origin: str, search_path: str = ""
) -> Tools | None:
    paths = {}
    for tool in TOOLS:
        name = names[tool]
        p = bindir / name if bindir is not None else _which(name, path=search_path)
        if p is None or not os.access(p, os.X_OK) or not Path(p).is_file():
            return None
        paths[tool] = str(p)
    ver = _prove(paths["llvm-mc"])
    if ver is None or ver[0] < MIN_LLVM:
        return None
    from netra.targets.target import Tools  # what discovery gives: building only

    return Tools(
        target="gfx950",
        identity=Toolchain(flavour=flavour, version=ver[1], label=FLAVOURS[flavour]),
        paths=paths,
        origin=origin,
    )


def discover(env: dict[str, str] | None = None) -> Tools:
    """Return the first proven toolchain; otherwise say everything that was searched and how to get one."""
    env = dict(os.environ if env is None else env)
    searched: list[str] = []

    explicit = env.get("NETRA_LLVM_BINDIR")
    if explicit:
        found = _candidate(Path(explicit), {t: t for t in TOOLS}, "llvm", f"NETRA_LLVM_BINDIR={explicit}")
        if found is None:
            raise ToolchainError(
                f"NETRA_LLVM_BINDIR={explicit} has no llvm-mc/ld.lld/llvm-objdump >= {MIN_LLVM} with gfx950",
                "point it at an LLVM bin folder with the AMDGPU target, or unset it to search the defaults",
            )
        return found

    rocm = Path(env.get("ROCM_PATH") or "/opt/rocm") / "llvm" / "bin"
    searched.append(str(rocm))
    found = _candidate(rocm, {t: t for t in TOOLS}, "rocm", str(rocm))
    if found:
        return found

    path_env = env.get("PATH", "")
    for major in range(30, MIN_LLVM - 1, -1):
        names = {t: f"{t}-{major}" for t in TOOLS}
        found = _candidate(None, names, "llvm", f"PATH (*-{major})", path_env)
        if found:
            return found
    searched.append("llvm-mc-N/ld.lld-N on PATH")
    found = _candidate(None, {t: t for t in TOOLS}, "llvm", "PATH", path_env)
    if found:
        return found
    searched.append("llvm-mc/ld.lld on PATH")

    for root in (Path(r) for r in env.get("NETRA_LLVM_ROOTS", "/usr/lib").split(os.pathsep) if r):
        versioned = [(n, d) for d in root.glob("llvm-*") if (n := integer(d.name[5:], digits=4)) is not None]
        for _, d in sorted((v for v in versioned if v[0] >= MIN_LLVM), reverse=True):  # not llvm-² or llvm-x
            found = _candidate(d / "bin", {t: t for t in TOOLS}, "llvm", str(d / "bin"))
            if found:
                return found
        searched.append(f"{root}/llvm-N/bin (N >= {MIN_LLVM})")
    raise ToolchainError(
        f"no AMDGPU toolchain with gfx950 found (searched {', '.join(searched)})", INSTALL_HINT
    )


def _which(name: str, path: str) -> str | None:
    """shutil.which, imported when a toolchain is searched for (never on a serving host's path)."""
    import shutil

    return shutil.which(name, path=path)
