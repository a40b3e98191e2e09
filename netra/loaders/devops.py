"""Device memory, streams, events and graphs over a GPU driver library: what `netra certify` and the
GPU tests need to run kernels without a framework.

The CUDA driver API and HIP expose these with the same shapes (pointer-sized handles, the same
argument order, the same flag values for a non-blocking stream and thread-local capture), so one
implementation serves both loaders; each loader names its symbols (`OPS`) and its error check.
"""

from __future__ import annotations

import ctypes
import itertools
from collections.abc import Callable
from typing import Any, ClassVar

_vp = ctypes.c_void_p
STREAM_NON_BLOCKING = 0x1  # cudaStreamNonBlocking / hipStreamNonBlocking
CAPTURE_THREAD_LOCAL = 1  # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL / hipStreamCaptureModeThreadLocal
# operation -> argument types (return type is always an int status)
SIGNATURES: dict[str, list[Any]] = {
    "alloc": [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t],
    "free": [ctypes.c_uint64],
    "upload": [ctypes.c_uint64, _vp, ctypes.c_size_t],
    "download": [_vp, ctypes.c_uint64, ctypes.c_size_t],
    "copy": [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t],
    "fill": [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t],
    "synchronize": [],
    "stream_create": [ctypes.POINTER(_vp), ctypes.c_uint],
    "stream_destroy": [_vp],
    "event_create": [ctypes.POINTER(_vp), ctypes.c_uint],
    "event_record": [_vp, _vp],
    "event_synchronize": [_vp],
    "event_elapsed": [ctypes.POINTER(ctypes.c_float), _vp, _vp],
    "event_destroy": [_vp],
    "capture_begin": [_vp, ctypes.c_int],
    "capture_end": [_vp, ctypes.POINTER(_vp)],
    "graph_instantiate": [ctypes.POINTER(_vp), _vp, ctypes.c_ulonglong],
    "graph_launch": [_vp, _vp],
    "graph_exec_destroy": [_vp],
    "graph_destroy": [_vp],
    "module_load": [ctypes.POINTER(_vp), _vp],
    "module_function": [ctypes.POINTER(_vp), _vp, ctypes.c_char_p],
}


class DeviceOps:
    """Mixin: needs `self.lib` (the loaded library), `OPS` (operation -> symbol), `check(rc, what)` and
    `context()` (makes a context current where the API has one)."""

    OPS: ClassVar[dict[str, str | tuple[str, ...]]]
    lib: Any

    def check(self, rc: int, what: str) -> None:  # pragma: no cover - provided by the loader
        raise NotImplementedError

    def context(self) -> int:  # pragma: no cover - provided by the loader
        raise NotImplementedError

    def _bind_ops(self, missing: Callable[[str], Exception]) -> None:
        self._ops: dict[str, Any] = {}
        for op, argtypes in SIGNATURES.items():
            names = self.OPS[op]
            names = (names,) if isinstance(names, str) else names
            fn = next((getattr(self.lib, n) for n in names if hasattr(self.lib, n)), None)
            if fn is None:
                raise missing(names[0])
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
            self._ops[op] = fn

    def _call(self, op: str, *args: Any) -> None:
        self.check(self._ops[op](*args), self._name(op))

    def _name(self, op: str) -> str:
        n = self.OPS[op]
        return n if isinstance(n, str) else n[0]

    def load_function(self, image: bytes, symbol: str, artifact: str) -> tuple[int, int]:
        """(module, function) handles for `symbol` in the code object `image` (the caller keeps `image`
        referenced for the module's lifetime)."""
        module, fn = _vp(), _vp()
        self._call_named("module_load", f"({artifact})", ctypes.byref(module), image)
        self._call_named("module_function", f"({symbol})", ctypes.byref(fn), module, symbol.encode())
        return module.value or 0, fn.value or 0

    def _call_named(self, op: str, suffix: str, *args: Any) -> None:
        self.check(self._ops[op](*args), self._name(op) + suffix)

    def alloc(self, nbytes: int) -> int:
        self.context()
        p = ctypes.c_uint64(0)
        self._call("alloc", ctypes.byref(p), max(1, nbytes))
        return p.value

    def free(self, ptr: int) -> None:
        self._call("free", ptr)

    def upload(self, ptr: int, data: bytes | memoryview) -> None:
        """data's bytes into device memory at ptr. A memoryview (certify's inputs: arrays mapped from their
        files) is read where it lies, not first copied into a bytes object of its size."""
        if isinstance(data, memoryview) and data.nbytes and data.c_contiguous:
            import numpy as np  # certify and the GPU tests upload; a serving runtime never does

            view = np.frombuffer(data, dtype=np.uint8)  # the same memory, kept alive through the call
            self._call("upload", ptr, view.ctypes.data, view.nbytes)
            return
        buf = bytes(data)
        self._call("upload", ptr, buf, len(buf))

    def download(self, ptr: int, nbytes: int) -> bytes:
        buf = ctypes.create_string_buffer(max(1, nbytes))
        self._call("download", buf, ptr, nbytes)
        return buf.raw[:nbytes]

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        self._call("copy", dst, src, nbytes)

    def fill(self, ptr: int, byte: int, nbytes: int) -> None:
        self._call("fill", ptr, byte, nbytes)

    def synchronize(self) -> None:
        self._call("synchronize")

    def stream(self) -> int:
        self.context()
        s = _vp()
        self._call("stream_create", ctypes.byref(s), STREAM_NON_BLOCKING)
        return s.value or 0

    def destroy_stream(self, stream: int) -> None:
        self._call("stream_destroy", _vp(stream))

    def graph(self, stream: int, body: Callable[[], None]) -> int:
        """Capture `body`'s launches on `stream` into an instantiated graph (a graph exec handle)."""
        s = _vp(stream)
        self._call("capture_begin", s, CAPTURE_THREAD_LOCAL)
        g = _vp()
        try:
            body()
        finally:
            self._call("capture_end", s, ctypes.byref(g))
        exe = _vp()
        try:
            self._call("graph_instantiate", ctypes.byref(exe), g, 0)
        finally:
            self._ops["graph_destroy"](g)
        return exe.value or 0

    def replay_ms(self, graph_exec: int, stream: int, times: int) -> list[float]:
        """Milliseconds of each of `times` replays of a graph, from events around each replay."""
        s = _vp(stream)
        events = []
        try:
            for _ in range(times + 1):
                e = _vp()
                self._call("event_create", ctypes.byref(e), 0)
                events.append(e)
            self._call("event_record", events[0], s)
            for i in range(times):
                self._call("graph_launch", _vp(graph_exec), s)
                self._call("event_record", events[i + 1], s)
            self._call("event_synchronize", events[-1])
            out = []
            for a, b in itertools.pairwise(events):
                ms = ctypes.c_float(0.0)
                self._call("event_elapsed", ctypes.byref(ms), a, b)
                out.append(ms.value)
            return out
        finally:
            for e in events:
                self._ops["event_destroy"](e)

    def destroy_graph(self, graph_exec: int) -> None:
        self._call("graph_exec_destroy", _vp(graph_exec))
