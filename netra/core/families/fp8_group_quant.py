"""The fp8_group_quant family's record (netra.core.family); its contract: docs/ops/fp8_group_quant.md.

FP8 E4M3FN codes and one fp32 scale per group of a row.
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily, Scalar
from netra.core.launch import rows_launch

ARGS = ("q", "scales", "x", "rows")
RECORD = OpFamily(
    name="fp8_group_quant",
    params=("hidden", "group"),
    short={"hidden": "h", "group": "g"},
    inputs=(Operand("x", "bf16", ("rows", "hidden")),),
    outputs=(
        Operand("q", "fp8_e4m3fn", ("rows", "hidden")),
        Operand("scales", "f32", ("rows", "hidden / group")),
    ),
    scalars=(Scalar("group", "int", 128),),
    args=ARGS,
    launch=rows_launch(ARGS, "fp8_group_quant", eps=False),
    layout="row-major contiguous [rows, hidden]; scales [rows, hidden/group]",
    quant="fp8 e4m3fn (OCP), one fp32 scale per group, scale = max(amax, 1e-10)/448, RNE, saturate",
    doc="docs/ops/fp8_group_quant.md",
)
