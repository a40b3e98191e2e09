"""The rmsnorm_fp8_group_quant family's record (netra.core.family); its contract: docs/ops/rmsnorm_fp8_group_quant.md.

Rmsnorm rounded to bf16, then quantized as fp8_group_quant.
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily, Scalar
from netra.core.launch import rows_launch

ARGS = ("q", "scales", "x", "w", "rows", "eps")
RECORD = OpFamily(
    name="rmsnorm_fp8_group_quant",
    params=("hidden", "weight_offset", "group"),
    short={"hidden": "h", "weight_offset": "wo", "group": "g"},
    inputs=(Operand("x", "bf16", ("rows", "hidden")), Operand("w", "bf16", ("hidden",))),
    outputs=(
        Operand("q", "fp8_e4m3fn", ("rows", "hidden")),
        Operand("scales", "f32", ("rows", "hidden / group")),
    ),
    scalars=(
        Scalar("eps", "float", param=False),
        Scalar("weight_offset", "int", 0),
        Scalar("group", "int", 128),
    ),
    args=ARGS,
    launch=rows_launch(ARGS, "rmsnorm_fp8_group_quant", eps=True),
    layout="row-major contiguous [rows, hidden]; scales [rows, hidden/group]",
    quant="rmsnorm rounded to bf16, then fp8 e4m3fn (OCP) as fp8_group_quant",
    doc="docs/ops/rmsnorm_fp8_group_quant.md",
)
