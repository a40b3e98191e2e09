"""What every loader needs to launch a kernel, computed without any GPU runtime: grid, block, shared
memory and the packed kernel-argument segment (the table's kernarg layout, byte-exact).

Both loaders (netra.loaders.hip, netra.loaders.cuda) pass the segment as one buffer through their launch call's
`extra` array, so the driver copies each argument from the offsets the static gate checked equal the
table's; nothing here differs between them except the array's marker values, which each loader owns.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from netra.errors import KernargError, RuntimeUnavailableError
from netra.runtime.kernarg import BY_VALUE_TYPES, KernargLayout

if TYPE_CHECKING:
    from netra.runtime.catalog import Kernel


@dataclass(frozen=True)
class LaunchArgs:
    """Everything a launch needs besides the function and stream."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    kernargs: bytes


def launch_args(kernel: Kernel, rows: int, args: Mapping[str, Any] | bytes) -> LaunchArgs:
    """Grid for `rows`, the table's block, dynamic shared memory, and the kernarg segment (packed here
    from a mapping of argument values, or given already packed as exactly kernarg.size bytes)."""
    if isinstance(args, (bytes, bytearray)):
        if len(args) != kernel.kernarg.size:
            raise KernargError(
                f"{kernel.artifact}: packed kernel arguments are {len(args)} bytes, "
                f"the layout has {kernel.kernarg.size}",
                "pack them with kernel.pack(**args)",
            )
        packed = bytes(args)
    else:
        packed = kernel.pack(**args)
    return LaunchArgs(kernel.grid(rows), kernel.block, kernel.dynamic_lds_bytes, packed)


class Extra:
    """An `extra` launch array and the memory it points to, kept alive together for one launch."""

    def __init__(self, kernargs: bytes, pointer_marker: int, size_marker: int, end_marker: int) -> None:
        self.buffer = (ctypes.c_char * max(1, len(kernargs))).from_buffer_copy(kernargs or b"\0")
        self.size = ctypes.c_size_t(len(kernargs))
        self.array = (ctypes.c_void_p * 5)(
            pointer_marker,
            ctypes.addressof(self.buffer),
            size_marker,
            ctypes.addressof(self.size),
            end_marker,
        )


def load_library(candidates: Sequence[str], what: str, hint: str) -> tuple[ctypes.CDLL, str]:
    """The first candidate the dynamic linker loads; otherwise one error naming `what` and every try."""
    tried: list[str] = []
    for c in candidates:
        try:
            return ctypes.CDLL(c), c
        except OSError as e:
            tried.append(f"{c}: {e}")
    raise RuntimeUnavailableError(f"{what} could not be loaded ({'; '.join(tried) or 'not found'})", hint)


def packer(layout: KernargLayout, names: Sequence[str]) -> struct.Struct | None:
    """One struct.Struct writing `names` (in that order) at the layout's offsets, zero padding between
    and after them; None when the layout does not list exactly these arguments in this order."""
    args = sorted(layout.args, key=lambda a: a.offset)
    if tuple(a.name for a in args) != tuple(names):
        return None
    fmt, pos = "<", 0
    for a in args:
        code = "Q" if a.kind == "global_buffer" else BY_VALUE_TYPES.get(a.type, ("", 0))[0]
        if not code or a.offset < pos or struct.calcsize("<" + code) != a.size:
            return None
        fmt += f"{a.offset - pos}x{code}" if a.offset > pos else code
        pos = a.offset + a.size
    if pos > layout.size:
        return None
    if layout.size > pos:
        fmt += f"{layout.size - pos}x"
    st = struct.Struct(fmt)
    return st if st.size == layout.size else None


def check_names(kernel: Any, names: Sequence[str]) -> None:
    """The table's kernel must take exactly the arguments its family's record names (netra/core/families/)."""
    have = kernel.kernarg.names
    if set(have) != set(names):
        raise KernargError(
            f"{kernel.artifact} ({kernel.contract}, {kernel.gpu_class}) takes the arguments {', '.join(have)}, "
            f"but its op family passes {', '.join(names)}",
            "the release's table disagrees with the family's record; reinstall netra-kernel or report the release",
        )
