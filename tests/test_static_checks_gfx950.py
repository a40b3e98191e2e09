"""Each gfx950 static check refuses a code object that breaks it, built with the real assembler and linker."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest

from netra.core.types import Arg, ArtifactSpec, Tactic, Template
from netra.targets.gfx950.assemble import disassemble
from netra.targets.gfx950.checks import CHECKS, check, registers_used
from netra.targets.gfx950.codeobject import inspect
from netra.targets.gfx950.toolchain import TRIPLE, discover
from netra.targets.target import Tools


@pytest.fixture(scope="module")
def tools() -> Tools:
    return discover()


ARGS = (
    Arg("y", 0, 8, "global_buffer", "bf16*", "global"),
    Arg("rows", 8, 4, "by_value", "u32"),
)


def spec_for(*, lds: int = 0, block: int = 256, kernarg: tuple[Arg, ...] = ARGS) -> ArtifactSpec:
    tpl = Template(
        name="probe",
        target="gfx950",
        op="rmsnorm",
        source="kernels/gfx950/probe.s",
        constants={},
        args=kernarg,
        budget={"vgprs": 28, "sgprs": 16, "lds_bytes": lds, "rows_per_wave": 1},
    )
    tac = Tactic(
        op="rmsnorm", name="b", template="probe", block=block, maturity="experiment", why="", target="gfx950"
    )
    return ArtifactSpec(
        name="probe_kernel", target="gfx950", template=tpl, tactic=tac, contract={},
        definitions={"NETRA_BLOCK": block}, rows_per_block=block // 64, file="gfx950/probe_kernel.hsaco",
    )  # fmt: skip


def source(
    *,
    body: str = "v_mov_b32 v1, 0",
    lds: int = 0,
    kernarg_desc: int = 12,
    kernarg_meta: int = 12,
    vgprs: int = 28,
    sgprs: int = 16,
    accum: int = 28,
    meta_lds: int | None = None,
    max_wg: int = 256,
    private: int = 0,
    extra: str = "",
) -> str:
    return f"""
.amdgcn_target "amdgcn-amd-amdhsa--gfx950"
.amdhsa_code_object_version 5
{extra}
.text
.globl probe_kernel
.p2align 8
.type probe_kernel,@function
probe_kernel:
  s_load_dwordx2 s[2:3], s[0:1], 0
  {body}
  s_endpgm
.size probe_kernel, .-probe_kernel
.rodata
.p2align 6
.amdhsa_kernel probe_kernel
  .amdhsa_user_sgpr_kernarg_segment_ptr 1
  .amdhsa_kernarg_size {kernarg_desc}
  .amdhsa_group_segment_fixed_size {lds}
  .amdhsa_private_segment_fixed_size {private}
  .amdhsa_next_free_vgpr {vgprs}
  .amdhsa_next_free_sgpr {sgprs}
  .amdhsa_accum_offset {accum}
.end_amdhsa_kernel
.amdgpu_metadata
---
amdhsa.version: [ 1, 2 ]
amdhsa.kernels:
  - .name: probe_kernel
    .symbol: probe_kernel.kd
    .kernarg_segment_size: {kernarg_meta}
    .kernarg_segment_align: 8
    .group_segment_fixed_size: {lds if meta_lds is None else meta_lds}
    .private_segment_fixed_size: {private}
    .wavefront_size: 64
    .sgpr_count: {sgprs}
    .vgpr_count: {vgprs}
    .agpr_count: 0
    .max_flat_workgroup_size: {max_wg}
    .args:
      - {{ .name: y, .offset: 0, .size: 8, .value_kind: global_buffer, .address_space: global }}
      - {{ .name: rows, .offset: 8, .size: 4, .value_kind: by_value }}
...
.end_amdgpu_metadata
"""


def build(tools: Tools, tmp: Path, text: str, *, link: bool = True, undefined_ok: bool = False) -> Path:
    src, obj, out = tmp / "k.s", tmp / "k.o", tmp / "k.hsaco"
    src.write_text(text)
    subprocess.run(
        [tools["llvm-mc"], f"-triple={TRIPLE}", "-mcpu=gfx950", "-filetype=obj", "-o", str(obj), str(src)],
        check=True,
    )
    if not link:
        return obj
    flags = [] if undefined_ok else ["--no-undefined"]
    subprocess.run([tools["ld.lld"], "-shared", *flags, "-o", str(out), str(obj)], check=True)
    return out


def failed(tools: Tools, path: Path, spec: ArtifactSpec) -> dict[str, list[str]]:
    co = inspect(path.read_bytes(), path.name)
    out: dict[str, list[str]] = {}
    for p in check(co, spec, disassemble(tools, [path])[path]):
        out.setdefault(p.check, []).append(p.detail)
    return out


def test_a_good_code_object_passes_every_check(tools: Tools, tmp_path: Path) -> None:
    assert failed(tools, build(tools, tmp_path, source()), spec_for()) == {}


def test_lds_over_the_gfx950_limit(tools: Tools, tmp_path: Path) -> None:
    # The assembler accepts 200000 bytes; gfx950 has 160 KiB per workgroup.
    got = failed(tools, build(tools, tmp_path, source(lds=200000)), spec_for(lds=200000))
    assert list(got) == ["lds"] and "163840" in got["lds"][0]


def test_lds_descriptor_and_metadata_disagree(tools: Tools, tmp_path: Path) -> None:
    got = failed(tools, build(tools, tmp_path, source(lds=1024, meta_lds=0)), spec_for(lds=1024))
    assert list(got) == ["lds"]


def test_kernarg_size_mismatch(tools: Tools, tmp_path: Path) -> None:
    # 24 in the descriptor against 12 in the metadata: llvm-mc accepts it, HIP would copy the wrong size.
    got = failed(tools, build(tools, tmp_path, source(kernarg_desc=24)), spec_for())
    assert list(got) == ["kernarg"] and "descriptor 24" in got["kernarg"][0]


def test_kernarg_args_differ_from_the_template_abi(tools: Tools, tmp_path: Path) -> None:
    other = (Arg("y", 0, 8, "global_buffer", "bf16*", "global"), Arg("eps", 8, 4, "by_value", "f32"))
    got = failed(tools, build(tools, tmp_path, source()), spec_for(kernarg=other))
    assert list(got) == ["kernarg"] and "template ABI" in got["kernarg"][0]


def test_vgpr_beyond_the_allocation(tools: Tools, tmp_path: Path) -> None:
    # v200 with 28 VGPRs allocated assembles and links without a word from the toolchain.
    got = failed(tools, build(tools, tmp_path, source(body="v_mov_b32 v200, 0")), spec_for())
    assert list(got) == ["registers"] and "v200" in got["registers"][0]


def test_vgpr_range_beyond_the_allocation(tools: Tools, tmp_path: Path) -> None:
    body = "global_load_dwordx4 v[26:29], v0, s[2:3]"
    got = failed(tools, build(tools, tmp_path, source(body=body)), spec_for())
    assert list(got) == ["registers"] and "v29" in got["registers"][0]


def test_sgpr_beyond_the_allocation(tools: Tools, tmp_path: Path) -> None:
    got = failed(tools, build(tools, tmp_path, source(body="s_mov_b32 s40, 0")), spec_for())
    assert list(got) == ["registers"] and "s40" in got["registers"][0]


def test_too_many_vgprs_for_gfx950(tools: Tools, tmp_path: Path) -> None:
    # The descriptor's granule field tops out at 512; metadata can still claim more than the hardware has.
    text = source().replace(".vgpr_count: 28", ".vgpr_count: 520")
    got = failed(tools, build(tools, tmp_path, text), spec_for())
    assert "vgpr" in got and "exceeds 512" in got["vgpr"][0]


def test_too_many_sgprs_for_gfx950(tools: Tools, tmp_path: Path) -> None:
    text = source().replace(".sgpr_count: 16", ".sgpr_count: 110")
    got = failed(tools, build(tools, tmp_path, text), spec_for())
    assert "sgpr" in got and "102" in got["sgpr"][0]


def test_accum_offset_beyond_next_free_vgpr(tools: Tools, tmp_path: Path) -> None:
    path = build(tools, tmp_path, source())
    data = bytearray(path.read_bytes())
    kd = _kd_offset(path, inspect(bytes(data)).kernels["probe_kernel"].kd_value)
    rsrc3 = struct.unpack_from("<I", data, kd + 44)[0]
    struct.pack_into("<I", data, kd + 44, (rsrc3 & ~0x3F) | 40)  # accum_offset 164 > 32 allocated
    path.write_bytes(bytes(data))
    got = failed(tools, path, spec_for())
    assert list(got) == ["accum_offset"]


def test_wave32_is_refused(tools: Tools, tmp_path: Path) -> None:
    path = build(tools, tmp_path, source())
    data = bytearray(path.read_bytes())
    kd = _kd_offset(path, inspect(bytes(data)).kernels["probe_kernel"].kd_value)
    props = struct.unpack_from("<H", data, kd + 56)[0]
    struct.pack_into("<H", data, kd + 56, props | (1 << 10))
    path.write_bytes(bytes(data))
    assert list(failed(tools, path, spec_for())) == ["wave64"]


def test_workgroup_smaller_than_the_contract_block(tools: Tools, tmp_path: Path) -> None:
    got = failed(tools, build(tools, tmp_path, source(max_wg=64)), spec_for(block=256))
    assert list(got) == ["workgroup"]


def test_scratch_is_refused(tools: Tools, tmp_path: Path) -> None:
    got = failed(tools, build(tools, tmp_path, source(private=64)), spec_for())
    assert list(got) == ["scratch"]


def test_missing_kernel_descriptor(tools: Tools, tmp_path: Path) -> None:
    # Metadata names a kernel whose .kd symbol does not exist.
    text = source().replace(
        "  - .name: probe_kernel\n    .symbol: probe_kernel.kd", "  - .name: ghost\n    .symbol: ghost.kd"
    )
    got = failed(tools, build(tools, tmp_path, text), spec_for())
    assert "kd" in got and "ghost.kd" in " ".join(got["kd"])


def test_undefined_symbol(tools: Tools, tmp_path: Path) -> None:
    extra = ".globl external_table\n"
    body = (
        "s_getpc_b64 s[4:5]\n  s_add_u32 s4, s4, external_table@gotpcrel32@lo+4\n"
        "  s_addc_u32 s5, s5, external_table@gotpcrel32@hi+12"
    )
    path = build(tools, tmp_path, source(body=body, extra=extra), undefined_ok=True)
    got = failed(tools, path, spec_for())
    assert "undefined" in got and "external_table" in got["undefined"][0]


def test_relocations_left_in_text(tools: Tools, tmp_path: Path) -> None:
    body = (
        "s_getpc_b64 s[4:5]\n  s_add_u32 s4, s4, probe_kernel.kd@rel32@lo+4\n"
        "  s_addc_u32 s5, s5, probe_kernel.kd@rel32@hi+12"
    )
    obj = build(tools, tmp_path, source(body=body), link=False)
    got = failed(tools, obj, spec_for())
    assert "relocations" in got


def test_register_scan_reads_ranges_and_singles() -> None:
    text = "\tv_pk_mul_f32 v[4:5], v[10:11], s[20:21]\n\tv_accvgpr_write_b32 a3, v7\n\ts_endpgm\n"
    assert registers_used(text) == {"v": 11, "s": 21, "a": 3}


def test_every_check_is_exercised() -> None:
    # Keep this list in step with the tests above: a check nobody tries to break is not a check.
    exercised = {
        "elf",
        "symbols",
        "kd",
        "kernarg",
        "lds",
        "vgpr",
        "sgpr",
        "accum_offset",
        "wave64",
        "workgroup",
        "scratch",
        "undefined",
        "relocations",
        "registers",
    }
    assert set(CHECKS) == exercised


def _kd_offset(path: Path, kd_addr: int | None) -> int:
    """File offset of the kernel descriptor (address -> offset through its section)."""
    from elftools.elf.elffile import ELFFile

    assert kd_addr is not None
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for sec in elf.iter_sections():
            if sec["sh_addr"] <= kd_addr < sec["sh_addr"] + sec["sh_size"] and sec["sh_type"] != "SHT_NOBITS":
                return sec["sh_offset"] + kd_addr - sec["sh_addr"]
    raise AssertionError("descriptor not found")
