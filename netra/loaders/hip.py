"""Loading and launching gfx950 code objects through the HIP module API (ctypes on libamdhip64.so).

    from netra.loaders.hip import Hip
    hip = Hip()                                   # RuntimeUnavailableError without a HIP runtime
    hip.launch(kernel, rows, stream, {"y": ptr, "rows": n})  # kernel: Catalog.select; stream: hipStream_t

hipModuleLoadData and hipModuleGetFunction run once per (device, code object) and the handles are
cached; each launch packs the arguments from the table's kernarg layout into one buffer and passes it
through `extra` (HIP_LAUNCH_PARAM_BUFFER_POINTER, buffer, HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
HIP_LAUNCH_PARAM_END), which HIP's clr reads at each argument's metadata offset and size. The stream
belongs to the caller (a framework's current stream); nothing here synchronizes.

NOT RUN ON HARDWARE: no AMD GPU and no ROCm runtime were available where this was written. The calls
follow ROCm's documented API and clr's hip_module.cpp; what is tested is everything up to the library
(argument packing, the `extra` array, grid computation, the missing-library error). See docs/runtime.md.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from netra.core import text
from netra.errors import HipError, RuntimeUnavailableError
from netra.loaders.devops import DeviceOps
from netra.loaders.launch import Extra as _Extra
from netra.loaders.launch import LaunchArgs, launch_args, load_library
from netra.targets.amd import AMD

if TYPE_CHECKING:
    from netra.runtime import Kernel

__all__ = ["Extra", "Hip", "LaunchArgs", "launch_args"]

# hip_runtime_api.h (ROCm 5.x-7.x, unchanged): values of the `extra` array markers. Note they differ from
# CUDA's CU_LAUNCH_PARAM_* (END is 0x00 there), so an array built for one runtime is wrong for the other.
HIP_LAUNCH_PARAM_BUFFER_POINTER = 0x01
HIP_LAUNCH_PARAM_BUFFER_SIZE = 0x02
HIP_LAUNCH_PARAM_END = 0x03
HIP_SUCCESS = 0
HIP_INSTALL_HINT = AMD.install_hint


class Extra(_Extra):
    """HIP's `extra` array: {BUFFER_POINTER, buffer, BUFFER_SIZE, &size, END} with HIP's marker values."""

    def __init__(self, kernargs: bytes) -> None:
        super().__init__(
            kernargs, HIP_LAUNCH_PARAM_BUFFER_POINTER, HIP_LAUNCH_PARAM_BUFFER_SIZE, HIP_LAUNCH_PARAM_END
        )


def _load(candidates: Sequence[str]) -> tuple[ctypes.CDLL, str]:
    return load_library(candidates, f"HIP runtime library {AMD.libraries[0]}", HIP_INSTALL_HINT)


class Hip(DeviceOps):
    """One process's HIP module loader: handles cached per (device, artifact), launches on caller streams."""

    OPS: ClassVar[dict[str, str | tuple[str, ...]]] = {
        "alloc": "hipMalloc", "free": "hipFree", "upload": "hipMemcpyHtoD", "download": "hipMemcpyDtoH",
        "copy": "hipMemcpyDtoD", "fill": "hipMemsetD8", "synchronize": "hipDeviceSynchronize",
        "stream_create": "hipStreamCreateWithFlags", "stream_destroy": "hipStreamDestroy",
        "event_create": "hipEventCreateWithFlags", "event_record": "hipEventRecord",
        "event_synchronize": "hipEventSynchronize", "event_elapsed": "hipEventElapsedTime",
        "event_destroy": "hipEventDestroy", "capture_begin": "hipStreamBeginCapture",
        "capture_end": "hipStreamEndCapture", "graph_instantiate": "hipGraphInstantiateWithFlags",
        "graph_launch": "hipGraphLaunch", "graph_exec_destroy": "hipGraphExecDestroy", "graph_destroy": "hipGraphDestroy",
        "module_load": "hipModuleLoadData", "module_function": "hipModuleGetFunction",
    }  # fmt: skip

    def __init__(self, library: str | Path | None = None) -> None:
        if library is not None:
            candidates = [str(library)]
        else:
            found = AMD.find_library()
            candidates = [str(found)] if found else list(AMD.libraries)  # let the dynamic linker try too
        self.lib, self.library = _load(candidates)
        L = self.lib
        vp, u32 = ctypes.c_void_p, ctypes.c_uint
        L.hipModuleLaunchKernel.argtypes = [
            vp,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            u32,
            vp,
            ctypes.POINTER(vp),
            ctypes.POINTER(vp),
        ]
        L.hipGetDevice.argtypes = [ctypes.POINTER(ctypes.c_int)]
        L.hipGetErrorString.argtypes = [ctypes.c_int]
        L.hipGetErrorString.restype = ctypes.c_char_p
        L.hipGetErrorName.argtypes = [ctypes.c_int]
        L.hipGetErrorName.restype = ctypes.c_char_p
        L.hipDeviceGetName.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        L.hipDriverGetVersion.argtypes = [ctypes.POINTER(ctypes.c_int)]
        for f in (L.hipModuleLaunchKernel, L.hipGetDevice, L.hipDeviceGetName, L.hipDriverGetVersion):
            f.restype = ctypes.c_int
        self._bind_ops(
            lambda n: RuntimeUnavailableError(
                f"{self.library} has no {n}: the HIP runtime is too old", HIP_INSTALL_HINT
            )
        )
        self._functions: dict[tuple[int, str], tuple[int, int, bytes]] = {}
        self._mutex = threading.Lock()

    def check(self, rc: int, what: str) -> None:
        self._check(rc, what)

    def context(self) -> int:
        return 0  # HIP has no context to make current: the current device is used

    def device_name(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self._check(self.lib.hipDeviceGetName(buf, 256, self.device()), "hipDeviceGetName")
        return text.decode(buf.value)

    def driver_version(self) -> str:
        v = ctypes.c_int(0)
        self._check(self.lib.hipDriverGetVersion(ctypes.byref(v)), "hipDriverGetVersion")
        return f"{v.value // 10_000_000}.{v.value // 100_000 % 100}"

    def gpu_class(self) -> str:
        """The current device's gfx target, from the KFD topology (HIP's device properties struct changes
        layout between ROCm releases; sysfs does not)."""
        found, _ = AMD.sysfs()
        index = self.device()
        return found[index].gpu_class if index < len(found) else "unknown"

    def _check(self, rc: int, what: str) -> None:
        if rc != HIP_SUCCESS:
            name = text.decode(self.lib.hipGetErrorName(rc) or b"?")
            words = text.decode(self.lib.hipGetErrorString(rc) or b"?")
            raise HipError(f"{what}: {name} ({rc}): {words}", _hint(rc))

    def device(self) -> int:
        dev = ctypes.c_int(0)
        self._check(self.lib.hipGetDevice(ctypes.byref(dev)), "hipGetDevice")
        return dev.value

    def function(self, kernel: Kernel) -> int:
        """The kernel's hipFunction_t on the current device, loading its module the first time."""
        if kernel.loader != AMD.loader:
            raise HipError(
                f"{kernel.artifact} is a {kernel.gpu_class} kernel for the {kernel.loader} loader, not HIP",
                "open the catalog of the GPU class this process runs on",
            )
        key = (self.device(), kernel.artifact)
        hit = self._functions.get(key)
        if hit is not None:
            return hit[1]
        with self._mutex:
            hit = self._functions.get(key)
            if hit is None:
                image = kernel.code_object  # kept referenced for the module's lifetime
                module, fn = self.load_function(image, kernel.symbol, kernel.artifact)
                hit = self._functions[key] = (module, fn, image)
            return hit[1]

    def launch(self, kernel: Kernel, rows: int, stream: int, args: Mapping[str, Any] | bytes) -> None:
        """Enqueue the kernel for `rows` rows on `stream` (hipStream_t as int; 0 is the null stream).

        `args` maps each kernel argument name to its value (device pointers as ints or objects with
        .data_ptr()), or is the segment already packed by kernel.pack. A dict, not keywords: kernels
        commonly take an argument named `rows` themselves."""
        la = launch_args(kernel, rows, args)
        if 0 in la.grid:
            return  # nothing to do for zero rows; HIP would reject a zero-size grid
        fn = self.function(kernel)
        extra = Extra(la.kernargs)
        rc = self.lib.hipModuleLaunchKernel(
            fn, *la.grid, *la.block, la.shared_bytes, ctypes.c_void_p(stream or None), None, extra.array
        )
        self._check(rc, f"hipModuleLaunchKernel({kernel.symbol}, grid {la.grid}, block {la.block})")


def _hint(rc: int) -> str:
    return {
        200: "the code object is not a valid image; verify the install with `netra doctor`",
        209: "this code object is for another GPU target than the current device; open that device's class",
        500: "the kernel symbol is not in the code object; verify the install with `netra doctor`",
    }.get(rc, "see the HIP error above; `netra doctor` checks the install and the host")
