"""The fp8_moe_down family's record (netra.core.family): the second stage of the routed FP8 MoE
(netra/core/families/fp8_moe.py); its contract: docs/ops/fp8_moe.md.

For each (token, slot) pair the down projection of the slot's expert over the FP8 codes of h (block-
scaled), then per token the router-weighted sum over the slots in slot order, rounded once to bf16.
Only the experts the tokens hit are read; the bytes moved count each once however many tokens route
to it, as a tactic loading each sub-slice once per call moves them (how often each tactic loads them:
docs/ops/fp8_moe.md, Bytes).
"""

from __future__ import annotations

from netra.core.family import Operand, OpFamily
from netra.core.launch import LaunchModel, Step, Value, Workspace

# A CTA computes `columns` output columns (the template's COLUMNS) of one hit expert for every token
# routed to it: 32 in fp8_moe_down, 128 in fp8_moe_down_tc; the last slot to finish a (token, column
# tile) sums the slots in order and writes bf16 (no atomics on the output).
# Rows of CTAs as fp8_moe_gate_up's (at most grid_experts, each taking its hit experts in turn). A
# slot_tile tactic: 16 columns a CTA, one row, every pair, the slots summed in the CTA (no counters).
ARGS = ("out", "hq", "hs", "ids", "weights", "w2", "w2s", "y32", "counts", "tokens")
RECORD = OpFamily(
    name="fp8_moe_down",
    params=("experts", "topk", "hidden", "inter"),
    short={"experts": "e", "topk": "k", "hidden": "h", "inter": "i"},
    inputs=(
        Operand("hq", "fp8_e4m3fn", ("tokens * topk", "inter")),
        Operand("hs", "f32", ("tokens * topk", "inter / 128")),
        Operand("ids", "i32", ("tokens", "topk")),
        Operand("weights", "f32", ("tokens", "topk")),
        Operand("w2", "fp8_e4m3fn", ("experts", "hidden", "inter")),
        Operand("w2s", "f32", ("experts", "hidden / 128", "inter / 128")),
    ),
    outputs=(Operand("out", "bf16", ("tokens", "hidden")),),
    scalars=(),
    args=ARGS,
    launch=LaunchModel(
        values=(Value("tokens", "u32", "tokens of the call (rows of ids and out)"),),
        steps=(
            Step(
                "fp8_moe_down",
                ARGS,
                ("hidden / columns", "min(experts, tokens * topk, grid_experts)", "1"),
            ),
        ),
        workspaces=(
            Workspace("y32", "tokens * topk * hidden * 4", dtype="f32"),
            Workspace("counts", "tokens * (hidden / 32) * 4", zeroed=True, dtype="u32"),
        ),
        dispatch="tokens",
    ),
    layout="row-major contiguous; w2 [E, H, I]; pair p = token * topk + slot; out [tokens, H]",
    quant="fp8 e4m3fn (OCP) weights with one f32 scale per 128x128 block, h per 1x128; bf16 output",
    doc="docs/ops/fp8_moe.md",
    reads={
        "w2": "hit * hidden * inter",
        "w2s": "hit * (hidden / 128) * (inter / 128) * 4",
    },
    derived={"hit": "min(experts, tokens * topk)"},
)
