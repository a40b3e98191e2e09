"""The registry of op families: one module per family holding its record (netra.core.family).

Adding a family is one module here and one line in FAMILY_MODULES (docs/authoring.md); a chain of
families, one line in CHAIN_MODULES.
"""

from __future__ import annotations

from netra.core.families import (
    fp8_group_quant,
    fp8_moe,
    fp8_moe_down,
    fp8_moe_gate_up,
    fused_add_rmsnorm,
    fused_add_rmsnorm_fp8_group_quant,
    moe_grouped_topk_sigmoid,
    moe_topk_softmax,
    rmsnorm,
    rmsnorm_fp8_group_quant,
    silu_mul_fp8_quant,
)

FAMILY_MODULES = (
    rmsnorm,
    fp8_group_quant,
    silu_mul_fp8_quant,
    fused_add_rmsnorm,
    rmsnorm_fp8_group_quant,
    fused_add_rmsnorm_fp8_group_quant,
    moe_topk_softmax,
    moe_grouped_topk_sigmoid,
    fp8_moe_gate_up,
    fp8_moe_down,
)
# Operations served as a chain of the families above (netra.core.family.Chain).
CHAIN_MODULES = (fp8_moe,)
