"""Conformance: the test vectors every kernel of an op family is run on, and how its outputs are judged.

Target-independent and framework-free (numpy only), so that `netra certify` can use it on any GPU
class: a harness allocates `outputs(...)`, runs the kernel on each `cases(...)` entry, and hands what
came back to `judge(...)`. The float64 reference (netra.certify.reference) defines every expected value;
the allowances below are the only places where a kernel may differ from it, each one derived in a
comment. Inputs are bf16 bit patterns (uint16), deterministic functions of (op, params, seed).

Judging, per op (details at each function):

* bf16 outputs (rmsnorm y): bit-exact against the reference rounded once, except one ulp where the
  exact value lies within MIDPOINT_WINDOW of a bf16 rounding midpoint (counted); plus
  relative_max_error <= TOLERANCES.
* FP8 codes: bit-exact (as values: +0 and -0 are equal) against the reference, except one step where
  the exact scaled value lies within the window of an E4M3 rounding midpoint (counted); two steps or
  a NaN code always fail. Scales: elementwise relative error within TOLERANCES.
* Fused families (fused_add_rmsnorm, rmsnorm_fp8_group_quant, fused_add_rmsnorm_fp8_group_quant): the
  reference is the composition of the unfused ones. residual_out = bf16(x + residual) is bit-exact (one
  rounding of an exact sum: no allowance); y is judged as rmsnorm's; q and scales as fp8_group_quant's
  of the bf16 y, where a y the kernel may round the other way (within rmsnorm's window of a bf16
  midpoint) may be quantized as that other bf16 value (counted).
* Expert ids: exact, order included. The contract fixes the order of equal logits (lower id first),
  so a swap of tied experts is a contract violation, not a rounding effect, and is not allowed.
  Router weights: relative_max_error within TOLERANCES.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

try:
    import numpy as np
    import numpy.typing as npt
except ModuleNotFoundError as _e:  # numpy is the certify extra's, not a dependency of netra-kernel
    raise ModuleNotFoundError(
        "netra.certify.conformance needs numpy, which is not installed: pip install 'netra-kernel[certify]'",
        name=_e.name,
    ) from None

from netra.certify import reference as ref
from netra.core.ops import FAMILIES

__all__ = [
    "MIDPOINT_WINDOW",
    "OPS",
    "TOLERANCES",
    "Case",
    "Verdict",
    "bytes_moved",
    "cases",
    "expected",
    "judge",
    "outputs",
]

OPS = tuple(FAMILIES)
FUSED_QUANT = ("rmsnorm_fp8_group_quant", "fused_add_rmsnorm_fp8_group_quant")
WITH_RESIDUAL = ("fused_add_rmsnorm", "fused_add_rmsnorm_fp8_group_quant")
FUSED = ("fused_add_rmsnorm", *FUSED_QUANT)

U = 2.0**-24  # fp32 unit roundoff

# Tolerances on max_rel_deviation = reference.relative_max_error(kernel, float64 reference), per op and
# output; for scales the same bound is applied elementwise (a scale is never 0: the floor).
TOLERANCES: dict[str, dict[str, float]] = {
    # RNE to bf16 is within 2^-8 |y| of any value it rounds (half an ulp of 8 significant bits), and a
    # conforming fp32 computation (one rounding at the output) lands within (H/128 + 9) u of the exact
    # y before it (docs/ops/rmsnorm.md); at the template's largest H = 16384: 2^-8 + 137u = 3.9144e-3.
    "rmsnorm": {"y": 2.0**-8 + 137 * U},
    # scale = RN32(max(amax, 1e-10) / 448) with an exact amax: <= u; at the floor the fp32 value of
    # 1e-10 (1.3e-8 relative off) adds to it, < 2u = 2^-23. dequant = decode(q) * s against the exact
    # x: half a step of the top binade (16 of 448) = 1/28, for the reference as well, plus rounding.
    "fp8_group_quant": {"scales": 2.0**-23, "dequant": 1 / 28 + 1e-6},
    # h = silu(g) u in fp32 is within (|g| + 10) u (docs/ops/silu_mul_fp8_quant.md); the scale adds u
    # and its own rounding. 16u = 2^-20 covers it when the gate g* at the group maximum is > -6; for
    # negative g* the elementwise check adds GATE_TERM * |g*| (4x the |g| u of rounding the exponent
    # of exp(-g)), so large negative gates are not failed for an error the contract allows.
    "silu_mul_fp8_quant": {"scales": 2.0**-20, "dequant": 1 / 28 + 1e-6},
    # w_s = e_s / sum e: exp within 2 ulp (4u), the k-term sum (k-1)u plus the e errors (4u), the
    # quotient 2u: <= 17u w relative; rounding d = l_s - l_0 moves e by <= e |d| u <= u/e absolute.
    # Over a tensor whose largest weight is >= 1/k = 1/8: <= 17u + 8u/e ~ 20u; 2^-18 = 64u leaves room
    # for a less careful exp (the gfx950 kernel's 2^(d log2 e)).
    "moe_topk_softmax": {"weights": 2.0**-18},
    # residual_out is exact (no entry); y is rmsnorm's y of residual_out.
    "fused_add_rmsnorm": {"y": 2.0**-8 + 137 * U},
    # scales as fp8_group_quant's; dequant against the reference's bf16 y: fp8_group_quant's 1/28, plus
    # one bf16 rounding (<= 2^-8 of the tensor's max) where the kernel's y rounded the other way at a
    # midpoint, which also moves that group's scale by <= 2^-8: 1/28 (1 + 2^-8) + 2^-8 < 1/28 + 2^-7.
    "rmsnorm_fp8_group_quant": {"scales": 2.0**-23, "dequant": 1 / 28 + 2.0**-7},
    "fused_add_rmsnorm_fp8_group_quant": {"scales": 2.0**-23, "dequant": 1 / 28 + 2.0**-7},
}

# How close (relative) the exact value must be to a rounding midpoint for a one-step difference to be
# a rounding effect. rmsnorm: the fp32 budget before the bf16 rounding is <= (H/128 + 9) u <= 8.2e-6 <
# 2^-16. FP8: the quotient the encoder sees is within ~4u of the exact x/s (scale rounding, reciprocal,
# product); 2^-18 = 64u leaves room for an rcp-based quotient (gfx950: ~1.5 ulp). silu adds
# GATE_TERM * max(-g, 0) per element (4x the |g| u error of exp(-g), which only matters for g < 0).
MIDPOINT_WINDOW: dict[str, float] = {
    "rmsnorm": 2.0**-16,
    "fp8_group_quant": 2.0**-18,
    "silu_mul_fp8_quant": 2.0**-18,
}
GATE_TERM = 2.0**-22

# How a harness holds each tensor dtype of a family's record: bf16 as uint16 bits, FP8 as uint8 codes.
_HOLD = {"bf16": np.uint16, "fp8_e4m3fn": np.uint8, "f32": np.float32, "i32": np.int32}

U16 = npt.NDArray[np.uint16]
F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Case:
    """One test vector: inputs by kernel argument name (bf16 as uint16 bits) and runtime scalars."""

    name: str
    rows: int
    inputs: dict[str, np.ndarray]
    scalars: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """A judged case. max_rel_deviation / tolerance are those of the output nearest its tolerance."""

    passed: bool
    max_rel_deviation: float
    tolerance: float
    counts: dict[str, int]
    reason: str
    deviations: dict[str, float] = field(default_factory=dict)


def _check(op: str, params: dict[str, int]) -> None:
    if op not in FAMILIES:
        raise ValueError(f"unknown op {op!r}; one of {', '.join(OPS)}")
    missing = [p for p in FAMILIES[op].params if p not in params]
    if missing:
        raise ValueError(f"{op}: missing parameters {missing}")
    if op in ("fp8_group_quant", "silu_mul_fp8_quant", *FUSED_QUANT) and params["group"] != ref.FP8_GROUP:
        raise ValueError(f"{op}: group must be {ref.FP8_GROUP}")


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------


def outputs(op: str, params: dict[str, int], rows: int) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """What a harness allocates for a kernel's outputs, by argument name in ABI order (bf16 as uint16,
    FP8 as uint8): the family's record (netra/core/families/) at these parameters and rows."""
    _check(op, params)
    fam = FAMILIES[op]
    env = fam.env(params, rows)
    return {o.name: (np.dtype(_HOLD[o.dtype]), o.dims(env)) for o in fam.kernel_outputs}


def bytes_moved(op: str, params: dict[str, int], rows: int) -> int:
    """The fewest bytes the op must move: each input read once, each output written once (the record's)."""
    _check(op, params)
    return FAMILIES[op].bytes_moved(params, rows)


# --------------------------------------------------------------------------------------------
# Test vectors
# --------------------------------------------------------------------------------------------


def _bits_f32(a: npt.NDArray[np.float32]) -> U16:
    """bf16 bits of finite float32 values, round to nearest even (integer arithmetic: fast, exact)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def _bits_exact(v: npt.ArrayLike) -> U16:
    """bf16 bits of values that must be exactly representable (constructed cases)."""
    v = np.asarray(v, dtype=np.float64)
    b = ref.f64_to_bf16_rne(v)
    if not np.array_equal(ref.bf16_to_f64(b), v):
        raise AssertionError("internal: a constructed value is not a bf16 value")
    return b


def _rng(op: str, params: dict[str, int], name: str, seed: int) -> np.random.Generator:
    key = [seed, zlib.crc32(op.encode()), zlib.crc32(name.encode())]
    key += [int(params[p]) for p in FAMILIES[op].params]
    return np.random.default_rng(key)


_SCALES = (1e-3, 1.0, 1e3)


def _normal(rng: np.random.Generator, rows: int, n: int, scales: npt.ArrayLike) -> U16:
    """Normal values, one scale per row (cycled), as bf16 bits."""
    s = np.resize(np.asarray(scales, dtype=np.float32), rows)[:, None]
    return _bits_f32(rng.standard_normal((rows, n), dtype=np.float32) * s)


# FP8 E4M3FN: every rounding midpoint between consecutive non-negative values up to 448 (5 significant
# bits at most, so exact in bf16 after any power-of-two scaling in range).
_FP8_VALUES = ref.fp8_e4m3_decode(np.arange(0x7F, dtype=np.uint8))
_FP8_MIDPOINTS = (_FP8_VALUES[:-1] + _FP8_VALUES[1:]) / 2


def _huge_per_group(rng: np.random.Generator, bits: U16, n: int, lo: float, hi: float) -> None:
    """Give each group of 128 one element of magnitude 10^[lo, hi): in place (saturation, tiny codes)."""
    rows = bits.shape[0]
    groups = n // 128
    pos = rng.integers(0, 128, size=(rows, groups)) + 128 * np.arange(groups)
    mag = 10.0 ** rng.uniform(lo, hi, size=(rows, groups))
    sign = np.where(rng.random((rows, groups)) < 0.5, -1.0, 1.0)
    np.put_along_axis(bits, pos, _bits_f32((sign * mag).astype(np.float32)), axis=1)


def _midpoint_rows(rng: np.random.Generator, rows: int, n: int) -> tuple[F64, F64]:
    """Rows whose x / s is exactly an E4M3 midpoint (or value) for every element: per group a random
    power-of-two scale 2^k, one element +-448 * 2^k (amax, so s = 2^k exactly), the others +-m * 2^k
    with m a midpoint (3/4 of them) or a representable value. Returns (values, 2^k per element)."""
    groups = n // 128
    k = rng.integers(-24, 25, size=(rows, groups, 1)).astype(np.float64)
    m = rng.choice(_FP8_MIDPOINTS, size=(rows, groups, 128))
    exact = rng.choice(_FP8_VALUES[1:], size=(rows, groups, 128))
    m = np.where(rng.random((rows, groups, 128)) < 0.75, m, exact)
    m[:, :, 0] = ref.FP8_E4M3_MAX
    m = rng.permuted(m, axis=2)
    sign = np.where(rng.random(m.shape) < 0.5, -1.0, 1.0)
    return (sign * m).reshape(rows, n), np.broadcast_to(np.exp2(k), m.shape).reshape(rows, n)


def _rmsnorm_cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    h, wo = p["hidden"], p["weight_offset"]

    def make(
        name: str, rows: int, fill: Callable[[np.random.Generator, int], U16], eps: float = 1e-6
    ) -> Case:
        rng = _rng("rmsnorm", p, name, seed)
        x = fill(rng, rows)
        # w: around 1 for x*w, around 0 for Gemma's x*(1 + w); a few exact zeros
        w = rng.standard_normal(h, dtype=np.float32) * np.float32(0.5 if wo == 0 else 0.3)
        w = np.where(rng.random(h) < 0.02, np.float32(0), w + np.float32(1 - wo))
        return Case(name, rows, {"x": x, "w": _bits_f32(w)}, {"eps": float(np.float32(eps))})

    def zeros(rng: np.random.Generator, rows: int) -> U16:
        x = _normal(rng, rows, h, _SCALES)
        x[0::2] = 0
        x[2::4] = 0x8000  # -0.0 rows
        return x

    def huge(rng: np.random.Generator, rows: int) -> U16:
        # one large value per row among small ones: rs is set by it; x^2 stays inside fp32
        x = _normal(rng, rows, h, 1e-3)
        pos = rng.integers(0, h, size=rows)
        x[np.arange(rows), pos] = _bits_f32(np.float32(10.0) ** rng.uniform(2, 12, rows).astype(np.float32))
        return x

    def large_fill(rng: np.random.Generator, rows: int) -> U16:
        x = _normal(rng, rows, h, _SCALES)
        x[17::97] = 0
        x[5::31, rng.integers(0, h)] = _bits_f32(np.float32(1e6))
        return x

    partial = _partial_rows(rpb)
    return [
        make("random_1e0_rows1", 1, lambda r, n: _normal(r, n, h, 1.0)),
        make("random_1e-3_rows3", 3, lambda r, n: _normal(r, n, h, 1e-3)),
        make("random_1e3_rows3", 3, lambda r, n: _normal(r, n, h, 1e3), eps=1e-5),
        make(f"random_mixed_rows{partial}", partial, lambda r, n: _normal(r, n, h, _SCALES)),
        make("zeros_rows4", 4, zeros),
        make("huge_rows3", 3, huge),
        make(f"large_rows{large}", large, large_fill),
    ]


def _partial_rows(rpb: int) -> int:
    """A row count that is not a multiple of rows_per_block (5 when every count is)."""
    return 2 * rpb + 1 if rpb > 1 else 5


def _quant_cases(op: str, p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    silu = op == "silu_mul_fp8_quant"
    n = p["inter"] if silu else p["hidden"]

    def make(name: str, rows: int, fill: Callable[[np.random.Generator, int], U16]) -> Case:
        return Case(name, rows, {"x": fill(_rng(op, p, name, seed), rows)})

    def rnd(scales: npt.ArrayLike) -> Callable[[np.random.Generator, int], U16]:
        # silu: gate and up at the same scale (the row is [g | u])
        return lambda r, rows: _normal(r, rows, 2 * n if silu else n, scales)

    def zeros(rng: np.random.Generator, rows: int) -> U16:
        x = rnd(_SCALES)(rng, rows)
        x[0] = 0
        x[1] = 0x8000  # -0.0: codes 0x80 (silu: h = -0 * -0 = +0 or similar, all zero)
        x[2, : 128 * (n // 256)] = 0  # some whole groups zero (silu: zero gates), the rest random
        return x

    def huge(rng: np.random.Generator, rows: int) -> U16:
        if not silu:
            x = rnd(1.0)(rng, rows)
            _huge_per_group(rng, x, n, 3, 38.5)  # up to the bf16 range: tiny and subnormal codes
            return x
        g = _normal(rng, rows, n, 1.0)
        u = _normal(rng, rows, n, 1.0)
        _huge_per_group(rng, g, n, 1.3, 4)  # large positive or negative gates: silu = g or ~0
        _huge_per_group(rng, u, n, 2, 12)
        return np.concatenate([g, u], axis=1)

    def midpoints(rng: np.random.Generator, rows: int) -> U16:
        v, pow2 = _midpoint_rows(rng, rows, n)
        if not silu:
            return _bits_exact(v * pow2)
        # silu(g) = g exactly in fp32 and float64 for g >= 64 (exp(-64) < 2^-90): h = 64 u exactly
        g = np.full((rows, n), 64.0)
        return np.concatenate([_bits_exact(g), _bits_exact(v * pow2 / 64)], axis=1)

    def large_fill(rng: np.random.Generator, rows: int) -> U16:
        x = rnd(_SCALES)(rng, rows)
        x[7::101] = 0
        mid = midpoints(rng, len(range(3, rows, 53)))
        x[3::53] = mid
        return x

    partial = _partial_rows(rpb)
    return [
        make("random_1e0_rows1", 1, rnd(1.0)),
        make("random_1e-3_rows3", 3, rnd(1e-3)),
        make("random_1e3_rows3", 3, rnd(1e3)),
        make(f"random_mixed_rows{partial}", partial, rnd(_SCALES)),
        make("zeros_rows3", 3, zeros),
        make("huge_rows3", 3, huge),
        make("midpoints_rows4", 4, midpoints),
        make(f"large_rows{large}", large, large_fill),
    ]


def _tied_rows(rng: np.random.Generator, rows: int, e: int, k: int) -> U16:
    """Router rows with equal logits where they decide the selection."""
    out = np.zeros((rows, e), dtype=np.uint16)
    for r in range(rows):
        kind = r % 5
        if kind == 0:  # every logit equal: ids 0..k-1, equal weights
            out[r] = _bits_exact(np.full(e, 0.5))
        elif kind == 1:  # a tie across the top-k boundary
            v = -4.0 + rng.integers(0, 8, e) / 8.0
            sure = max(k - 2, 0)  # experts above the tie (none when k <= 2)
            top = rng.permutation(e)[: min(sure + 6, e)]
            v[top[:sure]] = 3.0 + np.arange(sure) / 4
            v[top[sure:]] = 2.0  # up to six experts share the last places
            out[r] = _bits_exact(v)
        elif kind == 2:  # +0 and -0 are equal logits
            out[r] = _bits_exact(-1.0 - rng.integers(0, 4, e) / 4.0)
            z = rng.permutation(e)[: k + 2]
            out[r, z] = np.where(np.arange(k + 2) % 2 == 0, 0x0000, 0x8000)
        elif kind == 3:  # few distinct values: ties everywhere
            out[r] = _bits_exact(rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], e))
        else:  # the maximum repeated
            v = rng.standard_normal(e)
            v[rng.permutation(e)[:3]] = 6.0
            out[r] = _bits_f32(v.astype(np.float32))
    return out


def _moe_cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    e, k = p["experts"], p["topk"]

    def make(name: str, rows: int, fill: Callable[[np.random.Generator, int], U16]) -> Case:
        return Case(name, rows, {"logits": fill(_rng("moe_topk_softmax", p, name, seed), rows)})

    def rnd(scales: npt.ArrayLike) -> Callable[[np.random.Generator, int], U16]:
        return lambda r, rows: _normal(r, rows, e, scales)

    def zeros(rng: np.random.Generator, rows: int) -> U16:
        x = rnd(1.0)(rng, rows)
        x[0] = 0
        x[1] = np.where(np.arange(e) % 3 == 0, 0x8000, 0).astype(np.uint16)
        return x

    def huge(rng: np.random.Generator, rows: int) -> U16:
        # gaps beyond exp's range: all but the top weights underflow (flush or denormal)
        x = rnd(1.0)(rng, rows)
        x[np.arange(rows), rng.integers(0, e, rows)] = _bits_f32(
            np.array([1e4, 120.0, 3e38][:rows], dtype=np.float32)
        )
        return x

    def large_fill(rng: np.random.Generator, rows: int) -> U16:
        x = rnd((1.0, 2.0, 4.0, 1e-3, 50.0))(rng, rows)
        x[1::16] = _tied_rows(rng, len(range(1, rows, 16)), e, k)
        return x

    partial = _partial_rows(rpb)
    return [
        make("random_1e0_rows1", 1, rnd(1.0)),
        make("random_1e-3_rows3", 3, rnd(1e-3)),
        make("random_1e3_rows3", 3, rnd(1e3)),
        make(f"random_mixed_rows{partial}", partial, rnd(_SCALES)),
        make("zeros_rows3", 3, zeros),
        make("huge_rows3", 3, huge),
        make("ties_rows10", 10, lambda r, rows: _tied_rows(r, rows, e, k)),
        make(f"large_rows{large}", large, large_fill),
    ]


def _split(rng: np.random.Generator, t: U16) -> tuple[U16, U16]:
    """(x, residual) whose bf16 sum is about t: residual = t * u, u uniform in [-1, 2), x = bf16(t - residual).

    Zero rows of t stay exactly zero (x = residual = t), so the norm's zero and huge rows survive the add."""
    tv = ref.bf16_to_f64(t)
    u = rng.uniform(-1.0, 2.0, size=t.shape)
    r = ref.f64_to_bf16_rne(tv * u)
    x = ref.f64_to_bf16_rne(tv - ref.bf16_to_f64(r))
    zero = tv == 0
    return np.where(zero, t, x).astype(np.uint16), np.where(zero, t, r).astype(np.uint16)


def _add_ties(rng: np.random.Generator, rows: int, h: int) -> tuple[U16, U16]:
    """Sums that land exactly on bf16 rounding midpoints (ties to even), just beside them, far below
    residual's ulp, and cancelling to +0 and -0: where a second rounding or a wrong tie rule shows."""
    r = _normal(rng, rows, h, _SCALES)
    r = np.where((r & 0x7FFF) == 0, np.uint16(0x3F80), r).astype(np.uint16)
    rv = ref.bf16_to_f64(r)
    _, e = np.frexp(np.abs(rv))
    half_ulp = np.ldexp(1.0, e - 1 - 8)  # half of 2^(e-1-7), the ulp of rv's binade
    kind = rng.integers(0, 6, size=r.shape)
    sign = np.where(rng.random(r.shape) < 0.5, -1.0, 1.0)
    xv = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
        [
            sign * half_ulp,
            sign * half_ulp * (1 + 2.0**-7),
            sign * half_ulp * 3,
            sign * half_ulp * 2.0**-20,
            -rv,
        ],
        default=sign * half_ulp * (1 - 2.0**-7),
    )
    x = _bits_exact(xv)
    x[0, :2] = (0x8000, 0x0000)
    r[0, :2] = (0x8000, 0x8000)  # -0 + -0 = -0, +0 + -0 = +0
    return x, r


def _fused_cases(op: str, p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    """rmsnorm's cases of the same (hidden, weight_offset) as the norm's input (for the fused adds: split
    into x + residual), plus the add's ties and, for the quantizing two, a case of exact FP8 midpoints."""
    h, wo = p["hidden"], p["weight_offset"]
    norm = {"hidden": h, "weight_offset": wo}
    add = op in WITH_RESIDUAL
    out = []
    for c in _rmsnorm_cases(norm, rpb, large, seed):
        inputs = dict(c.inputs)
        if add:
            x, r = _split(_rng(op, p, c.name, seed), c.inputs["x"])
            inputs = {"x": x, "residual": r, "w": c.inputs["w"]}
        out.append(Case(c.name, c.rows, inputs, dict(c.scalars)))
    w = out[0].inputs["w"]
    if add:
        x, r = _add_ties(_rng(op, p, "add_ties", seed), 4, h)
        out.insert(
            -1, Case("add_ties_rows4", 4, {"x": x, "residual": r, "w": w}, {"eps": float(np.float32(1e-6))})
        )
    if op in FUSED_QUANT:
        out.insert(-1, _norm_midpoints(op, p, seed))
    return out


def _norm_midpoints(op: str, p: dict[str, int], seed: int) -> Case:
    """y = x * (w + weight_offset) exactly, with |x| = 1 and eps = 0 (rstd = 1): per group one y of
    1.75 (amax, so s = 2^-8 exactly) and the others FP8 values or midpoints of [256, 448] times 2^-8
    (exact in bf16, and so is w = y - 1 for weight_offset 1): every y / s is a code or a tie."""
    h, wo = p["hidden"], p["weight_offset"]
    rows = 4
    rng = _rng(op, p, "midpoints", seed)
    top = np.arange(256, 449, 16, dtype=np.float64) / 256  # 256 .. 448 in steps of 16: codes and midpoints
    y = rng.choice(top, size=h)
    y[rng.integers(0, 128, size=h // 128) + 128 * np.arange(h // 128)] = 1.75
    sign = np.where(rng.random((rows, h)) < 0.5, -1.0, 1.0)
    inputs: dict[str, np.ndarray] = {"x": _bits_exact(sign), "w": _bits_exact(y - wo)}  # rows: signs differ
    if op in WITH_RESIDUAL:
        a = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=(rows, h))
        inputs = {"x": _bits_exact(sign * a), "residual": _bits_exact(sign * (1 - a)), "w": inputs["w"]}
    return Case("midpoints_rows4", rows, inputs, {"eps": 0.0})


def cases(
    op: str, params: dict[str, int], *, rows_per_block: int, large_rows: int = 8192, seed: int = 0
) -> list[Case]:
    """Every test vector for one contract: 1 row, 3 rows, a count that is not a multiple of
    rows_per_block, large_rows; values at scales 1e-3, 1 and 1e3, zeros, one huge value per group,
    exact FP8 midpoints (quantizers), tied logits (router). Deterministic in (op, params, seed)."""
    _check(op, params)
    if rows_per_block < 1 or large_rows < 1:
        raise ValueError("rows_per_block and large_rows must be positive")
    if op == "rmsnorm":
        return _rmsnorm_cases(params, rows_per_block, large_rows, seed)
    if op == "moe_topk_softmax":
        return _moe_cases(params, rows_per_block, large_rows, seed)
    if op in FUSED:
        return _fused_cases(op, params, rows_per_block, large_rows, seed)
    return _quant_cases(op, params, rows_per_block, large_rows, seed)


# --------------------------------------------------------------------------------------------
# Expected values
# --------------------------------------------------------------------------------------------

_CHUNK_ROWS = 256  # the reference runs in row chunks: rows are independent, and memory stays bounded


def _by_rows(
    fn: Callable[[int, int], dict[str, np.ndarray]], rows: int, workers: int
) -> dict[str, np.ndarray]:
    spans = [(a, min(a + _CHUNK_ROWS, rows)) for a in range(0, rows, _CHUNK_ROWS)]
    if workers > 1 and len(spans) > 1:
        # numpy releases the GIL inside its array loops, so threads over row chunks run in parallel
        with ThreadPoolExecutor(max_workers=workers) as ex:
            parts = list(ex.map(lambda ab: fn(*ab), spans))
    else:
        parts = [fn(a, b) for a, b in spans]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def expected(op: str, params: dict[str, int], case: Case, *, workers: int = 1) -> dict[str, np.ndarray]:
    """The float64 reference for a case, plus what judging needs (computed once, shared by tactics).

    workers > 1 computes row chunks in that many threads; the result does not depend on it."""
    _check(op, params)
    if op == "rmsnorm":
        x, w, eps = case.inputs["x"], case.inputs["w"], case.scalars["eps"]
        wo = float(params["weight_offset"])
        return _by_rows(lambda a, b: {"y": ref.rmsnorm(x[a:b], w, eps, wo)}, case.rows, workers)
    if op == "moe_topk_softmax":
        lg = case.inputs["logits"]

        def topk(a: int, b: int) -> dict[str, np.ndarray]:
            t = ref.moe_topk_softmax(lg[a:b], k=params["topk"])
            return {"ids": t.ids, "weights": t.weights}

        return _by_rows(topk, case.rows, workers)
    if op in FUSED:
        return _by_rows(lambda a, b: _fused_expected(op, params, case, a, b), case.rows, workers)
    x = case.inputs["x"]
    silu = op == "silu_mul_fp8_quant"

    def quant(a: int, b: int) -> dict[str, np.ndarray]:
        gq = ref.silu_mul_fp8_quant(x[a:b]) if silu else ref.fp8_group_quant(x[a:b])
        v = gq.values.reshape(b - a, -1, ref.FP8_GROUP)
        s = gq.scales[..., None]
        out: dict[str, np.ndarray] = {
            "q": gq.q,
            "scales": gq.scales,
            "scaled": np.clip(v / s, -ref.FP8_E4M3_MAX, ref.FP8_E4M3_MAX).reshape(b - a, -1),
            "values": gq.values,
        }
        if silu:
            # -g where g < 0: the size of the exp(-g) rounding term in h (zero for g >= 0)
            neg_gate = np.maximum(-ref.bf16_to_f64(x[a:b, : x.shape[1] // 2]), 0.0)
            at_max = np.argmax(np.abs(v), axis=-1)[..., None]
            out["neg_gate"] = neg_gate
            out["neg_gate_at_max"] = np.take_along_axis(neg_gate.reshape(v.shape), at_max, axis=-1)[..., 0]
        return out

    return _by_rows(quant, case.rows, workers)


def _other_bf16(y: F64, bits: U16) -> U16:
    """The bf16 neighbour of `bits` on the side of the exact value y (bits itself where y is exact)."""
    step = np.sign(y - ref.bf16_to_f64(bits)).astype(np.int64)
    o = _ordinal16(bits) + step
    return np.where(o < 0, 0x8000 | (-o), o).astype(np.uint16)


def _fused_expected(op: str, p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The composed reference of rows a..b. Quantizing families: the bf16 y (`y`), the other bf16 value a
    conforming kernel may round y to (`y_alt`: where y is within rmsnorm's window of a bf16 midpoint,
    else y), and fp8_group_quant of y (`q`, `scales`) and of y_alt (`scales_alt`)."""
    x, w, eps = case.inputs["x"][a:b], case.inputs["w"], case.scalars["eps"]
    wo = float(p["weight_offset"])
    out: dict[str, np.ndarray] = {}
    if op in WITH_RESIDUAL:
        fa = ref.fused_add_rmsnorm(x, case.inputs["residual"][a:b], w, eps, wo)
        out["residual_out"] = fa.residual_out
        y64 = fa.y
        if op == "fused_add_rmsnorm":
            out["y"] = y64
            return out
        gq = ref.fused_add_rmsnorm_fp8_group_quant(x, case.inputs["residual"][a:b], w, eps, wo, p["group"])[1]
    else:
        y64 = ref.rmsnorm(x, w, eps, wo)
        gq = ref.rmsnorm_fp8_group_quant(x, w, eps, wo, p["group"])
    y = ref.f64_to_bf16_rne(y64)
    other = _other_bf16(y64, y)
    mid = (ref.bf16_to_f64(y) + ref.bf16_to_f64(other)) / 2
    with np.errstate(invalid="ignore"):
        near = np.abs(y64 - mid) <= MIDPOINT_WINDOW["rmsnorm"] * np.abs(y64)
    y_alt = np.where(near, other, y).astype(np.uint16)
    out.update(
        q=gq.q,
        scales=gq.scales,
        y=y,
        y_alt=y_alt,
        scales_alt=ref.fp8_group_quant(y_alt, p["group"]).scales,
    )
    return out


# --------------------------------------------------------------------------------------------
# Judging
# --------------------------------------------------------------------------------------------


def _ordinal16(bits: U16) -> npt.NDArray[np.int64]:
    mag = (bits & 0x7FFF).astype(np.int64)
    return np.where(bits & 0x8000, -mag, mag)


def _first(mask: np.ndarray) -> str:
    idx = np.argwhere(mask)[0]
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def _verdict(devs: dict[str, tuple[float, float]], counts: dict[str, int], failures: list[str]) -> Verdict:
    worst = max(devs, key=lambda k: devs[k][0] / devs[k][1] if devs[k][1] else math.inf)
    dev, tol = devs[worst]
    for name, (d, t) in devs.items():
        if not d <= t:  # NaN-safe
            failures.append(f"{name}: max_rel_deviation {d:.3e} > tolerance {t:.3e}")
    return Verdict(
        passed=not failures,
        max_rel_deviation=dev,
        tolerance=tol,
        counts=counts,
        reason="; ".join(failures) if failures else "ok",
        deviations={k: d for k, (d, _) in devs.items()},
    )


def _shape_errors(op: str, params: dict[str, int], case: Case, got: dict[str, np.ndarray]) -> list[str]:
    errs = []
    for name, (dt, shape) in outputs(op, params, case.rows).items():
        a = got.get(name)
        if a is None:
            errs.append(f"output {name} missing")
        elif a.dtype != dt or a.shape != shape:
            errs.append(f"output {name} is {a.dtype}{list(a.shape)}, expected {dt}{list(shape)}")
    return errs


def _judge_rmsnorm(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    y = exp["y"]
    y_bits = got["y"]
    ref_bits = ref.f64_to_bf16_rne(y)
    gv = ref.bf16_to_f64(y_bits)
    failures: list[str] = []
    dist = np.abs(_ordinal16(y_bits) - _ordinal16(ref_bits))
    off = dist != 0
    mid = (gv + ref.bf16_to_f64(ref_bits)) / 2
    with np.errstate(invalid="ignore"):
        near = (dist == 1) & (np.abs(y - mid) <= MIDPOINT_WINDOW["rmsnorm"] * np.abs(y))
    bad = off & ~near
    if bad.any():
        at = _first(bad)
        i = tuple(np.argwhere(bad)[0])
        failures.append(
            f"{int(bad.sum())} of {y.size} y differ from the reference rounding away from a bf16 midpoint "
            f"(first at {at}: got {int(y_bits[i]):#06x}, want {int(ref_bits[i]):#06x})"
        )
    counts = {"elements": int(y.size), "bf16_one_ulp_at_midpoint": int((off & near).sum())}
    devs = {"y": (ref.relative_max_error(gv, y), TOLERANCES["rmsnorm"]["y"])}
    return _verdict(devs, counts, failures)


def _judge_quant(op: str, exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    tol = TOLERANCES[op]
    silu = op == "silu_mul_fp8_quant"
    q, s = got["q"], got["scales"].astype(np.float64)
    failures: list[str] = []
    # scales, elementwise
    s_ref = exp["scales"]
    allow = tol["scales"] + (GATE_TERM * exp["neg_gate_at_max"] if silu else 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        rel = np.abs(s - s_ref) / s_ref
    bad_s = ~(rel <= allow)
    if bad_s.any():
        i = tuple(np.argwhere(bad_s)[0])
        failures.append(
            f"{int(bad_s.sum())} scales off by more than their tolerance (first at {_first(bad_s)}: "
            f"got {s[i]!r}, want {s_ref[i]!r})"
        )
    # codes
    dist = ref.fp8_step_distance(q, exp["q"])
    beyond = dist > 1
    if beyond.any():
        i = tuple(np.argwhere(beyond)[0])
        failures.append(
            f"{int(beyond.sum())} codes two or more steps from the reference, or NaN (first at "
            f"{_first(beyond)}: got {int(q[i]):#04x}, want {int(exp['q'][i]):#04x})"
        )
    one = dist == 1
    v = exp["scaled"]
    mid = (ref.fp8_e4m3_decode(q) + ref.fp8_e4m3_decode(exp["q"])) / 2
    window = MIDPOINT_WINDOW[op] + (GATE_TERM * exp["neg_gate"] if silu else 0.0)
    with np.errstate(invalid="ignore"):
        near = one & (np.abs(v - mid) <= window * np.abs(v))
    off_mid = one & ~near
    if off_mid.any():
        i = tuple(np.argwhere(off_mid)[0])
        failures.append(
            f"{int(off_mid.sum())} codes one step off away from an E4M3 midpoint (first at "
            f"{_first(off_mid)}: got {int(q[i]):#04x}, want {int(exp['q'][i]):#04x}, x/s = {v[i]!r})"
        )
    rows, n = q.shape
    deq = (ref.fp8_e4m3_decode(q).reshape(rows, -1, ref.FP8_GROUP) * s[..., None]).reshape(rows, n)
    devs = {
        "scales": (ref.relative_max_error(s, s_ref), tol["scales"]),
        "dequant": (ref.relative_max_error(deq, exp["values"]), tol["dequant"]),
    }
    counts = {"codes": int(q.size), "fp8_one_step_at_midpoint": int(near.sum()), "scales": int(s.size)}
    return _verdict(devs, counts, failures)


def _judge_residual_out(exp: dict[str, np.ndarray], got: dict[str, np.ndarray], failures: list[str]) -> None:
    r, want = got["residual_out"], exp["residual_out"]
    wrong = r != want
    if wrong.any():
        i = tuple(np.argwhere(wrong)[0])
        failures.append(
            f"{int(wrong.sum())} of {r.size} residual_out differ from bf16(x + residual) (first at "
            f"{_first(wrong)}: got {int(r[i]):#06x}, want {int(want[i]):#06x})"
        )


def _quant_at(values: F64, scale: F64) -> tuple[npt.NDArray[np.uint8], F64]:
    """fp8_group_quant's codes of values [rows, H] at given group scales [rows, H/128], and the quotients."""
    rows, n = values.shape
    v = values.reshape(rows, -1, ref.FP8_GROUP) / scale[..., None]
    scaled = np.clip(v, -ref.FP8_E4M3_MAX, ref.FP8_E4M3_MAX).reshape(rows, n)
    return ref.fp8_e4m3_encode(scaled), scaled


def _judge_fused(op: str, exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    failures: list[str] = []
    counts: dict[str, int] = {}
    devs: dict[str, tuple[float, float]] = {}
    if op in WITH_RESIDUAL:
        _judge_residual_out(exp, got, failures)
        counts["residual_out"] = int(got["residual_out"].size)
    if op == "fused_add_rmsnorm":
        v = _judge_rmsnorm({}, exp, got)
        if not v.passed:
            failures.append(v.reason)
        return Verdict(
            passed=not failures,
            max_rel_deviation=v.max_rel_deviation,
            tolerance=v.tolerance,
            counts={**counts, **v.counts},
            reason="; ".join(failures) if failures else "ok",
            deviations=v.deviations,
        )
    tol = TOLERANCES[op]
    q, s = got["q"], got["scales"].astype(np.float64)
    s_ref, s_alt = exp["scales"], exp["scales_alt"]
    # the scale the kernel's amax gave: the reference's, or the other one where the amax was a bf16 tie
    use_alt = np.abs(s - s_alt) < np.abs(s - s_ref)
    s_used = np.where(use_alt, s_alt, s_ref)
    with np.errstate(invalid="ignore", over="ignore"):
        rel = np.abs(s - s_used) / s_used
    bad_s = ~(rel <= tol["scales"])
    if bad_s.any():
        i = tuple(np.argwhere(bad_s)[0])
        failures.append(
            f"{int(bad_s.sum())} scales off by more than their tolerance (first at {_first(bad_s)}: "
            f"got {s[i]!r}, want {s_ref[i]!r})"
        )
    dec = ref.fp8_e4m3_decode(q)
    exact: dict[str, np.ndarray] = {}
    near: dict[str, np.ndarray] = {}
    far = np.ones(q.shape, dtype=bool)
    for which in ("y", "y_alt"):  # codes of the reference's bf16 y and of the other rounding, at s_used
        want, scaled = _quant_at(ref.bf16_to_f64(exp[which]), s_used)
        dist = ref.fp8_step_distance(q, want)
        mid = (dec + ref.fp8_e4m3_decode(want)) / 2
        exact[which] = dist == 0
        with np.errstate(invalid="ignore"):
            near[which] = (dist == 1) & (
                np.abs(scaled - mid) <= MIDPOINT_WINDOW["fp8_group_quant"] * np.abs(scaled)
            )
        far &= dist > 1
    ok_ref = exact["y"] | near["y"]
    ok = ok_ref | exact["y_alt"] | near["y_alt"]
    at_mid = ok & ~exact["y"] & ~exact["y_alt"]
    if far.any():
        i = tuple(np.argwhere(far)[0])
        failures.append(
            f"{int(far.sum())} codes two or more steps from the reference, or NaN (first at "
            f"{_first(far)}: got {int(q[i]):#04x}, want {int(exp['q'][i]):#04x})"
        )
    off_mid = ~ok & ~far
    if off_mid.any():
        i = tuple(np.argwhere(off_mid)[0])
        failures.append(
            f"{int(off_mid.sum())} codes one step off away from an E4M3 midpoint (first at "
            f"{_first(off_mid)}: got {int(q[i]):#04x}, want {int(exp['q'][i]):#04x})"
        )
    rows, n = q.shape
    deq = (dec.reshape(rows, -1, ref.FP8_GROUP) * s[..., None]).reshape(rows, n)
    devs["scales"] = (ref.relative_max_error(s, s_used), tol["scales"])
    devs["dequant"] = (ref.relative_max_error(deq, ref.bf16_to_f64(exp["y"])), tol["dequant"])
    counts.update(
        codes=int(q.size),
        fp8_one_step_at_midpoint=int(at_mid.sum()),
        scales=int(s.size),
        bf16_other_rounding_codes=int(np.count_nonzero(ok & ~ok_ref)),
        bf16_other_rounding_scales=int(np.count_nonzero(use_alt & (s_alt != s_ref))),
    )
    return _verdict(devs, counts, failures)


def _judge_moe(exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    failures: list[str] = []
    wrong = got["ids"] != exp["ids"]
    if wrong.any():
        i = tuple(np.argwhere(wrong)[0])
        failures.append(
            f"{int(wrong.sum())} expert ids differ (first at {_first(wrong)}: got {int(got['ids'][i])}, "
            f"want {int(exp['ids'][i])})"
        )
    w = got["weights"].astype(np.float64)
    devs = {"weights": (ref.relative_max_error(w, exp["weights"]), TOLERANCES["moe_topk_softmax"]["weights"])}
    return _verdict(devs, {"ids": int(wrong.size), "ids_wrong": int(wrong.sum())}, failures)


def judge(
    op: str,
    params: dict[str, int],
    case: Case,
    got: dict[str, np.ndarray],
    exp: dict[str, np.ndarray] | None = None,
) -> Verdict:
    """Judge a kernel's outputs for one case; exp is expected(op, params, case) if already computed."""
    _check(op, params)
    errs = _shape_errors(op, params, case, got)
    if errs:
        return Verdict(False, math.inf, 0.0, {}, "; ".join(errs))
    if exp is None:
        exp = expected(op, params, case)
    if op == "rmsnorm":
        return _judge_rmsnorm(params, exp, got)
    if op == "moe_topk_softmax":
        return _judge_moe(exp, got)
    if op in FUSED:
        return _judge_fused(op, exp, got)
    return _judge_quant(op, exp, got)
