"""gfx950's static gate: a code object must match its contract and stay inside gfx950's limits.

The assembler checks some limits and not others (it accepts a 200000-byte LDS request, a kernarg size
that disagrees with the metadata, registers beyond the allocation), so each is checked here from the
linked code object and its disassembly. The check names are recorded as evidence in the tables.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from netra.targets.gfx950.codeobject import EM_AMDGPU, CodeObject
from netra.targets.target import Problem

if TYPE_CHECKING:
    from netra.core.types import ArtifactSpec

LIMITS = {
    "gfx950": {"lds_bytes": 163840, "vgprs": 512, "sgprs": 102, "wave_size": 64, "max_block": 1024},
}
CHECKS = (
    "elf",
    "symbols",
    "kd",
    "kernarg",
    "lds",
    "vgpr",
    "sgpr",
    "accum_offset",
    "wave64",
    "workgroup",
    "scratch",
    "undefined",
    "relocations",
    "registers",
)

_REG_RANGE = re.compile(r"(?<![\w.])([vsa])\[(\d+):(\d+)\]")
_REG_ONE = re.compile(r"(?<![\w.\[])([vsa])(\d+)(?![\w:\]])")


def registers_used(disassembly: str) -> dict[str, int]:
    """Highest register index used per file (v, s, a) over all instructions; -1 when unused."""
    top = {"v": -1, "s": -1, "a": -1}
    for line in disassembly.splitlines():
        line = line.split("//", 1)[0].strip()
        if not line or line.endswith(":") or line.startswith(("Disassembly", ".")) or " " not in line:
            continue
        operands = line.split(None, 1)[1]
        for kind, _lo, hi in _REG_RANGE.findall(operands):
            top[kind] = max(top[kind], int(hi))
        for kind, idx in _REG_ONE.findall(_REG_RANGE.sub("", operands)):
            top[kind] = max(top[kind], int(idx))
    return top


def check(co: CodeObject, spec: ArtifactSpec, disassembly: str) -> list[Problem]:
    """Return every problem found (empty when the code object passes all CHECKS)."""
    lim = LIMITS[spec.target]
    tpl = spec.template
    p: list[Problem] = []

    if co.e_machine != EM_AMDGPU:
        p.append(Problem("elf", f"e_machine {co.e_machine} is not EM_AMDGPU ({EM_AMDGPU})"))
    names = sorted(co.kernels)
    if names != [spec.symbol]:
        p.append(Problem("symbols", f"kernels in metadata {names}, expected exactly [{spec.symbol!r}]"))
    for name, each in sorted(co.kernels.items()):
        if each.kd_value is None or each.descriptor is None:
            p.append(Problem("kd", f"{name}.kd (the kernel descriptor) is missing"))
        if each.symbol_value < 0:
            p.append(Problem("kd", f"kernel symbol {name} is missing"))
    k = co.kernels.get(spec.symbol)
    if k is None or k.descriptor is None:
        return p + _undefined_and_relocs(co)
    d, m = k.descriptor, k.metadata

    meta_kernarg = m.get(".kernarg_segment_size")
    if not (d.kernarg_bytes == meta_kernarg == tpl.kernarg_bytes):
        p.append(
            Problem(
                "kernarg",
                f"kernarg bytes: descriptor {d.kernarg_bytes}, metadata {meta_kernarg}, "
                f"template ABI {tpl.kernarg_bytes}",
            )
        )
    meta_args = [
        (a.get(".name"), a.get(".offset"), a.get(".size"), a.get(".value_kind")) for a in m.get(".args", [])
    ]
    abi_args = [(a.name, a.offset, a.size, a.value_kind) for a in tpl.args]
    if meta_args != abi_args:
        p.append(Problem("kernarg", f"metadata args {meta_args} differ from the template ABI {abi_args}"))
    if tpl.args and not d.kernarg_ptr:
        p.append(
            Problem("kernarg", "the kernel takes arguments but the descriptor enables no kernarg pointer")
        )

    meta_lds = m.get(".group_segment_fixed_size")
    if d.group_segment_bytes != meta_lds or d.group_segment_bytes != tpl.budget["lds_bytes"]:
        p.append(
            Problem(
                "lds",
                f"LDS bytes: descriptor {d.group_segment_bytes}, metadata {meta_lds}, contract {tpl.budget['lds_bytes']}",
            )
        )
    if d.group_segment_bytes > lim["lds_bytes"]:
        p.append(
            Problem("lds", f"LDS {d.group_segment_bytes} bytes exceeds {spec.target}'s {lim['lds_bytes']}")
        )

    vgpr_count = int(m.get(".vgpr_count", -1))
    if d.vgpr_alloc > lim["vgprs"] or vgpr_count > lim["vgprs"]:
        p.append(Problem("vgpr", f"{max(d.vgpr_alloc, vgpr_count)} VGPRs exceeds {lim['vgprs']}"))
    if vgpr_count < 0 or d.vgpr_alloc < vgpr_count:
        p.append(
            Problem("vgpr", f"descriptor allocates {d.vgpr_alloc} VGPRs, metadata declares {vgpr_count}")
        )

    sgpr_count = int(m.get(".sgpr_count", -1))
    sgpr_alloc = (d.sgpr_granule_field + 1) * 8
    if sgpr_count > lim["sgprs"]:
        p.append(Problem("sgpr", f"{sgpr_count} SGPRs exceeds {lim['sgprs']}"))
    if sgpr_count < 0 or sgpr_alloc < sgpr_count:
        p.append(Problem("sgpr", f"descriptor allocates {sgpr_alloc} SGPRs, metadata declares {sgpr_count}"))

    acc = d.accum_offset
    if not (4 <= acc <= 256) or acc % 4 or acc > max(d.vgpr_alloc, 4):
        p.append(
            Problem("accum_offset", f"accum_offset {acc} must be 4..256, a multiple of 4, <= {d.vgpr_alloc}")
        )

    if d.wave32 or m.get(".wavefront_size") != lim["wave_size"]:
        p.append(
            Problem(
                "wave64", f"wave size {m.get('.wavefront_size')} (wave32 bit {d.wave32}); gfx950 is wave64"
            )
        )

    max_wg = int(m.get(".max_flat_workgroup_size", 0))
    if max_wg < spec.tactic.block or spec.tactic.block > lim["max_block"]:
        p.append(
            Problem(
                "workgroup", f"max_flat_workgroup_size {max_wg} < the contract's block {spec.tactic.block}"
            )
        )

    if d.private_segment_bytes or m.get(".private_segment_fixed_size", 0):
        p.append(Problem("scratch", f"uses {d.private_segment_bytes} bytes of scratch; contracts allow none"))

    p += _undefined_and_relocs(co)

    used = registers_used(disassembly)
    arch_limit = min(vgpr_count, acc) if used["a"] >= 0 else vgpr_count
    if used["v"] >= arch_limit:
        p.append(Problem("registers", f"uses v{used['v']} but only v0..v{arch_limit - 1} are allocated"))
    if used["a"] >= 0 and acc + used["a"] >= d.vgpr_alloc:
        p.append(Problem("registers", f"uses a{used['a']} beyond the {d.vgpr_alloc - acc} AGPRs allocated"))
    if used["s"] >= sgpr_count:
        p.append(Problem("registers", f"uses s{used['s']} but only s0..s{sgpr_count - 1} are allocated"))
    return p


def _undefined_and_relocs(co: CodeObject) -> list[Problem]:
    p = []
    if co.undefined_symbols:
        p.append(Problem("undefined", f"undefined symbols: {', '.join(co.undefined_symbols)}"))
    if co.text_relocations or co.dynamic_relocations:
        p.append(
            Problem(
                "relocations",
                f"{co.text_relocations} relocations against .text, {co.dynamic_relocations} dynamic relocations",
            )
        )
    return p
