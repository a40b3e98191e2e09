"""Loading and launching cubins (every NVIDIA GPU class) through the CUDA driver API (ctypes on libcuda.so.1).

    from netra.loaders.cuda import Cuda
    cu = Cuda()                                    # RuntimeUnavailableError without a CUDA driver
    cu.launch(kernel, rows, stream, {"y": ptr, "rows": n, ...})   # kernel: Catalog.select(...)

cuModuleLoadData and cuModuleGetFunction run once per (context, code object) on the verified bytes the
runtime hands over, and the handles are cached; each launch packs the arguments from the table's
kernarg layout into one buffer passed through `extra` ({CU_LAUNCH_PARAM_BUFFER_POINTER, buffer,
CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END} = 0x01, 0x02, 0x00 in cuda.h), so the driver
copies each argument from the offsets the static gate checked equal the cubin's. The stream belongs to
the caller: a raw CUstream (int), an object with `.cuda_stream` (torch.cuda.Stream), or None for
torch's current stream when torch is imported (else the legacy default stream). Nothing here
synchronizes, so launches can be captured in a CUDA graph.

ctypes on libcuda.so.1 rather than cuda-bindings (docs/runtime.md): the driver library is on every host
that can run these kernels, and cuda-bindings would add a dependency tied to a CUDA major version for
the twenty functions used here. Every call's CUresult is checked and decoded with cuGetErrorName /
cuGetErrorString.

A kernel served many times (netra.torch) is prepared once (Cuda.prepare): the function loaded, the
`extra` array built over a kernarg buffer, the layout compiled to one struct; each call then packs in
place and enqueues.

Memory, copies, events and graphs (netra.loaders.devops) serve `netra certify` and the GPU tests without a
framework.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from netra.core import text
from netra.errors import CudaError, RuntimeUnavailableError
from netra.loaders.devops import DeviceOps
from netra.loaders.launch import Extra as _Extra
from netra.loaders.launch import check_names, launch_args, load_library, packer
from netra.targets.nvidia import NVIDIA

CU_LAUNCH_PARAM_BUFFER_POINTER = 0x01
CU_LAUNCH_PARAM_BUFFER_SIZE = 0x02
CU_LAUNCH_PARAM_END = 0x00
CUDA_SUCCESS = 0
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # cuda.h CUfunction_attribute
CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9  # cuda.h CUfunction_attribute
CUDA_INSTALL_HINT = NVIDIA.install_hint
_HINTS = {
    2: "the device is out of memory",
    100: "no CUDA device is visible (CUDA_VISIBLE_DEVICES, driver); `netra doctor` shows the host",
    200: "the code object is not a valid cubin; verify the install with `netra doctor`",
    209: "this cubin is for another GPU class than the current device; open that device's class",
    500: "the kernel symbol is not in the code object; verify the install with `netra doctor`",
    701: "the launch asks for more resources than the device has (block, shared memory, registers)",
}
_vp = ctypes.c_void_p
_SIGNATURES: dict[str, list[Any]] = {
    "cuInit": [ctypes.c_uint],
    "cuDriverGetVersion": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDeviceGetCount": [ctypes.POINTER(ctypes.c_int)],
    "cuDeviceGetName": [ctypes.c_char_p, ctypes.c_int, ctypes.c_int],
    "cuDeviceGetAttribute": [ctypes.POINTER(ctypes.c_int), ctypes.c_int, ctypes.c_int],
    "cuDevicePrimaryCtxRetain": [ctypes.POINTER(_vp), ctypes.c_int],
    "cuCtxGetCurrent": [ctypes.POINTER(_vp)],
    "cuCtxSetCurrent": [_vp],
    "cuCtxGetDevice": [ctypes.POINTER(ctypes.c_int)],
    "cuLaunchKernel": [_vp, *[ctypes.c_uint] * 7, _vp, ctypes.POINTER(_vp), ctypes.POINTER(_vp)],
    "cuLaunchKernelEx": [_vp, _vp, ctypes.POINTER(_vp), ctypes.POINTER(_vp)],
    "cuFuncSetAttribute": [_vp, ctypes.c_int, ctypes.c_int],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
    "cuGetErrorString": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


class Extra(_Extra):
    """CUDA's `extra` array: {BUFFER_POINTER, buffer, BUFFER_SIZE, &size, END} with cuda.h's values."""

    def __init__(self, kernargs: bytes) -> None:
        super().__init__(
            kernargs, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE, CU_LAUNCH_PARAM_END
        )


def gpu_class_of(capability: tuple[int, int]) -> str:
    """The class of a device with this compute capability (major, minor), named by the registry."""
    return NVIDIA.gpu_class(tuple(capability)) or f"compute capability {capability[0]}.{capability[1]}"


def _load(candidates: Sequence[str]) -> tuple[ctypes.CDLL, str]:
    return load_library(candidates, f"CUDA driver library {NVIDIA.libraries[0]}", CUDA_INSTALL_HINT)


def stream_handle(stream: Any) -> int:
    """A CUstream as an int from what a caller holds: an int, a torch stream, or None (torch's current)."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            try:  # what torch's own compiled code calls: no Stream object per launch
                return int(torch._C._cuda_getCurrentRawStream(torch._C._cuda_getDevice()))
            except AttributeError:  # a torch without these internals
                return int(torch.cuda.current_stream().cuda_stream)
        return 0
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    if isinstance(stream, bool) or not isinstance(stream, int):
        raise CudaError(
            f"stream {stream!r} is not a CUstream", "pass an int handle, a torch.cuda.Stream or None"
        )
    return stream


CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # cuda.h


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value union."""

    _fields_ = (("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64))


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuLaunchKernelEx): grid, block, dynamic shared memory, stream, attributes."""

    _fields_ = (
        ("gx", ctypes.c_uint),
        ("gy", ctypes.c_uint),
        ("gz", ctypes.c_uint),
        ("bx", ctypes.c_uint),
        ("by", ctypes.c_uint),
        ("bz", ctypes.c_uint),
        ("shared", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_LaunchAttribute)),
        ("nattrs", ctypes.c_uint),
    )


def overlapping(cu: Any, block: tuple[int, int, int], shared: int) -> Callable[..., int]:
    """A launcher with the cuLaunchKernel signature that launches through cuLaunchKernelEx with
    programmatic stream serialization: the kernel may start before the previous one on its stream
    ends, and waits for that one's writes where it executes griddepcontrol.wait (a chain's second step,
    netra.core.family.Chain.overlaps_previous). The attribute and the config are made once; each call
    sets the grid and the stream."""
    attr = (_LaunchAttribute * 1)()
    attr[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr[0].value = (1).to_bytes(4, "little") + bytes(60)
    cfg = _LaunchConfig(0, 0, 0, block[0], block[1], block[2], shared, None, attr, 1)
    ex = cu.lib.cuLaunchKernelEx
    ref = ctypes.byref(cfg)

    def call(
        fn: Any,
        gx: int,
        gy: int,
        gz: int,
        bx: int,
        by: int,
        bz: int,
        sh: int,
        s: Any,
        params: Any,
        extra: Any,
    ) -> int:
        cfg.gx, cfg.gy, cfg.gz, cfg.stream = gx, gy, gz, s
        return int(ex(ref, fn, params, extra))

    call.keep = (attr, cfg)  # type: ignore[attr-defined]  # what the config points at stays alive
    return call


class _Prepared:
    """A kernel's function handle and `extra` array in one context, reused by every launch."""

    def __init__(self, function: int, kernel: Any) -> None:
        self.function = function
        self.extra = Extra(bytes(kernel.kernarg.size))
        self.lock = threading.Lock()


class Cuda(DeviceOps):
    """One process's CUDA module loader: handles cached per (context, artifact), launches on caller streams."""

    OPS: ClassVar[dict[str, str | tuple[str, ...]]] = {
        "alloc": "cuMemAlloc_v2", "free": "cuMemFree_v2", "upload": "cuMemcpyHtoD_v2",
        "download": "cuMemcpyDtoH_v2", "copy": "cuMemcpyDtoD_v2", "fill": "cuMemsetD8_v2",
        "synchronize": "cuCtxSynchronize", "stream_create": "cuStreamCreate", "stream_destroy": "cuStreamDestroy_v2",
        "event_create": "cuEventCreate", "event_record": "cuEventRecord", "event_synchronize": "cuEventSynchronize",
        # CUDA 12.8+ exports cuEventElapsedTime_v2 (same signature); older drivers only the first name.
        "event_elapsed": ("cuEventElapsedTime_v2", "cuEventElapsedTime"), "event_destroy": "cuEventDestroy_v2",
        "capture_begin": "cuStreamBeginCapture_v2", "capture_end": "cuStreamEndCapture",
        "graph_instantiate": "cuGraphInstantiateWithFlags", "graph_launch": "cuGraphLaunch",
        "graph_exec_destroy": "cuGraphExecDestroy", "graph_destroy": "cuGraphDestroy",
        "module_load": "cuModuleLoadData", "module_function": "cuModuleGetFunction",
    }  # fmt: skip

    def __init__(self, library: str | Path | None = None) -> None:
        if library is not None:
            candidates = [str(library)]
        else:
            found = NVIDIA.find_library()
            candidates = [str(found)] if found else list(NVIDIA.libraries)
        self.lib, self.library = _load(candidates)
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(self.lib, name, None)
            if fn is None:
                raise RuntimeUnavailableError(
                    f"{self.library} has no {name}: the driver is too old", CUDA_INSTALL_HINT
                )
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        self._bind_ops(
            lambda n: RuntimeUnavailableError(
                f"{self.library} has no {n}: the driver is too old", CUDA_INSTALL_HINT
            )
        )
        self._mutex = threading.Lock()
        self._functions: dict[tuple[int, str], tuple[int, int, bytes]] = {}
        self._prepared: dict[tuple[int, str], _Prepared] = {}
        self._checked: set[tuple[int, str]] = set()
        self.check(self.lib.cuInit(0), "cuInit")

    # -- errors ------------------------------------------------------------------------------------

    def check(self, rc: int, what: str) -> None:
        if rc != CUDA_SUCCESS:
            name, words = ctypes.c_char_p(), ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            self.lib.cuGetErrorString(rc, ctypes.byref(words))
            n = text.decode(name.value or b"CUDA_ERROR_UNKNOWN")
            t = text.decode(words.value or b"?")
            raise CudaError(
                f"{what}: {n} ({rc}): {t}",
                _HINTS.get(rc, "see the CUDA error above; `netra doctor` checks the install and the host"),
            )

    # -- devices and contexts ------------------------------------------------------------------------

    def device_count(self) -> int:
        n = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
        return n.value

    def context(self, device: int = 0) -> int:
        """The current context (a framework's, e.g. torch's), else device's primary context made current."""
        ctx = _vp()
        self.check(self.lib.cuCtxGetCurrent(ctypes.byref(ctx)), "cuCtxGetCurrent")
        if ctx.value:
            return ctx.value
        dev = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGet(ctypes.byref(dev), device), f"cuDeviceGet({device})")
        self.check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
        self.check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        return ctx.value or 0

    def current_device(self) -> int:
        self.context()
        dev = ctypes.c_int(0)
        self.check(self.lib.cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice")
        return dev.value

    def attribute(self, attribute: int, device: int | None = None) -> int:
        dev = self.current_device() if device is None else device
        v = ctypes.c_int(0)
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(v), attribute, dev), "cuDeviceGetAttribute")
        return v.value

    def gpu_class(self, device: int | None = None) -> str:
        """The current (or given) device's class, named by the registry from its compute capability."""
        major = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        minor = self.attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        return gpu_class_of((major, minor))

    def device_name(self, device: int | None = None) -> str:
        dev = self.current_device() if device is None else device
        buf = ctypes.create_string_buffer(256)
        self.check(self.lib.cuDeviceGetName(buf, 256, dev), "cuDeviceGetName")
        return text.decode(buf.value)

    def driver_version(self) -> str:
        """The CUDA version the driver supports, e.g. '13.0'."""
        v = ctypes.c_int(0)
        self.check(self.lib.cuDriverGetVersion(ctypes.byref(v)), "cuDriverGetVersion")
        return f"{v.value // 1000}.{v.value % 1000 // 10}"

    # -- kernels ------------------------------------------------------------------------------------

    def function(self, kernel: Any) -> int:
        """The kernel's CUfunction in the current context, loading its module the first time."""
        if kernel.loader != NVIDIA.loader:
            raise CudaError(
                f"{kernel.artifact} is a {kernel.gpu_class} kernel for the {kernel.loader} loader, not CUDA",
                "open the catalog of the GPU class this process runs on",
            )
        ctx = self.context()
        key = (ctx, kernel.artifact)
        hit = self._functions.get(key)
        if hit is not None:
            return hit[1]
        with self._mutex:
            hit = self._functions.get(key)
            if hit is None:
                have = self.gpu_class()
                if have != kernel.gpu_class:
                    raise CudaError(
                        f"{kernel.artifact} is an {kernel.gpu_class} kernel but the current device is {have}",
                        f"open the catalog of {have} (open_catalog() detects it), or run on an {kernel.gpu_class} GPU",
                    )
                image = kernel.code_object  # kept referenced for the module's lifetime
                module, fn = self.load_function(image, kernel.symbol, kernel.artifact)
                # static and dynamic shared memory above 48 KB need the function's limit raised: raise it
                # for every kernel that takes dynamic shared memory
                dynamic = kernel.dynamic_lds_bytes
                if dynamic:
                    attr = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
                    self.check(
                        self.lib.cuFuncSetAttribute(fn, attr, dynamic),
                        f"cuFuncSetAttribute({kernel.symbol}, max dynamic shared {dynamic})",
                    )
                hit = self._functions[key] = (module, fn, image)
            return hit[1]

    def launch(self, kernel: Any, rows: int, stream: Any, args: Mapping[str, Any] | bytes) -> None:
        """Enqueue the kernel for `rows` rows on `stream`. `args` maps each kernel argument name to its
        value (device pointers as ints or objects with .data_ptr()), or is kernel.pack's segment.

        Per (context, kernel) the function handle and one `extra` array over a kernarg buffer are made
        once; a launch copies its segment into that buffer and enqueues under the kernel's lock (the
        driver copies the parameters when the launch is enqueued or captured, so the buffer is free
        again when cuLaunchKernel returns)."""
        la = launch_args(kernel, rows, args)
        if 0 in la.grid:
            return  # nothing to do for zero rows; CUDA would reject a zero-size grid
        handle = stream_handle(stream)
        ctx = self.context()
        prep = self._prepared.get((ctx, kernel.artifact))
        if prep is None:
            prep = self._prepared.setdefault((ctx, kernel.artifact), _Prepared(self.function(kernel), kernel))
        with prep.lock:
            ctypes.memmove(prep.extra.buffer, la.kernargs, len(la.kernargs))
            rc = self.lib.cuLaunchKernel(
                prep.function, *la.grid, *la.block, la.shared_bytes, handle or None, None, prep.extra.array
            )
        if rc:
            self.check(rc, f"cuLaunchKernel({kernel.symbol}, grid {la.grid}, block {la.block})")

    def prepare(
        self,
        kernel: Any,
        names: Sequence[str],
        stream: Callable[[], int],
        rebind: Callable[[], None],
        overlap: bool = False,
    ) -> Callable[..., None]:
        """The kernel ready to launch many times (module-level `prepare`, on this loader); `overlap`:
        with programmatic stream serialization (a chain's step that waits for its producer in-kernel)."""
        return prepare(self, kernel, names, stream, rebind, overlap)


CUDA_ERROR_INVALID_CONTEXT = 201  # a thread on which no CUDA context was ever made current


def prepare(
    cu: Any,
    kernel: Any,
    names: Sequence[str],
    stream: Callable[[], int],
    rebind: Callable[[], None],
    overlap: bool = False,
) -> Callable[..., None]:
    """A certified kernel made ready to launch many times: launch(rows, *values) enqueues `kernel` for
    rows >= 1 on stream(), values in `names` order (what Cuda.launch does per call, done once).

    Here all of Cuda.launch's per-call work is done when the kernel is first served: the CUfunction
    is loaded (cu.function, in the device's context), one Extra array is built over a kernarg buffer of
    the table's size, and the table's kernarg layout is compiled to one struct.Struct (launch.packer).
    A call packs its values into that buffer in place (one pack_into), computes the grid from the
    table's launch geometry and calls cuLaunchKernel. The driver copies the kernarg buffer when the
    launch is enqueued (or captured into a CUDA graph), so the buffer is free again when the call
    returns; a lock keeps two threads from packing into it at once. A layout whose arguments are not in
    `names` order is packed by Kernel.pack per call, and out-of-range values are reported by its
    KernargError.

    Must be called with the kernel's device current (its module is loaded into that context).
    `rebind` makes the device's context current on a thread that has none (then the launch is retried
    once)."""
    check_names(kernel, names)
    fn = cu.function(kernel)
    size = kernel.kernarg.size
    extra = Extra(bytes(size))
    buf, arr = extra.buffer, extra.array
    st = packer(kernel.kernarg, names)
    geometry = kernel.candidate.launch
    if geometry.per_block:  # (cdiv(rows, rows_per_block), grid_y, 1): computed inline per call
        axes = geometry.grid_axes
        rpb, gy, gz = axes[0][1], axes[1], axes[2]
    else:  # an expression of rows on some axis (a routed MoE's hit experts): the table's reading
        rpb, gy, gz = 0, 0, 0
        grid_of = geometry.grid
    bx, by, bz = kernel.block
    shared = kernel.dynamic_lds_bytes
    call = overlapping(cu, kernel.block, shared) if overlap else cu.lib.cuLaunchKernel
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
            if rpb:
                rc = call(fn, -(-rows // rpb), gy, gz, bx, by, bz, shared, s, None, arr)
            else:
                gx_, gy_, gz_ = grid_of(rows)
                rc = call(fn, gx_, gy_, gz_, bx, by, bz, shared, s, None, arr)
        if rc:
            if rc == CUDA_ERROR_INVALID_CONTEXT:
                rebind()
                with lock:
                    pack(vals)
                    gx_, gy_, gz_ = (-(-rows // rpb), gy, gz) if rpb else grid_of(rows)
                    rc = call(fn, gx_, gy_, gz_, bx, by, bz, shared, s, None, arr)
            if rc:
                check(rc, f"cuLaunchKernel({kernel.symbol}, rows {rows}, block {kernel.block})")

    launch.kernel = kernel  # type: ignore[attr-defined]  # what it launches, for netra.torch.kernel_for
    launch.extra = extra  # type: ignore[attr-defined]  # keeps the buffer the array points to alive
    return launch


_shared: list[Cuda] = []
_shared_mutex = threading.Lock()


def shared() -> Cuda:
    """The process's loader: modules are loaded once per process, whoever launches (netra.torch,
    certify, a serving engine calling the runtime directly)."""
    if not _shared:
        with _shared_mutex:
            if not _shared:
                _shared.append(Cuda())
    return _shared[0]
