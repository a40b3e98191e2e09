"""Kernel arguments: the table's kernarg layout, and packing values into the exact bytes the kernel reads.

The layout comes from the certified table (which the static gate checked against the code object's
descriptor and metadata), so a launch never guesses offsets. Packing is strict: every argument by
name, nothing extra, every value in range for its type; padding bytes are zero.
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass, field
from typing import Any

from netra.errors import KernargError

# by_value type -> (struct code, size in bytes). Little-endian, as every supported GPU's kernarg segment.
BY_VALUE_TYPES: dict[str, tuple[str, int]] = {
    "u8": ("B", 1),
    "u16": ("H", 2),
    "u32": ("I", 4),
    "u64": ("Q", 8),
    "i8": ("b", 1),
    "i16": ("h", 2),
    "i32": ("i", 4),
    "i64": ("q", 8),
    "f16": ("e", 2),
    "f32": ("f", 4),
    "f64": ("d", 8),
}
_INT_RANGE = {
    "B": (0, 2**8 - 1),
    "H": (0, 2**16 - 1),
    "I": (0, 2**32 - 1),
    "Q": (0, 2**64 - 1),
    "b": (-(2**7), 2**7 - 1),
    "h": (-(2**15), 2**15 - 1),
    "i": (-(2**31), 2**31 - 1),
    "q": (-(2**63), 2**63 - 1),
}


def _integer(value: Any, what: str) -> int:
    """Python and numpy integers; never bool or float, which would hide a wrong argument."""
    if isinstance(value, bool):
        raise TypeError(f"expected {what}, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"expected {what}, got {type(value).__name__}") from None


def _pointer(value: Any) -> int:
    """A device address: an integer, a ctypes c_void_p, or an object with .data_ptr() (a torch tensor)."""
    if hasattr(value, "data_ptr"):
        value = value.data_ptr()
    elif type(value).__name__ == "c_void_p" and type(value).__module__ == "ctypes":
        value = value.value or 0  # ctypes itself is not imported: the runtime does not need it
    return _integer(value, "a device address (int)")


@dataclass(frozen=True)
class KernargArg:
    name: str
    offset: int
    size: int
    kind: str  # "global_buffer" (a device pointer) or "by_value"
    type: str  # "bf16*", "u32", "f32", ...
    _code: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        code = "Q" if self.kind == "global_buffer" else BY_VALUE_TYPES[self.type][0]
        object.__setattr__(self, "_code", code)

    def encode(self, value: Any) -> bytes:
        code = self._code
        try:
            if self.kind == "global_buffer":
                value = _pointer(value)
            elif code in ("e", "f", "d"):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise TypeError(f"expected a number, got {type(value).__name__}")
                value = float(value)
            else:
                value = _integer(value, "an integer")
            if code in _INT_RANGE:
                lo, hi = _INT_RANGE[code]
                if not lo <= value <= hi:
                    raise OverflowError(f"{value} is outside [{lo}, {hi}]")
            return struct.pack("<" + code, value)
        except (TypeError, OverflowError, struct.error) as e:
            raise KernargError(
                f"kernel argument {self.name} ({self.type}, {self.size} bytes at offset {self.offset}): {e}",
                "pass a value of the argument's type (layout: the kernel's table entry, docs/tables.md)",
            ) from None


@dataclass(frozen=True)
class KernargLayout:
    """The kernarg segment: its size and each argument's offset, size, kind and type."""

    size: int
    args: tuple[KernargArg, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args)

    def pack(self, /, **values: Any) -> bytes:
        """The kernarg segment for these values: exactly `size` bytes, zero padding between arguments."""
        want = self.names
        if values.keys() != set(want):
            missing = [n for n in want if n not in values]
            extra = sorted(set(values) - set(want))
            raise KernargError(
                "kernel arguments do not match the kernel's layout"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(extra)}" if extra else ""),
                f"pass exactly: {', '.join(want)}",
            )
        buf = bytearray(self.size)
        for a in self.args:
            buf[a.offset : a.offset + a.size] = a.encode(values[a.name])
        return bytes(buf)
