"""Which GPUs this host has, and their Netra GPU class ("gfx950", "sm_90", ...), without vendor tools.

AMD: the KFD topology in sysfs (`gfx_target_version` per node; CPU nodes report 0), then rocminfo or
amd-smi when sysfs shows no GPU and they are installed. NVIDIA: nvidia-smi when installed, else the CUDA
driver API through ctypes (libcuda.so.1). No GPU is a normal answer: every source that found nothing
or failed says so in `notes`, and nothing here raises for it. The sysfs root is a parameter so tests
can point it at a directory of real files in the sysfs format.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from netra import libs

SYSFS_NODES = "/sys/class/kfd/kfd/topology/nodes"
AMD_VENDOR_ID = 0x1002
_TIMEOUT_S = 10
# CUDA driver API (cuda.h): device attributes for the compute capability.
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CUDA_ERROR_NO_DEVICE = 100


@dataclass(frozen=True)
class GPU:
    vendor: str  # "amd" or "nvidia"
    gpu_class: str  # "gfx950", "sm_90"
    name: str  # what the source calls it ("NVIDIA H200", "gfx950", a marketing name)
    index: int  # KFD node id or CUDA device ordinal
    source: str  # "kfd-sysfs", "rocminfo", "amd-smi", "nvidia-smi", "libcuda"


@dataclass(frozen=True)
class Detection:
    gpus: tuple[GPU, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def classes(self) -> list[str]:
        return sorted({g.gpu_class for g in self.gpus})


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


def sm_name(major: int, minor: int) -> str:
    """A CUDA compute capability as a Netra class: 9.0 -> sm_90."""
    return f"sm_{major}{minor}"


def _properties(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        try:
            out[key] = int(value.strip(), 0)
        except ValueError:
            continue
    return out


def amd_sysfs(nodes: str | Path = SYSFS_NODES) -> tuple[list[GPU], str]:
    """GPU nodes of the KFD topology: every node whose gfx_target_version is not 0."""
    root = Path(nodes)
    if not root.is_dir():
        return [], f"kfd sysfs: {root} not present (no amdgpu kernel driver)"
    gpus: list[GPU] = []
    skipped: list[str] = []
    entries = sorted((p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    for node in entries:
        try:
            props = _properties((node / "properties").read_text())
        except OSError as e:
            skipped.append(f"node {node.name}: unreadable ({e.strerror or e})")
            continue
        version = props.get("gfx_target_version", 0)
        if version == 0:
            continue  # a CPU node
        vendor = props.get("vendor_id", AMD_VENDOR_ID)
        cls = gfx_name(version)
        if cls is None or vendor != AMD_VENDOR_ID:
            skipped.append(
                f"node {node.name}: gfx_target_version {version}, vendor_id {vendor:#x} not understood"
            )
            continue
        name = cls
        with contextlib.suppress(OSError):
            name = (node / "name").read_text().strip() or cls
        gpus.append(GPU("amd", cls, name, int(node.name), "kfd-sysfs"))
    note = f"kfd sysfs: {len(gpus)} GPU node(s) in {root}" + (f" ({'; '.join(skipped)})" if skipped else "")
    return gpus, note


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=True).stdout


def amd_rocminfo() -> tuple[list[GPU], str]:
    exe = shutil.which("rocminfo")
    if exe is None:
        return [], "rocminfo: not on PATH"
    try:
        out = _run([exe])
    except (OSError, subprocess.SubprocessError) as e:
        return [], f"rocminfo: failed ({e})"
    gpus: list[GPU] = []
    for block in re.split(r"\n(?=\s*Agent \d+\s*\n)", out):
        if not re.search(r"Device Type:\s*GPU", block):
            continue
        m = re.search(r"^\s*Name:\s*(gfx[0-9a-f]+)", block, re.M)
        if m:
            mk = re.search(r"^\s*Marketing Name:\s*(.+)$", block, re.M)
            gpus.append(
                GPU("amd", m.group(1), mk.group(1).strip() if mk else m.group(1), len(gpus), "rocminfo")
            )
    return gpus, f"rocminfo: {len(gpus)} GPU agent(s)"


def amd_smi() -> tuple[list[GPU], str]:
    exe = shutil.which("amd-smi")
    if exe is None:
        return [], "amd-smi: not on PATH"
    try:
        out = _run([exe, "static", "--asic"])
    except (OSError, subprocess.SubprocessError) as e:
        return [], f"amd-smi: failed ({e})"
    found = re.findall(r"TARGET_GRAPHICS_VERSION:\s*(gfx[0-9a-f]+)", out)
    return [GPU("amd", c, c, i, "amd-smi") for i, c in enumerate(found)], f"amd-smi: {len(found)} GPU(s)"


def nvidia_smi() -> tuple[list[GPU], str] | None:
    """None when nvidia-smi is not installed (then the driver API is asked instead)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = _run([exe, "--query-gpu=index,name,compute_cap", "--format=csv,noheader"])
    except (OSError, subprocess.SubprocessError) as e:
        return [], f"nvidia-smi: failed ({e})"
    gpus: list[GPU] = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        index, name, cap = parts[0], ", ".join(parts[1:-1]), parts[-1]
        m = re.fullmatch(r"(\d+)\.(\d+)", cap)
        if m and index.isdigit():
            gpus.append(
                GPU("nvidia", sm_name(int(m.group(1)), int(m.group(2))), name, int(index), "nvidia-smi")
            )
    return gpus, f"nvidia-smi: {len(gpus)} GPU(s)"


def nvidia_driver(library: str | Path | None = None) -> tuple[list[GPU], str]:
    """The CUDA driver API: cuInit, cuDeviceGetCount, and each device's compute capability and name."""
    path = Path(library) if library is not None else libs.find(libs.CUDA)
    if path is None:
        return [], f"CUDA driver: {libs.CUDA[0]} not found"
    try:
        cu = ctypes.CDLL(str(path))
    except OSError as e:
        return [], f"CUDA driver: {path} could not be loaded ({e})"
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
            or cu.cuDeviceGetAttribute(ctypes.byref(major), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
            != 0
            or cu.cuDeviceGetAttribute(ctypes.byref(minor), CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
            != 0
        ):
            continue
        cu.cuDeviceGetName(name, 256, dev)
        label = name.value.decode(errors="replace") or f"CUDA device {i}"
        gpus.append(GPU("nvidia", sm_name(major.value, minor.value), label, i, "libcuda"))
    return gpus, f"CUDA driver: {len(gpus)} GPU(s) via {path}"


def detect(sysfs_nodes: str | Path = SYSFS_NODES, *, tools: bool = True) -> Detection:
    """Every GPU this host shows; `tools=False` reads sysfs only (no subprocess, no library loaded)."""
    gpus: list[GPU] = []
    notes: list[str] = []
    amd, note = amd_sysfs(sysfs_nodes)
    gpus += amd
    notes.append(note)
    if tools and not amd:
        for probe in (amd_rocminfo, amd_smi):
            found, note = probe()
            notes.append(note)
            if found:
                gpus += found
                break
    if tools:
        smi = nvidia_smi()
        if smi is None:
            notes.append("nvidia-smi: not on PATH")
            smi = nvidia_driver()
        gpus += smi[0]
        notes.append(smi[1])
    return Detection(tuple(gpus), tuple(notes))
