"""Reading sm_90 cubins: the machine code the lock pins and the kernel attributes the gate checks.

A cubin is an EM_CUDA ELF64 file. Each kernel's machine code is the section `.text.<kernel>`; what
the driver launches it with is in NVIDIA's "EIATTR" attribute records: `.nv.info` (per-function
register count and stack frame, keyed by symbol index) and `.nv.info.<kernel>` (parameter layout,
parameter bank size, max threads from __launch_bounds__, ...), plus the sizes of `.nv.shared.<kernel>`
and `.nv.constant0.<kernel>`. The record format is not documented by NVIDIA; what is read here is the
layout cuobjdump -elf prints, checked against ptxas's own report on the kernels Netra builds
(docs/build.md): records are [format u8][attribute u8] then a u16 value (formats 1 to 3; zero for
format 1, which has none) or a u16 size and that many bytes (format 4).

The runtime needs only `text_sha256` (netra.core.elf, struct); the rest uses pyelftools.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from dataclasses import dataclass, field
from typing import Any

from netra.core import elf
from netra.errors import ValidationError

EM_CUDA = 190
SM_ARCH = 90
RESERVED_SHARED = 1024  # the system's shared memory per block (sm_90, sm_100), placed in the kernel's section
# EIATTR attribute numbers (as cuobjdump names them).
PARAM_CBANK = 0x0A
FRAME_SIZE = 0x11
MIN_STACK_SIZE = 0x12
KPARAM_INFO = 0x17
CBANK_PARAM_SIZE = 0x19
MAX_STACK_SIZE = 0x23
REGCOUNT = 0x2F
MAX_THREADS = 0x05
COMPAT_ARCH_SPECIFIC = 0x09  # .nv.compat: 1 for sm_XYa (arch-specific features)
_RESERVED_SYMBOLS = (".nv.reservedSmem", "__nv_reservedSMEM")


def attributes(raw: bytes) -> list[tuple[int, int, bytes]]:
    """(format, attribute, value bytes) records of an .nv.info or .nv.compat section."""
    out = []
    i = 0
    while i < len(raw):
        if i + 2 > len(raw):
            raise ValueError("truncated attribute record")
        fmt, attr = raw[i], raw[i + 1]
        i += 2
        if fmt in (1, 2, 3):  # no value, a byte or a half-word: each record is 4 bytes long
            if i + 2 > len(raw):
                raise ValueError("truncated attribute value")
            value = raw[i : i + 2]
            i += 2
        elif fmt == 4:
            if i + 2 > len(raw):
                raise ValueError("truncated attribute size")
            (size,) = struct.unpack_from("<H", raw, i)
            i += 2
            if i + size > len(raw):
                raise ValueError("attribute value out of bounds")
            value = raw[i : i + size]
            i += size
        else:
            raise ValueError(f"unknown attribute format {fmt}")
        out.append((fmt, attr, bytes(value)))
    return out


def sm_number(arch: str) -> int:
    """The architecture number of an nvcc -arch name: sm_90a -> 90."""
    return int(arch.removeprefix("sm_").rstrip("af"))


def is_sm90a(data: bytes) -> bool:
    """An EM_CUDA cubin for sm_90 with arch-specific (sm_90a) features."""
    return is_arch_specific(data, SM_ARCH)


def is_arch_specific(data: bytes, sm: int) -> bool:
    """An EM_CUDA cubin for sm_<sm> with arch-specific (sm_<sm>a) features (.nv.compat)."""
    if elf.machine(data) != EM_CUDA or _arch(data) != sm:
        return False
    compat = elf.section_bytes(data, ".nv.compat")
    return any(a == COMPAT_ARCH_SPECIFIC and v[:1] == b"\x01" for _, a, v in attributes(bytes(compat)))


def _arch(data: bytes) -> int:
    (flags,) = struct.unpack_from("<I", data, 48)  # e_flags
    return (flags >> 8) & 0xFF


def text_sha256(data: bytes, symbol: str, name: str = "cubin") -> str:
    """The machine-code identity the lock records: the kernel's own .text section."""
    try:
        return hashlib.sha256(elf.section_bytes(data, f".text.{symbol}")).hexdigest()
    except ValueError as e:
        raise ValidationError(f"{name}: {e}", "rebuild it with `netra build`") from None


@dataclass(frozen=True)
class Param:
    ordinal: int
    offset: int
    size: int


@dataclass(frozen=True)
class CubinKernel:
    """One kernel as the cubin describes it (its EIATTR records); the runtime's Kernel is another thing."""

    name: str
    symbol_index: int
    registers: int | None
    frame_bytes: int | None
    min_stack_bytes: int | None
    max_stack_bytes: int | None
    params: tuple[Param, ...]
    param_bytes: int | None
    max_threads: tuple[int, int, int] | None
    shared_bytes: int  # static shared memory the kernel declares (the system reserve excluded)
    shared_section_bytes: int  # what the driver reserves per block for it (reserve included)
    constant0_bytes: int
    info_raw: bytes  # .nv.info.<kernel>


@dataclass(frozen=True)
class Cubin:
    name: str
    e_machine: int
    e_flags: int
    arch: int
    arch_specific: bool
    kernels: dict[str, CubinKernel]
    text_sha256: dict[str, str]
    undefined_symbols: tuple[str, ...]
    text_relocations: int
    sections: tuple[str, ...] = field(default=())
    compat_raw: bytes = b""


def inspect(data: bytes, name: str = "cubin") -> Cubin:
    """Everything the static gate needs. Any damage is a ValidationError naming the file."""
    try:
        return _inspect(data, name)
    except ValidationError:
        raise
    except Exception as e:
        raise ValidationError(
            f"{name}: not a readable cubin ({type(e).__name__}: {e})"[:400], "rebuild it with `netra build`"
        ) from None


def _inspect(data: bytes, name: str) -> Cubin:
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection
    from elftools.elf.sections import SymbolTableSection

    machine = elf.machine(data)
    f = ELFFile(io.BytesIO(data))
    secs = list(f.iter_sections())
    by_name = {s.name: s for s in reversed(secs)}
    symtab = by_name.get(".symtab")
    if not isinstance(symtab, SymbolTableSection):
        raise ValidationError(f"{name}: no symbol table", "rebuild it with `netra build`")
    symbols = list(symtab.iter_symbols())
    functions = {
        s.name: i for i, s in enumerate(symbols)
        if s["st_info"]["type"] == "STT_FUNC" and s["st_info"]["bind"] == "STB_GLOBAL" and s["st_shndx"] != "SHN_UNDEF"
    }  # fmt: skip
    undefined = sorted(
        s.name for s in symbols
        if s.name and s["st_shndx"] == "SHN_UNDEF" and not s.name.startswith(_RESERVED_SYMBOLS)
    )  # fmt: skip
    per_symbol: dict[int, dict[int, bytes]] = {}
    info = by_name.get(".nv.info")
    if info is not None:
        for fmt, attr, value in attributes(info.data()):
            if (
                fmt == 4
                and len(value) == 8
                and attr in (REGCOUNT, FRAME_SIZE, MIN_STACK_SIZE, MAX_STACK_SIZE)
            ):
                sym, v = struct.unpack("<II", value)
                per_symbol.setdefault(sym, {})[attr] = struct.pack("<I", v)
    kernels: dict[str, CubinKernel] = {}
    texts: dict[str, str] = {}
    text_relocs = 0
    for kname, index in functions.items():
        text = by_name.get(f".text.{kname}")
        if text is None:
            continue
        texts[kname] = hashlib.sha256(text.data()).hexdigest()
        kinfo = by_name.get(f".nv.info.{kname}")
        raw = kinfo.data() if kinfo is not None else b""
        params: list[Param] = []
        param_bytes = None
        max_threads = None
        for fmt, attr, value in attributes(raw):
            if attr == KPARAM_INFO and fmt == 4 and len(value) == 12:
                _idx, ordinal, offset, flags = struct.unpack("<IHHI", value)
                params.append(Param(ordinal, offset, (flags >> 18) & 0x3FFF))
            elif attr == CBANK_PARAM_SIZE and fmt == 3:
                (param_bytes,) = struct.unpack("<H", value)
            elif attr == MAX_THREADS and fmt == 4 and len(value) == 12:
                x, y, z = struct.unpack("<III", value)
                max_threads = (x, y, z)
        attrs = per_symbol.get(index, {})

        def get(attr: int, attrs: dict[int, bytes] = attrs) -> int | None:
            return struct.unpack("<I", attrs[attr])[0] if attr in attrs else None

        shared = by_name.get(f".nv.shared.{kname}")
        shared_size = shared["sh_size"] if shared is not None else 0
        const0 = by_name.get(f".nv.constant0.{kname}")
        kernels[kname] = CubinKernel(
            name=kname, symbol_index=index, registers=get(REGCOUNT), frame_bytes=get(FRAME_SIZE),
            min_stack_bytes=get(MIN_STACK_SIZE), max_stack_bytes=get(MAX_STACK_SIZE),
            params=tuple(sorted(params, key=lambda p: p.ordinal)), param_bytes=param_bytes,
            max_threads=max_threads, shared_bytes=max(0, shared_size - RESERVED_SHARED) if shared_size else 0,
            shared_section_bytes=shared_size, constant0_bytes=const0["sh_size"] if const0 is not None else 0,
            info_raw=bytes(raw),
        )  # fmt: skip
        for sec in secs:
            if isinstance(sec, RelocationSection) and sec.name in (
                f".rel.text.{kname}",
                f".rela.text.{kname}",
            ):
                text_relocs += sec.num_relocations()
    compat = by_name.get(".nv.compat")
    compat_raw = bytes(compat.data()) if compat is not None else b""
    arch_specific = any(a == COMPAT_ARCH_SPECIFIC and v[:1] == b"\x01" for _, a, v in attributes(compat_raw))
    return Cubin(
        name=name, e_machine=machine, e_flags=f["e_flags"], arch=_arch(data), arch_specific=arch_specific,
        kernels=kernels, text_sha256=texts, undefined_symbols=tuple(undefined), text_relocations=text_relocs,
        sections=tuple(s.name for s in secs), compat_raw=compat_raw,
    )  # fmt: skip


def launch_facts(cb: Cubin, symbol: str) -> dict[str, Any]:
    """What the driver launches the kernel with, canonical: its attribute records and resource sizes."""
    k = cb.kernels.get(symbol)
    if k is None:
        raise ValidationError(f"{cb.name}: no kernel {symbol}", "rebuild it with `netra build`")
    return {
        "e_machine": cb.e_machine,
        "e_flags": cb.e_flags,
        "compat": cb.compat_raw.hex(),
        "info": k.info_raw.hex(),
        "registers": k.registers,
        "frame_bytes": k.frame_bytes,
        "min_stack_bytes": k.min_stack_bytes,
        "max_stack_bytes": k.max_stack_bytes,
        "shared_section_bytes": k.shared_section_bytes,
        "constant0_bytes": k.constant0_bytes,
    }


def digest(cb: Cubin, symbol: str) -> str:
    """sha256 of launch_facts: locked next to .text, so altered kernel attributes are refused."""
    facts = launch_facts(cb, symbol)
    return hashlib.sha256(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def launch_digest(data: bytes, symbol: str, name: str) -> str:
    return digest(inspect(data, name), symbol)
