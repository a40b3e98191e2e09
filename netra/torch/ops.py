"""The op families as PyTorch custom operators (torch.library), and the Python functions that call them.

    torch.ops.netra.<op>(<inputs>, <scalars>) -> <outputs>            e.g. rmsnorm(Tensor x, Tensor w,
                                                                      float eps, int weight_offset=0) -> Tensor
    torch.ops.netra.<op>_out(Tensor(a!) <out>, ..., <inputs>, <scalars>) -> ()   (caller-owned outputs)
    torch.ops.netra.<op>_(..., Tensor(a!) residual, ...) -> <the other outputs>  (in place, where the
        family's record lets an output be its input: the two fused adds; their schemas say so)

Every schema, fake and out= implementation is derived from the family's record (netra/core/families/,
netra.torch.signatures); only the Python entry points below are written per family. Each is defined in
the `netra` namespace with one CompositeExplicitAutograd kernel (netra.torch.dispatch:
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

from collections.abc import Callable
from typing import Any

import torch

from netra.core.ops import FAMILIES, STAGES, OpFamily
from netra.torch import contracts, dispatch, fused, moe, signatures

_Pair = tuple[torch.Tensor, torch.Tensor]
_lib = torch.library.Library("netra", "DEF")
_TAGS = (torch.Tag.pt2_compliant_tag,)
_register_fake = getattr(torch.library, "register_fake", None) or torch.library.impl_abstract


def _complete(fam: OpFamily, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A call's arguments with the scalars the dispatcher left out given their schema defaults."""
    n = len(fam.inputs) + len(fam.scalars)
    return args + tuple(s.default for s in fam.scalars[len(args) - n :]) if len(args) < n else args


def _implementation(name: str) -> Callable[..., Any]:
    """The eager implementation of an operator: netra.torch.fused's for the fused families, else dispatch's."""
    impl: Callable[..., Any] = getattr(fused if name in fused.OPS else dispatch, name)
    return impl


def _out_impl(fam: OpFamily) -> Callable[..., None]:
    """`<op>_out(outs..., inputs..., scalars...)`: the eager implementation writing the caller's outputs."""
    impl, n = _implementation(fam.name), len(fam.outputs)

    def run(*args: Any) -> None:
        impl(*args[n:], out=args[0] if n == 1 else tuple(args[:n]))

    return run


def _fakes(fam: OpFamily) -> dict[str, Callable[..., Any]]:
    """The fake (meta) implementations of a family's operators: the same checks as the eager path and
    empty outputs of the record's shapes and dtypes; nothing runs."""
    op, check, n = fam.name, getattr(contracts, fam.name), len(fam.outputs)

    def new(*args: Any) -> tuple[torch.Tensor, ...]:
        s = check(*_complete(fam, args))
        x = args[0]
        return tuple(
            x.new_empty(sh, dtype=dt) for sh, dt in zip(s.out, contracts.out_dtypes(op, x), strict=True)
        )

    def functional(*args: Any) -> Any:
        outs = new(*args)
        return outs[0] if n == 1 else outs

    def out(*args: Any) -> None:
        outs, rest = args[:n], _complete(fam, args[n:])
        contracts.outputs(op, check(*rest), rest[0], outs)  # (overlap needs data pointers: checked when run)

    fakes = {op: functional, f"{op}_out": out}
    if fam.aliases:
        written = fam.out_names.index(fam.aliases[0][0])

        def in_place(*args: Any) -> Any:
            outs = [t for i, t in enumerate(new(*args)) if i != written]
            return outs[0] if len(outs) == 1 else tuple(outs)

        fakes[f"{op}_"] = in_place
    return fakes


def _define(fam: OpFamily) -> None:
    """Define a family's operators from its record: schema, eager implementation, fake."""
    impls: dict[str, Callable[..., Any]] = {
        fam.name: _implementation(fam.name),
        f"{fam.name}_out": _out_impl(fam),
    }
    if fam.aliases:
        impls[f"{fam.name}_"] = _implementation(f"{fam.name}_")
    fakes = _fakes(fam)
    for name, schema in signatures.all_schemas(fam).items():
        _lib.define(schema, tags=_TAGS)
        _lib.impl(name, impls[name], "CompositeExplicitAutograd")
        _register_fake(f"netra::{name}", fakes[name], lib=_lib)


for _fam in FAMILIES.values():
    if _fam.name not in STAGES:  # a chain's stage is served as its chain (netra/core/families/fp8_moe.py)
        _define(_fam)


def _define_moe() -> None:
    """The routed MoE chain's operators (netra.torch.moe), their schemas derived from the chain's view
    of its stages' records (netra.core.ops.chain_family)."""
    fam = moe.VIEW

    def out_impl(out: torch.Tensor, *args: Any) -> None:
        xq, xs, ids, weights, w13, w13s, w2, w2s = args
        moe.fp8_moe(xq, xs, ids, weights, w13, w13s, w2, w2s, out=out)

    def fake(*args: Any) -> torch.Tensor:
        s = moe.check(*args)
        return args[0].new_empty((s.tokens, s.params["hidden"]), dtype=torch.bfloat16)

    def fake_out(out: torch.Tensor, *args: Any) -> None:
        moe.check(*args)

    impls = {fam.name: moe.fp8_moe, f"{fam.name}_out": out_impl}
    fakes = {fam.name: fake, f"{fam.name}_out": fake_out}
    for name, schema in signatures.all_schemas(fam).items():
        _lib.define(schema, tags=_TAGS)
        _lib.impl(name, impls[name], "CompositeExplicitAutograd")
        _register_fake(f"netra::{name}", fakes[name], lib=_lib)


_define_moe()


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
_moe_grouped_topk_sigmoid_op = torch.ops.netra.moe_grouped_topk_sigmoid.default
_moe_grouped_topk_sigmoid_out_op = torch.ops.netra.moe_grouped_topk_sigmoid_out.default
_fp8_moe_op = torch.ops.netra.fp8_moe.default
_fp8_moe_out_op = torch.ops.netra.fp8_moe_out.default

_rmsnorm = dispatch.rmsnorm
_fp8_group_quant = dispatch.fp8_group_quant
_silu_mul_fp8_quant = dispatch.silu_mul_fp8_quant
_moe_topk_softmax = dispatch.moe_topk_softmax
_moe_grouped_topk_sigmoid = dispatch.moe_grouped_topk_sigmoid
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


def moe_grouped_topk_sigmoid(
    logits: torch.Tensor,
    bias: torch.Tensor,
    topk: int,
    groups: int,
    topk_groups: int,
    scale: float,
    *,
    out: _Pair | None = None,
) -> _Pair:
    """(ids, weights) of DeepSeek-V3's router (noaux_tc): s = sigmoid(logits) [..., experts] (fp32, as
    the model's fp32 gate writes them), b = s + bias (e_score_correction_bias [experts]); the topk_groups
    best of `groups` expert groups by the sum of their two largest b; the topk experts of largest b in
    them, best first, equal scores to the lower index (int32 [..., topk]); weights = scale * s of those
    / (their sum + 1e-20) (fp32 [..., topk]: what nt.fp8_moe takes). out=(ids, weights) writes those.
    DeepSeek-V3: topk 8, groups 8, topk_groups 4, scale 2.5. docs/ops/moe_grouped_topk_sigmoid.md."""
    if _eager() and _plain_all(logits, bias) and (out is None or _plain(out)):
        return _moe_grouped_topk_sigmoid(logits, bias, topk, groups, topk_groups, scale, out)
    args = (logits, bias, topk, groups, topk_groups, scale)
    contracts.moe_grouped_topk_sigmoid(*args)  # the one-line ContractError, not the dispatcher's
    if out is None:
        ids, w = _moe_grouped_topk_sigmoid_op(*args)
        return ids, w
    a, b = contracts.as_outs("moe_grouped_topk_sigmoid", out)
    if not (isinstance(a, _Tensor) and isinstance(b, _Tensor)):
        contracts.outputs(
            "moe_grouped_topk_sigmoid", contracts.moe_grouped_topk_sigmoid(*args), logits, (a, b)
        )
    _moe_grouped_topk_sigmoid_out_op(a, b, *args)
    return a, b


def fp8_moe(
    xq: torch.Tensor,
    xs: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    w13: torch.Tensor,
    w13s: torch.Tensor,
    w2: torch.Tensor,
    w2s: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The routed FP8 MoE at decode: for each token the router-weighted sum over its k experts of
    down(quant(silu(gate) * up)), block-scaled FP8 throughout, bf16 [tokens, hidden]. xq, xs as
    fused_add_rmsnorm_fp8_group_quant writes them; ids, weights as moe_topk_softmax does; w13 [E, 2I, H],
    w2 [E, H, I] and their 128 x 128 block scales as the checkpoint ships them. docs/ops/fp8_moe.md."""
    args = (xq, xs, ids, weights, w13, w13s, w2, w2s)
    if _eager() and all(type(t) is _Tensor for t in args) and (out is None or type(out) is _Tensor):
        return moe.fp8_moe(*args, out=out)
    if not all(isinstance(t, _Tensor) for t in args):
        moe.check(*args)  # the one-line ContractError, not the dispatcher's
    if out is None:
        return _fp8_moe_op(*args)
    _fp8_moe_out_op(out, *args)
    return out


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
        return fused.fused_add_rmsnorm(x, residual, w, eps, weight_offset, out)
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
        return fused.fused_add_rmsnorm_(x, residual, w, eps, weight_offset)
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
        return fused.rmsnorm_fp8_group_quant(x, w, eps, weight_offset, group, out)
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
        return fused.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps, weight_offset, group, out)
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
        return fused.fused_add_rmsnorm_fp8_group_quant_(x, residual, w, eps, weight_offset, group)
    contracts.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps, weight_offset, group)
    q, s = _fused_add_rmsnorm_fp8_group_quant_inplace_op(x, residual, w, eps, weight_offset, group)
    return q, s
