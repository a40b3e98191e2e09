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

from netra.core.expr import evaluate_tree, parse
from netra.core.ops import CHAINS, FAMILIES, chain_family, contract_key
from netra.errors import ContractError

# Every operator's record: the families, and each chain seen as one (its call's inputs and outputs).
RECORDS = {**FAMILIES, **{name: chain_family(name) for name in CHAINS}}


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


def _shape(op: str, params: dict[str, Any], width: int, first: torch.Tensor) -> Shape:
    """A checked call's Shape: the outputs' shapes come from the family's record."""
    return Shape(op, params, width, _out_shapes(op, params, tuple(first.shape[:-1])))


def _fail(op: str, what: str, fix: str) -> ContractError:
    return ContractError(f"netra.torch.{op}: {what}", f"{fix} (see {RECORDS[op].doc})")


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
    h, wo = _norm("rmsnorm", x, w, eps, weight_offset)
    return _shape("rmsnorm", {"hidden": h, "weight_offset": wo}, h, x)


def _norm(op: str, x: Any, w: Any, eps: Any, weight_offset: Any) -> tuple[int, int]:
    """The checks of a norm's x [..., hidden], w [hidden], eps and weight_offset: (hidden, weight_offset)."""
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
    return h, wo


def _residual(op: str, x: torch.Tensor, residual: Any) -> None:
    r = _tensor(op, "residual", residual, "[..., hidden], x's shape")
    if tuple(r.shape) != tuple(x.shape):
        raise _fail(op, f"residual has shape {list(r.shape)} but x {list(x.shape)}", "pass both of one shape")
    if r.dtype != x.dtype:
        raise _fail(
            op, f"residual is {r.dtype} but x {x.dtype}", "pass both in one dtype (bf16 is certified)"
        )
    _same_device(op, x, r, "x", "residual")


def fused_add_rmsnorm(x: Any, residual: Any, w: Any, eps: Any, weight_offset: Any) -> Shape:
    op = "fused_add_rmsnorm"
    h, wo = _norm(op, x, w, eps, weight_offset)
    _residual(op, x, residual)
    return _shape(op, {"hidden": h, "weight_offset": wo}, h, x)


def rmsnorm_fp8_group_quant(x: Any, w: Any, eps: Any, weight_offset: Any, group: Any) -> Shape:
    op = "rmsnorm_fp8_group_quant"
    h, wo = _norm(op, x, w, eps, weight_offset)
    g = _group(op, h, group, "hidden")
    return _shape(op, {"hidden": h, "weight_offset": wo, "group": g}, h, x)


def fused_add_rmsnorm_fp8_group_quant(
    x: Any, residual: Any, w: Any, eps: Any, weight_offset: Any, group: Any
) -> Shape:
    op = "fused_add_rmsnorm_fp8_group_quant"
    h, wo = _norm(op, x, w, eps, weight_offset)
    _residual(op, x, residual)
    g = _group(op, h, group, "hidden")
    return _shape(op, {"hidden": h, "weight_offset": wo, "group": g}, h, x)


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
    return _shape(op, {"hidden": h, "group": g}, h, x)


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
    return _shape(op, {"inter": i, "group": g}, n, x)


def moe_topk_softmax(logits: Any, topk: Any) -> Shape:
    op = "moe_topk_softmax"
    logits = _tensor(op, "logits", logits, "[..., experts]")
    e = logits.shape[-1]
    k = _int(op, "topk", topk, 1, "pass topk between 1 and the number of experts")
    if k > e:
        raise _fail(op, f"topk = {k} exceeds the {e} experts", "pass topk between 1 and logits.shape[-1]")
    return _shape(op, {"experts": e, "topk": k}, e, logits)


def moe_grouped_topk_sigmoid(
    logits: Any, bias: Any, topk: Any, groups: Any, topk_groups: Any, scale: Any
) -> Shape:
    op = "moe_grouped_topk_sigmoid"
    logits = _tensor(op, "logits", logits, "[..., experts]")
    bias = _tensor(op, "bias", bias, "[experts] (e_score_correction_bias)")
    e = logits.shape[-1]
    if bias.dim() != 1 or bias.shape[0] != e:
        raise _fail(
            op,
            f"bias has shape {list(bias.shape)}, not [{e}]",
            "pass bias as [experts], one per logit column",
        )
    _same_device(op, logits, bias, "logits", "bias")
    g = _int(op, "groups", groups, 1, "pass the model's n_group (8 for DeepSeek-V3)")
    if e % g or e // g < 2:
        raise _fail(
            op,
            f"groups = {g} does not divide the {e} experts into groups of at least 2",
            "pass n_group dividing logits.shape[-1] (8 for DeepSeek-V3's 256)",
        )
    tg = _int(op, "topk_groups", topk_groups, 1, "pass the model's topk_group (4 for DeepSeek-V3)")
    if tg > g:
        raise _fail(op, f"topk_groups = {tg} exceeds the {g} groups", "pass topk_groups between 1 and groups")
    k = _int(op, "topk", topk, 1, "pass topk between 1 and the experts of the kept groups")
    if k > tg * (e // g):
        raise _fail(
            op,
            f"topk = {k} exceeds the {tg * (e // g)} experts of {tg} kept groups",
            "pass topk at most topk_groups * experts / groups",
        )
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise _fail(
            op, f"scale must be a number, got {scale!r}", "pass routed_scaling_factor as a float, e.g. 2.5"
        )
    return _shape(op, {"experts": e, "topk": k, "groups": g, "topk_groups": tg}, e, logits)


# ---------------------------------------------------------------------------------------------------
# Caller-owned outputs (out=)

# Derived from each family's record (netra/core/families/): the outputs' names in return order, the
# (output, input) pairs that may be the same tensor (the fused adds write residual_out over residual).
OUT_NAMES = {op: fam.out_names for op, fam in RECORDS.items()}
ALIASES = {op: fam.aliases for op, fam in FAMILIES.items() if fam.aliases}
TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp8_e4m3fn": torch.float8_e4m3fn,
    "f32": torch.float32,
    "i32": torch.int32,
}
# The outputs' dtypes where none follows an input (all families but the norms' bf16 outputs).
FIXED_DTYPES = {
    op: tuple(TORCH_DTYPES[o.dtype] for o in fam.outputs)
    for op, fam in FAMILIES.items()
    if not any(o.follows for o in fam.outputs)
}
PAIR_DTYPES = {op: d for op, d in FIXED_DTYPES.items() if len(d) == 2}  # the families returning a pair


def out_dtypes(op: str, first: torch.Tensor) -> tuple[torch.dtype, ...]:
    """The dtypes a call's outputs have: the record's, except an output that follows its input (a
    norm's y and residual_out keep x's dtype)."""
    fixed = FIXED_DTYPES.get(op)
    if fixed is not None:
        return fixed
    return tuple(first.dtype if o.follows else TORCH_DTYPES[o.dtype] for o in FAMILIES[op].outputs)


# Each output's dimensions after "rows", parsed once here (torch.compile traces the evaluation, not the
# parser): (expression, its tree) per dimension.
_OUT_DIMS = {
    op: tuple(tuple((d, parse(d)) for d in o.shape[1:]) for o in fam.outputs) for op, fam in FAMILIES.items()
}


def _out_shapes(op: str, params: dict[str, Any], lead: tuple[Any, ...]) -> tuple[tuple[Any, ...], ...]:
    """The outputs' shapes from the record: the input's leading dimensions, then each output's own
    (its shape's expressions after "rows", at the call's parameters)."""
    return tuple((*lead, *(evaluate_tree(t, params, d) for d, t in dims)) for dims in _OUT_DIMS[op])


def as_outs(op: str, out: Any) -> tuple[Any, ...]:
    """`out=` as a tuple of tensors: one tensor for rmsnorm, a pair or a triple for the others."""
    names = OUT_NAMES[op]
    if len(names) == 1:
        return (out,)
    if isinstance(out, (tuple, list)) and len(out) == len(names):
        return tuple(out)
    what = "a pair" if len(names) == 2 else f"a tuple of {len(names)}"
    raise _fail(
        op,
        f"out must be {what} of tensors ({', '.join(names)}), got {type(out).__name__}",
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


def _overlaps_itself(t: torch.Tensor) -> bool:
    """Whether two of the tensor's elements are one memory location (an expanded view: a stride 0 over
    more than one element, or strides that fold back onto each other). Contiguous tensors never do;
    strides that may fold are settled by listing the offsets (rare, and only on a slow path)."""
    if t.numel() < 2 or t.is_contiguous():
        return False
    dims = sorted((st, n) for n, st in zip(t.shape, t.stride(), strict=True) if n > 1)
    reach, clear = 0, True
    for st, n in dims:
        if st == 0:
            return True
        clear = clear and st > reach
        reach += (n - 1) * st
    if clear:
        return False
    offsets = torch.zeros(1, dtype=torch.int64)
    for st, n in dims:
        offsets = (offsets[:, None] + torch.arange(n, dtype=torch.int64) * st).flatten()
    return bool(offsets.unique().numel() != offsets.numel())


def _written(op: str, what: str, t: torch.Tensor) -> None:
    """A tensor the call writes must not overlap itself: the kernel and the composite's copy would
    write one location twice (torch's copy_ refuses it with a traceback)."""
    if _overlaps_itself(t):
        raise _fail(
            op,
            f"{what} has elements that share one memory location (an expanded or self-overlapping view), "
            "and the call writes it",
            f"pass {what.removeprefix('out ')} with distinct elements (.clone() or .contiguous() of it)",
        )


def in_place(op: str, ins: tuple[tuple[str, torch.Tensor], ...]) -> None:
    """An in-place call writes the input its record lets an output alias (residual) while it reads the
    others: that input must not overlap itself nor any other input."""
    written = FAMILIES[op].aliases[0][1]
    target = dict(ins)[written]
    _written(op, written, target)
    wlo, whi = _span(target)
    for name, t in ins:
        if name == written:
            continue
        lo, hi = _span(t)
        if lo < whi and wlo < hi:
            raise _fail(
                op,
                f"{name} shares memory with {written}, which {op}_ writes",
                f"pass {'an' if name[0] in 'aeiou' else 'a'} {name} that overlaps no part of {written}",
            )


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same elements in the same places: what an in-place output over its input must be."""
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()


def disjoint(op: str, outs: tuple[torch.Tensor, ...], ins: tuple[tuple[str, torch.Tensor], ...]) -> None:
    """No output may share memory with an input or with another output: the kernels read their inputs
    while they write, and in-place calls are not a certified contract (torch refuses them alike), except
    where the contract says so: the fused adds' residual_out may be residual itself (ALIASES)."""
    names = OUT_NAMES[op]
    tensors = dict(zip(names, outs, strict=True)) | dict(ins)
    allowed = {frozenset(p) for p in ALIASES.get(op, ())}
    for n, t in zip(names, outs, strict=True):
        _written(op, f"out {n}", t)
    spans = [(n, f"out {n}", _span(t)) for n, t in zip(names, outs, strict=True)]
    others = spans[1:] + [(n, n, _span(t)) for n, t in ins]
    for i, (ka, na, (alo, ahi)) in enumerate(spans):
        for kb, nb, (blo, bhi) in others[i:]:
            if frozenset((ka, kb)) in allowed and same(tensors[ka], tensors[kb]):
                continue
            if alo < bhi and blo < ahi:
                raise _fail(
                    op,
                    f"{na} shares memory with {nb}",
                    "pass outputs that overlap no input and no other output ("
                    + ("residual_out may be residual itself)" if allowed else "in-place is not supported)"),
                )
