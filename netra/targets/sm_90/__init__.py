"""sm_90 (NVIDIA H100 / H200, Hopper): CUDA C++ templates, nvcc -arch=sm_90a, the CUDA loader.

Everything Netra knows about the class is in this package: nvcc discovery and proof (toolchain.py),
how a template becomes a cubin (compile.py), how a cubin is read and where its machine code is
(cubin.py: `.text.<kernel>`), and its static checks (checks.py). Another NVIDIA class built from the
same CUDA templates reuses them with its own architecture (`arch`, `sm`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from netra.core.ops import FAMILIES
from netra.core.schema import Field, Int
from netra.targets.nvidia import NVIDIA

if TYPE_CHECKING:
    from netra.core.types import ArtifactSpec, Tactic, Template, Toolchain
    from netra.targets.host import DriverNeed
    from netra.targets.target import Examined, Recipe, Target, Tools

WARP = 32


class Sm90:
    name = "sm_90"
    vendor = NVIDIA
    identities = ((9, 0),)  # compute capability 9.0 (H100, H200)
    sm = 90  # the cubin's SM number (cubin.SM_ARCH; the build's modules are imported only to build)
    suffix = ".cubin"

    # The toolchain module (nvcc discovery and proof) is imported when its facts are asked for: serving
    # a kernel needs the class, not its compiler.
    @property
    def arch(self) -> str:
        """nvcc -arch: the arch-specific sm_90a (its features are Hopper's alone)."""
        from netra.targets.sm_90 import toolchain

        return toolchain.ARCH

    @property
    def flavours(self) -> dict[str, str]:
        from netra.targets.sm_90 import toolchain

        return toolchain.FLAVOURS

    @property
    def checks(self) -> tuple[str, ...]:
        from netra.targets.sm_90 import checks  # with the cubin reader: build and examine only

        return checks.CHECKS

    # Its template sources: its own folder, then the CUDA templates shared by NVIDIA classes.
    sources = ("kernels/sm_90", NVIDIA.shared_templates)
    provision = ("pip-pinned", "nvidia-")  # the pinned nvidia-cuda-nvcc wheels and their headers
    toolchain_package = "nvidia-cuda-nvcc"  # nvcc itself; the other nvidia- pins are what it runs with
    # A template's resource budget: the most any instantiation may use (the gate refuses more).
    budget: ClassVar[dict[str, Field]] = {
        "registers": Field(Int(min=16, max=255)),
        "shared_bytes": Field(Int(min=0, max=227 * 1024)),
    }

    def discover(self, env: dict[str, str] | None = None) -> Tools:
        from netra.targets.sm_90 import toolchain

        return toolchain.discover(env, target=self.name, arch=self.arch)

    def driver_need(self, toolchain: Toolchain) -> DriverNeed:
        """The driver the lock's nvcc requires: CUDA 13.x cubins need an NVIDIA driver >= 580."""
        return NVIDIA.cubin_driver_need(toolchain.version)

    def rows_per_block(self, template: Template, tactic: Tactic) -> int:
        """The tactic's rows per block; 0 for a family whose grid does not read it (a routed MoE's)."""
        return tactic.rows_per_block or 0

    def tactic_problem(self, template: Template, tactic: Tactic) -> str | None:
        if tactic.block % WARP or not WARP <= tactic.block <= 1024:
            return f"block {tactic.block} must be a multiple of {WARP} in [{WARP}, 1024]"
        per_block = "rows_per_block" in FAMILIES[template.op].launch.names()
        if tactic.rows_per_block is None and per_block:
            return f"rows_per_block is required on {self.name} (the host launches ceil(rows / rows_per_block) blocks)"
        if tactic.rows_per_block is not None and not per_block:
            return f"rows_per_block does not apply to {template.op}, whose grid does not read it: remove it"
        return None

    def tactic_defines(self, tactic: Tactic) -> dict[str, int]:
        if tactic.rows_per_block is None:  # a family whose grid is its record's (tactic_problem says so)
            return dict(tactic.constants)
        return {
            "NETRA_ROWS_PER_BLOCK": tactic.rows_per_block,
            "NETRA_GRID_Y": tactic.grid_y,
            **tactic.constants,
        }

    def instantiation(self, spec: ArtifactSpec) -> str:
        from netra.targets.sm_90 import compile

        return compile.instantiation(spec)

    def compile(self, spec: ArtifactSpec, tools: Tools, root: Path, work: Path, out: Path) -> Path:
        from netra.targets.sm_90 import compile

        return compile.compile_cubin(spec, tools, root, work, out, self.arch)

    def recipe(self, spec: ArtifactSpec, tools: Tools) -> Recipe:
        from netra.targets.sm_90 import compile

        return compile.recipe(spec, tools, self.arch)

    def examine(self, built: list[tuple[ArtifactSpec, Path]], tools: Tools, jobs: int) -> list[Examined]:
        return [_examined(spec, path, self.sm) for spec, path in built]

    def text_sha256(self, data: bytes, symbol: str, name: str) -> str:
        from netra.targets.sm_90 import cubin

        return cubin.text_sha256(data, symbol, name)

    def launch_digest(self, data: bytes, symbol: str, name: str) -> str:
        from netra.targets.sm_90 import cubin

        return cubin.launch_digest(data, symbol, name)

    def first_difference(self, tools: Tools, ours: Path, theirs: bytes, spec: ArtifactSpec) -> str:
        from netra.targets.sm_90 import cubin

        a = cubin.inspect(ours.read_bytes(), spec.file)
        b = cubin.inspect(theirs, spec.file)
        ka, kb = a.kernels.get(spec.symbol), b.kernels.get(spec.symbol)
        if ka and kb and ka.registers != kb.registers:
            return f"registers: built {ka.registers}, reference {kb.registers}"
        return (
            "the .text differs (no SASS disassembler is required by the build; compare with cuobjdump -sass)"
        )


def _examined(spec: ArtifactSpec, path: Path, sm: int) -> Examined:
    from netra.targets.sm_90 import checks, cubin
    from netra.targets.target import Examined  # a build type: not needed to serve

    data = path.read_bytes()
    cb = cubin.inspect(data, spec.file)
    problems = checks.check(cb, spec, sm)
    k = cb.kernels.get(spec.symbol)
    return Examined(
        spec=spec,
        path=path,
        text_sha256=cb.text_sha256.get(spec.symbol, ""),
        launch_sha256=cubin.digest(cb, spec.symbol) if k else "",
        code_sha256=hashlib.sha256(data).hexdigest(),
        symbols=tuple(sorted(cb.kernels)),
        kernarg_bytes=k.param_bytes if k and k.param_bytes is not None else -1,
        lds_bytes=k.shared_bytes if k else -1,
        max_threads=k.max_threads[0] * k.max_threads[1] * k.max_threads[2] if k and k.max_threads else 0,
        facts={
            "registers": k.registers if k and k.registers is not None else 0,
            "shared_section_bytes": k.shared_section_bytes if k else 0,
            "constant0_bytes": k.constant0_bytes if k else 0,
        },
        problems=problems,
    )


TARGET: Target = Sm90()
