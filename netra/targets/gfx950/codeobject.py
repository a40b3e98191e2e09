"""Reading AMDGPU code objects: the .text hash the lock pins, and the facts the static gate checks.

pyelftools parses the ELF; msgpack decodes the NT_AMDGPU_METADATA note. `text_sha256` is what the
runtime and doctor need most: it locates .text with netra.core.elf (struct, microseconds) and hands anything
that reader does not handle plainly to pyelftools. `launch_digest` hashes what a kernel launches with:
its 64-byte descriptor (without the code-entry offset, which moves with section layout between
toolchains) and its metadata entry, canonicalized, so the lock pins them across toolchains too.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from netra.errors import ValidationError

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
KD_SIZE = 64


def _elf(data: bytes, name: str) -> Any:
    from elftools.elf.elffile import ELFFile

    try:
        return ELFFile(io.BytesIO(data))
    except Exception as e:  # ELFError, and whatever else a damaged header trips pyelftools into
        raise ValidationError(
            f"{name}: not an ELF code object ({e})"[:400], "rebuild it with `netra build`"
        ) from None


def text_bytes(data: bytes, name: str = "code object") -> bytes:
    """.text through pyelftools; any damage it trips on (truncation, bad offsets) is this file's problem."""
    elf = _elf(data, name)
    try:
        sec = elf.get_section_by_name(".text")
        text = sec.data() if sec is not None else None
    except Exception as e:
        raise ValidationError(
            f"{name}: not a readable AMDGPU code object ({type(e).__name__}: {e})"[:400],
            "rebuild it with `netra build`",
        ) from None
    if text is None:
        raise ValidationError(f"{name}: no .text section", "rebuild it with `netra build`")
    return text


def text_sha256(data: bytes, name: str = "code object") -> str:
    """The machine-code identity the lock records: stable across toolchains' packaging differences."""
    from netra.core import elf

    try:
        return hashlib.sha256(elf.section_bytes(data, ".text")).hexdigest()
    except ValueError:
        return hashlib.sha256(text_bytes(data, name)).hexdigest()


@dataclass(frozen=True)
class Descriptor:
    """The 64-byte kernel descriptor, decoded (see the AMDGPU usage docs, 'Kernel Descriptor')."""

    group_segment_bytes: int
    private_segment_bytes: int
    kernarg_bytes: int
    entry_offset: int
    rsrc3: int
    rsrc1: int
    rsrc2: int
    properties: int

    @classmethod
    def parse(cls, raw: bytes) -> Descriptor:
        g, p, k = struct.unpack_from("<III", raw, 0)
        (entry,) = struct.unpack_from("<q", raw, 16)
        rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
        (props,) = struct.unpack_from("<H", raw, 56)
        return cls(g, p, k, entry, rsrc3, rsrc1, rsrc2, props)

    @property
    def vgpr_alloc(self) -> int:
        """Unified VGPRs (arch + acc) allocated per lane: granule of 8 on gfx90a/gfx94x/gfx950."""
        return ((self.rsrc1 & 0x3F) + 1) * 8

    @property
    def sgpr_granule_field(self) -> int:
        return (self.rsrc1 >> 6) & 0xF

    @property
    def accum_offset(self) -> int:
        return ((self.rsrc3 & 0x3F) + 1) * 4

    @property
    def wave32(self) -> bool:
        return bool(self.properties & (1 << 10))

    @property
    def kernarg_ptr(self) -> bool:
        return bool(self.properties & (1 << 3))


@dataclass(frozen=True)
class HsacoKernel:
    """One kernel as the code object describes it (symbol, descriptor, metadata); not the runtime's Kernel."""

    name: str
    symbol_value: int  # address of the kernel's code
    kd_value: int | None
    descriptor: Descriptor | None
    metadata: dict[str, Any]
    descriptor_raw: bytes | None = None


@dataclass(frozen=True)
class CodeObject:
    name: str
    e_machine: int
    e_flags: int
    abi_version: int
    text_sha256: str
    text_addr: int
    text_size: int
    kernels: dict[str, HsacoKernel]
    metadata: dict[str, Any]
    undefined_symbols: tuple[str, ...]
    text_relocations: int
    dynamic_relocations: int
    sections: tuple[str, ...] = field(default=())


def _notes_metadata(sections: list[Any]) -> dict[str, Any]:
    import msgpack

    for sec in sections:
        if sec["sh_type"] != "SHT_NOTE":
            continue
        for note in sec.iter_notes():
            if note["n_name"] == "AMDGPU" and note["n_type"] == NT_AMDGPU_METADATA:
                desc = note["n_descdata"]
                if isinstance(desc, str):  # pyelftools gives str for unknown note types on some versions
                    desc = desc.encode("latin-1")
                return msgpack.unpackb(desc, raw=False)
    return {}


def inspect(data: bytes, name: str = "code object") -> CodeObject:
    """Everything the static gate needs, from one parse of the file (sections are walked once).

    A damaged file can break pyelftools or msgpack in many ways; every one of them is this file's
    problem, reported as a ValidationError naming it, never another exception type.
    """
    try:
        return _inspect(data, name)
    except ValidationError:
        raise
    except Exception as e:
        raise ValidationError(
            f"{name}: not a readable AMDGPU code object ({type(e).__name__}: {e})"[:400],
            "rebuild it with `netra build`",
        ) from None


def _inspect(data: bytes, name: str) -> CodeObject:
    from elftools.elf.relocation import RelocationSection
    from elftools.elf.sections import SymbolTableSection

    elf = _elf(data, name)
    sections = list(elf.iter_sections())
    by_name = {s.name: s for s in reversed(sections)}  # the first section of a name wins
    text = by_name.get(".text")
    if text is None:
        raise ValidationError(f"{name}: no .text section", "rebuild it with `netra build`")
    symbols: dict[str, Any] = {}
    undefined: list[str] = []
    for st in (by_name.get(".symtab"), by_name.get(".dynsym")):
        if not isinstance(st, SymbolTableSection):
            continue
        for s in st.iter_symbols():
            if not s.name:
                continue
            if s["st_shndx"] == "SHN_UNDEF":
                undefined.append(s.name)
            else:
                symbols.setdefault(s.name, s)
    text_index = sections.index(text)
    text_relocs = 0
    dyn_relocs = 0
    for sec in sections:
        if isinstance(sec, RelocationSection):
            if sec["sh_info"] == text_index:
                text_relocs += sec.num_relocations()
            else:
                dyn_relocs += sec.num_relocations()
    meta = _notes_metadata(sections)
    if not isinstance(meta, dict) or not isinstance(meta.get("amdhsa.kernels", []), list):
        raise ValidationError(f"{name}: the AMDGPU metadata note is not a map of kernels", "rebuild it")
    kernels: dict[str, HsacoKernel] = {}
    for k in meta.get("amdhsa.kernels", []):
        if not isinstance(k, dict) or not isinstance(k.get(".name", ""), str):
            raise ValidationError(f"{name}: a metadata kernel entry is malformed", "rebuild it")
        kname = k.get(".name", "")
        sym = symbols.get(kname)
        kd = symbols.get(f"{kname}.kd")
        desc = None
        raw_kd = None
        if kd is not None:
            for sec in sections:
                start, size = sec["sh_addr"], sec["sh_size"]
                if sec["sh_type"] != "SHT_NOBITS" and start <= kd["st_value"] < start + size:
                    off = kd["st_value"] - start
                    raw = sec.data()[off : off + KD_SIZE]
                    if len(raw) == KD_SIZE:
                        desc = Descriptor.parse(raw)
                        raw_kd = bytes(raw)
                    break
        kernels[kname] = HsacoKernel(
            name=kname,
            symbol_value=sym["st_value"] if sym is not None else -1,
            kd_value=kd["st_value"] if kd is not None else None,
            descriptor=desc,
            metadata=k,
            descriptor_raw=raw_kd,
        )
    text_data = text.data()
    return CodeObject(
        name=name,
        e_machine=_machine_number(data),
        e_flags=elf["e_flags"],
        abi_version=elf["e_ident"]["EI_ABIVERSION"],
        text_sha256=hashlib.sha256(text_data).hexdigest(),
        text_addr=text["sh_addr"],
        text_size=text["sh_size"],
        kernels=kernels,
        metadata=meta,
        undefined_symbols=tuple(sorted(set(undefined))),
        text_relocations=text_relocs,
        dynamic_relocations=dyn_relocs,
        sections=tuple(s.name for s in sections),
    )


def _machine_number(data: bytes) -> int:
    """pyelftools names e_machine; the gate wants the number (EM_AMDGPU is 224), at offset 18."""
    return struct.unpack_from("<H", data, 18)[0]


def read(f: BinaryIO | bytes, name: str) -> CodeObject:
    return inspect(f if isinstance(f, bytes) else f.read(), name)


# What HIP reads when it launches a kernel: the descriptor and these metadata keys (the argument list
# with the offsets, sizes and kinds it copies kernel arguments by).
LAUNCH_METADATA = (
    ".agpr_count", ".group_segment_fixed_size", ".kernarg_segment_align", ".kernarg_segment_size",
    ".max_flat_workgroup_size", ".name", ".private_segment_fixed_size", ".sgpr_count", ".symbol",
    ".vgpr_count", ".wavefront_size",
)  # fmt: skip
LAUNCH_ARG_KEYS = (".access", ".address_space", ".name", ".offset", ".size", ".value_kind")
_KD_ENTRY = slice(16, 24)  # kernel_code_entry_byte_offset: moves with section layout, not locked


def launch_facts(co: CodeObject, symbol: str) -> dict[str, Any]:
    """The launch-relevant part of one kernel, canonical: the same on every toolchain that agrees."""
    k = co.kernels.get(symbol)
    if k is None or k.descriptor_raw is None:
        raise ValidationError(f"{co.name}: no kernel {symbol} with a descriptor", "rebuild it")
    kd = bytearray(k.descriptor_raw)
    kd[_KD_ENTRY] = bytes(8)
    meta = {key: k.metadata[key] for key in LAUNCH_METADATA if key in k.metadata}
    meta[".args"] = [
        {key: a[key] for key in LAUNCH_ARG_KEYS if key in a}
        for a in k.metadata.get(".args", [])
        if isinstance(a, dict)
    ]
    return {"descriptor": kd.hex(), "metadata": meta, "e_machine": co.e_machine}


def digest(co: CodeObject, symbol: str) -> str:
    """sha256 of launch_facts: locked next to .text, so an altered descriptor or metadata is refused."""
    facts = launch_facts(co, symbol)
    return hashlib.sha256(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def launch_digest(data: bytes, symbol: str, name: str) -> str:
    return digest(inspect(data, name), symbol)
