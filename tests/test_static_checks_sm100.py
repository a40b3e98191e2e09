"""sm_100's static gate on cubins compiled by the real nvcc for sm_100a: a good one passes and its facts
are read; each check refuses a cubin that breaks it; what the lock pins (.text, and the launch digest
that covers the Mercury form an sm_100a kernel carries) is what a changed byte moves."""

from __future__ import annotations

import functools
import struct
from pathlib import Path

import cubin_probe
import pytest
from cubin_probe import GOOD

from netra import targets
from netra.core import elf
from netra.core.types import Arg, ArtifactSpec
from netra.targets.sm_90 import cubin
from netra.targets.target import Tools

NAME = "sm_100"
TGT = targets.get(NAME)


@pytest.fixture(scope="module")
def tools() -> Tools:
    return TGT.discover()


spec_for = functools.partial(cubin_probe.spec_for, NAME, "verified")
compile_cu = functools.partial(cubin_probe.compile_cu, arch="sm_100a")


def failed(path: Path, spec: ArtifactSpec, tools: Tools) -> dict[str, list[str]]:
    """What the class's own gate (Target.examine) says of this cubin, per check."""
    out: dict[str, list[str]] = {}
    for p in TGT.examine([(spec, path)], tools, 1)[0].problems:
        out.setdefault(p.check, []).append(p.detail)
    return out


def test_the_class_proves_nvcc_on_sm_100a(tools: Tools) -> None:
    assert tools.target == NAME and tools.identity.flavour == "nvcc"
    assert TGT.identities == ((10, 0),) and TGT.vendor.gpu_class((10, 0)) == NAME
    assert TGT.vendor.gpu_class((9, 0)) != NAME and TGT.vendor.gpu_class((10, 3)) != NAME  # B300: sm_103


def test_a_good_cubin_passes_every_check_and_its_facts_are_read(tools: Tools, tmp_path: Path) -> None:
    path = compile_cu(tools, tmp_path, GOOD)
    assert failed(path, spec_for(), tools) == {}
    data = path.read_bytes()
    cb = cubin.inspect(data)
    assert (cb.e_machine, cb.arch, cb.arch_specific) == (cubin.EM_CUDA, 100, True)
    k = cb.kernels["probe"]
    assert [(p.ordinal, p.offset, p.size) for p in k.params] == [(0, 0, 8), (1, 8, 8), (2, 16, 4)]
    assert k.param_bytes == 20 and k.max_threads == (128, 1, 1) and k.frame_bytes == 0 and k.registers
    # What sets an sm_100a cubin apart from an sm_90a one: the kernel's Mercury sections.
    names = {s.name.decode() for s in elf.sections(data)}
    assert {".nv.capmerc.text.probe", ".nv.merc.nv.info.probe"} <= names
    e = TGT.examine([(spec_for(), path)], tools, 1)[0]
    assert e.text_sha256 == TGT.text_sha256(data, "probe", "k") and e.launch_sha256 == TGT.launch_digest(
        data, "probe", "k"
    )
    assert e.launch_sha256 != cubin.launch_digest(data, "probe", "k")  # sm_90's digest omits Mercury


def test_not_sm_100a(tools: Tools, tmp_path: Path) -> None:
    # sm_100 and sm_100f cubins carry the same e_flags as sm_100a: only .nv.compat's arch-specific
    # record tells them apart. sm_103a (B300) and sm_90a are other architectures.
    for arch in ("sm_100", "sm_100f", "sm_103a", "sm_90a"):
        got = failed(compile_cu(tools, tmp_path, GOOD, arch=arch), spec_for(), tools)
        assert list(got) == ["elf"] and "not an sm_100a cubin" in got["elf"][0], (arch, got)


def test_an_extra_kernel_or_another_name(tools: Tools, tmp_path: Path) -> None:
    two = GOOD + 'extern "C" __global__ void other(float* y) { y[0] = 1.0f; }\n'
    got = failed(compile_cu(tools, tmp_path, two), spec_for(), tools)
    assert list(got) == ["symbols"] and "other" in got["symbols"][0]


def test_parameter_layout_differs_from_the_template_abi(tools: Tools, tmp_path: Path) -> None:
    other = (Arg("y", 0, 8, "global_buffer", "f32*"), Arg("rows", 8, 4, "by_value", "u32"))
    got = failed(compile_cu(tools, tmp_path, GOOD), spec_for(args=other), tools)
    assert list(got) == ["kernarg"]


def test_registers_and_shared_memory_over_the_budget(tools: Tools, tmp_path: Path) -> None:
    got = failed(compile_cu(tools, tmp_path, GOOD), spec_for(registers=4), tools)
    assert list(got) == ["registers"] and "budget 4" in got["registers"][0]
    text = GOOD.replace(
        "{\n", "{\n  __shared__ float t[128]; t[threadIdx.x] = x[threadIdx.x]; __syncthreads();\n", 1
    )
    text = text.replace("y[i] = x[i] * 2.0f", "y[i] = t[127 - threadIdx.x]")
    path = compile_cu(tools, tmp_path, text)
    got = failed(path, spec_for(shared=256), tools)
    assert list(got) == ["shared"] and "512 bytes" in got["shared"][0]  # the 1 KiB system reserve excluded
    assert failed(path, spec_for(shared=512), tools) == {}


def test_local_memory_is_refused(tools: Tools, tmp_path: Path) -> None:
    text = GOOD.replace(
        "if (i < rows) y[i] = x[i] * 2.0f;",
        "float a[256]; for (int k = 0; k < 256; ++k) a[k] = x[k * rows + i];\n"
        "  if (i < rows) y[i] = a[(rows + i) & 255];",
    )
    got = failed(compile_cu(tools, tmp_path, text), spec_for(registers=255), tools)
    assert list(got) == ["local"]


def test_launch_bounds_missing_or_other_than_the_block(tools: Tools, tmp_path: Path) -> None:
    got = failed(compile_cu(tools, tmp_path, GOOD.replace("__launch_bounds__(128) ", "")), spec_for(), tools)
    assert list(got) == ["launch_bounds"]
    got = failed(compile_cu(tools, tmp_path, GOOD), spec_for(block=256), tools)
    assert list(got) == ["launch_bounds"] and "(128, 1, 1)" in got["launch_bounds"][0]


def test_undefined_symbols_and_relocations(tools: Tools, tmp_path: Path) -> None:
    text = GOOD.replace(
        "#include <stdint.h>", '#include <stdint.h>\nextern "C" __device__ float helper(float);'
    )
    text = text.replace("x[i] * 2.0f", "helper(x[i])")
    got = failed(compile_cu(tools, tmp_path, text, "-rdc=true"), spec_for(), tools)
    assert "undefined" in got and "helper" in got["undefined"][0]
    assert "relocations" in got


def test_device_globals_are_refused(tools: Tools, tmp_path: Path) -> None:
    text = GOOD.replace("#include <stdint.h>", "#include <stdint.h>\n__device__ float scale = 2.0f;")
    text = text.replace("x[i] * 2.0f", "x[i] * scale")
    got = failed(compile_cu(tools, tmp_path, text), spec_for(), tools)
    assert "globals" in got


def _flip(data: bytes, section: str, at: int = 0) -> bytes:
    s = next(s for s in elf.sections(data) if s.name == section.encode())
    out = bytearray(data)
    out[s.offset + at] ^= 0xFF
    return bytes(out)


def test_the_mercury_form_and_the_attributes_are_pinned_beside_the_text(tools: Tools, tmp_path: Path) -> None:
    """A flipped byte of the kernel's Mercury text leaves .text and the checks alone and moves the
    launch digest (the lock refuses it); a rewritten max-threads attribute moves the digest and fails
    launch_bounds; a flipped byte of .text moves .text's sha256."""
    data = compile_cu(tools, tmp_path, GOOD).read_bytes()
    text, launch = TGT.text_sha256(data, "probe", "k"), TGT.launch_digest(data, "probe", "k")
    merc = _flip(data, ".nv.capmerc.text.probe", 16)
    assert TGT.text_sha256(merc, "probe", "k") == text and TGT.launch_digest(merc, "probe", "k") != launch
    (tmp_path / "m.cubin").write_bytes(merc)
    assert failed(tmp_path / "m.cubin", spec_for(), tools) == {}
    code = _flip(data, ".text.probe", 4)
    assert TGT.text_sha256(code, "probe", "k") != text

    raw = cubin.inspect(data).kernels["probe"].info_raw
    at = data.find(raw)
    attrs = bytearray(data)
    i = 0
    while i < len(raw):  # the MAX_THREADS record: x doubled
        fmt, attr = raw[i], raw[i + 1]
        if fmt == 4:
            (size,) = struct.unpack_from("<H", raw, i + 2)
            if attr == cubin.MAX_THREADS:
                struct.pack_into("<I", attrs, at + i + 4, 256)
                break
            i += 4 + size
        else:
            i += 4
    moved = bytes(attrs)
    assert TGT.text_sha256(moved, "probe", "k") == text and TGT.launch_digest(moved, "probe", "k") != launch
    (tmp_path / "a.cubin").write_bytes(moved)
    assert list(failed(tmp_path / "a.cubin", spec_for(), tools)) == ["launch_bounds"]


def test_every_check_is_exercised() -> None:
    # Keep in step with the tests above: a check nobody tries to break is not a check.
    exercised = {"elf", "symbols", "kernarg", "registers", "shared", "local", "launch_bounds", "undefined",
                 "relocations", "globals"}  # fmt: skip
    assert set(TGT.checks) == exercised


def test_damaged_cubins_are_validation_errors_not_crashes(tools: Tools, tmp_path: Path) -> None:
    from netra.errors import ValidationError

    data = compile_cu(tools, tmp_path, GOOD).read_bytes()
    for bad in (data[:100], data[: len(data) // 2], b"\x7fELF" + b"\x00" * 60, b"", data[:64] + b"\xff" * 64):
        with pytest.raises(ValidationError):
            TGT.launch_digest(bad, "probe", "bad.cubin")
        with pytest.raises(ValidationError):
            TGT.text_sha256(bad, "probe", "bad.cubin")


def test_the_table_is_static_every_candidate_verified_and_none_served_by_default() -> None:
    """What `netra lock` wrote for sm_100: a static table (nothing ran on Blackwell) of the same contracts
    as sm_90's, each candidate verified with its static evidence, held to the lock; the runtime's default
    policy serves none of them and `verified` serves each entry's first."""
    from netra.runtime import catalog, lockfile, tables

    repo = Path(__file__).resolve().parents[1]
    t = tables.loads((repo / tables.table_path(NAME)).read_bytes(), "sm_100.json", NAME)
    sm90 = tables.loads((repo / tables.table_path("sm_90")).read_bytes(), "sm_90.json", "sm_90")
    assert (t.certification, t.vendor, t.loader) == ("static", "nvidia", "cuda")
    assert t.runs == () and "No sm_100 hardware has run these kernels" in t.note
    assert set(t.entries) == set(sm90.entries)
    cands = [c for e in t.entries.values() for c in e.candidates]
    assert cands and {c.maturity for c in cands} == {"verified"}
    assert all(c.hardware is None and c.file.startswith(f"{NAME}/") for c in cands)
    assert tables.against_lock(t, lockfile.read(repo / lockfile.LOCK_PATH)) == []
    for e in t.entries.values():
        assert catalog.choose(e.candidates, catalog.DEFAULT_POLICY) is None
        assert catalog.choose(e.candidates, "verified") is e.candidates[0]
