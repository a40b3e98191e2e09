"""The moe_grouped_topk_sigmoid family's record (netra.core.family); its contract:
docs/ops/moe_grouped_topk_sigmoid.md.

DeepSeek-V3's router (noaux_tc): sigmoid scores plus a per-expert correction bias choose the best
topk_groups of the expert groups (each scored by the sum of its two best biased scores) and the top-k
experts inside them; the unbiased scores of those experts, renormalized, times the routed scaling
factor are the weights. The factor (2.5 for DeepSeek-V3) is not an integer: it is a runtime f32 value
the kernel reads, as a norm's eps is, not a contract parameter.
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily, Scalar
from netra.core.launch import LaunchModel, Step, Value

ARGS = ("ids", "weights", "logits", "bias", "rows", "scale")
RECORD = OpFamily(
    name="moe_grouped_topk_sigmoid",
    params=("experts", "topk", "groups", "topk_groups"),
    short={"experts": "e", "topk": "k", "groups": "g", "topk_groups": "tg"},
    inputs=(Operand("logits", "f32", ("rows", "experts")), Operand("bias", "f32", ("experts",))),
    outputs=(Operand("ids", "i32", ("rows", "topk")), Operand("weights", "f32", ("rows", "topk"))),
    scalars=(
        Scalar("topk", "int"),
        Scalar("groups", "int"),
        Scalar("topk_groups", "int"),
        Scalar("scale", "float", param=False),
    ),
    args=ARGS,
    launch=LaunchModel(
        values=(
            Value("rows", "u32", "tokens (leading dimensions of logits flattened)"),
            Value("scale", "f32", "the routed scaling factor the renormalized weights are multiplied by"),
        ),
        steps=(Step("moe_grouped_topk_sigmoid", ARGS),),
    ),
    layout="row-major contiguous logits [rows, experts], bias [experts]; ids and weights [rows, topk]",
    quant="none",
    doc="docs/ops/moe_grouped_topk_sigmoid.md",
)
