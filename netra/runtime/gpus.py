"""Which GPUs this host has, and their Netra GPU class, without vendor tools where files suffice.

Each registered vendor is asked in turn (netra.targets: AMD reads the KFD topology in sysfs, then
rocminfo or amd-smi; NVIDIA asks nvidia-smi, else the CUDA driver API), and each device's identity is
named by the registry: the class that declares it, else the vendor's own name for it. No GPU is a
normal answer: every source that found nothing or failed says so in `notes`, and nothing here raises
for it: what a broken host shows (files that are FIFOs or not UTF-8, a tool printing garbage, crashing
or hanging) is a note naming that source, and the other sources still count. The sysfs root is a parameter so tests can point it at a directory of real files in the sysfs
format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from netra.errors import NetraError
from netra.targets.host import GPU

__all__ = ["GPU", "Detection", "detect"]


@dataclass(frozen=True)
class Detection:
    gpus: tuple[GPU, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def classes(self) -> list[str]:
        return sorted({g.gpu_class for g in self.gpus})


def detect(sysfs_nodes: str | Path | None = None, *, tools: bool = True) -> Detection:
    """Every GPU this host shows; `tools=False` reads files only (no subprocess, no library loaded)."""
    from netra import targets

    gpus: list[GPU] = []
    notes: list[str] = []
    for vendor in targets.vendors():
        try:
            found, said = vendor.detect(sysfs_nodes, tools=tools)
        except (NetraError, OSError, ValueError) as e:  # one broken source never hides the others
            found, said = [], [f"{vendor.name}: detection failed ({getattr(e, 'message', None) or e})"]
        gpus += found
        notes += said
    return Detection(tuple(gpus), tuple(notes))
