"""The routed FP8 MoE at decode, served as a chain of two families (netra.core.family.Chain); its
contract: docs/ops/fp8_moe.md.

gate/up (netra/core/families/fp8_moe_gate_up.py) writes h's FP8 codes and scales, down
(fp8_moe_down.py) reads them. Each stage is certified on its own against the float64 reference, the
second fed with the first's own codes: that is where the chain rounds, so that is where it is judged.
"""

from __future__ import annotations

from netra.core.family import Chain

CHAIN = Chain(
    name="fp8_moe",
    stages=("fp8_moe_gate_up", "fp8_moe_down"),
    links=("hq", "hs"),
    overlaps_previous=(False, True),
    inputs=("xq", "xs", "ids", "weights", "w13", "w13s", "w2", "w2s"),
    max_dispatch=64,  # decode and speculative verification; the templates' MAX_TOKENS (64) holds it
    doc="docs/ops/fp8_moe.md",
)
