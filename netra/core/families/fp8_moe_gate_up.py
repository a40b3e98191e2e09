"""The fp8_moe_gate_up family's record (netra.core.family): the first stage of the routed FP8 MoE
(netra/core/families/fp8_moe.py); its contract: docs/ops/fp8_moe.md.

For each (token, slot) pair the gate and up projections of the slot's expert as block-scaled FP8 dot
products, h = silu(gate) * up in fp32, quantized to FP8 per 128 columns as silu_mul_fp8_quant does.
Only the experts the tokens hit are read; the bytes moved count each once however many tokens route
to it, as a tactic loading each sub-slice once per call moves them (how often each tactic loads them:
docs/ops/fp8_moe.md, Bytes).
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily
from netra.core.launch import LaunchModel, Step, Value, Workspace

# A CTA computes `columns` gate rows and the matching up rows of one hit expert for every token routed
# to it (the template's COLUMNS): 16 in fp8_moe_gate_up (the last of a 128-column group's 8 CTAs
# quantizes the group), 128 in fp8_moe_gate_up_tc (a CTA quantizes its own group), each group's k blocks
# shared by ksplit CTAs (the template's KSPLIT: 1, or fp8_moe_gate_up_tc's cluster that adds their sums).
# A row of CTAs per hit expert, or at most grid_experts rows (the template's GRID_EXPERTS), each
# taking its hit experts in turn.
ARGS = ("hq", "hs", "xq", "xs", "ids", "w13", "w13s", "h32", "counts", "tokens")
RECORD = OpFamily(
    name="fp8_moe_gate_up",
    params=("experts", "topk", "hidden", "inter"),
    short={"experts": "e", "topk": "k", "hidden": "h", "inter": "i"},
    inputs=(
        Operand("xq", "fp8_e4m3fn", ("tokens", "hidden")),
        Operand("xs", "f32", ("tokens", "hidden / 128")),
        Operand("ids", "i32", ("tokens", "topk")),
        Operand("w13", "fp8_e4m3fn", ("experts", "2 * inter", "hidden")),
        Operand("w13s", "f32", ("experts", "2 * inter / 128", "hidden / 128")),
    ),
    outputs=(
        Operand("hq", "fp8_e4m3fn", ("tokens * topk", "inter")),
        Operand("hs", "f32", ("tokens * topk", "inter / 128")),
    ),
    scalars=(),
    args=ARGS,
    launch=LaunchModel(
        values=(Value("tokens", "u32", "tokens of the call (rows of xq and ids)"),),
        steps=(
            Step(
                "fp8_moe_gate_up",
                ARGS,
                ("inter / columns * ksplit", "min(experts, tokens * topk, grid_experts)", "1"),
            ),
        ),
        workspaces=(
            Workspace("h32", "tokens * topk * inter * 4", dtype="f32"),
            Workspace("counts", "experts * (inter / 128) * 4", zeroed=True, dtype="u32"),
        ),
        dispatch="tokens",
    ),
    layout="row-major contiguous; w13 [E, 2I, H] gate rows then up rows; pair p = token * topk + slot",
    quant="fp8 e4m3fn (OCP) weights with one f32 scale per 128x128 block, activations per 1x128; "
    "h quantized per 128 columns as silu_mul_fp8_quant",
    doc="docs/ops/fp8_moe.md",
    reads={
        "w13": "hit * 2 * inter * hidden",
        "w13s": "hit * (2 * inter / 128) * (hidden / 128) * 4",
    },
    derived={"hit": "min(experts, tokens * topk)"},
)
