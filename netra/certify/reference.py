"""Float64 reference implementations that every GPU class's kernels are certified against.

The contract for each operation is in docs/ops/. Inputs in bf16 are passed as uint16 bit
patterns so that no framework dtype (and no implicit float32 detour) sits between the test
vector and the reference. Every function reads the last axis as the row; leading axes are
rows. Results are float64 with a single rounding at the point the contract names (bf16 or
FP8 output), so any difference from a kernel is the kernel's own rounding.

This module imports numpy at top level; ``import netra`` never imports it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

try:
    import numpy as np
    import numpy.typing as npt
except ModuleNotFoundError as _e:  # numpy is the certify extra's, not a dependency of netra-kernel
    raise ModuleNotFoundError(
        "netra.certify.reference needs numpy, which is not installed: pip install 'netra-kernel[certify]'",
        name=_e.name,
    ) from None

__all__ = [
    "FP8_E4M3_MAX",
    "FP8_GROUP",
    "SCALE_FLOOR",
    "FusedAdd",
    "GroupQuant",
    "GroupedTopK",
    "TopK",
    "add_bf16",
    "bf16_to_f64",
    "count_fp8_beyond_one_step",
    "f64_to_bf16_rne",
    "fp8_e4m3_decode",
    "fp8_e4m3_encode",
    "fp8_group_quant",
    "fp8_group_quant_values",
    "fp8_step_distance",
    "fused_add_rmsnorm",
    "fused_add_rmsnorm_fp8_group_quant",
    "moe_grouped_topk_sigmoid",
    "moe_topk_softmax",
    "relative_max_error",
    "rmsnorm",
    "rmsnorm_bf16",
    "rmsnorm_fp8_group_quant",
    "sigmoid",
    "silu",
    "silu_mul_fp8_quant",
]

F64 = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike

FP8_E4M3_MAX = 448.0
"""Largest finite OCP E4M3FN value (code 0x7e)."""

FP8_GROUP = 128
"""Elements per quantization group: one fp32 scale per 128 consecutive elements of a row."""

SCALE_FLOOR = 1e-10
"""Lower bound on a group's amax, so an all-zero group gets a finite, nonzero scale."""

_FP8_NAN = 0x7F
_BF16_QNAN = 0x7FC0
_BF16_INF = 0x7F80


# --------------------------------------------------------------------------------------------
# Number formats
# --------------------------------------------------------------------------------------------


def _bits(a: ArrayLike, dtype: type[np.unsignedinteger], what: str) -> np.ndarray:
    # Refuse float arrays: passing values where bit patterns are expected is silently wrong.
    arr = np.asarray(a)
    if arr.dtype != dtype:
        raise TypeError(f"{what} must be {np.dtype(dtype).name} bit patterns, got {arr.dtype}")
    return arr


def _round_to_grid(a: F64, min_exp: int, mant_bits: int) -> F64:
    """RNE of non-negative finite ``a`` onto a binary format's grid, without overflow handling.

    Exact in float64: the scaling is by powers of two and np.rint rounds half to even. Values
    below 2**min_exp share the quantum of the smallest binade (gradual underflow).
    """
    safe = np.where(a > 0, a, 1.0)
    _, e = np.frexp(safe)  # safe = f * 2**e with f in [0.5, 1), so floor(log2) = e - 1
    quantum = np.ldexp(1.0, np.maximum(e - 1, min_exp) - mant_bits)
    return np.where(a > 0, np.rint(a / quantum) * quantum, 0.0)


def bf16_to_f64(bits: ArrayLike) -> F64:
    """Widen bf16 bit patterns to float64 (exact)."""
    b = _bits(bits, np.uint16, "bf16 input")
    with np.errstate(invalid="ignore"):  # signaling-NaN patterns widen to NaN, no warning
        return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def f64_to_bf16_rne(x: ArrayLike) -> npt.NDArray[np.uint16]:
    """Round float64 to bf16 bits, nearest-even, in one step.

    Going through float32 first would double-round (e.g. 1 + 2**-8 + 2**-30 must give 0x3f81,
    a float32 detour gives 0x3f80). Overflow gives +-inf; NaN gives the quiet NaN 0x7fc0 with
    the input's sign; subnormals are kept.
    """
    v = np.asarray(x, dtype=np.float64)
    a = np.abs(v)
    finite = np.isfinite(v)
    r = _round_to_grid(np.where(finite, a, 0.0), min_exp=-126, mant_bits=7)
    overflow = ~finite | (r >= 2.0**128)
    with np.errstate(over="ignore"):
        mag = (np.where(overflow, 0.0, r).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    mag = np.where(overflow, np.where(np.isnan(v), _BF16_QNAN, _BF16_INF), mag)
    sign = np.signbit(v).astype(np.uint16) << 15
    return (mag | sign).astype(np.uint16)


def fp8_e4m3_encode(x: ArrayLike) -> npt.NDArray[np.uint8]:
    """Encode float64 as OCP E4M3FN codes, round to nearest even.

    This is the non-saturating conversion: a magnitude that still exceeds 448 after rounding
    (|x| > 464; 464 itself ties to even, i.e. to 448), +-inf and NaN all encode as NaN (0x7f,
    or 0xff with the sign bit). The quantizers clamp to +-448 before encoding, so a NaN
    code in their output means a missing clamp, never a large value. -0.0 encodes as 0x80.
    """
    v = np.asarray(x, dtype=np.float64)
    a = np.abs(v)
    finite = np.isfinite(v)
    r = _round_to_grid(np.where(finite, a, 0.0), min_exp=-6, mant_bits=3)
    bad = ~finite | (r > FP8_E4M3_MAX)
    r = np.where(bad, 0.0, r)
    _, e = np.frexp(np.where(r > 0, r, 1.0))
    exp = np.maximum(e - 1, -6)
    # Subnormals: code = r / 2**-9 (0..8; 8 is the smallest normal, 0x08). Normals: biased
    # exponent (exp + 7) above three mantissa bits, which is the same formula with the
    # implicit leading one folded in: (exp + 6) * 8 + r / 2**(exp - 3).
    sub = np.rint(r * 2.0**9)
    nrm = (exp + 6) * 8 + r / np.ldexp(1.0, exp - 3)
    mag = np.where(r < 2.0**-6, sub, nrm).astype(np.uint8)
    mag = np.where(bad, _FP8_NAN, mag).astype(np.uint8)
    sign = np.signbit(v).astype(np.uint8) << 7
    return (mag | sign).astype(np.uint8)


def _fp8_table() -> F64:
    codes = np.arange(256)
    e = (codes >> 3) & 0xF
    m = (codes & 0x7).astype(np.float64)
    mag = np.where(e == 0, m * 2.0**-9, (1.0 + m / 8.0) * np.ldexp(1.0, e - 7))
    mag = np.where((codes & 0x7F) == _FP8_NAN, np.nan, mag)
    return np.where(codes & 0x80, -mag, mag)


_FP8_DECODE = _fp8_table()


def fp8_e4m3_decode(codes: ArrayLike) -> F64:
    """Decode OCP E4M3FN codes to float64 (exact); 0x7f and 0xff decode to NaN."""
    c = _bits(codes, np.uint8, "fp8 codes")
    return _FP8_DECODE[c]


# --------------------------------------------------------------------------------------------
# Operations
# --------------------------------------------------------------------------------------------


def rmsnorm(x_bits: ArrayLike, w_bits: ArrayLike, eps: float, weight_offset: float = 0.0) -> F64:
    """y = x / sqrt(mean(x**2) + eps) * (w + weight_offset), per row, before output rounding.

    ``weight_offset=1`` is Gemma's x * (1 + w). Shapes: x [..., H], w [H].
    """
    x = bf16_to_f64(x_bits)
    w = bf16_to_f64(w_bits)
    if w.ndim != 1 or x.shape[-1] != w.shape[0]:
        raise ValueError(f"weight shape {w.shape} does not match row length {x.shape[-1]}")
    rstd = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + float(eps))
    return x * rstd * (w + float(weight_offset))


def rmsnorm_bf16(
    x_bits: ArrayLike, w_bits: ArrayLike, eps: float, weight_offset: float = 0.0
) -> npt.NDArray[np.uint16]:
    """The bf16 bits a kernel with no rounding before its output would write."""
    return f64_to_bf16_rne(rmsnorm(x_bits, w_bits, eps, weight_offset))


class GroupQuant(NamedTuple):
    """Result of an FP8 group quantization; field order is stable for unpacking."""

    q: npt.NDArray[np.uint8]
    """E4M3FN codes, [..., H]."""
    scales: F64
    """One scale per group, [..., H / group]; the kernel stores them as fp32."""
    dequant: F64
    """decode(q) * scale, [..., H]: what a consumer of (q, scales) sees."""
    values: F64
    """The exact values that were quantized, [..., H]: the baseline for quantization error."""


def _group_quant(values: F64, group: int) -> GroupQuant:
    h = values.shape[-1]
    if group <= 0 or h % group:
        raise ValueError(f"row length {h} is not a multiple of the group size {group}")
    g = values.reshape(*values.shape[:-1], h // group, group)
    amax = np.max(np.abs(g), axis=-1, keepdims=True)
    scale = np.maximum(amax, SCALE_FLOOR) / FP8_E4M3_MAX
    q = fp8_e4m3_encode(np.clip(g / scale, -FP8_E4M3_MAX, FP8_E4M3_MAX))
    dequant = fp8_e4m3_decode(q) * scale
    return GroupQuant(
        q=q.reshape(values.shape),
        scales=scale[..., 0],
        dequant=dequant.reshape(values.shape),
        values=values,
    )


def fp8_group_quant(x_bits: ArrayLike, group: int = FP8_GROUP) -> GroupQuant:
    """Per-row, per-group FP8 quantization of bf16 x [..., H] with scale = max(amax, 1e-10) / 448."""
    return _group_quant(bf16_to_f64(x_bits), group)


def fp8_group_quant_values(values: ArrayLike, group: int = FP8_GROUP) -> GroupQuant:
    """The same quantization of exact float64 values: what a kernel quantizes from an fp32 value it
    computed itself (silu_mul's h, the routed MoE's h), never rounded to bf16 first."""
    return _group_quant(np.asarray(values, dtype=np.float64), group)


def silu(x: ArrayLike) -> F64:
    """x / (1 + exp(-x)) in float64; saturates to -0.0 for very negative x instead of warning."""
    v = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore"):
        return v / (1.0 + np.exp(-v))


def silu_mul_fp8_quant(x_bits: ArrayLike, group: int = FP8_GROUP) -> GroupQuant:
    """h = silu(g) * u with g = x[..., :I] and u = x[..., I:], then FP8 group quantization.

    h is never rounded to bf16: ``values`` holds it in float64.
    """
    x = bf16_to_f64(x_bits)
    if x.shape[-1] % 2:
        raise ValueError(f"row length {x.shape[-1]} is not 2 * I")
    i = x.shape[-1] // 2
    return _group_quant(silu(x[..., :i]) * x[..., i:], group)


def add_bf16(x_bits: ArrayLike, residual_bits: ArrayLike) -> npt.NDArray[np.uint16]:
    """bf16(x + residual): the exact sum of two bf16 values rounded once (the residual stream's add)."""
    x = bf16_to_f64(x_bits)
    r = bf16_to_f64(residual_bits)
    if x.shape != r.shape:
        raise ValueError(f"residual shape {r.shape} does not match x {x.shape}")
    return f64_to_bf16_rne(x + r)


class FusedAdd(NamedTuple):
    """Result of fused_add_rmsnorm; field order is stable for unpacking."""

    residual_out: npt.NDArray[np.uint16]
    """bf16(x + residual) bits, [..., H]: the next layer's residual."""
    y: F64
    """rmsnorm(residual_out) before output rounding, [..., H], as rmsnorm returns it."""


# The fused references below are the unfused ones composed, not a second implementation: fusion is
# numerically invisible by definition (docs/ops/), so a fused kernel is judged against exactly this.


def fused_add_rmsnorm(
    x_bits: ArrayLike, residual_bits: ArrayLike, w_bits: ArrayLike, eps: float, weight_offset: float = 0.0
) -> FusedAdd:
    """residual_out = add_bf16(x, residual); y = rmsnorm(residual_out, w, eps, weight_offset)."""
    r = add_bf16(x_bits, residual_bits)
    return FusedAdd(residual_out=r, y=rmsnorm(r, w_bits, eps, weight_offset))


def rmsnorm_fp8_group_quant(
    x_bits: ArrayLike, w_bits: ArrayLike, eps: float, weight_offset: float = 0.0, group: int = FP8_GROUP
) -> GroupQuant:
    """fp8_group_quant(rmsnorm_bf16(x, w, eps, weight_offset), group): the norm rounded to bf16 once,
    then quantized exactly as fp8_group_quant (``values`` holds the bf16 y)."""
    return fp8_group_quant(rmsnorm_bf16(x_bits, w_bits, eps, weight_offset), group)


def fused_add_rmsnorm_fp8_group_quant(
    x_bits: ArrayLike,
    residual_bits: ArrayLike,
    w_bits: ArrayLike,
    eps: float,
    weight_offset: float = 0.0,
    group: int = FP8_GROUP,
) -> tuple[npt.NDArray[np.uint16], GroupQuant]:
    """(residual_out, fp8_group_quant(rmsnorm_bf16(residual_out))) with residual_out = add_bf16(x, residual)."""
    r = add_bf16(x_bits, residual_bits)
    return r, rmsnorm_fp8_group_quant(r, w_bits, eps, weight_offset, group)


class TopK(NamedTuple):
    """Selected experts per row, most probable first."""

    ids: npt.NDArray[np.int32]
    """Expert ids, [..., k]."""
    weights: F64
    """Softmax probabilities of the selected experts renormalized to sum to 1, [..., k]."""


def moe_topk_softmax(logits_bits: ArrayLike, k: int = 8) -> TopK:
    """Top-k of softmax(logits) over E experts, ties to the lower id, weights renormalized.

    Selection sorts the logits, not float64 probabilities: softmax is strictly increasing in
    the logit, so this is the exact probability order, whereas float64 exp can map distinct
    logits to equal probabilities and turn them into false ties.
    """
    logits = bf16_to_f64(logits_bits)
    e = logits.shape[-1]
    if not 0 < k <= e:
        raise ValueError(f"k={k} must be in 1..{e}")
    if not np.all(np.isfinite(logits)):
        raise ValueError("the contract covers finite logits only")
    # Stable sort of the negated logits: descending, and equal logits keep ascending id order.
    order = np.argsort(-logits, axis=-1, kind="stable")[..., :k]
    top = np.take_along_axis(logits, order, axis=-1)
    # Renormalized top-k softmax = softmax over the selected logits; the row max cancels.
    ex = np.exp(top - top[..., :1])
    return TopK(ids=order.astype(np.int32), weights=ex / np.sum(ex, axis=-1, keepdims=True))


ROUTER_EPS = float(np.float32(1e-20))
"""Added to the sum of the selected scores before the weights are divided by it (an all-zero selection
gives zero weights, not NaN): the fp32 value of 1e-20, as transformers' and vLLM's DeepSeek routers add."""


def sigmoid(x: ArrayLike) -> F64:
    """1 / (1 + exp(-x)) in float64, written so that neither branch overflows."""
    v = np.asarray(x, dtype=np.float64)
    e = np.exp(-np.abs(v))
    return np.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


class GroupedTopK(NamedTuple):
    """The grouped sigmoid router's choice per row, best first, and the scores it was made from."""

    ids: npt.NDArray[np.int32]
    """Expert ids, [..., k]."""
    weights: F64
    """scale * s[id] / (sum of the k selected s + ROUTER_EPS), [..., k]."""
    scores: F64
    """s = sigmoid(logit) of every expert, [..., E] (the unbiased scores the weights are made of)."""
    biased: F64
    """b = s + bias of every expert, [..., E] (what chooses)."""
    groups: npt.NDArray[np.int64]
    """The kept groups' indices, best first, [..., topk_groups]."""


def moe_grouped_topk_sigmoid(
    logits: ArrayLike, bias: ArrayLike, k: int, groups: int, topk_groups: int, scale: float
) -> GroupedTopK:
    """DeepSeek-V3's router (docs/ops/moe_grouped_topk_sigmoid.md): s = sigmoid(logits), b = s + bias;
    a group's score is the sum of its two largest b; the topk_groups best groups are kept; the k experts
    of largest b among them are chosen; weights = scale * s / (sum of their s + ROUTER_EPS).

    Every ordering is a stable sort of float64 values, descending: equal scores keep the lower index
    first (groups and experts alike), the rule the contract states.
    """
    x = np.asarray(logits, dtype=np.float64)
    bv = np.asarray(bias, dtype=np.float64)
    e = x.shape[-1]
    if bv.shape != (e,):
        raise ValueError(f"bias has shape {bv.shape}, expected ({e},)")
    if groups < 1 or e % groups or e // groups < 2:
        raise ValueError(f"groups={groups} must divide E={e} into groups of at least 2 experts")
    size = e // groups
    if not 0 < topk_groups <= groups or not 0 < k <= topk_groups * size:
        raise ValueError(
            f"k={k}, topk_groups={topk_groups}: need 1 <= topk_groups <= {groups}, 1 <= k <= {topk_groups * size}"
        )
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(bv))):
        raise ValueError("the contract covers finite logits and bias only")
    s = sigmoid(x)
    b = s + bv
    lead = b.shape[:-1]
    by_group = b.reshape(*lead, groups, size)
    top2 = -np.sort(-by_group, axis=-1)[..., :2]
    gscore = top2[..., 0] + top2[..., 1]
    kept = np.argsort(-gscore, axis=-1, kind="stable")[..., :topk_groups]
    mask = np.zeros((*lead, groups), dtype=bool)
    np.put_along_axis(mask, kept, True, axis=-1)
    masked = np.where(np.repeat(mask, size, axis=-1), b, -np.inf)
    ids = np.argsort(-masked, axis=-1, kind="stable")[..., :k]
    chosen = np.take_along_axis(s, ids, axis=-1)
    w = chosen / (np.sum(chosen, axis=-1, keepdims=True) + ROUTER_EPS) * scale
    return GroupedTopK(ids=ids.astype(np.int32), weights=w, scores=s, biased=b, groups=kept)


# --------------------------------------------------------------------------------------------
# Deviation metrics
# --------------------------------------------------------------------------------------------


def relative_max_error(actual: ArrayLike, reference: ArrayLike) -> float:
    """max |actual - reference| / max |reference| over the whole tensor.

    Normalizing by the tensor's largest magnitude (not elementwise) keeps near-zero outputs,
    whose relative error is meaningless, from dominating. Returns inf if any difference is not
    finite (a NaN or inf in the kernel output must fail any tolerance), and for an all-zero
    reference returns 0.0 if actual matches it and inf otherwise.
    """
    a = np.asarray(actual, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if a.shape != r.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs {r.shape}")
    if a.size == 0:
        return 0.0
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - r)
    if not np.all(np.isfinite(diff)):
        return math.inf
    err = float(np.max(diff))
    ref = float(np.max(np.abs(r)))
    if ref == 0.0:
        return 0.0 if err == 0.0 else math.inf
    return err / ref


def _fp8_ordinal(codes: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    # E4M3FN magnitudes grow monotonically with the low 7 bits, so the signed ordinal counts
    # representable values; +0 and -0 both map to 0.
    mag = (codes & 0x7F).astype(np.int64)
    return np.where(codes & 0x80, -mag, mag)


def fp8_step_distance(actual: ArrayLike, expected: ArrayLike) -> npt.NDArray[np.int64]:
    """How many representable E4M3FN values lie between two codes (0: same value).

    +0/-0 are the same value. A NaN code on either side gives a distance of 256, larger than
    any real one.
    """
    a = _bits(actual, np.uint8, "fp8 codes")
    b = _bits(expected, np.uint8, "fp8 codes")
    dist = np.abs(_fp8_ordinal(a) - _fp8_ordinal(b))
    nan = ((a & 0x7F) == _FP8_NAN) | ((b & 0x7F) == _FP8_NAN)
    return np.where(nan, 256, dist)


def fp8_rounds_within(codes: ArrayLike, value: ArrayLike, window: ArrayLike) -> npt.NDArray[np.bool_]:
    """Where a code is what the saturating E4M3FN encoder gives for some quotient within `window` of
    `value`: the values that round to a code span half the distance to each neighbour (up to +-inf past
    +-448), so the code qualifies when its value lies within the window plus half the gap to its neighbour
    on the side of `value`. A NaN code never does."""
    c = _bits(codes, np.uint8, "fp8 codes")
    o = _fp8_ordinal(c)  # -126 .. 126 over the finite codes
    mags = fp8_e4m3_decode(np.arange(_FP8_NAN, dtype=np.uint8))  # codes 0x00 .. 0x7E: ordinals 0 .. 126
    by_ordinal = np.concatenate([[-np.inf], -mags[:0:-1], mags, [np.inf]])
    at = o + 127  # by_ordinal[at] is the code's value; its neighbours at at -+ 1
    q = by_ordinal[np.clip(at, 0, 254)]
    v = np.asarray(value, dtype=np.float64)
    up = v > q
    with np.errstate(invalid="ignore"):  # inf - inf past the ends: never read for a finite code
        gap = np.where(up, by_ordinal[np.clip(at + 1, 0, 254)] - q, q - by_ordinal[np.clip(at - 1, 0, 254)])
        ok = np.abs(v - q) <= np.asarray(window, dtype=np.float64) + gap / 2
    return ok & ((c & 0x7F) != _FP8_NAN)


def count_fp8_beyond_one_step(actual: ArrayLike, expected: ArrayLike) -> int:
    """Codes differing by more than one quantization step; certification expects 0.

    One step is allowed because the kernel's fp32 value can land on the other side of a
    rounding midpoint than the float64 one; two steps cannot come from rounding alone.
    """
    return int(np.count_nonzero(fp8_step_distance(actual, expected) > 1))
