"""The op families as PyTorch custom operators (torch.library), and the Python functions that call them.

    torch.ops.netra.rmsnorm(Tensor x, Tensor w, float eps, int weight_offset=0) -> Tensor y
    torch.ops.netra.fp8_group_quant(Tensor x, int group=128) -> (Tensor q, Tensor scales)
    torch.ops.netra.silu_mul_fp8_quant(Tensor x, int group=128) -> (Tensor q, Tensor scales)
    torch.ops.netra.moe_topk_softmax(Tensor logits, int topk) -> (Tensor ids, Tensor weights)
    torch.ops.netra.fused_add_rmsnorm(Tensor x, Tensor residual, Tensor w, float eps, int weight_offset=0)
        -> (Tensor y, Tensor residual_out)
    torch.ops.netra.rmsnorm_fp8_group_quant(Tensor x, Tensor w, float eps, int weight_offset=0,
        int group=128) -> (Tensor q, Tensor scales)
    torch.ops.netra.fused_add_rmsnorm_fp8_group_quant(Tensor x, Tensor residual, Tensor w, float eps,
        int weight_offset=0, int group=128) -> (Tensor q, Tensor scales, Tensor residual_out)
    torch.ops.netra.<op>_out(<outputs>(a!), <the same arguments>) -> ()   (out= writes caller-owned tensors)
    torch.ops.netra.fused_add_rmsnorm_(Tensor x, Tensor(a!) residual, ...) -> Tensor y, and
    torch.ops.netra.fused_add_rmsnorm_fp8_group_quant_(Tensor x, Tensor(a!) residual, ...) -> (q, scales):
        in place, residual_out written over residual; the only operators that mutate an input, and
        their schemas say so

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

from typing import Any

import torch

from netra.torch import contracts, dispatch

_Pair = tuple[torch.Tensor, torch.Tensor]
_lib = torch.library.Library("netra", "DEF")
_TAGS = (torch.Tag.pt2_compliant_tag,)
_SCHEMAS = {
    "rmsnorm": "rmsnorm(Tensor x, Tensor w, float eps, int weight_offset=0) -> Tensor",
    "fp8_group_quant": "fp8_group_quant(Tensor x, int group=128) -> (Tensor, Tensor)",
    "silu_mul_fp8_quant": "silu_mul_fp8_quant(Tensor x, int group=128) -> (Tensor, Tensor)",
    "moe_topk_softmax": "moe_topk_softmax(Tensor logits, int topk) -> (Tensor, Tensor)",
    "fused_add_rmsnorm": (
        "fused_add_rmsnorm(Tensor x, Tensor residual, Tensor w, float eps, int weight_offset=0) -> (Tensor, Tensor)"
    ),
    "rmsnorm_fp8_group_quant": (
        "rmsnorm_fp8_group_quant(Tensor x, Tensor w, float eps, int weight_offset=0, int group=128)"
        " -> (Tensor, Tensor)"
    ),
    "fused_add_rmsnorm_fp8_group_quant": (
        "fused_add_rmsnorm_fp8_group_quant(Tensor x, Tensor residual, Tensor w, float eps,"
        " int weight_offset=0, int group=128) -> (Tensor, Tensor, Tensor)"
    ),
    # in place: residual_out is written over residual, declared mutated (a!); y (q, scales) returned new
    "fused_add_rmsnorm_": (
        "fused_add_rmsnorm_(Tensor x, Tensor(a!) residual, Tensor w, float eps, int weight_offset=0) -> Tensor"
    ),
    "fused_add_rmsnorm_fp8_group_quant_": (
        "fused_add_rmsnorm_fp8_group_quant_(Tensor x, Tensor(a!) residual, Tensor w, float eps,"
        " int weight_offset=0, int group=128) -> (Tensor, Tensor)"
    ),
}
_OUT_SCHEMAS = {  # the caller owns the outputs (first, like vLLM's ops); they return nothing, so that
    # torch.compile functionalizes them (auto_functionalized) and inductor writes the buffers in place
    "rmsnorm_out": "rmsnorm_out(Tensor(a!) y, Tensor x, Tensor w, float eps, int weight_offset=0) -> ()",
    "fp8_group_quant_out": "fp8_group_quant_out(Tensor(a!) q, Tensor(b!) scales, Tensor x, int group=128) -> ()",
    "silu_mul_fp8_quant_out": (
        "silu_mul_fp8_quant_out(Tensor(a!) q, Tensor(b!) scales, Tensor x, int group=128) -> ()"
    ),
    "moe_topk_softmax_out": (
        "moe_topk_softmax_out(Tensor(a!) ids, Tensor(b!) weights, Tensor logits, int topk) -> ()"
    ),
    "fused_add_rmsnorm_out": (
        "fused_add_rmsnorm_out(Tensor(a!) y, Tensor(b!) residual_out, Tensor x, Tensor residual, Tensor w,"
        " float eps, int weight_offset=0) -> ()"
    ),
    "rmsnorm_fp8_group_quant_out": (
        "rmsnorm_fp8_group_quant_out(Tensor(a!) q, Tensor(b!) scales, Tensor x, Tensor w, float eps,"
        " int weight_offset=0, int group=128) -> ()"
    ),
    "fused_add_rmsnorm_fp8_group_quant_out": (
        "fused_add_rmsnorm_fp8_group_quant_out(Tensor(a!) q, Tensor(b!) scales, Tensor(c!) residual_out,"
        " Tensor x, Tensor residual, Tensor w, float eps, int weight_offset=0, int group=128) -> ()"
    ),
}


def _rmsnorm_out_impl(
    y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0
) -> None:
    dispatch.rmsnorm(x, w, eps, weight_offset, y)


def _pair_out_impl(name: str) -> Any:
    impl = getattr(dispatch, name)

    def run(a: torch.Tensor, b: torch.Tensor, x: torch.Tensor, *n: int) -> None:
        impl(x, *n, out=(a, b))  # the family's own default when the dispatcher leaves n out

    return run


def _fused_add_rmsnorm_out_impl(
    y: torch.Tensor,
    r: torch.Tensor,
    x: torch.Tensor,
    res: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    wo: int = 0,
) -> None:
    dispatch.fused_add_rmsnorm(x, res, w, eps, wo, (y, r))


def _rmsnorm_fp8_group_quant_out_impl(
    q: torch.Tensor,
    s: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    wo: int = 0,
    group: int = 128,
) -> None:
    dispatch.rmsnorm_fp8_group_quant(x, w, eps, wo, group, (q, s))


def _fused_add_rmsnorm_fp8_group_quant_out_impl(
    q: torch.Tensor,
    s: torch.Tensor,
    r: torch.Tensor,
    x: torch.Tensor,
    res: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    wo: int = 0,
    group: int = 128,
) -> None:
    dispatch.fused_add_rmsnorm_fp8_group_quant(x, res, w, eps, wo, group, (q, s, r))


_OUT_IMPLS = {
    "fused_add_rmsnorm_out": _fused_add_rmsnorm_out_impl,
    "rmsnorm_fp8_group_quant_out": _rmsnorm_fp8_group_quant_out_impl,
    "fused_add_rmsnorm_fp8_group_quant_out": _fused_add_rmsnorm_fp8_group_quant_out_impl,
    "rmsnorm_out": _rmsnorm_out_impl,
    "fp8_group_quant_out": _pair_out_impl("fp8_group_quant"),
    "silu_mul_fp8_quant_out": _pair_out_impl("silu_mul_fp8_quant"),
    "moe_topk_softmax_out": _pair_out_impl("moe_topk_softmax"),
}
for _name, _schema in _SCHEMAS.items():
    _lib.define(_schema, tags=_TAGS)
    _lib.impl(_name, getattr(dispatch, _name), "CompositeExplicitAutograd")
for _name, _schema in _OUT_SCHEMAS.items():
    _lib.define(_schema, tags=_TAGS)
    _lib.impl(_name, _OUT_IMPLS[_name], "CompositeExplicitAutograd")

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


def _outs_fake(op: str, s: contracts.Shape, first: torch.Tensor, outs: tuple[torch.Tensor, ...]) -> None:
    contracts.outputs(op, s, first, outs)  # (overlap needs data pointers: checked when it runs)


@_register_fake("netra::rmsnorm_out", lib=_lib)
def _rmsnorm_out_fake(
    y: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0
) -> None:
    _outs_fake("rmsnorm", contracts.rmsnorm(x, w, eps, weight_offset), x, (y,))


@_register_fake("netra::fp8_group_quant_out", lib=_lib)
def _fp8_group_quant_out_fake(q: torch.Tensor, s: torch.Tensor, x: torch.Tensor, group: int = 128) -> None:
    _outs_fake("fp8_group_quant", contracts.fp8_group_quant(x, group), x, (q, s))


@_register_fake("netra::silu_mul_fp8_quant_out", lib=_lib)
def _silu_mul_fp8_quant_out_fake(q: torch.Tensor, s: torch.Tensor, x: torch.Tensor, group: int = 128) -> None:
    _outs_fake("silu_mul_fp8_quant", contracts.silu_mul_fp8_quant(x, group), x, (q, s))


@_register_fake("netra::moe_topk_softmax_out", lib=_lib)
def _moe_topk_softmax_out_fake(ids: torch.Tensor, w: torch.Tensor, logits: torch.Tensor, topk: int) -> None:
    _outs_fake("moe_topk_softmax", contracts.moe_topk_softmax(logits, topk), logits, (ids, w))


def _fused_fake(op: str, s: contracts.Shape, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(x.new_empty(sh, dtype=dt) for sh, dt in zip(s.out, contracts.out_dtypes(op, x), strict=True))


@_register_fake("netra::fused_add_rmsnorm", lib=_lib)
def _fused_add_rmsnorm_fake(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0
) -> tuple[torch.Tensor, ...]:
    op = "fused_add_rmsnorm"
    return _fused_fake(op, contracts.fused_add_rmsnorm(x, residual, w, eps, weight_offset), x)


@_register_fake("netra::rmsnorm_fp8_group_quant", lib=_lib)
def _rmsnorm_fp8_group_quant_fake(
    x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0, group: int = 128
) -> tuple[torch.Tensor, ...]:
    op = "rmsnorm_fp8_group_quant"
    return _fused_fake(op, contracts.rmsnorm_fp8_group_quant(x, w, eps, weight_offset, group), x)


@_register_fake("netra::fused_add_rmsnorm_fp8_group_quant", lib=_lib)
def _fused_add_rmsnorm_fp8_group_quant_fake(
    x: torch.Tensor,
    residual: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    group: int = 128,
) -> tuple[torch.Tensor, ...]:
    op = "fused_add_rmsnorm_fp8_group_quant"
    s = contracts.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps, weight_offset, group)
    return _fused_fake(op, s, x)


@_register_fake("netra::fused_add_rmsnorm_", lib=_lib)
def _fused_add_rmsnorm_inplace_fake(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0
) -> torch.Tensor:
    op = "fused_add_rmsnorm"
    return _fused_fake(op, contracts.fused_add_rmsnorm(x, residual, w, eps, weight_offset), x)[0]


@_register_fake("netra::fused_add_rmsnorm_fp8_group_quant_", lib=_lib)
def _fused_add_rmsnorm_fp8_group_quant_inplace_fake(
    x: torch.Tensor,
    residual: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    group: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    op = "fused_add_rmsnorm_fp8_group_quant"
    s = contracts.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps, weight_offset, group)
    q, sc, _ = _fused_fake(op, s, x)
    return q, sc


@_register_fake("netra::fused_add_rmsnorm_out", lib=_lib)
def _fused_add_rmsnorm_out_fake(
    y: torch.Tensor,
    r: torch.Tensor,
    x: torch.Tensor,
    res: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    wo: int = 0,
) -> None:
    _outs_fake("fused_add_rmsnorm", contracts.fused_add_rmsnorm(x, res, w, eps, wo), x, (y, r))


@_register_fake("netra::rmsnorm_fp8_group_quant_out", lib=_lib)
def _rmsnorm_fp8_group_quant_out_fake(
    q: torch.Tensor,
    s: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    wo: int = 0,
    group: int = 128,
) -> None:
    op = "rmsnorm_fp8_group_quant"
    _outs_fake(op, contracts.rmsnorm_fp8_group_quant(x, w, eps, wo, group), x, (q, s))


@_register_fake("netra::fused_add_rmsnorm_fp8_group_quant_out", lib=_lib)
def _fused_add_rmsnorm_fp8_group_quant_out_fake(
    q: torch.Tensor,
    s: torch.Tensor,
    r: torch.Tensor,
    x: torch.Tensor,
    res: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    wo: int = 0,
    group: int = 128,
) -> None:
    op = "fused_add_rmsnorm_fp8_group_quant"
    _outs_fake(op, contracts.fused_add_rmsnorm_fp8_group_quant(x, res, w, eps, wo, group), x, (q, s, r))


# ---------------------------------------------------------------------------------------------------
# The Python entry points

_fused_add_rmsnorm_op = torch.ops.netra.fused_add_rmsnorm.default
_rmsnorm_fp8_group_quant_op = torch.ops.netra.rmsnorm_fp8_group_quant.default
_fused_add_rmsnorm_fp8_group_quant_op = torch.ops.netra.fused_add_rmsnorm_fp8_group_quant.default
_fused_add_rmsnorm_inplace_op = torch.ops.netra.fused_add_rmsnorm_.default
_fused_add_rmsnorm_fp8_group_quant_inplace_op = torch.ops.netra.fused_add_rmsnorm_fp8_group_quant_.default
_fused_add_rmsnorm_out_op = torch.ops.netra.fused_add_rmsnorm_out.default
_rmsnorm_fp8_group_quant_out_op = torch.ops.netra.rmsnorm_fp8_group_quant_out.default
_fused_add_rmsnorm_fp8_group_quant_out_op = torch.ops.netra.fused_add_rmsnorm_fp8_group_quant_out.default
_rmsnorm_op = torch.ops.netra.rmsnorm.default
_fp8_group_quant_op = torch.ops.netra.fp8_group_quant.default
_silu_mul_fp8_quant_op = torch.ops.netra.silu_mul_fp8_quant.default
_moe_topk_softmax_op = torch.ops.netra.moe_topk_softmax.default
_rmsnorm_out_op = torch.ops.netra.rmsnorm_out.default
_fp8_group_quant_out_op = torch.ops.netra.fp8_group_quant_out.default
_silu_mul_fp8_quant_out_op = torch.ops.netra.silu_mul_fp8_quant_out.default
_moe_topk_softmax_out_op = torch.ops.netra.moe_topk_softmax_out.default

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


def rmsnorm(
    x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """y = x * rsqrt(mean(x^2, -1) + eps) * (w + weight_offset), rounded once to x's dtype (bf16).

    x [..., hidden], w [hidden]; weight_offset 1 is Gemma's x * (1 + w). With out=y (x's shape and
    dtype, overlapping neither input) y is written and returned. docs/ops/rmsnorm.md."""
    if (
        _eager()
        and (type(x) is _Tensor or type(x) is _Parameter)
        and (type(w) is _Tensor or type(w) is _Parameter)
        and not ((x.requires_grad or w.requires_grad) and _grad())
        and (out is None or type(out) is _Tensor)
    ):
        return _rmsnorm(x, w, eps, weight_offset, out)
    if (
        not (isinstance(x, _Tensor) and isinstance(w, _Tensor))
        or isinstance(eps, bool)
        or not isinstance(eps, (int, float))
        or type(weight_offset) is not int
    ):
        contracts.rmsnorm(x, w, eps, weight_offset)  # the one-line ContractError, not the dispatcher's
    if out is None:
        return _rmsnorm_op(x, w, eps, weight_offset)
    if not isinstance(out, _Tensor):
        contracts.outputs("rmsnorm", contracts.rmsnorm(x, w, eps, weight_offset), x, (out,))
    _rmsnorm_out_op(out, x, w, eps, weight_offset)
    return out


def fp8_group_quant(x: torch.Tensor, group: int = 128, *, out: _Pair | None = None) -> _Pair:
    """(q, scales): FP8 E4M3FN codes [..., hidden] (torch.float8_e4m3fn) and fp32 scales
    [..., hidden / group], s = max(amax, 1e-10) / 448 per group; out=(q, scales) writes those.
    docs/ops/fp8_group_quant.md."""
    if _eager() and type(x) is _Tensor and not (x.requires_grad and _grad()) and (out is None or _plain(out)):
        return _fp8_group_quant(x, group, out)
    if not isinstance(x, _Tensor) or type(group) is not int:
        contracts.fp8_group_quant(x, group)
    if out is None:
        return _fp8_group_quant_op(x, group)
    return _call_out(_fp8_group_quant_out_op, "fp8_group_quant", contracts.fp8_group_quant, x, group, out)


def silu_mul_fp8_quant(x: torch.Tensor, group: int = 128, *, out: _Pair | None = None) -> _Pair:
    """(q, scales) of h = silu(gate) * up for x = [gate | up] [..., 2 * inter]: q [..., inter] FP8
    E4M3FN, scales [..., inter / group] fp32; h is never rounded to bf16; out=(q, scales) writes those.
    docs/ops/silu_mul_fp8_quant.md."""
    if _eager() and type(x) is _Tensor and not (x.requires_grad and _grad()) and (out is None or _plain(out)):
        return _silu_mul_fp8_quant(x, group, out)
    if not isinstance(x, _Tensor) or type(group) is not int:
        contracts.silu_mul_fp8_quant(x, group)
    if out is None:
        return _silu_mul_fp8_quant_op(x, group)
    return _call_out(
        _silu_mul_fp8_quant_out_op, "silu_mul_fp8_quant", contracts.silu_mul_fp8_quant, x, group, out
    )


def moe_topk_softmax(logits: torch.Tensor, topk: int, *, out: _Pair | None = None) -> _Pair:
    """(ids, weights): the top-k experts of softmax(logits) [..., experts], most probable first, equal
    logits to the lower id (int32 [..., topk]), and their probabilities renormalized over the k (fp32
    [..., topk]); out=(ids, weights) writes those. docs/ops/moe_topk_softmax.md."""
    if (
        _eager()
        and type(logits) is _Tensor
        and not (logits.requires_grad and _grad())
        and (out is None or _plain(out))
    ):
        return _moe_topk_softmax(logits, topk, out)
    if not isinstance(logits, _Tensor) or type(topk) is not int:
        contracts.moe_topk_softmax(logits, topk)
    if out is None:
        return _moe_topk_softmax_op(logits, topk)
    return _call_out(
        _moe_topk_softmax_out_op, "moe_topk_softmax", contracts.moe_topk_softmax, logits, topk, out
    )


def _plain(out: Any) -> bool:
    """A pair of plain tensors: the direct call is what the dispatcher would do."""
    return type(out) is tuple and len(out) == 2 and type(out[0]) is _Tensor and type(out[1]) is _Tensor


def _call_out(op: Any, name: str, check: Any, x: torch.Tensor, n: int, out: Any) -> _Pair:
    """Call an out= operator (a, b, x, n) and return the caller's pair."""
    a, b = contracts.as_outs(name, out)
    if not (isinstance(a, _Tensor) and isinstance(b, _Tensor)):
        contracts.outputs(name, check(x, n), x, (a, b))  # the one-line ContractError
    op(a, b, x, n)
    return a, b


# ---------------------------------------------------------------------------------------------------
# The fused families


def _plain_all(*ts: Any) -> bool:
    """Plain tensors (Tensor or Parameter), none needing grad while grad is recorded."""
    for t in ts:
        if not (type(t) is _Tensor or type(t) is _Parameter) or (t.requires_grad and _grad()):
            return False
    return True


def _plain_outs(out: Any, n: int) -> bool:
    return out is None or (type(out) is tuple and len(out) == n and all(type(t) is _Tensor for t in out))


def fused_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out): residual_out = bf16(x + residual) (one rounding), y = rmsnorm(residual_out, w,
    eps, weight_offset) as nt.rmsnorm. out=(y, residual_out) writes those; residual_out may be residual
    itself (vLLM's in-place form; nt.fused_add_rmsnorm_ is that operator). docs/ops/fused_add_rmsnorm.md."""
    if _eager() and _plain_all(x, residual, w) and _plain_outs(out, 2):
        return dispatch.fused_add_rmsnorm(x, residual, w, eps, weight_offset, out)
    contracts.fused_add_rmsnorm(x, residual, w, eps, weight_offset)
    if out is None:
        y, r = _fused_add_rmsnorm_op(x, residual, w, eps, weight_offset)
        return y, r
    y, r = contracts.as_outs("fused_add_rmsnorm", out)
    if r is residual:  # in place: the mutation goes through the operator that declares it
        y.copy_(_fused_add_rmsnorm_inplace_op(x, residual, w, eps, weight_offset))
        return y, r
    _fused_add_rmsnorm_out_op(y, r, x, residual, w, eps, weight_offset)
    return y, r


def fused_add_rmsnorm_(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0
) -> torch.Tensor:
    """In place: residual becomes bf16(x + residual), and y = rmsnorm of it is returned (what vLLM's
    engine calls between layers). The operator's schema declares residual mutated (Tensor(a!)), so
    torch.compile and CUDA graphs see the write. docs/ops/fused_add_rmsnorm.md."""
    if _eager() and _plain_all(x, residual, w):
        return dispatch.fused_add_rmsnorm_(x, residual, w, eps, weight_offset)
    contracts.fused_add_rmsnorm(x, residual, w, eps, weight_offset)
    return _fused_add_rmsnorm_inplace_op(x, residual, w, eps, weight_offset)


def rmsnorm_fp8_group_quant(
    x: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    group: int = 128,
    *,
    out: _Pair | None = None,
) -> _Pair:
    """(q, scales) = nt.fp8_group_quant(nt.rmsnorm(x, w, eps, weight_offset), group) in one pass: the norm
    rounded to bf16 once, then quantized exactly as fp8_group_quant. docs/ops/rmsnorm_fp8_group_quant.md."""
    if _eager() and _plain_all(x, w) and _plain_outs(out, 2):
        return dispatch.rmsnorm_fp8_group_quant(x, w, eps, weight_offset, group, out)
    contracts.rmsnorm_fp8_group_quant(x, w, eps, weight_offset, group)
    if out is None:
        q, s = _rmsnorm_fp8_group_quant_op(x, w, eps, weight_offset, group)
        return q, s
    q, s = contracts.as_outs("rmsnorm_fp8_group_quant", out)
    _rmsnorm_fp8_group_quant_out_op(q, s, x, w, eps, weight_offset, group)
    return q, s


def fused_add_rmsnorm_fp8_group_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    group: int = 128,
    *,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scales, residual_out): residual_out = bf16(x + residual), (q, scales) =
    nt.rmsnorm_fp8_group_quant(residual_out, ...). out=(q, scales, residual_out), where residual_out may
    be residual itself (nt.fused_add_rmsnorm_fp8_group_quant_ is that operator).
    docs/ops/fused_add_rmsnorm_fp8_group_quant.md."""
    if _eager() and _plain_all(x, residual, w) and _plain_outs(out, 3):
        return dispatch.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps, weight_offset, group, out)
    contracts.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps, weight_offset, group)
    if out is None:
        q, s, r = _fused_add_rmsnorm_fp8_group_quant_op(x, residual, w, eps, weight_offset, group)
        return q, s, r
    q, s, r = contracts.as_outs("fused_add_rmsnorm_fp8_group_quant", out)
    if r is residual:
        q2, s2 = _fused_add_rmsnorm_fp8_group_quant_inplace_op(x, residual, w, eps, weight_offset, group)
        q.copy_(q2)
        s.copy_(s2)
        return q, s, r
    _fused_add_rmsnorm_fp8_group_quant_out_op(q, s, r, x, residual, w, eps, weight_offset, group)
    return q, s, r


def fused_add_rmsnorm_fp8_group_quant_(
    x: torch.Tensor,
    residual: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    group: int = 128,
) -> _Pair:
    """In place: residual becomes bf16(x + residual); (q, scales) of its norm are returned. The schema
    declares residual mutated. docs/ops/fused_add_rmsnorm_fp8_group_quant.md."""
    if _eager() and _plain_all(x, residual, w):
        return dispatch.fused_add_rmsnorm_fp8_group_quant_(x, residual, w, eps, weight_offset, group)
    contracts.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps, weight_offset, group)
    q, s = _fused_add_rmsnorm_fp8_group_quant_inplace_op(x, residual, w, eps, weight_offset, group)
    return q, s
