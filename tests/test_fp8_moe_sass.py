"""The routed MoE's down stage in machine code, built by the lock's nvcc and read by nvdisasm: what the
source means to happen before `griddepcontrol.wait` (SASS ACQBULK) is what ptxas schedules there.

fp8_moe_down.cu loads a CTA's first weight sub-slice before the wait, so that under programmatic
dependent launch the down stage's weights stream while gate/up runs. ptxas sinks those `ld.global.nc`
loads below the wait in every register-path tactic (2026-12-06); EARLY 1 predicates the wait on the
loaded words, which keeps every one of them above it (docs/ops/fp8_moe.md, "Early weights"). The retired
tactics named here are compiled as variants of built ones (tests/tactic_variants.py): the template keeps
each option the tests read."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import tactic_variants as variants
from conftest import REPO

from netra import targets
from netra.release import manifests

QWEN3_30B = {"experts": 128, "topk": 8, "hidden": 2048, "inter": 768}
QWEN3_235B = {"experts": 128, "topk": 8, "hidden": 4096, "inter": 1536}
GATE_UP_30B = "netra_fp8_moe_gate_up_e128_k8_h2048_i768_"


def nvdisasm() -> str:
    """The test extra's nvidia-cuda-nvdisasm (requirements/test.in), else one on PATH."""
    import nvidia  # the namespace of NVIDIA's wheels

    for root in nvidia.__path__:
        for cand in sorted(Path(root).glob("cu*/bin/nvdisasm"), reverse=True):
            return str(cand)
    found = shutil.which("nvdisasm")
    if found is None:
        pytest.fail("nvdisasm is not installed: pip install -r requirements/test.in (nvidia-cuda-nvdisasm)")
    return found


def sass(contract: dict[str, int], tactic: str, tmp_path: Path) -> list[str]:
    """The SASS instructions of sm_90's (contract, tactic), compiled from this tree: a built tactic, or a
    retired one as the variant of a built one (tests/tactic_variants.py)."""
    cat = manifests.load(REPO)
    spec = variants.artifact(cat, contract, variants.tactic(cat, tactic))
    tgt = targets.get(spec.target)
    work = tmp_path / spec.name
    work.mkdir()
    cubin = tgt.compile(spec, tgt.discover(), REPO, work, work / "out")
    r = subprocess.run([nvdisasm(), "-c", str(cubin)], capture_output=True, text=True, check=True)
    return [m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(.+?)\s*;", r.stdout)]


def weight_loads_before_the_wait(code: list[str]) -> int:
    """The weights' loads (ld.global.nc.L1::no_allocate: LDG...NA) issued before the one ACQBULK."""
    waits = [i for i, ins in enumerate(code) if ins.startswith("ACQBULK")]
    assert len(waits) == 1, waits
    return sum(1 for ins in code[: waits[0]] if re.match(r"(@!?U?P\d+\s+)?LDG\.E\.NA\.", ins))


@pytest.mark.parametrize(
    ("tactic", "contract", "loads"),
    [
        # a warp's first sub-slice: 2 tiles x 2 row halves x 2 x 16 bytes a lane per 128-byte block
        ("d3e", QWEN3_30B, 16),  # K_SLICE 256: the whole k range of a warp
        ("d3oe", QWEN3_30B, 8),  # K_SLICE 128: the first of two sub-slices
        ("d3yse", QWEN3_30B, 16),
        ("d3e", QWEN3_235B, 16),  # the first of two 256-byte sub-slices
    ],
)
def test_an_early_tactic_issues_its_first_weights_before_the_wait(
    tactic: str, contract: str, loads: int, tmp_path: Path
) -> None:
    code = sass(contract, tactic, tmp_path)
    assert weight_loads_before_the_wait(code) == loads


@pytest.mark.parametrize("tactic", ["d3", "d3o", "d3ys"])
def test_without_early_ptxas_sinks_every_weight_load_below_the_wait(tactic: str, tmp_path: Path) -> None:
    """Why EARLY exists, on the lock's toolchain: the source loads the same words before the wait."""
    assert weight_loads_before_the_wait(sass(QWEN3_30B, tactic, tmp_path)) == 0


def wgmma_waits(code: list[str]) -> tuple[int, dict[int, int]]:
    """The wgmma instructions (QGMMA: e4m3) and the WARPGROUP.DEPBAR.LE waits by how many groups they
    leave in flight."""
    waits: dict[int, int] = {}
    for ins in code:
        m = re.match(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x([0-9a-f]+)", ins)
        if m:
            waits[int(m.group(1), 16)] = waits.get(int(m.group(1), 16), 0) + 1
    return sum(1 for ins in code if ins.startswith("QGMMA")), waits


@pytest.mark.parametrize(
    ("contract", "tactic", "overlap"),
    [
        (QWEN3_30B, "g8x8p", True),
        (QWEN3_235B, "g8x64p", True),
        (QWEN3_30B, "d8x8p", True),
        (QWEN3_235B, "d8x64p", True),
        (QWEN3_30B, "g8x8", False),
        (QWEN3_235B, "d8x64", False),
    ],
)
def test_a_tensor_core_tactic_issues_a_blocks_wgmma_back_to_back(
    contract: dict[str, int], tactic: str, overlap: bool, tmp_path: Path
) -> None:
    """The _tc templates' k loop in machine code: each block's four (down) or eight (gate/up) wgmma issued
    back to back and waited on once, not one wait per wgmma (ptxas's fallback, C7514, which the build
    refuses). With OVERLAP 1 (blocks in pairs: block k + 1's wgmma runs while block k's partial is
    promoted) one wait leaves a group in flight (0x1); without it every wait retires all (0x0)."""
    mmas, waits = wgmma_waits(sass(contract, tactic, tmp_path))
    per_block = 8 if tactic.startswith("g") else 4
    assert mmas >= per_block and sum(waits.values()) <= mmas // per_block + 1, (mmas, waits)
    assert (waits.get(1, 0) >= 1) == overlap and set(waits) <= {0, 1}, waits


def test_a_serialized_wgmma_is_refused_by_the_build_naming_the_artifact(tmp_path: Path) -> None:
    """A promotion moved above the wait that retires its block's wgmma still compiles, and works, but
    ptxas then waits on every wgmma in turn (its advisory C7514, not an error under -Werror): the build
    refuses the cubin in one line naming the artifact, and leaves no cubin behind."""
    from netra.errors import AssemblyError

    root = tmp_path / "tree"
    for d in ("kernels", "manifests"):
        shutil.copytree(REPO / d, root / d, symlinks=True)
    src = root / "kernels" / "cuda" / "fp8_moe_gate_up_tc.cu"
    good = "        tc::wg_wait_upto1();  // block kb's wgmma has completed (kb + 1's may still run)\n        promote(kb, dg0, du0);\n"
    assert good in src.read_text()
    src.write_text(
        src.read_text().replace(good, "        promote(kb, dg0, du0);\n        tc::wg_wait_upto1();\n")
    )
    spec = next(a for a in manifests.load(root).artifacts if a.name == GATE_UP_30B + "g8x64p")
    name = spec.name
    tgt = targets.get(spec.target)
    out, work = tmp_path / "out", tmp_path / "work"
    work.mkdir()
    with pytest.raises(
        AssemblyError, match=rf"^{name} \(.*\): ptxas serialized its wgmma instructions \(C7514"
    ):
        tgt.compile(spec, tgt.discover(), root, work, out)
    assert not [p for p in out.rglob("*") if p.is_file()], "a refused cubin was left behind"


def slot_sum_loads_before_the_first_output(code: list[str]) -> int:
    """The y32 and router-weight loads (__ldcg: LDG.E.STRONG.GPU) between the counters' last atomic and the
    first bf16 store of out (STG.E.U16): what a warp has requested before it writes its first sum."""
    atom = max(i for i, ins in enumerate(code) if re.match(r"(@!?P\d+\s+)?ATOMG\.E\.ADD", ins))
    store = next(i for i, ins in enumerate(code) if i > atom and re.match(r"(@!?P\d+\s+)?STG\.E\.U16", ins))
    return sum(1 for ins in code[atom:store] if re.match(r"(@!?P\d+\s+)?LDG\.E\.STRONG\.GPU", ins))


@pytest.mark.parametrize(
    ("tactic", "loads"),
    [
        (
            "d8x64m",
            8 * (1 + 128 // 32),
        ),  # SLOT_SUM: every weight and y32 value of a token (TOPK 8, 128 columns)
        ("d8x64s3m", 8 * (1 + 128 // 32)),
        ("d8x32cm", 8 * (1 + 128 // 32)),
    ],
)
def test_gathered_slot_sums_request_a_tokens_values_before_its_first_sum(
    tactic: str, loads: int, tmp_path: Path
) -> None:
    """SLOT_SUM 1 (docs/ops/fp8_moe.md, "Slot sums gathered"): all of a token's loads are issued before the
    first of its column groups is written, where SLOT_SUM 0 waits on each slot's load before its fma."""
    assert slot_sum_loads_before_the_first_output(sass(QWEN3_30B, tactic, tmp_path)) >= loads


@pytest.mark.parametrize("tactic", ["d8x64", "d8x64s3", "d8x32c"])
def test_slot_by_slot_sums_request_one_column_groups_values_first(tactic: str, tmp_path: Path) -> None:
    """Why SLOT_SUM exists, on the lock's toolchain: without it at most one column group's TOPK weights and
    y32 values precede the first store."""
    assert slot_sum_loads_before_the_first_output(sass(QWEN3_30B, tactic, tmp_path)) <= 16
