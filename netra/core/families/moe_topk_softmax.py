"""The moe_topk_softmax family's record (netra.core.family); its contract: docs/ops/moe_topk_softmax.md.

The top-k experts of softmax(logits) and their renormalized weights.
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily, Scalar
from netra.core.launch import rows_launch

ARGS = ("ids", "weights", "logits", "rows")
RECORD = OpFamily(
    name="moe_topk_softmax",
    params=("experts", "topk"),
    short={"experts": "e", "topk": "k"},
    inputs=(Operand("logits", "bf16", ("rows", "experts")),),
    outputs=(Operand("ids", "i32", ("rows", "topk")), Operand("weights", "f32", ("rows", "topk"))),
    scalars=(Scalar("topk", "int"),),
    args=ARGS,
    launch=rows_launch(ARGS, "moe_topk_softmax", eps=False),
    layout="row-major contiguous [rows, experts]; ids and weights [rows, topk]",
    quant="none",
    doc="docs/ops/moe_topk_softmax.md",
)
