"""sm_90's static gate: a cubin must be an sm_90a kernel that fits its contract and its budget (another
NVIDIA class runs the same checks for its own architecture: `check`'s `sm`).

Each check reads the cubin itself (netra.targets.sm_90.cubin), never the compiler's report, so a cubin
changed after it was built is judged by what it is. The check names are recorded as evidence in the
tables; docs/build.md lists what each refuses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from netra.targets.sm_90.cubin import EM_CUDA, SM_ARCH, Cubin
from netra.targets.target import Problem

if TYPE_CHECKING:
    from netra.core.types import ArtifactSpec

LIMITS = {"registers": 255, "shared_bytes": 227 * 1024, "max_block": 1024}
CHECKS = (
    "elf",
    "symbols",
    "kernarg",
    "registers",
    "shared",
    "local",
    "launch_bounds",
    "undefined",
    "relocations",
    "globals",
)


def check(cb: Cubin, spec: ArtifactSpec, sm: int = SM_ARCH) -> list[Problem]:
    """Every problem found (empty when the cubin passes all CHECKS); `sm`: the class's architecture,
    whose arch-specific variant (sm_<sm>a) the cubin must be."""
    p: list[Problem] = []
    tpl = spec.template
    if cb.e_machine != EM_CUDA or cb.arch != sm or not cb.arch_specific:
        p.append(Problem("elf", f"e_machine {cb.e_machine}, sm_{cb.arch}, arch-specific {cb.arch_specific}: "
                                f"not an sm_{sm}a cubin (EM_CUDA {EM_CUDA})"))  # fmt: skip
    names = sorted(cb.kernels)
    if names != [spec.symbol]:
        p.append(Problem("symbols", f'kernels {names}, expected exactly [{spec.symbol!r}] (extern "C")'))
    k = cb.kernels.get(spec.symbol)
    if k is None:
        return p
    got = [(q.ordinal, q.offset, q.size) for q in k.params]
    want = [(i, a.offset, a.size) for i, a in enumerate(tpl.args)]
    if got != want:
        p.append(
            Problem(
                "kernarg", f"parameters (ordinal, offset, size) {got} differ from the template ABI {want}"
            )
        )
    if k.param_bytes != tpl.kernarg_bytes:
        p.append(Problem("kernarg", f"parameter bank size {k.param_bytes}, template ABI {tpl.kernarg_bytes}"))
    budget = int(tpl.budget["registers"])
    if k.registers is None or k.registers > min(budget, LIMITS["registers"]):
        p.append(Problem("registers", f"{k.registers} registers per thread, budget {budget}"))
    shared_budget = int(tpl.budget["shared_bytes"])
    if k.shared_bytes > min(shared_budget, LIMITS["shared_bytes"]):
        p.append(Problem("shared", f"{k.shared_bytes} bytes of static shared memory, budget {shared_budget}"))
    elif k.shared_bytes + spec.dynamic_shared > LIMITS["shared_bytes"]:
        p.append(Problem("shared", f"{k.shared_bytes} static + {spec.dynamic_shared} dynamic bytes of shared "
                                   f"memory, more than a CTA may have ({LIMITS['shared_bytes']})"))  # fmt: skip
    stack = [v for v in (k.frame_bytes, k.min_stack_bytes, k.max_stack_bytes) if v]
    local = [s for s in cb.sections if s.startswith(".nv.local.")]
    if stack or local or k.frame_bytes is None:
        p.append(Problem("local", f"stack frame {k.frame_bytes}, stack {stack}, sections {local}: contracts allow "
                                  "no local memory (spills, stack arrays)"))  # fmt: skip
    block = (spec.tactic.block, 1, 1)
    if k.max_threads != block or spec.tactic.block > LIMITS["max_block"]:
        p.append(Problem("launch_bounds", f"max threads {k.max_threads}, the tactic launches {block}: "
                                          "declare __launch_bounds__(NETRA_BLOCK)"))  # fmt: skip
    if cb.undefined_symbols:
        p.append(Problem("undefined", f"undefined symbols: {', '.join(cb.undefined_symbols)}"))
    if cb.text_relocations:
        p.append(Problem("relocations", f"{cb.text_relocations} relocations against the kernel's .text"))
    state = [s for s in cb.sections if s.startswith((".nv.global", ".nv.constant3", ".nv.constant4"))]
    if state:
        p.append(Problem("globals", f"device-side state {state}: a kernel reads only its arguments"))
    return p
