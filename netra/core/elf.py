"""Reading ELF64 section headers with struct: the machine code of a code object in microseconds.

Every code object Netra ships (AMDGPU .hsaco, NVIDIA .cubin) is a little-endian ELF64 file whose
machine code is one named section. The runtime and doctor hash that section for every code object,
so they read the section header table directly instead of importing pyelftools (milliseconds per file
plus its import). Anything unusual (a compressed section, headers out of bounds) raises ValueError and
the caller decides; tests hold this reader equal to pyelftools on every shipped code object.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_EHDR = struct.Struct("<40xQ10xHHH")  # e_shoff at 0x28; e_shentsize, e_shnum, e_shstrndx at 0x3a
_SHDR = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, addralign, entsize
SHT_NOBITS = 8
SHF_COMPRESSED = 0x800
MAX_SECTIONS = 4096  # far above any code object; a larger count is a damaged file


@dataclass(frozen=True)
class Section:
    name: bytes
    type: int
    flags: int
    offset: int
    size: int
    info: int


def machine(data: bytes | memoryview) -> int:
    """e_machine (EM_AMDGPU 224, EM_CUDA 190), after checking the file is a little-endian ELF64."""
    view = memoryview(data)
    if len(view) < 64 or bytes(view[:4]) != b"\x7fELF" or view[4] != 2 or view[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    return int(struct.unpack_from("<H", view, 18)[0])


def sections(data: bytes | memoryview) -> list[Section]:
    """Every section header, in file order, with its name resolved; ValueError for a damaged table."""
    view = memoryview(data)
    machine(view)
    shoff, shentsize, shnum, shstrndx = _EHDR.unpack_from(view, 0)
    if not 0 < shnum <= MAX_SECTIONS or shentsize != _SHDR.size or shstrndx >= shnum:
        raise ValueError("section header table missing, extended or out of bounds")
    if shoff + shnum * shentsize > len(view):
        raise ValueError("section header table out of bounds")
    headers = [_SHDR.unpack_from(view, shoff + i * shentsize) for i in range(shnum)]
    strtab = headers[shstrndx]
    str_off, str_size = strtab[4], strtab[5]
    if str_off + str_size > len(view):
        raise ValueError("section name table out of bounds")
    names = bytes(view[str_off : str_off + str_size])
    out = []
    for name_off, typ, flags, _addr, off, size, _link, info, *_ in headers:
        end = names.find(b"\0", name_off)
        name = names[name_off:end] if name_off < len(names) and end >= 0 else b""
        out.append(Section(name, typ, flags, off, size, info))
    return out


def section_bytes(data: bytes | memoryview, name: str) -> memoryview:
    """The contents of the first section called `name`, as pyelftools' section.data() returns them."""
    view = memoryview(data)
    want = name.encode()
    for s in sections(view):
        if s.name != want:
            continue
        if s.flags & SHF_COMPRESSED:
            raise ValueError(f"{name} is compressed")
        if s.type == SHT_NOBITS:
            return view[0:0]
        if s.offset + s.size > len(view):
            raise ValueError(f"{name} out of bounds")
        return view[s.offset : s.offset + s.size]
    raise ValueError(f"no {name} section")
