"""The registry of op families: one module per family holding its record (netra.core.family).

Adding a family is one module here and one line in FAMILY_MODULES (docs/authoring.md).
"""

from __future__ import annotations

from netra.core.families import (
    fp8_group_quant,
    fused_add_rmsnorm,
    fused_add_rmsnorm_fp8_group_quant,
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
)
