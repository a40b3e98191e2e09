"""sm_100 (NVIDIA B200 / GB200, Blackwell): the CUDA C++ templates sm_90 builds, nvcc -arch=sm_100a.

A Blackwell class built like Hopper's: the same templates (kernels/cuda/), the same pinned nvcc found
and proven the same way (on an sm_100a probe), the same compile flags for another architecture, the
same static checks for sm_100a cubins (netra.targets.sm_90's modules, given `arch` and `sm`), and the
CUDA loader. What differs is written here: which devices are the class (compute capability 10.0:
sm_100a code runs on no other), and what a kernel launches with, since an sm_100a cubin carries a
second form of each kernel beside its `.text` (cubin.py). No Blackwell GPU has run these kernels: the
class is certified `static` (manifests/sm_100/tactics.toml) until `netra certify` runs on a B200.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from netra.targets.nvidia import NVIDIA
from netra.targets.sm_90 import Sm90

if TYPE_CHECKING:
    from netra.core.types import ArtifactSpec
    from netra.targets.target import Examined, Target, Tools


class Sm100(Sm90):
    name = "sm_100"
    identities = ((10, 0),)  # compute capability 10.0 (B200, GB200); B300 is 10.3, another class
    arch = "sm_100a"  # arch-specific: runs on compute capability 10.0 only, as the lock's .text promises
    sm = 100
    # Its own folder (class-specific variants of the CUDA templates: none today), then the shared ones.
    sources = ("kernels/sm_100", NVIDIA.shared_templates)

    def examine(self, built: list[tuple[ArtifactSpec, Path]], tools: Tools, jobs: int) -> list[Examined]:
        from netra.targets.sm_100 import cubin  # with the ELF reader: build, examine and doctor only

        out = super().examine(built, tools, jobs)
        for e in out:
            if e.launch_sha256:
                e.launch_sha256 = cubin.launch_digest(e.path.read_bytes(), e.spec.symbol, e.spec.file)
        return out

    def launch_digest(self, data: bytes, symbol: str, name: str) -> str:
        from netra.targets.sm_100 import cubin

        return cubin.launch_digest(data, symbol, name)


TARGET: Target = Sm100()
