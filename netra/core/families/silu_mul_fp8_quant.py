"""The silu_mul_fp8_quant family's record (netra.core.family); its contract: docs/ops/silu_mul_fp8_quant.md.

Silu(gate) * up of x = [gate | up], quantized as fp8_group_quant.
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily, Scalar
from netra.core.launch import rows_launch

ARGS = ("q", "scales", "x", "rows")
RECORD = OpFamily(
    name="silu_mul_fp8_quant",
    params=("inter", "group"),
    short={"inter": "i", "group": "g"},
    inputs=(Operand("x", "bf16", ("rows", "2 * inter")),),
    outputs=(
        Operand("q", "fp8_e4m3fn", ("rows", "inter")),
        Operand("scales", "f32", ("rows", "inter / group")),
    ),
    scalars=(Scalar("group", "int", 128),),
    args=ARGS,
    launch=rows_launch(ARGS, "silu_mul_fp8_quant", eps=False),
    layout="row-major contiguous [rows, 2*inter] as [gate | up]; q [rows, inter]",
    quant="fp8 e4m3fn (OCP), one fp32 scale per group, scale = max(amax, 1e-10)/448, RNE, saturate",
    doc="docs/ops/silu_mul_fp8_quant.md",
)
