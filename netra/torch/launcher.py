"""A certified kernel made ready to launch many times: what netra.loaders.cuda.Cuda.launch does per call,
done once.

Cuda.launch (netra/loaders/cuda.py) packs a mapping of arguments, computes the grid, builds an `extra` array
and looks the stream and the function up on every call. Here all of that is done when the kernel is
first served for a contract: the CUfunction is loaded (Cuda.function, in the device's context), one
netra.loaders.cuda.Extra array is built over a kernarg buffer of the table's size, and the table's kernarg
layout is compiled to one struct.Struct. A call then packs its values into that buffer in place
(one pack_into), computes grid.x = ceil(rows / rows_per_block) and calls cuLaunchKernel on torch's
current stream, checking the result with Cuda.check. The driver copies the kernarg buffer when the
launch is enqueued (or captured into a CUDA graph), so the buffer is free again when the call returns;
a lock keeps two threads from packing into it at once.

The packed bytes equal Kernel.pack's for the same values (tests/test_torch_ops.py checks it for every
candidate of the sm_90 table); a layout whose arguments are not in the order netra.torch passes them
falls back to Kernel.pack per call, and out-of-range values are reported by Kernel.pack's KernargError.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

from netra.errors import KernargError
from netra.runtime.kernarg import BY_VALUE_TYPES, KernargLayout

CUDA_ERROR_INVALID_CONTEXT = 201  # a thread on which no CUDA context was ever made current


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
    """The table's kernel must take exactly the arguments docs/ops names for its family."""
    have = kernel.kernarg.names
    if set(have) != set(names):
        raise KernargError(
            f"{kernel.artifact} ({kernel.contract}, {kernel.gpu_class}) takes the arguments {', '.join(have)}, "
            f"but its op family passes {', '.join(names)}",
            "the release's table disagrees with docs/ops; reinstall netra-kernel or report the release",
        )


def launcher(
    cu: Any,
    kernel: Any,
    names: Sequence[str],
    stream: Callable[[], int],
    rebind: Callable[[], None],
) -> Callable[..., None]:
    """launch(rows, *values): enqueue `kernel` for rows >= 1 on stream(), values in `names` order.

    Must be called with the kernel's device current (its module is loaded into that context).
    `rebind` makes the device's context current on a thread that has none (then the launch is retried
    once)."""
    from netra.loaders.cuda import Extra  # {BUFFER_POINTER, buf, BUFFER_SIZE, &size, END}

    check_names(kernel, names)
    fn = cu.function(kernel)
    size = kernel.kernarg.size
    extra = Extra(bytes(size))
    buf, arr = extra.buffer, extra.array
    st = packer(kernel.kernarg, names)
    axes = kernel.candidate.launch.grid_axes
    rpb, gy, gz = axes[0][1], axes[1], axes[2]
    bx, by, bz = kernel.block
    shared = kernel.dynamic_lds_bytes
    call = cu.lib.cuLaunchKernel
    check = cu.check
    lock = threading.Lock()
    names = tuple(names)

    def _pack_slow(vals: tuple[Any, ...]) -> None:
        data = kernel.pack(**dict(zip(names, vals, strict=True)))  # KernargError names a bad value
        ctypes.memmove(buf, data, size)

    if st is not None:
        pack_into = st.pack_into

        def pack(vals: tuple[Any, ...]) -> None:
            try:
                pack_into(buf, 0, *vals)
            except struct.error:
                _pack_slow(vals)  # raises KernargError for the value struct refused
                raise
    else:
        pack = _pack_slow

    def launch(rows: int, *vals: Any) -> None:
        s = stream()
        with lock:
            pack(vals)
            rc = call(fn, -(-rows // rpb), gy, gz, bx, by, bz, shared, s, None, arr)
        if rc:
            if rc == CUDA_ERROR_INVALID_CONTEXT:
                rebind()
                with lock:
                    pack(vals)
                    rc = call(fn, -(-rows // rpb), gy, gz, bx, by, bz, shared, s, None, arr)
            if rc:
                check(rc, f"cuLaunchKernel({kernel.symbol}, rows {rows}, block {kernel.block})")

    launch.kernel = kernel  # type: ignore[attr-defined]  # what it launches, for netra.torch.kernel_for
    launch.extra = extra  # type: ignore[attr-defined]  # keeps the buffer the array points to alive
    return launch
