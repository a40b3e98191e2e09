"""Reading AMDGPU code objects: the .text hash the lock pins, and the facts the static gate checks.

pyelftools parses the ELF; msgpack decodes the NT_AMDGPU_METADATA note. `text_sha256` is the only
function the runtime and doctor need: it reads the two headers that locate .text with struct
(microseconds, where pyelftools costs milliseconds per file plus its import), and hands anything it
does not handle plainly to pyelftools. Tests hold the two readers equal on every shipped code object.
"""

from __future__ import annotations

import hashlib
import io
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from netra.errors import ValidationError

EM_AMDGPU = 224
NT_AMDGPU_METADATA = 32
KD_SIZE = 64


def _elf(data: bytes, name: str) -> Any:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    try:
        return ELFFile(io.BytesIO(data))
    except ELFError as e:
        raise ValidationError(f"{name}: not an ELF code object ({e})", "rebuild it with `netra build`") from e


# Fast path for text_sha256: the ELF64 header and section headers, read with struct.
_EHDR = struct.Struct("<40xQ10xHHH")  # e_shoff at 0x28; e_shentsize, e_shnum, e_shstrndx at 0x3a
_SHDR = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, addralign, entsize
SHT_NOBITS = 8
SHF_COMPRESSED = 0x800


def fast_text(data: bytes | memoryview) -> memoryview:
    """The first section named .text, as pyelftools' get_section_by_name('.text').data() sees it."""
    view = memoryview(data)
    if len(view) < 64 or bytes(view[:4]) != b"\x7fELF" or view[4] != 2 or view[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    shoff, shentsize, shnum, shstrndx = _EHDR.unpack_from(view, 0)
    if shnum == 0 or shentsize != _SHDR.size or shstrndx >= shnum or shoff + shnum * shentsize > len(view):
        raise ValueError("section header table missing, extended or out of bounds")
    headers = [_SHDR.unpack_from(view, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx]
    str_off, str_size = strtab[4], strtab[5]
    if str_off + str_size > len(view):
        raise ValueError("section name table out of bounds")
    names = bytes(view[str_off : str_off + str_size])
    for name_off, typ, flags, _addr, off, size, *_ in headers:
        end = names.find(b"\0", name_off)
        if name_off >= len(names) or end < 0 or names[name_off:end] != b".text":
            continue
        if flags & SHF_COMPRESSED:
            raise ValueError(".text is compressed")
        if typ == SHT_NOBITS:
            return view[0:0]
        if off + size > len(view):
            raise ValueError(".text out of bounds")
        return view[off : off + size]
    raise ValueError("no .text section")


def text_bytes(data: bytes, name: str = "code object") -> bytes:
    elf = _elf(data, name)
    sec = elf.get_section_by_name(".text")
    if sec is None:
        raise ValidationError(f"{name}: no .text section", "rebuild it with `netra build`")
    return sec.data()


def text_sha256(data: bytes, name: str = "code object") -> str:
    """The machine-code identity the lock records: stable across toolchains' packaging differences."""
    try:
        return hashlib.sha256(fast_text(data)).hexdigest()
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
class Kernel:
    name: str
    symbol_value: int  # address of the kernel's code
    kd_value: int | None
    descriptor: Descriptor | None
    metadata: dict[str, Any]


@dataclass(frozen=True)
class CodeObject:
    name: str
    e_machine: int
    e_flags: int
    abi_version: int
    text_sha256: str
    text_addr: int
    text_size: int
    kernels: dict[str, Kernel]
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
    """Everything the static gate needs, from one parse of the file (sections are walked once)."""
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
    kernels: dict[str, Kernel] = {}
    for k in meta.get("amdhsa.kernels", []):
        kname = k.get(".name", "")
        sym = symbols.get(kname)
        kd = symbols.get(f"{kname}.kd")
        desc = None
        if kd is not None:
            for sec in sections:
                start, size = sec["sh_addr"], sec["sh_size"]
                if sec["sh_type"] != "SHT_NOBITS" and start <= kd["st_value"] < start + size:
                    off = kd["st_value"] - start
                    raw = sec.data()[off : off + KD_SIZE]
                    if len(raw) == KD_SIZE:
                        desc = Descriptor.parse(raw)
                    break
        kernels[kname] = Kernel(
            name=kname,
            symbol_value=sym["st_value"] if sym is not None else -1,
            kd_value=kd["st_value"] if kd is not None else None,
            descriptor=desc,
            metadata=k,
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
