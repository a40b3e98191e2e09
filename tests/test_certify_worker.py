"""The memory checkers' worker keeps each input file uploaded once (netra.certify.worker.Kept) and gives every
launch its own exact-size copy; the loaders upload a mapped array without copying it on the host first.

On the H200 (2026-12-07) memcheck, synccheck and initcheck each took 200 to 220 s over Qwen3-30B-A3B's 65
MoE candidates, about 0.3 s a launch, although they instrument differently: the worker uploaded the
contract's 400 MB of weights again for every launch. The device is a stand-in here (host memory behind the
loader's own operations); tests/test_gpu_sanitizer.py runs the worker under the real checkers on a GPU.
"""

from __future__ import annotations

import ctypes
import itertools
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from netra.certify import measure
from netra.certify.worker import Kept
from netra.loaders.devops import DeviceOps


class HostDevice(DeviceOps):
    """DeviceOps over host memory: what the operations were asked to do, with the bytes they moved."""

    OPS: ClassVar[dict[str, str | tuple[str, ...]]] = {"alloc": "a", "free": "f", "upload": "u", "copy": "c"}

    def __init__(self) -> None:
        self.mem: dict[int, bytearray] = {}
        self.uploads: list[int] = []  # bytes per upload
        self.sources: list[int] = []  # the host address each upload read
        self.copies = 0
        self._addresses = itertools.count(4096, 4096)  # never reused: a freed buffer read again is seen
        self._ops = {"alloc": self._alloc, "free": self._free, "upload": self._upload, "copy": self._copy}

    def check(self, rc: int, what: str) -> None:
        assert rc == 0, what

    def context(self) -> int:
        return 1

    def _alloc(self, out: Any, n: int) -> int:
        p = next(self._addresses)
        self.mem[p] = bytearray(n)
        out._obj.value = p
        return 0

    def _free(self, p: int) -> int:
        del self.mem[p]
        return 0

    def _upload(self, p: int, src: Any, n: int) -> int:
        addr = src if isinstance(src, int) else ctypes.cast(src, ctypes.c_void_p).value
        self.mem[p][:n] = ctypes.string_at(addr, n)
        self.uploads.append(n)
        self.sources.append(addr or 0)
        return 0

    def _copy(self, dst: int, src: int, n: int) -> int:
        self.mem[dst][:n] = self.mem[src][:n]
        self.copies += 1
        return 0


def _file(tmp: Path, name: str, n: int, seed: int) -> str:
    path = tmp / f"{name}.npy"
    np.save(path, np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8))
    return str(path)


def test_an_upload_of_a_mapped_array_carries_its_bytes_without_a_host_copy(tmp_path: Path) -> None:
    dev = HostDevice()
    f = _file(tmp_path, "w", 1 << 20, 1)
    data = measure.raw_bytes(np.load(f, mmap_mode="r"))
    p = dev.alloc(data.nbytes)
    dev.upload(p, data)
    assert bytes(dev.mem[p]) == np.load(f).tobytes()
    assert dev.sources == [np.frombuffer(data, dtype=np.uint8).ctypes.data]  # read in place: the mapping
    q = dev.alloc(3)
    dev.upload(q, b"abc")  # bytes still go as they are
    assert bytes(dev.mem[q]) == b"abc"


def test_each_file_is_uploaded_once_and_each_launch_gets_an_exact_copy_of_its_own(tmp_path: Path) -> None:
    dev = HostDevice()
    w, x = _file(tmp_path, "w", 5000, 1), _file(tmp_path, "x", 300, 2)
    kept = Kept(dev)
    seen = []
    for _ in range(3):  # three launches, as a candidate's cases share the contract's weights
        buf = measure.Buffers(dev)
        kept.fill(buf, "w", w)
        kept.fill(buf, "x", x)
        for name, f in (("w", w), ("x", x)):
            p = buf.args[name]
            assert bytes(dev.mem[p]) == np.load(f).tobytes() and len(dev.mem[p]) == np.load(f).nbytes
            seen.append(p)
        buf.free()
    assert dev.uploads == [5000, 300] and dev.copies == 6
    assert all(p not in kept.files.values() for p in seen)
    kept.free()
    assert dev.mem == {}


def test_past_its_budget_the_least_recently_used_file_goes_and_a_file_too_big_is_not_kept(
    tmp_path: Path,
) -> None:
    dev = HostDevice()
    a, b, c = (_file(tmp_path, n, 400, i) for i, n in enumerate("abc"))
    big = _file(tmp_path, "big", 2000, 9)
    kept = Kept(dev, limit=1000)
    for f in (a, b, a, c):  # c needs room: b (used before a) goes
        buf = measure.Buffers(dev)
        kept.fill(buf, "v", f)
        buf.free()
    assert list(kept.files) == [a, c] and kept.used == 800
    for _ in range(2):
        buf = measure.Buffers(dev)
        kept.fill(buf, "v", big)
        assert bytes(dev.mem[buf.args["v"]]) == np.load(big).tobytes()
        buf.free()
    assert dev.uploads == [400, 400, 400, 2000, 2000]  # a, b, c once each; big every time
    assert list(kept.files) == [a, c]
    kept.free()
    assert dev.mem == {}


def test_with_no_budget_every_launch_uploads_its_inputs_as_before(tmp_path: Path) -> None:
    """NETRA_CERTIFY_KEEP_INPUTS=0 gives the worker a Kept of limit 0: each launch uploads each input again,
    nothing stays on the device (the path the H200's run of 2026-12-07 took)."""
    dev = HostDevice()
    w = _file(tmp_path, "w", 500, 1)
    kept = Kept(dev, limit=0)
    for _ in range(3):
        buf = measure.Buffers(dev)
        kept.fill(buf, "w", w)
        assert bytes(dev.mem[buf.args["w"]]) == np.load(w).tobytes()
        buf.free()
    assert dev.uploads == [500, 500, 500] and dev.copies == 0 and not kept.files and dev.mem == {}
