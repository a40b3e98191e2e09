"""The four op families as PyTorch custom operators (torch.library), and the Python functions that call them.

    torch.ops.netra.rmsnorm(Tensor x, Tensor w, float eps, int weight_offset=0) -> Tensor y
    torch.ops.netra.fp8_group_quant(Tensor x, int group=128) -> (Tensor q, Tensor scales)
    torch.ops.netra.silu_mul_fp8_quant(Tensor x, int group=128) -> (Tensor q, Tensor scales)
    torch.ops.netra.moe_topk_softmax(Tensor logits, int topk) -> (Tensor ids, Tensor weights)

Each is defined in the `netra` namespace with one CompositeExplicitAutograd kernel (netra.torch.dispatch:
the certified kernel or the composite, on any device) and a fake implementation that checks the call
and gives the outputs' shapes and dtypes without running anything, so FakeTensorMode, torch.compile and
torch.export trace them as single opaque nodes. They are functional (no input is mutated, outputs are
new contiguous tensors), and the kernels launch on torch's current CUDA stream, so CUDA graphs capture
them.

The Python functions (rmsnorm, ...) call the operator, except in plain eager mode, where they call the
implementation directly: when no torch.compile/export trace, dispatch or function mode, functorch
transform, JIT trace or autograd recording is active and the tensors are plain (a Tensor or a
Parameter), going through the dispatcher only adds its cost (a few microseconds per call) and changes
nothing else. In every other case the operator is called.

torch.library.Library.define/impl rather than torch.library.custom_op: custom_op wraps every call in
Python-level autograd and aliasing checks, about 5 us more per call through the dispatcher on the
development machine, which compiled graphs (inductor calls the operator) would pay on every call.
"""

from __future__ import annotations

import torch

from netra.torch import contracts, dispatch

_lib = torch.library.Library("netra", "DEF")
_TAGS = (torch.Tag.pt2_compliant_tag,)
_SCHEMAS = {
    "rmsnorm": "rmsnorm(Tensor x, Tensor w, float eps, int weight_offset=0) -> Tensor",
    "fp8_group_quant": "fp8_group_quant(Tensor x, int group=128) -> (Tensor, Tensor)",
    "silu_mul_fp8_quant": "silu_mul_fp8_quant(Tensor x, int group=128) -> (Tensor, Tensor)",
    "moe_topk_softmax": "moe_topk_softmax(Tensor logits, int topk) -> (Tensor, Tensor)",
}
for _name, _schema in _SCHEMAS.items():
    _lib.define(_schema, tags=_TAGS)
    _lib.impl(_name, getattr(dispatch, _name), "CompositeExplicitAutograd")

_register_fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract


@_register_fake("netra::rmsnorm", lib=_lib)
def _rmsnorm_fake(x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0) -> torch.Tensor:
    s = contracts.rmsnorm(x, w, eps, weight_offset)
    return x.new_empty(s.out[0])


def _quant_fake(s: contracts.Shape, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(s.out[0], dtype=torch.float8_e4m3fn), x.new_empty(s.out[1], dtype=torch.float32)


@_register_fake("netra::fp8_group_quant", lib=_lib)
def _fp8_group_quant_fake(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    return _quant_fake(contracts.fp8_group_quant(x, group), x)


@_register_fake("netra::silu_mul_fp8_quant", lib=_lib)
def _silu_mul_fp8_quant_fake(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    return _quant_fake(contracts.silu_mul_fp8_quant(x, group), x)


@_register_fake("netra::moe_topk_softmax", lib=_lib)
def _moe_topk_softmax_fake(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    s = contracts.moe_topk_softmax(logits, topk)
    return logits.new_empty(s.out[0], dtype=torch.int32), logits.new_empty(s.out[1], dtype=torch.float32)


# ---------------------------------------------------------------------------------------------------
# The Python entry points

_rmsnorm_op = torch.ops.netra.rmsnorm.default
_fp8_group_quant_op = torch.ops.netra.fp8_group_quant.default
_silu_mul_fp8_quant_op = torch.ops.netra.silu_mul_fp8_quant.default
_moe_topk_softmax_op = torch.ops.netra.moe_topk_softmax.default

_rmsnorm = dispatch.rmsnorm
_fp8_group_quant = dispatch.fp8_group_quant
_silu_mul_fp8_quant = dispatch.silu_mul_fp8_quant
_moe_topk_softmax = dispatch.moe_topk_softmax
_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_C = torch._C
_compiling = torch.compiler.is_compiling
_grad = torch.is_grad_enabled
_hooks = (
    getattr(_C, "_len_torch_dispatch_stack", None),
    getattr(_C, "_is_torch_function_mode_enabled", None),
    getattr(_C, "_are_functorch_transforms_active", None),
    getattr(_C, "_get_tracing_state", None),
)
_FAST = all(h is not None for h in _hooks)
_dispatch_modes, _function_modes, _functorch, _jit_tracing = _hooks


def _eager() -> bool:
    """True when calling the implementation directly is exactly what the dispatcher would do (the
    tensors must also be plain: checked by the callers, inline)."""
    return (
        _FAST
        and not _compiling()  # first: under torch.compile this is a constant and nothing else is traced
        and not _dispatch_modes()  # type: ignore[misc]
        and not _function_modes()  # type: ignore[misc]
        and not _functorch()  # type: ignore[misc]
        and _jit_tracing() is None  # type: ignore[misc]
    )


def rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0) -> torch.Tensor:
    """y = x * rsqrt(mean(x^2, -1) + eps) * (w + weight_offset), rounded once to x's dtype (bf16).

    x [..., hidden], w [hidden]; weight_offset 1 is Gemma's x * (1 + w). docs/ops/rmsnorm.md."""
    if (
        _eager()
        and (type(x) is _Tensor or type(x) is _Parameter)
        and (type(w) is _Tensor or type(w) is _Parameter)
        and not ((x.requires_grad or w.requires_grad) and _grad())
    ):
        return _rmsnorm(x, w, eps, weight_offset)
    if (
        not (isinstance(x, _Tensor) and isinstance(w, _Tensor))
        or isinstance(eps, bool)
        or not isinstance(eps, (int, float))
        or type(weight_offset) is not int
    ):
        contracts.rmsnorm(x, w, eps, weight_offset)  # the one-line ContractError, not the dispatcher's
    return _rmsnorm_op(x, w, eps, weight_offset)


def fp8_group_quant(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scales): FP8 E4M3FN codes [..., hidden] (torch.float8_e4m3fn) and fp32 scales
    [..., hidden / group], s = max(amax, 1e-10) / 448 per group. docs/ops/fp8_group_quant.md."""
    if _eager() and type(x) is _Tensor and not (x.requires_grad and _grad()):
        return _fp8_group_quant(x, group)
    if not isinstance(x, _Tensor) or type(group) is not int:
        contracts.fp8_group_quant(x, group)
    return _fp8_group_quant_op(x, group)


def silu_mul_fp8_quant(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scales) of h = silu(gate) * up for x = [gate | up] [..., 2 * inter]: q [..., inter] FP8
    E4M3FN, scales [..., inter / group] fp32; h is never rounded to bf16. docs/ops/silu_mul_fp8_quant.md."""
    if _eager() and type(x) is _Tensor and not (x.requires_grad and _grad()):
        return _silu_mul_fp8_quant(x, group)
    if not isinstance(x, _Tensor) or type(group) is not int:
        contracts.silu_mul_fp8_quant(x, group)
    return _silu_mul_fp8_quant_op(x, group)


def moe_topk_softmax(logits: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, weights): the top-k experts of softmax(logits) [..., experts], most probable first, equal
    logits to the lower id (int32 [..., topk]), and their probabilities renormalized over the k (fp32
    [..., topk]). docs/ops/moe_topk_softmax.md."""
    if _eager() and type(logits) is _Tensor and not (logits.requires_grad and _grad()):
        return _moe_topk_softmax(logits, topk)
    if not isinstance(logits, _Tensor) or type(topk) is not int:
        contracts.moe_topk_softmax(logits, topk)
    return _moe_topk_softmax_op(logits, topk)
