"""The fused_add_rmsnorm_fp8_group_quant family's record (netra.core.family); its contract: docs/ops/fused_add_rmsnorm_fp8_group_quant.md.

Fused_add_rmsnorm whose norm is quantized as fp8_group_quant.
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily, Scalar
from netra.core.launch import rows_launch

ARGS = ("residual_out", "q", "scales", "x", "residual", "w", "rows", "eps")
RECORD = OpFamily(
    name="fused_add_rmsnorm_fp8_group_quant",
    params=("hidden", "weight_offset", "group"),
    short={"hidden": "h", "weight_offset": "wo", "group": "g"},
    inputs=(
        Operand("x", "bf16", ("rows", "hidden")),
        Operand("residual", "bf16", ("rows", "hidden")),
        Operand("w", "bf16", ("hidden",)),
    ),
    outputs=(
        Operand("q", "fp8_e4m3fn", ("rows", "hidden")),
        Operand("scales", "f32", ("rows", "hidden / group")),
        Operand("residual_out", "bf16", ("rows", "hidden"), follows="x"),
    ),
    scalars=(
        Scalar("eps", "float", param=False),
        Scalar("weight_offset", "int", 0),
        Scalar("group", "int", 128),
    ),
    args=ARGS,
    launch=rows_launch(ARGS, "fused_add_rmsnorm_fp8_group_quant", eps=True),
    layout="row-major contiguous [rows, hidden]; scales [rows, hidden/group]; residual_out may be residual",
    quant="rmsnorm of residual_out rounded to bf16, then fp8 e4m3fn (OCP) as fp8_group_quant",
    doc="docs/ops/fused_add_rmsnorm_fp8_group_quant.md",
    aliases=(("residual_out", "residual"),),
)
