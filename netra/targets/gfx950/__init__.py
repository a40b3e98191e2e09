"""gfx950 (AMD MI350X / MI355X, wave64): raw assembly templates, LLVM's llvm-mc and ld.lld, the HIP loader.

Everything Netra knows about the class is in this package: toolchain discovery and proof
(toolchain.py), how a template becomes a code object (assemble.py), how a code object is read and
where its machine code is (codeobject.py), and its static checks (checks.py).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from netra.core.schema import Field, Int, opt
from netra.targets.amd import AMD

if TYPE_CHECKING:
    from netra.core.types import ArtifactSpec, Tactic, Template, Toolchain
    from netra.targets.host import DriverNeed
    from netra.targets.target import Examined, Problem, Recipe, Target, Tools

WAVE = 64
MIN_ROCM = "7.0"  # the first ROCm release with gfx950 (its release notes and component changelogs)


class Gfx950:
    name = "gfx950"
    vendor = AMD
    identities = (90500,)  # KFD gfx_target_version 9.5.0
    suffix = ".hsaco"

    @property
    def flavours(self) -> dict[str, str]:
        """Its toolchain's flavours (the toolchain module, LLVM discovery, is imported when asked:
        serving a kernel needs the class, not its assembler)."""
        from netra.targets.gfx950 import toolchain

        return toolchain.FLAVOURS

    @property
    def checks(self) -> tuple[str, ...]:
        from netra.targets.gfx950 import checks  # with the code-object reader: build and examine only

        return checks.CHECKS

    sources = ("kernels/gfx950",)
    provision = ("apt", "llvm-22 lld-22")  # Debian 12's LLVM with the AMDGPU target
    toolchain_package = None  # a system package (or ROCm's LLVM): no pinned wheel is the toolchain
    # A template manifest's register and LDS allocation, fixed for every instantiation (docs/authoring.md).
    budget: ClassVar[dict[str, Field]] = {
        "vgprs": Field(Int(min=1, max=512)),
        "sgprs": Field(Int(min=1, max=106)),
        "lds_bytes": Field(Int(min=0, max=163840)),
        "rows_per_wave": opt(Int(min=1, max=64), 1),
    }

    def discover(self, env: dict[str, str] | None = None) -> Tools:
        from netra.targets.gfx950 import toolchain

        return toolchain.discover(env)

    def driver_need(self, toolchain: Toolchain) -> DriverNeed:
        """ROCm 7.0, the first release whose HIP runtime and amdgpu driver support gfx950 (MI350X /
        MI355X). Whichever LLVM built them, the code objects are version 5 (assemble.py pins it), which
        every ROCm since 5 loads, so the class's own support is the bound. Not run on a gfx950 GPU."""
        from netra.targets.gfx950 import assemble
        from netra.targets.host import DriverNeed

        return DriverNeed(
            "ROCm",
            MIN_ROCM,
            "runtime",
            f"the first ROCm with gfx950; its code objects (v{assemble.CODE_OBJECT_VERSION}, {toolchain}) "
            "need nothing newer",
        )

    def rows_per_block(self, template: Template, tactic: Tactic) -> int:
        return tactic.block // WAVE * int(template.budget["rows_per_wave"])

    def tactic_problem(self, template: Template, tactic: Tactic) -> str | None:
        """Why this tactic cannot launch this template on gfx950, or None."""
        if tactic.block % WAVE or not WAVE <= tactic.block <= 1024:
            return f"block {tactic.block} must be a multiple of {WAVE} in [{WAVE}, 1024] (wave64)"
        if tactic.grid_y != 1:
            return "grid_y must be 1: gfx950 templates index rows along grid.x only"
        if tactic.constants:
            return "gfx950 templates take no tactic constants"
        derived = self.rows_per_block(template, tactic)
        if tactic.rows_per_block not in (None, derived):
            return f"rows_per_block {tactic.rows_per_block} is not block / 64 x rows_per_wave = {derived}"
        return None

    def tactic_defines(self, tactic: Tactic) -> dict[str, int]:
        return {}  # the instantiation sets NETRA_BLOCK itself; nothing else comes from the tactic

    def instantiation(self, spec: ArtifactSpec) -> str:
        from netra.targets.gfx950 import assemble

        return assemble.instantiation(spec)

    def compile(self, spec: ArtifactSpec, tools: Tools, root: Path, work: Path, out: Path) -> Path:
        from netra.targets.gfx950 import assemble

        return assemble.assemble(spec, tools, root, work, out)

    def recipe(self, spec: ArtifactSpec, tools: Tools) -> Recipe:
        from netra.targets.gfx950 import assemble

        return assemble.recipe(spec, tools)

    def examine(self, built: list[tuple[ArtifactSpec, Path]], tools: Tools, jobs: int) -> list[Examined]:
        """Inspect and check every code object; one llvm-objdump per worker (its start-up dominates)."""
        from netra.targets.gfx950 import assemble

        chunks = [[p for _, p in built[i::jobs]] for i in range(jobs)]
        listings: dict[Path, str] = {}
        from concurrent.futures import ThreadPoolExecutor  # build time only: it imports logging

        from netra.core import interrupts

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for part in interrupts.pool_map(
                pool, lambda c: assemble.disassemble(tools, c), [c for c in chunks if c]
            ):
                listings.update(part)
        return [_examined(spec, path, listings[path]) for spec, path in built]

    def text_sha256(self, data: bytes, symbol: str, name: str) -> str:
        from netra.targets.gfx950 import codeobject

        return codeobject.text_sha256(data, name)

    def launch_digest(self, data: bytes, symbol: str, name: str) -> str:
        from netra.targets.gfx950 import codeobject

        return codeobject.launch_digest(data, symbol, name)

    def first_difference(self, tools: Tools, ours: Path, theirs: bytes, spec: ArtifactSpec) -> str:
        """The first instruction where two code objects' disassemblies differ, for the mismatch message."""
        import tempfile

        from netra.targets.gfx950 import assemble

        with tempfile.TemporaryDirectory(prefix="netra-ref-") as tmp:
            ref = Path(tmp) / ours.name
            ref.write_bytes(theirs)
            listing = assemble.disassemble(tools, [ours, ref], assemble.MCPU[spec.target])
            a, b = _instructions(listing[ours]), _instructions(listing[ref])
        for i, ((x, at), (y, _)) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return f"first differing instruction #{i} (at {at}): built `{x}`, reference `{y}`"
        if len(a) != len(b):
            return f"instruction counts differ: built {len(a)}, reference {len(b)}"
        return "disassembly identical (difference is in encoding only)"


def _examined(spec: ArtifactSpec, path: Path, listing: str) -> Examined:
    from netra.targets.gfx950 import checks, codeobject
    from netra.targets.target import Examined, Problem  # build types: not needed to serve

    data = path.read_bytes()
    co = codeobject.inspect(data, spec.file)
    problems: list[Problem] = checks.check(co, spec, listing)
    k = co.kernels.get(spec.symbol)
    d = k.descriptor if k is not None else None
    m = k.metadata if k is not None else {}
    launch = ""
    if k is not None and k.descriptor_raw is not None:
        launch = codeobject.digest(co, spec.symbol)
    elif not problems:
        problems.append(Problem("kd", f"{spec.symbol}.kd (the kernel descriptor) is missing"))
    return Examined(
        spec=spec,
        path=path,
        text_sha256=co.text_sha256,
        launch_sha256=launch,
        code_sha256=hashlib.sha256(data).hexdigest(),
        symbols=tuple(sorted(co.kernels)),
        kernarg_bytes=d.kernarg_bytes if d else -1,
        lds_bytes=d.group_segment_bytes if d else -1,
        max_threads=int(m.get(".max_flat_workgroup_size", 0)),
        facts={
            "vgprs": int(m.get(".vgpr_count", d.vgpr_alloc if d else -1)),
            "agprs": int(m.get(".agpr_count", 0)),
            "sgprs": int(m.get(".sgpr_count", 0)),
            "wave_size": int(m.get(".wavefront_size", WAVE)),
        },
        problems=problems,
    )


def _instructions(listing: str) -> list[tuple[str, str]]:
    """(instruction, address) pairs from an llvm-objdump listing, whose comments carry the address."""
    out = []
    for ln in listing.splitlines():
        if not ln.startswith(("\t", " ")):
            continue
        text, _, comment = ln.partition("//")
        out.append((" ".join(text.split()), comment.strip().split(":")[0] or "?"))
    return out


TARGET: Target = Gfx950()
