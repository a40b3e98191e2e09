"""The probe kernel the CUDA classes' static-check tests compile with the real nvcc, and its spec: one
source for sm_90's and sm_100's gates, so both judge the same cubin the same way."""

from __future__ import annotations

import subprocess
from pathlib import Path

from netra.core.types import Arg, ArtifactSpec, Tactic, Template
from netra.targets.target import Tools

ARGS = (
    Arg("y", 0, 8, "global_buffer", "f32*", "global"),
    Arg("x", 8, 8, "global_buffer", "f32*", "global"),
    Arg("rows", 16, 4, "by_value", "u32"),
)
GOOD = """
#include <stdint.h>
extern "C" __global__ void __launch_bounds__(128) probe(float* y, const float* x, uint32_t rows) {
  uint32_t i = blockIdx.x * 128 + threadIdx.x;
  if (i < rows) y[i] = x[i] * 2.0f;
}
"""


def spec_for(
    target: str, maturity: str, *, block: int = 128, registers: int = 64, shared: int = 0,
    args: tuple[Arg, ...] = ARGS,
) -> ArtifactSpec:  # fmt: skip
    """The probe's spec under `target`'s budget (registers, shared bytes) and launch."""
    tpl = Template(
        name="probe", target=target, op="rmsnorm", source="kernels/cuda/probe.cu", constants={}, args=args,
        budget={"registers": registers, "shared_bytes": shared},
    )  # fmt: skip
    tac = Tactic(op="rmsnorm", name="p", template="probe", block=block, maturity=maturity, why="",
                 target=target, rows_per_block=1)  # fmt: skip
    return ArtifactSpec(
        name="probe", target=target, template=tpl, tactic=tac, contract={},
        definitions={"NETRA_BLOCK": block, "NETRA_GRID_Y": 1, "NETRA_ROWS_PER_BLOCK": 1}, rows_per_block=1,
        file=f"{target}/probe.cubin",
    )  # fmt: skip


def compile_cu(tools: Tools, tmp: Path, text: str, *flags: str, arch: str) -> Path:
    """`text` compiled by the real nvcc to tmp/k.cubin (the test fails with nvcc's message if it cannot)."""
    (tmp / "k.cu").write_text(text)
    r = subprocess.run(
        [tools["nvcc"], "-cubin", f"-arch={arch}", "-O3", *flags, "-o", "k.cubin", "k.cu"],
        cwd=tmp, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return tmp / "k.cubin"
