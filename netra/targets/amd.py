"""AMD: the HIP loader and libamdhip64, GPUs found in the KFD topology (then rocminfo, amd-smi).

A device's identity is its KFD gfx_target_version (major*10000 + minor*100 + stepping: 90500); LLVM
names it gfx<major><minor:x><stepping:x> (gfx950), which is also how rocminfo and amd-smi report it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING

from netra.core import files
from netra.errors import NetraError, ToolError
from netra.targets.vendor import Vendor

if TYPE_CHECKING:
    from netra.targets.host import GPU, Versions

SYSFS_NODES = "/sys/class/kfd/kfd/topology/nodes"
AMDGPU_MODULE = "/sys/module/amdgpu"  # `version` there: the amdgpu-dkms driver's (an in-tree one has none)
AMD_VENDOR_ID = 0x1002
_TIMEOUT_S = 10
_GFX = re.compile(r"gfx([0-9]+)([0-9a-f])([0-9a-f])")
_NODE = re.compile(r"[0-9]{1,6}")
_SYSFS_LIMIT = 1 << 20  # a KFD properties file is under 2 KiB; sysfs files are at most a page


def gfx_name(gfx_target_version: int) -> str | None:
    """KFD's major*10000 + minor*100 + stepping as LLVM's target name: 90500 -> gfx950, 90010 -> gfx90a."""
    major, minor, step = (
        gfx_target_version // 10000,
        gfx_target_version // 100 % 100,
        gfx_target_version % 100,
    )
    if gfx_target_version <= 0 or minor > 15 or step > 15:
        return None
    return f"gfx{major}{minor:x}{step:x}"


def gfx_version(name: str) -> int | None:
    """The inverse of gfx_name for a name a tool reports: gfx950 -> 90500, gfx90a -> 90010."""
    m = _GFX.fullmatch(name)
    return int(m.group(1)) * 10000 + int(m.group(2), 16) * 100 + int(m.group(3), 16) if m else None


def _properties(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            out[key] = int(value.strip(), 0)
        except ValueError:
            continue
    return out


def _run(argv: list[str]) -> str:
    """A vendor tool's stdout (netra.core.proc: bounded, its bytes decoded by the one policy);
    ToolError when it cannot run, fails, crashes or hangs."""
    from netra.core import proc  # detection with tools only: reading files needs none of it

    r = proc.run(argv, tool=Path(argv[0]).name, what="GPU detection", timeout=_TIMEOUT_S)
    if r.returncode != 0:
        last = next((ln.strip() for ln in reversed(r.stderr.splitlines()) if ln.strip()), "")
        raise ToolError(f"exit status {r.returncode}" + (f": {last}" if last else ""))
    return r.stdout


def _host_text(path: Path) -> str:
    """A host's version file, read as `_sysfs_text` reads the topology (regular, bounded, one decoding)."""
    from netra.core import text  # detection only: serving a kernel reads no host file

    return text.decode(files.read_path(path, limit=_SYSFS_LIMIT, what="version file"))


def _sysfs_text(path: Path) -> str:
    """A sysfs file as text: a regular file, opened non-blocking (a FIFO there is refused, never waited
    on), bounded, decoded by the one policy (bytes that are not UTF-8 are the host's, not an error)."""
    from netra.core import text

    return text.decode(files.read_path(path, limit=_SYSFS_LIMIT, what="KFD topology file"))


def _shown(name: str) -> str:
    """A file name from the host as text that can always be printed (not UTF-8: escaped)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


class Amd(Vendor):
    name = "amd"
    loader = "hip"
    loader_module = "netra.loaders.hip"
    loader_class = "Hip"
    runtime = "HIP"
    # Runtime packages often ship only the versioned name; the unversioned one comes with -dev packages.
    libraries = ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6")
    sources = ("kfd-sysfs", "rocminfo", "amd-smi")
    install_hint = (
        "install a ROCm release that supports gfx950 (the MI350 series), e.g. its rocm-hip-runtime package, and "
        "make libamdhip64.so findable (ROCM_PATH, or LD_LIBRARY_PATH=/opt/rocm/lib; from Python, Hip(library=PATH) names it)"
    )

    def library_dirs(self) -> list[str]:
        dirs = [
            os.path.join(os.environ[var], "lib") for var in ("ROCM_PATH", "HIP_PATH") if os.environ.get(var)
        ]
        dirs.append("/opt/rocm/lib")
        with contextlib.suppress(OSError):
            dirs.extend(sorted((str(p / "lib") for p in Path("/opt").glob("rocm-*")), reverse=True))
        return dirs

    def conventional_name(self, identity: Hashable) -> str | None:
        return gfx_name(identity) if isinstance(identity, int) else None

    def _named(self, name: str) -> str:
        """A class for a gfx name a tool reported (the name itself when it is not one LLVM would write)."""
        version = gfx_version(name)
        return (self.gpu_class(version) if version is not None else None) or name

    def sysfs(self, nodes: str | Path | None = None) -> tuple[list[GPU], str]:
        """GPU nodes of the KFD topology: every node whose gfx_target_version is not 0."""
        from netra.targets.host import GPU

        root = Path(nodes if nodes is not None else SYSFS_NODES)
        if not root.is_dir():
            return [], f"kfd sysfs: {_shown(str(root))} not present (no amdgpu kernel driver)"
        gpus: list[GPU] = []
        skipped: list[str] = []
        try:
            names = [p.name for p in root.iterdir()]
        except OSError as e:
            return [], f"kfd sysfs: {_shown(str(root))} unreadable ({e.strerror or e})"
        strays = sorted(_shown(n) for n in names if not _NODE.fullmatch(n))
        if strays:
            skipped.append(f"not a node: {', '.join(strays[:5])}" + (" ..." if len(strays) > 5 else ""))
        entries = sorted((root / n for n in names if _NODE.fullmatch(n)), key=lambda p: int(p.name))
        for node in entries:
            try:
                props = _properties(_sysfs_text(node / "properties"))
            except NetraError as e:
                skipped.append(f"node {node.name}: unreadable ({e.message})")
                continue
            version = props.get("gfx_target_version", 0)
            if version == 0:
                continue  # a CPU node
            vendor = props.get("vendor_id", AMD_VENDOR_ID)
            cls = self.gpu_class(version)
            if cls is None or vendor != AMD_VENDOR_ID:
                skipped.append(
                    f"node {node.name}: gfx_target_version {version}, vendor_id {vendor:#x} not understood"
                )
                continue
            name = cls
            with contextlib.suppress(NetraError):
                name = _sysfs_text(node / "name").strip() or cls
            gpus.append(GPU(self.name, cls, name, int(node.name), "kfd-sysfs"))
        note = f"kfd sysfs: {len(gpus)} GPU node(s) in {root}" + (
            f" ({'; '.join(skipped)})" if skipped else ""
        )
        return gpus, note

    def rocminfo(self) -> tuple[list[GPU], str]:
        from netra.targets.host import GPU

        exe = _which("rocminfo")
        if exe is None:
            return [], "rocminfo: not on PATH"
        try:
            out = _run([exe])
        except ToolError as e:
            return [], f"rocminfo: failed ({e.message})"
        gpus: list[GPU] = []
        for block in re.split(r"\n(?=\s*Agent \d+\s*\n)", out):
            if not re.search(r"Device Type:\s*GPU", block):
                continue
            m = re.search(r"^\s*Name:\s*(gfx[0-9a-f]+)", block, re.M)
            if m:
                mk = re.search(r"^\s*Marketing Name:\s*(.+)$", block, re.M)
                label = mk.group(1).strip() if mk else m.group(1)
                gpus.append(GPU(self.name, self._named(m.group(1)), label, len(gpus), "rocminfo"))
        return gpus, f"rocminfo: {len(gpus)} GPU agent(s)"

    def smi(self) -> tuple[list[GPU], str]:
        from netra.targets.host import GPU

        exe = _which("amd-smi")
        if exe is None:
            return [], "amd-smi: not on PATH"
        try:
            out = _run([exe, "static", "--asic"])
        except ToolError as e:
            return [], f"amd-smi: failed ({e.message})"
        found = re.findall(r"TARGET_GRAPHICS_VERSION:\s*(gfx[0-9a-f]+)", out)
        gpus = [GPU(self.name, self._named(c), c, i, "amd-smi") for i, c in enumerate(found)]
        return gpus, f"amd-smi: {len(found)} GPU(s)"

    def detect(self, sysfs_nodes: str | Path | None, *, tools: bool) -> tuple[list[GPU], list[str]]:
        """The KFD topology; rocminfo, then amd-smi, only when sysfs shows no GPU."""
        gpus, note = self.sysfs(sysfs_nodes)
        notes = [note]
        if tools and not gpus:
            for probe in (self.rocminfo, self.smi):
                found, note = probe()
                notes.append(note)
                if found:
                    gpus = found
                    break
        return gpus, notes

    def rocm_roots(self) -> list[Path]:
        """Where a ROCm release may be installed: $ROCM_PATH, $HIP_PATH, /opt/rocm, /opt/rocm-*."""
        return [Path(d).parent for d in self.library_dirs()]

    def versions(self) -> Versions:
        """The amdgpu kernel driver's version (sysfs), and the ROCm release of the HIP runtime the loader
        uses (its .info/version file), files only, each read as `_sysfs_text` reads the topology."""
        import platform

        from netra.targets.host import Versions

        notes = []
        module = Path(AMDGPU_MODULE)
        driver = None
        try:
            driver = _host_text(module / "version").strip() or None
            notes.append(f"driver: {module}/version")
        except NetraError:
            if module.is_dir():
                driver = f"in-tree amdgpu of kernel {platform.release()}"
                notes.append(f"driver: {module} has no readable version file (the kernel's own amdgpu)")
            else:
                notes.append(f"driver: {module} not present (no amdgpu kernel driver loaded)")
        runtime = None
        for root in self.rocm_roots():
            with contextlib.suppress(NetraError):
                release = _host_text(root / ".info" / "version").strip()
                if release:
                    runtime = f"ROCm {release}"
                    notes.append(f"runtime: {root}/.info/version")
                    break
        if runtime is None:
            notes.append("runtime: no ROCm release found (" + ", ".join(map(str, self.rocm_roots())) + ")")
        return Versions(driver, runtime, tuple(notes))


AMD = Amd()


def _which(name: str) -> str | None:
    """shutil.which, imported only when a tool is looked for (shutil pulls in the compression modules)."""
    import shutil

    return shutil.which(name)
