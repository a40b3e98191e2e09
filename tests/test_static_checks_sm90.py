"""Each sm_90 static check refuses a cubin that breaks it, compiled by the real nvcc."""

from __future__ import annotations

import functools
import struct
from pathlib import Path

import cubin_probe
import pytest
from cubin_probe import GOOD

from netra.core.types import Arg, ArtifactSpec
from netra.targets.sm_90 import cubin
from netra.targets.sm_90.checks import CHECKS, check
from netra.targets.sm_90.toolchain import discover
from netra.targets.target import Tools


@pytest.fixture(scope="module")
def tools() -> Tools:
    return discover()


spec_for = functools.partial(cubin_probe.spec_for, "sm_90", "experiment")
compile_cu = functools.partial(cubin_probe.compile_cu, arch="sm_90a")


def failed(path: Path, spec: ArtifactSpec) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in check(cubin.inspect(path.read_bytes(), path.name), spec):
        out.setdefault(p.check, []).append(p.detail)
    return out


def test_a_good_cubin_passes_every_check_and_its_facts_are_read(tools: Tools, tmp_path: Path) -> None:
    path = compile_cu(tools, tmp_path, GOOD)
    assert failed(path, spec_for()) == {}
    k = cubin.inspect(path.read_bytes()).kernels["probe"]
    assert [(p.ordinal, p.offset, p.size) for p in k.params] == [(0, 0, 8), (1, 8, 8), (2, 16, 4)]
    assert k.param_bytes == 20 and k.max_threads == (128, 1, 1) and k.frame_bytes == 0 and k.registers


def test_not_sm_90a(tools: Tools, tmp_path: Path) -> None:
    # A plain sm_90 cubin (no arch-specific features) and an sm_80 one: neither is what the lock names.
    for arch in ("sm_90", "sm_80"):
        got = failed(compile_cu(tools, tmp_path, GOOD, arch=arch), spec_for())
        assert list(got) == ["elf"], (arch, got)


def test_an_extra_kernel_or_another_name(tools: Tools, tmp_path: Path) -> None:
    two = GOOD + 'extern "C" __global__ void other(float* y) { y[0] = 1.0f; }\n'
    got = failed(compile_cu(tools, tmp_path, two), spec_for())
    assert "symbols" in got and "other" in got["symbols"][0]


def test_parameter_layout_differs_from_the_template_abi(tools: Tools, tmp_path: Path) -> None:
    other = (Arg("y", 0, 8, "global_buffer", "f32*"), Arg("rows", 8, 4, "by_value", "u32"))
    got = failed(compile_cu(tools, tmp_path, GOOD), spec_for(args=other))
    assert list(got) == ["kernarg"]


def test_registers_over_the_budget(tools: Tools, tmp_path: Path) -> None:
    got = failed(compile_cu(tools, tmp_path, GOOD), spec_for(registers=4))
    assert list(got) == ["registers"] and "budget 4" in got["registers"][0]


def test_shared_memory_over_the_budget(tools: Tools, tmp_path: Path) -> None:
    text = GOOD.replace(
        "{\n", "{\n  __shared__ float t[128]; t[threadIdx.x] = x[threadIdx.x]; __syncthreads();\n", 1
    )
    text = text.replace("y[i] = x[i] * 2.0f", "y[i] = t[127 - threadIdx.x]")
    got = failed(compile_cu(tools, tmp_path, text), spec_for(shared=256))
    assert list(got) == ["shared"] and "512 bytes" in got["shared"][0]
    assert failed(compile_cu(tools, tmp_path, text), spec_for(shared=512)) == {}


def test_local_memory_is_refused(tools: Tools, tmp_path: Path) -> None:
    # A stack array indexed at run time: ptxas puts it in local memory (the build's -Werror flags would
    # refuse to compile it; the gate refuses the cubin as well, whoever compiled it).
    text = GOOD.replace(
        "if (i < rows) y[i] = x[i] * 2.0f;",
        "float a[256]; for (int k = 0; k < 256; ++k) a[k] = x[k * rows + i];\n"
        "  if (i < rows) y[i] = a[(rows + i) & 255];",
    )
    got = failed(compile_cu(tools, tmp_path, text), spec_for(registers=255))
    assert list(got) == ["local"]


def test_launch_bounds_missing_or_other_than_the_block(tools: Tools, tmp_path: Path) -> None:
    got = failed(compile_cu(tools, tmp_path, GOOD.replace("__launch_bounds__(128) ", "")), spec_for())
    assert list(got) == ["launch_bounds"]
    got = failed(compile_cu(tools, tmp_path, GOOD), spec_for(block=256))
    assert list(got) == ["launch_bounds"] and "(128, 1, 1)" in got["launch_bounds"][0]


def test_undefined_symbols_and_relocations(tools: Tools, tmp_path: Path) -> None:
    # Separate compilation: a call to a device function defined elsewhere leaves an undefined symbol
    # and a relocation against the kernel's .text.
    text = GOOD.replace(
        "#include <stdint.h>", '#include <stdint.h>\nextern "C" __device__ float helper(float);'
    )
    text = text.replace("x[i] * 2.0f", "helper(x[i])")
    got = failed(compile_cu(tools, tmp_path, text, "-rdc=true"), spec_for())
    assert "undefined" in got and "helper" in got["undefined"][0]
    assert "relocations" in got


def test_device_globals_are_refused(tools: Tools, tmp_path: Path) -> None:
    text = GOOD.replace("#include <stdint.h>", "#include <stdint.h>\n__device__ float scale = 2.0f;")
    text = text.replace("x[i] * 2.0f", "x[i] * scale")
    got = failed(compile_cu(tools, tmp_path, text), spec_for())
    assert "globals" in got


def test_a_flipped_attribute_changes_the_launch_digest_not_the_text(tools: Tools, tmp_path: Path) -> None:
    """What the lock pins beside .text: the max-threads attribute (from __launch_bounds__) rewritten."""
    path = compile_cu(tools, tmp_path, GOOD)
    data = bytearray(path.read_bytes())
    before = (cubin.text_sha256(bytes(data), "probe"), cubin.launch_digest(bytes(data), "probe", "k"))
    raw = cubin.inspect(bytes(data)).kernels["probe"].info_raw
    at = bytes(data).find(raw)
    i = 0
    while i < len(raw):  # find the MAX_THREADS record and double x
        fmt, attr = raw[i], raw[i + 1]
        if fmt == 4:
            (size,) = struct.unpack_from("<H", raw, i + 2)
            if attr == cubin.MAX_THREADS:
                struct.pack_into("<I", data, at + i + 4, 256)
                break
            i += 4 + size
        else:
            i += 4 if fmt in (2, 3) else 2
    after = (cubin.text_sha256(bytes(data), "probe"), cubin.launch_digest(bytes(data), "probe", "k"))
    assert after[0] == before[0] and after[1] != before[1]
    got = failed_bytes(bytes(data), spec_for())
    assert list(got) == ["launch_bounds"]


def failed_bytes(data: bytes, spec: ArtifactSpec) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in check(cubin.inspect(data, "k.cubin"), spec):
        out.setdefault(p.check, []).append(p.detail)
    return out


def test_every_check_is_exercised() -> None:
    # Keep in step with the tests above: a check nobody tries to break is not a check.
    exercised = {"elf", "symbols", "kernarg", "registers", "shared", "local", "launch_bounds", "undefined",
                 "relocations", "globals"}  # fmt: skip
    assert set(CHECKS) == exercised


def test_damaged_cubins_are_validation_errors_not_crashes(tools: Tools, tmp_path: Path) -> None:
    from netra.errors import ValidationError

    data = compile_cu(tools, tmp_path, GOOD).read_bytes()
    for bad in (data[:100], data[: len(data) // 2], b"\x7fELF" + b"\x00" * 60, b"", data[:64] + b"\xff" * 64):
        with pytest.raises(ValidationError):
            cubin.inspect(bad, "bad.cubin")
        with pytest.raises(ValidationError):
            cubin.text_sha256(bad, "probe", "bad.cubin")
