"""Netra's certified kernels as PyTorch operators, with an explicit, counted fallback (docs/torch.md).

    import netra.torch as nt
    y = nt.rmsnorm(x, w, eps=1e-6)                 # bf16 [..., H]; weight_offset=1 for Gemma
    q, s = nt.fp8_group_quant(y)                   # float8_e4m3fn [..., H], fp32 [..., H/128]
    q, s = nt.silu_mul_fp8_quant(gate_up)          # [..., 2I] -> [..., I], [..., I/128]
    ids, w = nt.moe_topk_softmax(router_logits, topk=8)
    ids, w = nt.moe_grouped_topk_sigmoid(logits_f32, bias, 8, 8, 4, 2.5)  # DeepSeek-V3's router
    out = nt.fp8_moe(xq, xs, ids, w, w13, w13s, w2, w2s)  # routed FP8 experts at decode: bf16 [M, H]
    y, residual = nt.fused_add_rmsnorm(x, residual, w, eps=1e-6)             # residual add + norm
    q, s = nt.rmsnorm_fp8_group_quant(x, w, eps=1e-6)                        # norm + FP8 quant
    q, s, residual = nt.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps=1e-6)
    y = nt.fused_add_rmsnorm_(x, residual, w, eps=1e-6)                      # residual updated in place
    nt.stats()   # {"rmsnorm(hidden=4096,weight_offset=0)": {"certified": 12}, ...}
    with nt.strict(): ...                          # any fallback raises StrictModeError

The operators are torch.ops.netra.* (netra.torch.ops); importing this package registers them and
imports torch. `import netra` never imports this package, and nothing else in netra imports torch but
netra.integrations, which is built on it.
"""

try:
    import torch as _torch  # noqa: F401  (first, so a missing torch is named before anything else fails)
except ModuleNotFoundError as e:
    if e.name != "torch":
        raise
    raise ModuleNotFoundError(
        "netra.torch needs PyTorch (the build for your CUDA), which is not installed: "
        "pip install 'netra-kernel[torch]'",
        name="torch",
    ) from None

from netra.errors import StrictModeError
from netra.torch.dispatch import (
    batch_invariant,
    fallback_reasons,
    is_strict,
    kernel_for,
    policy,
    prepare,
    reset_stats,
    set_batch_invariant,
    set_policy,
    set_strict,
    set_tactics,
    stats,
    strict,
    tactics,
)
from netra.torch.ops import (
    fp8_group_quant,
    fp8_moe,
    fused_add_rmsnorm,
    fused_add_rmsnorm_,
    fused_add_rmsnorm_fp8_group_quant,
    fused_add_rmsnorm_fp8_group_quant_,
    moe_grouped_topk_sigmoid,
    moe_topk_softmax,
    rmsnorm,
    rmsnorm_fp8_group_quant,
    silu_mul_fp8_quant,
)

__all__ = [
    "StrictModeError",
    "batch_invariant",
    "fallback_reasons",
    "fp8_group_quant",
    "fp8_moe",
    "fused_add_rmsnorm",
    "fused_add_rmsnorm_",
    "fused_add_rmsnorm_fp8_group_quant",
    "fused_add_rmsnorm_fp8_group_quant_",
    "is_strict",
    "kernel_for",
    "moe_grouped_topk_sigmoid",
    "moe_topk_softmax",
    "policy",
    "prepare",
    "reset_stats",
    "rmsnorm",
    "rmsnorm_fp8_group_quant",
    "set_batch_invariant",
    "set_policy",
    "set_strict",
    "set_tactics",
    "silu_mul_fp8_quant",
    "stats",
    "strict",
    "tactics",
]
