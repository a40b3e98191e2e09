"""The CUDA loader up to the driver: what it passes to cuLaunchKernel, computed without a GPU; and the
one-line refusal where no driver is installed. Launching for real: tests/test_gpu_sm90.py (H200)."""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from netra.errors import CudaError, RuntimeUnavailableError
from netra.loaders import cuda
from netra.loaders.launch import launch_args
from netra.targets.nvidia import NVIDIA

REPO = Path(__file__).resolve().parents[1]


def _sm90_catalog() -> Any:
    """The source tree's sm_90 catalog, its code objects stood in for (they are not read here)."""
    from netra import runtime
    from netra.runtime import installed, tables

    inst = installed.editable(REPO)
    lock, built = runtime.installed_lock(inst)
    table = tables.loads((REPO / "release/tables/sm_90.json").read_bytes(), "sm_90.json", "sm_90")
    cat = runtime.Catalog(inst, lock, table, ("sm_90",), built)
    cat._code.update({c.file: b"cubin bytes are not read here" for c in table.candidates()})
    return cat


def _sm90_kernel() -> Any:
    cat = _sm90_catalog()
    return cat.kernel(cat.table.entries["rmsnorm(hidden=4096,weight_offset=0)"].candidates[0])


def test_served_resolves_the_certified_dispatch_to_kernels() -> None:
    cat = _sm90_catalog()
    for key, entry in cat.table.entries.items():
        served = cat.served(key)
        if not isinstance(served, tuple):  # a contract added after the certification run: not served yet
            assert served.code == "below_policy" and all(
                c.evidence["hardware"] is None for c in entry.candidates
            )
            continue
        if entry.dispatch:
            assert [(top, k.tactic) for top, k in served] == [(d.max_rows, d.tactic) for d in entry.dispatch]
            for rows in (1, 16, 64, 512, 8192, 32768):
                assert cat.select(key, rows=rows).tactic == entry.tactic_for(rows)
        else:
            assert [(top, k.tactic) for top, k in served] == [(None, entry.candidates[0].tactic)]
        assert served[-1][0] is None
    assert any(e.dispatch for e in cat.table.entries.values())  # the certified table has row dispatch


def test_extra_array_uses_cuda_markers_and_the_packed_segment() -> None:
    k = _sm90_kernel()
    la = launch_args(k, 1000, {"y": 0x1000, "x": 0x2000, "w": 0x3000, "rows": 1000, "eps": 1e-6})
    ex = cuda.Extra(la.kernargs)
    assert (ex.array[0], ex.array[2], ex.array[4]) == (
        0x01,
        0x02,
        None,
    )  # BUFFER_POINTER, BUFFER_SIZE, END (0)
    assert ex.size.value == k.kernarg.size == 32
    raw = ctypes.string_at(ex.array[1], ex.size.value)
    assert raw == la.kernargs
    assert struct.unpack_from("<QQQIf", raw) == (0x1000, 0x2000, 0x3000, 1000, pytest.approx(1e-6))
    rpb = k.candidate.launch.rows_per_block
    assert la.grid == (-(-1000 // rpb), 1, 1) and la.block == k.block


def test_stream_handles() -> None:
    assert cuda.stream_handle(None) == 0 or "torch" in sys.modules  # no torch: the legacy default stream
    assert cuda.stream_handle(1234) == 1234
    assert cuda.stream_handle(type("S", (), {"cuda_stream": 77})()) == 77
    with pytest.raises(CudaError):
        cuda.stream_handle(True)
    with pytest.raises(CudaError):
        cuda.stream_handle("0")


def test_missing_driver_is_one_line_naming_the_library(tmp_path: Path) -> None:
    with pytest.raises(RuntimeUnavailableError) as e:
        cuda.Cuda(library=tmp_path / "libcuda.so.1")
    assert "libcuda.so.1" in e.value.message and "\n" not in str(e.value) and e.value.hint


@pytest.mark.skipif(NVIDIA.find_library() is not None, reason="this host has a CUDA driver")
def test_no_driver_on_this_host_is_the_same_refusal() -> None:
    code = "from netra.loaders.cuda import Cuda; Cuda()"
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode != 0 and "RuntimeUnavailableError" in r.stderr and "libcuda.so.1" in r.stderr
