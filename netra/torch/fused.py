"""The eager implementations of the three fused families: residual add, rmsnorm and FP8 group quantization
in one kernel (fused_add_rmsnorm, rmsnorm_fp8_group_quant, fused_add_rmsnorm_fp8_group_quant and the
in-place forms).

Their hot path is netra.torch.dispatch's (a plan per call signature, the certified kernel or the route
saying why not); their fallback is not a composite of their own but the chain of the unfused netra.torch
operators, each served or counted on its own, which is what the fused contracts are defined as (docs/ops/).
"""

from __future__ import annotations

from typing import Any

import torch

from netra.torch import contracts
from netra.torch.dispatch import (
    _MISS,
    NAMES,
    Plan,
    _check_outs,
    _eps,
    _fused,
    _layout_route,
    _plan,
    _remember,
    _Tensor,
    composite,
    fp8_group_quant,
    rmsnorm,
)

OPS = (
    "fused_add_rmsnorm",
    "fused_add_rmsnorm_",
    "rmsnorm_fp8_group_quant",
    "fused_add_rmsnorm_fp8_group_quant",
    "fused_add_rmsnorm_fp8_group_quant_",
)  # the eager implementations defined here (netra.torch.ops registers them)

FUSED_ADD = ("fused_add_rmsnorm", "fused_add_rmsnorm_fp8_group_quant")


def _fused_shape(op: str, x: Any, residual: Any, w: Any, eps: Any, wo: Any, group: Any) -> contracts.Shape:
    if op == "fused_add_rmsnorm":
        return contracts.fused_add_rmsnorm(x, residual, w, eps, wo)
    if op == "rmsnorm_fp8_group_quant":
        return contracts.rmsnorm_fp8_group_quant(x, w, eps, wo, group)
    return contracts.fused_add_rmsnorm_fp8_group_quant(x, residual, w, eps, wo, group)


def _fused_chain(
    op: str, x: torch.Tensor, residual: Any, w: torch.Tensor, eps: float, wo: int, group: int
) -> tuple[torch.Tensor, ...]:
    """The fallback: the unfused netra.torch implementations chained, each one served or counted on
    its own, which is what the fused contract is defined as (docs/ops/). Outputs in OUT_NAMES order."""
    r = composite.add(x, residual) if op in FUSED_ADD else None
    y = rmsnorm(r if r is not None else x, w, eps, wo)
    if op == "fused_add_rmsnorm":
        assert r is not None
        return y, r
    q, sc = fp8_group_quant(y, group)
    return (q, sc) if r is None else (q, sc, r)


def fused(
    op: str,
    x: torch.Tensor,
    residual: torch.Tensor | None,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    group: int = 128,
    out: Any = None,
    inplace: bool = False,
) -> tuple[torch.Tensor, ...]:
    """The eager implementation of the three fused families: outputs in contracts.OUT_NAMES order. With
    out= the caller's tensors are written (residual_out may be residual itself); with inplace,
    residual_out is written over residual."""
    add = op in FUSED_ADD
    try:
        if type(weight_offset) is not int or type(group) is not int:
            raise TypeError
        if add and residual.shape != x.shape:  # type: ignore[union-attr]
            raise TypeError
        rd = (residual.dtype, residual.device) if add else None  # type: ignore[union-attr]
        p = _fused[(op, x.dtype, rd, w.dtype, x.device, w.device, x.shape[-1], w.shape, weight_offset, group)]
    except _MISS:
        s = _fused_shape(op, x, residual, w, eps, weight_offset, group)
        ins0 = (("x", x), ("residual", residual), ("w", w)) if add else (("x", x), ("w", w))
        rd = (residual.dtype, residual.device) if add else None  # type: ignore[union-attr]
        key = (op, x.dtype, rd, w.dtype, x.device, w.device, x.shape[-1], w.shape, weight_offset, group)
        p = _remember(_fused, key, lambda: _fused_make(op, s, ins0))
    if type(eps) is not float:
        eps = _eps(eps)
    ins: tuple[tuple[str, Any], ...] = (
        (("x", x), ("residual", residual), ("w", w)) if add else (("x", x), ("w", w))
    )
    outs = None if out is None else contracts.as_outs(op, out)
    if inplace:
        contracts.in_place(op, ins)
    launch = p.launch
    if launch is not None and all(t.is_contiguous() and not t.data_ptr() & 15 for _, t in ins):
        made = _fused_outs(op, p, x, residual, outs, inplace, ins)
        if made is not None:
            ptr = {n: t.data_ptr() for n, t in zip(contracts.OUT_NAMES[op], made, strict=True)}
            ptr.update((n, t.data_ptr()) for n, t in ins)
            rows = x.numel() // p.width
            if rows:
                launch(rows, *[rows if n == "rows" else eps if n == "eps" else ptr[n] for n in NAMES[op]])
            p.count += 1
            return made
        rt = None
    else:
        rt = p.route
    if outs is not None:
        _check_outs(op, _fused_shape(op, x, residual, w, eps, weight_offset, group), x, outs, ins)
    (_layout_route(p, ins, outs) if rt is None else rt).take()  # (Route is falsy)
    got = _fused_chain(op, x, residual, w, eps, weight_offset, group)
    if inplace:
        assert residual is not None
        residual.copy_(got[-1])
        return (*got[:-1], residual)
    if outs is None:
        return got
    return tuple(o.copy_(g) for o, g in zip(outs, got, strict=True))


def _fused_make(op: str, s: contracts.Shape, ins: tuple[tuple[str, torch.Tensor], ...]) -> Plan:
    p = _plan(op, s, ins)
    p.extra = tuple(sh[-1] for sh in s.out)  # each output's row length (leading dims are the call's)
    return p


def _fused_outs(
    op: str,
    p: Plan,
    x: torch.Tensor,
    residual: Any,
    outs: tuple[Any, ...] | None,
    inplace: bool,
    ins: tuple[tuple[str, Any], ...],
) -> tuple[torch.Tensor, ...] | None:
    """The outputs a planned kernel writes: new ones, residual itself as residual_out (in place), or
    the caller's when the kernel can write them as they are (else None: the fallback says why)."""
    dtypes = contracts.out_dtypes(op, x)
    lead = tuple(x.shape[:-1])
    shapes = tuple((*lead, n) for n in p.extra)
    if outs is None:
        made = [x.new_empty(sh, dtype=dt) for sh, dt in zip(shapes, dtypes, strict=True)]
        if inplace:
            made[-1] = residual
        return tuple(made)
    for t, sh, dt in zip(outs, shapes, dtypes, strict=True):
        if not (
            isinstance(t, _Tensor)
            and t.dtype is dt
            and tuple(t.shape) == tuple(sh)
            and t.get_device() == x.get_device()
        ):
            contracts.outputs(op, contracts.Shape(op, {}, p.width, shapes), x, outs)  # the ContractError
        if not t.is_contiguous() or t.data_ptr() & 15:
            return None
    contracts.disjoint(op, outs, ins)
    return tuple(outs)


def fused_add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    out: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    y, r = fused("fused_add_rmsnorm", x, residual, w, eps, weight_offset, 128, out)
    return y, r


def fused_add_rmsnorm_(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0
) -> torch.Tensor:
    return fused("fused_add_rmsnorm", x, residual, w, eps, weight_offset, 128, None, True)[0]


def rmsnorm_fp8_group_quant(
    x: torch.Tensor, w: torch.Tensor, eps: float, weight_offset: int = 0, group: int = 128, out: Any = None
) -> tuple[torch.Tensor, torch.Tensor]:
    q, sc = fused("rmsnorm_fp8_group_quant", x, None, w, eps, weight_offset, group, out)
    return q, sc


def fused_add_rmsnorm_fp8_group_quant(
    x: torch.Tensor,
    residual: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    group: int = 128,
    out: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, sc, r = fused("fused_add_rmsnorm_fp8_group_quant", x, residual, w, eps, weight_offset, group, out)
    return q, sc, r


def fused_add_rmsnorm_fp8_group_quant_(
    x: torch.Tensor,
    residual: torch.Tensor,
    w: torch.Tensor,
    eps: float,
    weight_offset: int = 0,
    group: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    q, sc, _ = fused(
        "fused_add_rmsnorm_fp8_group_quant", x, residual, w, eps, weight_offset, group, None, True
    )
    return q, sc
