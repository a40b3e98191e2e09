"""sm_90's toolchain: an nvcc that can build sm_90a cubins, found in a documented order and proven.

Search order, the first that proves itself is used:
1. $NETRA_NVCC when set: used as is, or refused (never silently skipped);
2. the nvcc of this Python environment's pinned wheels (nvidia-cuda-nvcc: site-packages/nvidia/cu13/
   bin/nvcc), which the release environment installs from requirements/build.txt with hashes, so a
   release's cubins do not depend on what CUDA a build machine happens to have;
3. $CUDA_HOME/bin/nvcc, then $CUDA_PATH/bin/nvcc;
4. nvcc on PATH;
5. <root>/cuda/bin/nvcc, then <root>/cuda-N.M/bin/nvcc, newest first, for each root in
   $NETRA_CUDA_ROOTS (default /usr/local).

"Proves itself" means `nvcc --version` reports CUDA >= 12.0 and nvcc compiles a probe kernel to a
cubin of the class's architecture (sm_90a: an EM_CUDA ELF for sm_90 whose .nv.compat marks
arch-specific features) in a temporary folder. nvcc uses the host's C++ compiler as its preprocessor
(gcc on Debian). Another NVIDIA class uses the same search with its own architecture (`discover`'s
`target` and `arch`).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from netra.core.types import Toolchain
from netra.errors import ToolchainError, ToolError

if TYPE_CHECKING:
    from netra.targets.target import Tools

MIN_CUDA = (12, 0)
ARCH = "sm_90a"  # what the probe must build (the class's own; another NVIDIA class passes its own)
FLAVOURS = {"nvcc": "nvcc"}  # the one flavour of an sm_90 toolchain, as messages name it
PROBE_TIMEOUT_S = 120
INSTALL_HINT = (
    "install the pinned compiler: pip install --require-hashes -r requirements/build.txt (nvidia-cuda-nvcc "
    "13.0.88 and its headers), or install the CUDA toolkit and set CUDA_HOME, or set NETRA_NVCC"
)
_VERSION_RE = re.compile(r"release ([0-9]{1,4})\.([0-9]{1,4}), V([0-9]{1,4}\.[0-9]{1,4}\.[0-9]{1,6})\b")
_PROBE = 'extern "C" __global__ void __launch_bounds__(32) netra_probe(float* y) { y[threadIdx.x] = 1.0f; }\n'


def _prove(nvcc: str, arch: str) -> tuple[tuple[int, int], str] | None:
    """((major, minor), full version) when this nvcc builds an `arch` (sm_90a) cubin; None otherwise."""
    from netra.core import proc  # a tool run: imported by the build only

    try:
        ver = proc.run([nvcc, "--version"], tool="nvcc", what="proving nvcc", timeout=PROBE_TIMEOUT_S)
    except ToolError:
        return None
    m = _VERSION_RE.search(ver.stdout)
    if ver.returncode != 0 or not m:
        return None
    major_minor = (int(m.group(1)), int(m.group(2)))
    if major_minor < MIN_CUDA:
        return None
    import tempfile

    with tempfile.TemporaryDirectory(prefix="netra-nvcc-probe-") as tmp:
        (Path(tmp) / "probe.cu").write_text(_PROBE)
        try:
            r = proc.run(
                [nvcc, "-cubin", f"-arch={arch}", "-o", "probe.cubin", "probe.cu"], tool="nvcc",
                what="proving nvcc", timeout=PROBE_TIMEOUT_S, cwd=Path(tmp), env={**os.environ, "TMPDIR": tmp},
            )  # fmt: skip
        except ToolError:
            return None
        out = Path(tmp) / "probe.cubin"
        if r.returncode != 0 or not out.is_file():
            return None
        from netra.targets.sm_90 import cubin

        try:
            if not cubin.is_arch_specific(out.read_bytes(), cubin.sm_number(arch)):
                return None
        except ValueError:
            return None
    return major_minor, m.group(3)


def _candidate(path: Path | str | None, origin: str, target: str, arch: str) -> Tools | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file() or not os.access(p, os.X_OK):
        return None
    proven = _prove(str(p), arch)
    if proven is None:
        return None
    from netra.targets.target import Tools  # what discovery gives: building only

    return Tools(
        target=target,
        identity=Toolchain(flavour="nvcc", version=proven[1], label=FLAVOURS["nvcc"]),
        paths={"nvcc": str(p)},
        origin=origin,
    )


def _environment_nvcc() -> list[Path]:
    """nvcc from the pinned wheels importable by this interpreter (site-packages/nvidia/cu*/bin)."""
    roots = [Path(p) for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    out: list[Path] = []
    for r in roots:
        for cand in sorted(r.glob("nvidia/cu*/bin/nvcc"), reverse=True):
            if cand not in out:
                out.append(cand)
    return out


def discover(env: dict[str, str] | None = None, *, target: str = "sm_90", arch: str = ARCH) -> Tools:
    """Return the first nvcc proven on `arch`; otherwise say everything that was searched and how to get one."""
    env = dict(os.environ if env is None else env)

    def candidate(path: Path | str | None, origin: str) -> Tools | None:
        return _candidate(path, origin, target, arch)

    explicit = env.get("NETRA_NVCC")
    if explicit:
        found = candidate(explicit, f"NETRA_NVCC={explicit}")
        if found is None:
            raise ToolchainError(
                f"NETRA_NVCC={explicit} is not an nvcc >= {MIN_CUDA[0]}.{MIN_CUDA[1]} that builds {arch} cubins",
                "point it at a working nvcc, or unset it to search the defaults",
            )
        return found
    searched: list[str] = []
    for cand in _environment_nvcc():
        found = candidate(cand, f"{cand} (this environment's nvidia-cuda-nvcc wheel)")
        if found:
            return found
    searched.append("this environment's nvidia-cuda-nvcc wheel")
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            found = candidate(Path(env[var]) / "bin" / "nvcc", f"{var}={env[var]}")
            if found:
                return found
            searched.append(f"${var}/bin/nvcc")
    found = candidate(_which("nvcc", path=env.get("PATH", "")), "PATH")
    if found:
        return found
    searched.append("nvcc on PATH")
    for root in (Path(r) for r in env.get("NETRA_CUDA_ROOTS", "/usr/local").split(os.pathsep) if r):
        installs = [root / "cuda"]
        installs += sorted(root.glob("cuda-*"), key=lambda p: _version_key(p.name), reverse=True)
        for d in installs:
            found = candidate(d / "bin" / "nvcc", str(d / "bin"))
            if found:
                return found
        searched.append(f"{root}/cuda*/bin/nvcc")
    raise ToolchainError(
        f"no nvcc that builds {arch} cubins found (searched {', '.join(searched)})", INSTALL_HINT
    )


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


def _which(name: str, path: str) -> str | None:
    """shutil.which, imported when a toolchain is searched for (never on a serving host's path)."""
    import shutil

    return shutil.which(name, path=path)
