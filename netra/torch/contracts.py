"""From tensors to an exact contract: input checks and output shapes, shared by the real and fake kernels.

Everything here reads metadata only (shape, dtype, device, Python arguments), so the fake (meta)
implementations run it under FakeTensorMode and torch.compile exactly as the eager path does. A
malformed call is a ContractError (one line: what is wrong, then the fix), raised before anything is
launched or computed; a well-formed call that Netra does not certify is not an error but a fallback
(netra.torch.dispatch).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from netra.core.ops import FAMILIES, contract_key
from netra.errors import ContractError


class Shape(NamedTuple):
    """A checked call: its op and contract parameters, the row length, and the output shapes (leading
    dims kept). The key is formatted only when asked for, so a fake run under symbolic shapes never
    turns a size into a string."""

    op: str
    params: dict[str, Any]
    width: int  # the input's last dimension
    out: tuple[tuple[Any, ...], ...]

    @property
    def key(self) -> str:
        return contract_key(self.op, self.params)


def _fail(op: str, what: str, fix: str) -> ContractError:
    return ContractError(f"netra.torch.{op}: {what}", f"{fix} (see {FAMILIES[op].doc})")


def _tensor(op: str, name: str, t: Any, form: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise _fail(op, f"{name} must be a torch.Tensor, got {type(t).__name__}", f"pass {name} as {form}")
    if t.dim() < 1:
        raise _fail(op, f"{name} is a 0-D tensor", f"pass {name} as {form}")
    if not t.is_floating_point():
        raise _fail(
            op,
            f"{name} has dtype {t.dtype}",
            f"pass {name} as a floating-point tensor {form} (bf16 is certified)",
        )
    return t


def _int(op: str, name: str, v: Any, lo: int, why: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise _fail(op, f"{name} must be an integer, got {v!r}", why)
    if v < lo:
        raise _fail(op, f"{name} = {v} is below {lo}", why)
    return v


def _same_device(op: str, a: torch.Tensor, b: torch.Tensor, na: str, nb: str) -> None:
    if a.device != b.device:
        raise _fail(op, f"{na} is on {a.device} but {nb} on {b.device}", "put both on the same device")


def rmsnorm(x: Any, w: Any, eps: Any, weight_offset: Any) -> Shape:
    op = "rmsnorm"
    x = _tensor(op, "x", x, "[..., hidden]")
    w = _tensor(op, "w", w, "[hidden]")
    if w.dim() != 1:
        raise _fail(op, f"w has shape {list(w.shape)}", "pass the norm weight as a 1-D tensor [hidden]")
    h = x.shape[-1]
    if h < 1:
        raise _fail(op, "x has rows of length 0", "pass x as [..., hidden] with hidden >= 1")
    if w.shape[0] != h:
        raise _fail(
            op, f"w has {w.shape[0]} elements but x's rows have {h}", "pass a weight of length x.shape[-1]"
        )
    _same_device(op, x, w, "x", "w")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise _fail(op, f"eps must be a number, got {eps!r}", "pass eps as a Python float, e.g. 1e-6")
    wo = _int(op, "weight_offset", weight_offset, 0, "pass 0 (x * w) or 1 (Gemma's x * (1 + w))")
    return Shape(op, {"hidden": h, "weight_offset": wo}, h, (tuple(x.shape),))


def _group(op: str, n: int, group: Any, what: str) -> int:
    g = _int(op, "group", group, 1, "pass group=128 (the certified group size)")
    if n % g:
        raise _fail(
            op, f"{what} {n} is not a multiple of the group size {g}", f"pad {what} to a multiple of {g}"
        )
    return g


def fp8_group_quant(x: Any, group: Any) -> Shape:
    op = "fp8_group_quant"
    x = _tensor(op, "x", x, "[..., hidden]")
    h = x.shape[-1]
    if h < 1:
        raise _fail(op, "x has rows of length 0", "pass x as [..., hidden] with hidden >= 1")
    g = _group(op, h, group, "hidden")
    lead = tuple(x.shape[:-1])
    return Shape(op, {"hidden": h, "group": g}, h, ((*lead, h), (*lead, h // g)))


def silu_mul_fp8_quant(x: Any, group: Any) -> Shape:
    op = "silu_mul_fp8_quant"
    x = _tensor(op, "x", x, "[..., 2 * inter] ([gate | up])")
    n = x.shape[-1]
    if n < 2 or n % 2:
        raise _fail(
            op, f"x's rows have {n} elements, not 2 * inter", "pass x as [..., 2 * inter] = [gate | up]"
        )
    i = n // 2
    g = _group(op, i, group, "inter")
    lead = tuple(x.shape[:-1])
    return Shape(op, {"inter": i, "group": g}, n, ((*lead, i), (*lead, i // g)))


def moe_topk_softmax(logits: Any, topk: Any) -> Shape:
    op = "moe_topk_softmax"
    logits = _tensor(op, "logits", logits, "[..., experts]")
    e = logits.shape[-1]
    k = _int(op, "topk", topk, 1, "pass topk between 1 and the number of experts")
    if k > e:
        raise _fail(op, f"topk = {k} exceeds the {e} experts", "pass topk between 1 and logits.shape[-1]")
    lead = tuple(logits.shape[:-1])
    return Shape(op, {"experts": e, "topk": k}, e, ((*lead, k), (*lead, k)))


# ---------------------------------------------------------------------------------------------------
# Caller-owned outputs (out=)

OUT_NAMES = {
    "rmsnorm": ("y",),
    "fp8_group_quant": ("q", "scales"),
    "silu_mul_fp8_quant": ("q", "scales"),
    "moe_topk_softmax": ("ids", "weights"),
}


PAIR_DTYPES = {  # the two outputs' dtypes of the families that return a pair
    "fp8_group_quant": (torch.float8_e4m3fn, torch.float32),
    "silu_mul_fp8_quant": (torch.float8_e4m3fn, torch.float32),
    "moe_topk_softmax": (torch.int32, torch.float32),
}


def out_dtypes(op: str, first: torch.Tensor) -> tuple[torch.dtype, ...]:
    """The dtypes a call's outputs have (rmsnorm's follows its input, the others are fixed)."""
    return (first.dtype,) if op == "rmsnorm" else PAIR_DTYPES[op]


def as_outs(op: str, out: Any) -> tuple[Any, ...]:
    """`out=` as a tuple of tensors: one tensor for rmsnorm, a pair for the other three families."""
    names = OUT_NAMES[op]
    if len(names) == 1:
        return (out,)
    if isinstance(out, (tuple, list)) and len(out) == len(names):
        return tuple(out)
    raise _fail(
        op,
        f"out must be a pair of tensors ({', '.join(names)}), got {type(out).__name__}",
        f"pass out=({', '.join(names)})",
    )


def outputs(op: str, s: Shape, first: torch.Tensor, outs: tuple[Any, ...]) -> None:
    """Caller-owned outputs must be exactly what the op would return: tensors of the output shapes and
    dtypes, on the input's device. Layout is not checked here: a strided or misaligned output is a
    fallback (the composite writes into it), not an error."""
    dtypes = out_dtypes(op, first)
    for name, t, shape, dtype in zip(OUT_NAMES[op], outs, s.out, dtypes, strict=True):
        if not isinstance(t, torch.Tensor):
            raise _fail(
                op, f"out {name} must be a torch.Tensor, got {type(t).__name__}", f"pass {name} as a tensor"
            )
        if tuple(t.shape) != tuple(shape) or t.dtype != dtype:
            raise _fail(
                op,
                f"out {name} is {t.dtype} {list(t.shape)}, but the call writes {dtype} {list(shape)}",
                f"allocate {name} as torch.empty({list(shape)}, dtype={dtype})",
            )
        if t.device != first.device:
            raise _fail(
                op,
                f"out {name} is on {t.device} but the input on {first.device}",
                "put both on the same device",
            )


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The bytes a tensor's elements can reach (strides are never negative in torch)."""
    lo = t.data_ptr()
    if t.numel() == 0:
        return lo, lo
    reach = sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True)) + 1
    return lo, lo + reach * t.element_size()


def disjoint(op: str, outs: tuple[torch.Tensor, ...], ins: tuple[tuple[str, torch.Tensor], ...]) -> None:
    """No output may share memory with an input or with another output: the kernels read their inputs
    while they write, and in-place calls are not a certified contract (torch refuses them alike)."""
    names = OUT_NAMES[op]
    spans = [(f"out {n}", _span(t)) for n, t in zip(names, outs, strict=True)]
    others = spans[1:] + [(n, _span(t)) for n, t in ins]
    for i, (na, (alo, ahi)) in enumerate(spans):
        for nb, (blo, bhi) in others[i:]:
            if alo < bhi and blo < ahi:
                raise _fail(
                    op,
                    f"{na} shares memory with {nb}",
                    "pass outputs that overlap no input and no other output (in-place is not supported)",
                )
