"""NVIDIA: the CUDA loader and libcuda, GPUs found by nvidia-smi (else the CUDA driver API), its probes,
and the developer tools certification runs (compute-sanitizer and ncu: netra.targets.nvidia_tools).

A device's identity is its compute capability (major, minor); NVIDIA names it sm_<major><minor>. The CUDA
C++ templates the NVIDIA classes compile live once, sources and manifests, in one folder
(`shared_templates`); a class's own folder, kernels/<class>/, holds only its variants of them.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING

from netra.errors import NetraError, ToolError
from netra.targets.vendor import Vendor

if TYPE_CHECKING:
    from netra.targets.devtools import MemoryChecker, Profiler
    from netra.targets.host import GPU, DriverNeed, Versions

_TIMEOUT_S = 10
# CUDA driver API (cuda.h): device attributes for the compute capability.
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CUDA_ERROR_NO_DEVICE = 100
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"  # the loaded kernel module's own line
# The oldest driver that runs code built by each CUDA major release, from NVIDIA's CUDA Toolkit release
# notes and its CUDA Compatibility guide (minor version compatibility: a cubin built by any CUDA 13.x
# runs on a driver >= 580; 12.x on >= 525). CUDA 13.0 GA itself shipped with 580.65.06.
CUDA_MIN_DRIVER = {12: "525", 13: "580"}
# What detection calls in libcuda, checked before any is called: a file of that name lacking them (an
# empty stub, another library renamed) is "unusable", named, never an AttributeError.
_DETECTION_SYMBOLS = ("cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute", "cuDeviceGetName")
_DRIVER_LIBRARY = "the NVIDIA driver's libcuda"


def sm_name(major: int, minor: int) -> str:
    """A CUDA compute capability as NVIDIA names the architecture: 9.0 -> sm_90."""
    return f"sm_{major}{minor}"


def _run(argv: list[str], timeout: float = _TIMEOUT_S) -> str:
    """A vendor tool's stdout (netra.core.proc: bounded, its bytes decoded by the one policy);
    ToolError when it cannot run, fails, crashes or hangs."""
    from netra.core import proc  # detection with tools only: reading files needs none of it

    r = proc.run(argv, tool=Path(argv[0]).name, what="GPU detection", timeout=timeout)
    if r.returncode != 0:
        last = next((ln.strip() for ln in reversed(r.stderr.splitlines()) if ln.strip()), "")
        raise ToolError(f"exit status {r.returncode}" + (f": {last}" if last else ""))
    return r.stdout


def _smi_query(query: str) -> str | None:
    """One nvidia-smi --query-gpu value of the first GPU, None when it cannot be read."""
    exe = _which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = _run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits"], timeout=20)
    except ToolError:
        return None
    return out.splitlines()[0].strip() if out.strip() else None


class Nvidia(Vendor):
    name = "nvidia"
    loader = "cuda"
    loader_module = "netra.loaders.cuda"
    loader_class = "Cuda"
    runtime = "CUDA"
    libraries = ("libcuda.so.1", "libcuda.so")
    sources = ("nvidia-smi", "libcuda")
    install_hint = (
        "install the NVIDIA driver (it provides libcuda.so.1) and make it findable (LD_LIBRARY_PATH; from "
        "Python, Cuda(library=PATH) names it); `netra doctor` shows which runtime libraries this host has"
    )
    # CUDA C++ templates shared by NVIDIA classes (each class lists it in its `sources`, after its own folder).
    shared_templates = "kernels/cuda"

    def library_dirs(self) -> list[str]:
        return ["/usr/local/nvidia/lib64"]  # the NVIDIA container runtime's

    def conventional_name(self, identity: Hashable) -> str | None:
        if isinstance(identity, tuple) and len(identity) == 2 and all(isinstance(x, int) for x in identity):
            return sm_name(identity[0], identity[1])
        return None

    def _cls(self, major: int, minor: int) -> str:
        return self.gpu_class((major, minor)) or sm_name(major, minor)

    def smi(self) -> tuple[list[GPU], str] | None:
        """None when nvidia-smi is not installed (then the driver API is asked instead)."""
        from netra.targets.host import GPU

        exe = _which("nvidia-smi")
        if exe is None:
            return None
        try:
            out = _run([exe, "--query-gpu=index,name,compute_cap", "--format=csv,noheader"])
        except ToolError as e:
            return [], f"nvidia-smi: failed ({e.message})"
        gpus: list[GPU] = []
        unread = 0
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            m = re.fullmatch(r"([0-9]{1,3})\.([0-9]{1,3})", parts[-1]) if len(parts) >= 3 else None
            if m is None or re.fullmatch(r"[0-9]{1,6}", parts[0]) is None:
                unread += line.strip() != ""
                continue
            cls = self._cls(int(m.group(1)), int(m.group(2)))
            gpus.append(GPU(self.name, cls, ", ".join(parts[1:-1]), int(parts[0]), "nvidia-smi"))
        said = f" ({unread} line(s) of its output not understood)" if unread else ""
        return gpus, f"nvidia-smi: {len(gpus)} GPU(s){said}"

    def driver_api(self, library: str | Path | None = None) -> tuple[list[GPU], str]:
        """The CUDA driver API: cuInit, cuDeviceGetCount, and each device's compute capability and name."""
        import ctypes  # loads nothing by itself, but costs an import a serving host may never need

        from netra.core import libraries, text
        from netra.targets.host import GPU

        path = Path(library) if library is not None else self.find_library()
        if path is None:
            return [], f"CUDA driver: {self.libraries[0]} not found"
        try:
            cu = libraries.load(path, _DETECTION_SYMBOLS, _DRIVER_LIBRARY)
        except NetraError as e:
            return [], f"CUDA driver: {e.message}"
        rc = cu.cuInit(0)
        if rc == CUDA_ERROR_NO_DEVICE:
            return [], f"CUDA driver: {path}: no CUDA device"
        if rc != 0:
            return [], f"CUDA driver: {path}: cuInit failed with CUresult {rc}"
        count = ctypes.c_int(0)
        if cu.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return [], f"CUDA driver: {path}: cuDeviceGetCount failed"
        gpus: list[GPU] = []
        for i in range(count.value):
            dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
            name = ctypes.create_string_buffer(256)
            if (
                cu.cuDeviceGet(ctypes.byref(dev), i) != 0
                or cu.cuDeviceGetAttribute(
                    ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
                )
                != 0
                or cu.cuDeviceGetAttribute(
                    ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
                )
                != 0
            ):
                continue
            cu.cuDeviceGetName(name, 256, dev)
            label = text.decode(name.value) or f"CUDA device {i}"
            gpus.append(GPU(self.name, self._cls(major.value, minor.value), label, i, "libcuda"))
        return gpus, f"CUDA driver: {len(gpus)} GPU(s) via {path}"

    def detect(self, sysfs_nodes: str | Path | None, *, tools: bool) -> tuple[list[GPU], list[str]]:
        """nvidia-smi when it shows GPUs, else the driver API; nothing without tools (both run code)."""
        if not tools:
            return [], []
        notes = []
        smi = self.smi()
        if smi is None:
            notes.append("nvidia-smi: not on PATH")
        else:
            notes.append(smi[1])
            if smi[0]:
                return smi[0], notes
        # No nvidia-smi, or one that failed or showed nothing it could read: the driver still counts.
        api = self.driver_api()
        notes.append(api[1])
        return api[0], notes

    def driver(self) -> str:
        import platform

        return _smi_query("driver_version") or platform.release()

    def clocks(self) -> dict[str, int] | None:
        raw = _smi_query("clocks.max.sm,clocks.max.mem")
        try:
            sm, mem = (int(float(x)) for x in (raw or "").split(","))
        except ValueError:
            return None
        return {"max_sm_mhz": sm, "max_mem_mhz": mem}

    def versions(self) -> Versions:
        """The kernel module's version from /proc (else nvidia-smi), and the CUDA version of the driver API
        (cuDriverGetVersion from libcuda: the runtime netra's loader uses; it needs no cuInit)."""
        from netra.targets.host import Versions

        notes = []
        driver = None
        import ctypes

        from netra.core import files, libraries, text
        from netra.errors import MissingFileError

        try:  # a regular file, bounded, decoded by the one policy (a FIFO there is refused, never waited on)
            version = text.decode(
                files.read_path(Path(DRIVER_VERSION_FILE), limit=1 << 16, what="driver version")
            )
            m = re.search(r"Kernel Module\b.*?\s(\d+\.\d+(?:\.\d+)?)\s", version)
            driver = m.group(1) if m else None
            notes.append(f"driver: {DRIVER_VERSION_FILE}" + ("" if m else " has no version line"))
        except MissingFileError:
            notes.append(f"driver: {DRIVER_VERSION_FILE} not present (no NVIDIA kernel module loaded)")
        except NetraError as e:
            notes.append(f"driver: {DRIVER_VERSION_FILE} unreadable ({e.message})")
        if driver is None and _which("nvidia-smi"):
            driver = _smi_query("driver_version")
            notes.append("driver: nvidia-smi" + ("" if driver else " did not say"))
        runtime = None
        path = self.find_library()
        if path is None:
            notes.append(f"runtime: {self.libraries[0]} not found")
        else:
            try:
                v = ctypes.c_int(0)
                cu = libraries.load(path, ("cuDriverGetVersion",), _DRIVER_LIBRARY)
                if cu.cuDriverGetVersion(ctypes.byref(v)) == 0 and v.value > 0:
                    runtime = f"CUDA {v.value // 1000}.{v.value % 1000 // 10}"
                notes.append(f"runtime: cuDriverGetVersion of {path}" + ("" if runtime else " failed"))
            except NetraError as e:
                notes.append(f"runtime: {e.message}")
        return Versions(driver, runtime, tuple(notes))

    def cubin_driver_need(self, cuda_version: str) -> DriverNeed:
        """The oldest driver that loads cubins nvcc `cuda_version` built (CUDA_MIN_DRIVER, by CUDA major)."""
        from netra.core.text import integer
        from netra.targets.host import DriverNeed

        major = integer(cuda_version.split(".")[0], digits=4)
        major = -1 if major is None else major
        minimum = CUDA_MIN_DRIVER.get(major)
        why = (
            f"cubins of nvcc {cuda_version} (CUDA {major}.x; NVIDIA's CUDA {major}.0 release notes)"
            if minimum
            else f"no minimum driver is known here for nvcc {cuda_version}: see NVIDIA's CUDA release notes"
        )
        return DriverNeed("NVIDIA driver", minimum, "driver", why)

    def memory_checkers(self) -> tuple[MemoryChecker, ...]:
        """compute-sanitizer's memcheck, racecheck, initcheck and synccheck (netra.targets.nvidia_tools)."""
        from netra.targets import nvidia_tools

        return nvidia_tools.CHECKERS

    def profiler(self) -> Profiler | None:
        """Nsight Compute's ncu (netra.targets.nvidia_tools)."""
        from netra.targets import nvidia_tools

        return nvidia_tools.PROFILER


NVIDIA = Nvidia()


def _which(name: str) -> str | None:
    """shutil.which, imported only when a tool is looked for (shutil pulls in the compression modules)."""
    import shutil

    return shutil.which(name)
