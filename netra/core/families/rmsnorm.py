"""The rmsnorm family's record (netra.core.family); its contract: docs/ops/rmsnorm.md.

y = x * rsqrt(mean(x^2) + eps) * (w + weight_offset), one launch over rows.
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily, Scalar
from netra.core.launch import rows_launch

ARGS = ("y", "x", "w", "rows", "eps")
RECORD = OpFamily(
    name="rmsnorm",
    params=("hidden", "weight_offset"),
    short={"hidden": "h", "weight_offset": "wo"},
    inputs=(Operand("x", "bf16", ("rows", "hidden")), Operand("w", "bf16", ("hidden",))),
    outputs=(Operand("y", "bf16", ("rows", "hidden"), follows="x"),),
    scalars=(Scalar("eps", "float", param=False), Scalar("weight_offset", "int", 0)),
    args=ARGS,
    launch=rows_launch(ARGS, "rmsnorm", eps=True),
    layout="row-major contiguous [rows, hidden]",
    quant="none",
    doc="docs/ops/rmsnorm.md",
)
