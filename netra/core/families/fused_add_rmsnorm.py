"""The fused_add_rmsnorm family's record (netra.core.family); its contract: docs/ops/fused_add_rmsnorm.md.

Residual_out = x + residual, y = rmsnorm(residual_out); residual_out may be residual.
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily, Scalar
from netra.core.launch import rows_launch

ARGS = ("residual_out", "y", "x", "residual", "w", "rows", "eps")
RECORD = OpFamily(
    name="fused_add_rmsnorm",
    params=("hidden", "weight_offset"),
    short={"hidden": "h", "weight_offset": "wo"},
    inputs=(
        Operand("x", "bf16", ("rows", "hidden")),
        Operand("residual", "bf16", ("rows", "hidden")),
        Operand("w", "bf16", ("hidden",)),
    ),
    outputs=(
        Operand("y", "bf16", ("rows", "hidden"), follows="x"),
        Operand("residual_out", "bf16", ("rows", "hidden"), follows="x"),
    ),
    scalars=(Scalar("eps", "float", param=False), Scalar("weight_offset", "int", 0)),
    args=ARGS,
    launch=rows_launch(ARGS, "fused_add_rmsnorm", eps=True),
    layout="row-major contiguous [rows, hidden]; residual_out may be residual (in place)",
    quant="none",
    doc="docs/ops/fused_add_rmsnorm.md",
    aliases=(("residual_out", "residual"),),
)
