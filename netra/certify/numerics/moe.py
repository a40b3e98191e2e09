"""What the routed FP8 MoE's two stages share (numerics/fp8_moe_gate_up.py, fp8_moe_down.py): the experts'
weights and their roles, the tokens and their routing, the test vectors' layout, the block-scaled dot in
float64 with the bound of the kernel's fp32 accumulation, and which tokens must give identical bits.

The contract and every derivation: docs/ops/fp8_moe.md. In short: a block-scaled dot product
sum_b ws[b] * xs[b] * sum_{k in block b} dec(w[k]) * dec(x[k]) is exact in float64 per 128-block (products
of two E4M3 values have at most 8 significant bits and lie in [2^-18, 2^17.6], so a block's sum needs at
most 43 bits), and the kernel's fp32 value is within B = c * 2^-23 * T of it, T = sum_k |terms| (scales
included), c = 5 + blocks / 2 (accumulation). A kernel whose tensor core keeps fewer significant bits of
each instruction's sum (wgmma e4m3 on sm_90a: 14, ACCUMULATORS) has its own, larger c; the reference
carries the bounds of each such model under keys suffixed "@bits" (netra.certify.conformance.judge picks
the candidate's).

The weights are generated once per (params, seed) and family and shared by every case of the contract
(a Qwen3-235B-A22B w13 is 1.6 GB). Experts no case routes to hold the FP8 NaN code 0x7F and NaN scales, so
a kernel that reads an expert it should not writes NaN and fails.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from netra.certify import reference as ref
from netra.certify.numerics.common import SCALES, Case
from netra.runtime.tables.model import FP32_ACCUMULATOR_BITS

BLOCK = ref.FP8_GROUP  # 128: the scale blocks of weights and activations, the groups of h
U = 2.0**-24  # fp32 unit roundoff
FP8_NAN = 0x7F
FP8_MAX_CODE = 0x7E  # +448
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]


# The tensor-core accumulations the MoE kernels declare (a template's accumulator_bits): fp32 (mma.sync
# e4m3: F2FP conversions and f16 HMMA on sm_90a), and wgmma
# e4m3 on sm_90a, whose partial sums keep 13 fraction bits (a 22-bit float: the FP22 accumulator of
# Hopper's FP8 tensor cores; DeepSeek-V3's report, section 3.3.2, measured "around 14 bits")
ACCUMULATORS = (FP32_ACCUMULATOR_BITS, 14)


def accumulation(blocks: int, k_len: int, bits: int = FP32_ACCUMULATOR_BITS) -> float:
    """B / T for a block-scaled dot over `blocks` 128-blocks (k_len = 128 * blocks), in absolute terms,
    for a tensor core that keeps `bits` significant bits of each instruction's partial sum.

    The kernel (docs/ops/fp8_moe.md): each block's 128 products, exact in fp32, summed by the tensor core
    in 4 steps of 32 (mma.sync m16n8k32 or wgmma m64nNk32) into the block's partial; each step modelled
    as one rounding to `bits` significant bits of at most 2^(1 - bits) of the step's magnitudes (its
    products and the partial it adds to: truncation allowed; 2^-23 for fp32), so at most 4 * 2^(1 - bits)
    of the block's magnitudes; then the block's partial times (w-scale * x-scale) (that product rounded
    once: 2^-24 of the block's magnitudes) rounded once more (a product or an fma: 2^-24), and the blocks
    merged in any order: blocks - 1 additions of 2^-24 of T at most each. Summed over the blocks: 4 *
    2^(1 - bits) * T + (1 + 1 + blocks - 1) * 2^-24 * T, and one more 2^-24 * T bounds every second-order
    term (blocks < 4000, bits >= 8): for fp32, c = 5 + blocks / 2 in units of 2^-23. The float64 reference
    adds its own rounding where it combines the blocks, k_len * 2^-52 * T at most, added here too.
    """
    if bits not in ACCUMULATORS:
        raise ValueError(f"accumulator_bits {bits}: the MoE judges model {ACCUMULATORS}")
    return 4 * 2.0 ** (1 - bits) + (blocks + 2) * 2.0**-24 + k_len * 2.0**-52


# --------------------------------------------------------------------------------------------
# Experts
# --------------------------------------------------------------------------------------------


def rng(params: dict[str, int], name: str, seed: int) -> np.random.Generator:
    """One generator per (contract, purpose, seed): both stages see the same tokens and routing."""
    key = [seed, zlib.crc32(b"fp8_moe"), zlib.crc32(name.encode())]
    key += [int(params[p]) for p in ("experts", "topk", "hidden", "inter")]
    return np.random.default_rng(key)


@dataclass(frozen=True)
class Roles:
    """What each expert is for. reserved: never routed (NaN traps); exact: small-integer codes and
    power-of-two scales, the first two identical (every sum exact in fp32: the slot order is visible in
    the bits); extreme: every code +-448 with a sign pattern that makes h tie at its group maxima."""

    reserved: tuple[int, ...]
    exact: tuple[int, ...]
    extreme: int | None
    routable: tuple[int, ...]


def roles(params: dict[str, int], seed: int) -> Roles:
    e, k = params["experts"], params["topk"]
    perm = [int(x) for x in rng(params, "roles", seed).permutation(e)]
    nres = max(0, min(max(1, e // 16), e - k))
    reserved, routable = sorted(perm[:nres]), perm[nres:]
    exact = tuple(routable[:k]) if k >= 2 and len(routable) > k else ()
    extreme = routable[len(exact)] if len(routable) > len(exact) + k else None
    return Roles(tuple(reserved), exact, extreme, tuple(sorted(routable)))


# A random expert's codes: 256 equally likely levels shaped like a normal distribution quantized to
# E4M3 (about 110 per standard deviation, +-448 included), so block sums cancel as real weights do.
_LEVELS = ref.fp8_e4m3_encode(
    np.clip(np.sort(np.random.default_rng(20261204).standard_normal(256)) * 110.0, -448.0, 448.0)
)
_LEVELS[0], _LEVELS[-1] = 0x80 | FP8_MAX_CODE, FP8_MAX_CODE
# An exact expert's codes: 0, +-1, +-2, +-3, +-4.
_SMALL = ref.fp8_e4m3_encode(np.array([-4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0]))


def weights(
    params: dict[str, int], name: str, shape: tuple[int, int], hit: Iterable[int], seed: int
) -> tuple[U8, npt.NDArray[np.float32]]:
    """An [E, rows, cols] FP8 weight tensor and its [E, rows/128, cols/128] f32 scales ("w13" or "w2").

    Only the experts in `hit` are generated (each from its own generator, so its values do not depend on
    which others are hit); the others hold 0x7F and NaN scales.
    """
    e = params["experts"]
    rows, cols = shape
    r = roles(params, seed)
    codes = np.full((e, rows, cols), FP8_NAN, dtype=np.uint8)
    scales = np.full((e, rows // BLOCK, cols // BLOCK), np.nan, dtype=np.float32)
    for x in sorted(set(hit)):
        if x in r.exact:  # exact[0] and exact[1] are the same expert
            g = rng(params, f"{name}/exact/{max(r.exact.index(x), 1)}", seed)
            codes[x] = _SMALL[g.integers(0, len(_SMALL), (rows, cols))]
            scales[x] = 2.0**-8
            continue
        g = rng(params, f"{name}/{x}", seed)
        if x == r.extreme:
            sign = g.integers(0, 2, (rows, 1), dtype=np.uint8) ^ g.integers(0, 2, (1, cols), dtype=np.uint8)
            codes[x] = FP8_MAX_CODE | (sign << 7)
            scales[x] = 10.0 ** g.uniform(-3.5, -2.5, scales.shape[1:])
            continue
        codes[x] = _LEVELS[g.integers(0, 256, (rows, cols), dtype=np.uint8)]
        scales[x] = 10.0 ** g.uniform(-4.5, -2.0, scales.shape[1:])  # spread over decades
    return codes, scales


# --------------------------------------------------------------------------------------------
# Tokens and cases
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    """One token of a case: the same key gives the same inputs in every case (batch invariance)."""

    key: str
    scale: float | str  # activation scale, or "zero", "saturated", "exact"
    route: str = "uniform"  # or "same" (the anchor's experts), "extreme", "exact"
    weights: str = "positive"  # or "signed", "exact"


ANCHOR = Token("anchor", 1.0)


def layout(params: dict[str, int], seed: int, down: bool) -> list[tuple[str, list[Token]]]:
    """Every case of a contract as its tokens. tokens = 1, 2, 3, 7, 16, 64 (the contract's range, so
    conformance's rows_per_block and large_rows do not apply); the anchor is token 0 of the cases of 1, 7
    and 64 tokens and of the 40 and 64 tokens routed to its own experts."""
    r = roles(params, seed)

    def mixed(case: str, n: int, **kw: str) -> list[Token]:
        return [Token(f"{case}/{i}", SCALES[i % 3], **kw) for i in range(n)]

    zeros = mixed("zeros", 16)
    zeros[5] = Token("zeros/5", "zero")
    out = [
        ("anchor_tokens1", [ANCHOR]),
        ("random_1e-3_tokens2", [Token(f"small/{i}", 1e-3) for i in range(2)]),
        ("random_1e3_tokens3", [Token(f"large/{i}", 1e3) for i in range(3)]),
        ("random_mixed_tokens7", [ANCHOR, *mixed("mixed7", 6)]),
        ("zeros_tokens16", zeros),
        ("uniform_tokens64", [ANCHOR, *mixed("uniform64", 63)]),
        ("same_experts_tokens64", [ANCHOR, *mixed("same64", 63, route="same")]),
        # 40 pairs per expert = 5 chunks of 8: a tactic holding 4 chunks' accumulators (RESIDENT_CHUNKS 4)
        # loads the weights in a full round and a partial one
        ("same_experts_tokens40", [ANCHOR, *mixed("same40", 39, route="same")]),
    ]
    if r.extreme is not None:
        out.append(("saturated_tokens4", [Token(f"sat/{i}", "saturated", "extreme") for i in range(4)]))
    if down:
        out.append(("signed_weights_tokens5", mixed("signed", 5, weights="signed")))
        if r.exact:
            out.append(
                ("exact_slots_tokens4", [Token(f"exact/{i}", "exact", "exact", "exact") for i in range(4)])
            )
    return out


def routing(params: dict[str, int], tokens: list[Token], seed: int) -> tuple[npt.NDArray[np.int32], F64]:
    """ids [n, k] (k distinct routable experts per token) and router weights [n, k] (f32 values)."""
    k = params["topk"]
    r = roles(params, seed)
    anchor = route_of(params, ANCHOR, r, seed, None)[0]
    ids = np.zeros((len(tokens), k), dtype=np.int32)
    w = np.zeros((len(tokens), k), dtype=np.float32)
    for i, t in enumerate(tokens):
        ids[i], w[i] = route_of(params, t, r, seed, anchor)
    return ids, w.astype(np.float64)


def route_of(
    params: dict[str, int], t: Token, r: Roles, seed: int, anchor: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    k = params["topk"]
    g = rng(params, f"route/{t.key}", seed)
    pool = np.array(r.routable)
    if t.route == "same" and anchor is not None:
        ids = g.permutation(anchor)
    elif t.route == "extreme" and r.extreme is not None:
        rest = g.choice(pool[pool != r.extreme], k - 1, replace=False)
        ids = np.concatenate([[r.extreme], rest])
    elif t.route == "exact" and r.exact:
        ids = np.array(r.exact)
    else:
        ids = g.choice(pool, k, replace=False)
    if t.weights == "signed":  # arbitrary signs and sizes, not normalized
        w = g.standard_normal(k).astype(np.float32)
    elif t.weights == "exact":
        # slot 0: a with an odd significand, slot 1: -a, the rest 0: out = the fp32 rounding residue of
        # a * y0, whose sign says which slot came first (y0 = y1 exactly: identical experts and h)
        a = np.float32(g.uniform(0.25, 0.5))
        a = np.frombuffer((np.array([a]).view(np.uint32) | 1).tobytes(), dtype=np.float32)[0]
        w = np.zeros(k, dtype=np.float32)
        w[0], w[1] = a, -a
    else:  # positive and renormalized, as moe_topk_softmax's
        p = g.uniform(0.05, 1.0, k)
        w = (p / p.sum()).astype(np.float32)
    return ids.astype(np.int32), w


def activations(
    params: dict[str, int], tokens: list[Token], what: str, rows: int, cols: int, seed: int
) -> tuple[U8, npt.NDArray[np.float32]]:
    """FP8 codes [n * rows, cols] and f32 scales [n * rows, cols / 128] of `rows` rows per token (the
    token's activations xq/xs, or its pairs' h codes hq/hs), quantized as fp8_group_quant would."""
    codes = np.zeros((len(tokens) * rows, cols), dtype=np.uint8)
    scales = np.zeros((len(tokens) * rows, cols // BLOCK), dtype=np.float32)
    for i, t in enumerate(tokens):
        g = rng(params, f"{what}/{t.key}", seed)
        sl = slice(i * rows, (i + 1) * rows)
        if t.scale == "zero":
            scales[sl] = ref.SCALE_FLOOR / ref.FP8_E4M3_MAX
        elif t.scale == "saturated":  # every code +-448
            codes[sl] = FP8_MAX_CODE | (g.integers(0, 2, (rows, cols), dtype=np.uint8) << 7)
            scales[sl] = 10.0 ** g.uniform(-3.5, -2.5, (rows, cols // BLOCK))
        elif t.scale == "exact":  # small integers, one power-of-two scale: the same row for every slot
            codes[sl] = _SMALL[g.integers(0, len(_SMALL), (1, cols))]
            scales[sl] = 2.0**-6
        else:
            x = g.standard_normal((rows, cols // BLOCK, BLOCK)) * float(t.scale)
            x *= 10.0 ** g.uniform(-0.5, 0.5, (rows, cols // BLOCK, 1))
            amax = np.max(np.abs(x), axis=-1)
            s = (np.maximum(amax, ref.SCALE_FLOOR) / ref.FP8_E4M3_MAX).astype(np.float32)
            q = np.clip(x / s.astype(np.float64)[..., None], -ref.FP8_E4M3_MAX, ref.FP8_E4M3_MAX)
            codes[sl] = ref.fp8_e4m3_encode(q).reshape(rows, cols)
            scales[sl] = s
    return codes, scales


def build(
    params: dict[str, int], seed: int, down: bool
) -> list[tuple[str, list[Token], npt.NDArray[np.int32], F64]]:
    """(name, tokens, ids, router weights) of every case."""
    return [(name, toks, *routing(params, toks, seed)) for name, toks in layout(params, seed, down)]


def same_bits(op: str, cases: list[Case]) -> list[tuple[tuple[str, int], ...]]:
    """The (case, token) pairs that must give identical output bits: every token whose inputs equal
    another's (its rows of every input the family's record indexes by token: [tokens, ...] one row,
    [tokens * topk, ...] topk rows), across and within cases. Derived from the inputs, not from how
    they were made."""
    from netra.core.ops import FAMILIES

    lead = {o.name: o.shape[0] for o in FAMILIES[op].inputs if o.shape[0] in ("tokens", "tokens * topk")}
    seen: dict[bytes, list[tuple[str, int]]] = {}
    for c in cases:
        k = c.inputs["ids"].shape[1]
        for t in range(c.rows):
            parts = []
            for name in sorted(lead):
                m = 1 if lead[name] == "tokens" else k
                parts.append(np.ascontiguousarray(c.inputs[name][t * m : (t + 1) * m]).tobytes())
            seen.setdefault(b"|".join(parts), []).append((c.name, t))
    return [tuple(v) for v in seen.values() if len(v) > 1]


# --------------------------------------------------------------------------------------------
# The block-scaled dot in float64
# --------------------------------------------------------------------------------------------

_DEC = ref.fp8_e4m3_decode(np.arange(256, dtype=np.uint8))
_ABS = np.abs(_DEC)
# The spacing of the E4M3 grid at each code's value (every value is a multiple of it): 2^-9 below the
# normals, 2^(e-3) in binade e; zero constrains nothing (inf), NaN is NaN.
_QUANTUM = np.where(
    _ABS == 0, np.inf, np.maximum(np.exp2(np.floor(np.log2(np.where(_ABS > 0, _ABS, 1.0))) - 3), 2.0**-9)
)


def _pow2(a: np.ndarray) -> np.ndarray:
    m, _ = np.frexp(np.asarray(a, dtype=np.float64))
    return np.abs(m) == 0.5


@dataclass
class Dot:
    """value [rows, pairs] (float64, exact per block), magnitude T [rows, pairs] (sum of |terms|, scales
    included) and quantum [rows, pairs]: a grid q every term is a multiple of (power-of-two scales), NaN
    where there is none (see exact)."""

    value: F64
    magnitude: F64
    quantum: F64

    def exact(self, bits: int = FP32_ACCUMULATOR_BITS) -> npt.NDArray[np.bool_]:
        """Where the kernel's result is the value itself: every term a multiple of q and T <= 2^bits q, so
        every partial sum in any order is a number of `bits` significant bits and no rounding of the
        kernel's (to nearest or toward zero) changes anything."""
        with np.errstate(invalid="ignore"):
            return ~np.isnan(self.quantum) & (
                (self.magnitude == 0) | (self.magnitude <= 2.0**bits * self.quantum)
            )


def block_dot(w: U8, ws: npt.NDArray[np.float32], x: U8, xs: np.ndarray, with_exact: bool = False) -> Dot:
    """y[j, p] = sum_b ws[j/128, b] * xs[p, b] * sum_{k in b} dec(w[j, k]) * dec(x[p, k]) for one expert.

    w [rows, K] codes with ws [rows/128, K/128]; x [pairs, K] codes with xs [pairs, K/128]. Each block's
    sum is a float64 matmul of decoded codes, exact (43 bits at most); the scales are applied per block.
    with_exact: also the grid q of the elements whose every term is a multiple of one (power-of-two
    scales), for Dot.exact.
    """
    rows, klen = w.shape
    nb = klen // BLOCK
    wd = _DEC[w]
    wa = np.abs(wd)
    xd = _DEC[x]
    xa = np.abs(xd)
    value = np.zeros((rows, x.shape[0]))
    mag = np.zeros((rows, x.shape[0]))
    wsr = np.repeat(ws.astype(np.float64), BLOCK, axis=0)  # [rows, nb]
    for b in range(nb):
        sl = slice(b * BLOCK, (b + 1) * BLOCK)
        s = wsr[:, b : b + 1] * xs[:, b].astype(np.float64)[None, :]  # exact: two fp32 values
        value += s * (wd[:, sl] @ xd[:, sl].T)
        mag += np.abs(s) * (wa[:, sl] @ xa[:, sl].T)
    quantum = np.full(value.shape, np.nan)
    if with_exact:
        rows_p2 = np.repeat(np.all(_pow2(ws), axis=1), BLOCK)  # [rows]
        pairs_p2 = np.all(_pow2(xs), axis=1)  # [pairs]
        if rows_p2.any() and pairs_p2.any():
            qw = np.min(_QUANTUM[w], axis=1)  # [rows]
            qx = np.min(_QUANTUM[x], axis=1)  # [pairs]
            smin = np.min(wsr[:, :, None] * xs.astype(np.float64).T[None, :, :], axis=1)  # [rows, pairs]
            with np.errstate(invalid="ignore"):
                q = qw[:, None] * qx[None, :] * smin
            quantum = np.where(rows_p2[:, None] & pairs_p2[None, :], q, np.nan)
    return Dot(value, mag, quantum)


def per_expert(
    ids: npt.NDArray[np.int32], fn: Callable[[int, np.ndarray], Dot], pairs_out: int, cols: int
) -> Dot:
    """Run `fn(expert, pair indices)` -> Dot for every expert the pairs hit (each expert's weights decoded
    once, never all experts at once) and scatter into one Dot of [pairs, cols] arrays."""
    flat = ids.reshape(-1)
    value = np.zeros((pairs_out, cols))
    mag = np.zeros((pairs_out, cols))
    quantum = np.full((pairs_out, cols), np.nan)
    for e in np.unique(flat):
        idx = np.flatnonzero(flat == e)
        d = fn(int(e), idx)
        value[idx], mag[idx], quantum[idx] = d.value.T, d.magnitude.T, d.quantum.T
    return Dot(value, mag, quantum)


def _rows_top(exp: F64) -> np.ndarray:
    return np.max(np.abs(exp), axis=-1) if exp.size else np.zeros(0)


def row_relative(got: F64, exp: F64) -> float:
    """max over rows of max |got - exp| / max |exp|: each pair or token against its own size (rows 1e-3
    and 1e3 in one call). Rows whose reference is all zero are judged element-wise only; a NaN or inf
    anywhere gives inf."""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(got - exp)
    if not np.all(np.isfinite(diff)):
        return float("inf")
    top = _rows_top(exp)
    live = top > 0
    return float(np.max(np.max(diff, axis=-1)[live] / top[live])) if live.any() else 0.0


def row_relative_bound(allow: F64, exp: F64) -> float:
    """The tolerance row_relative is held to: max over rows of max allow / max |exp| (the same rows)."""
    top = _rows_top(exp)
    live = top > 0
    return float(np.max(np.max(allow, axis=-1)[live] / top[live])) if live.any() else 0.0


def fma32(a: F64, b: F64, c: F64) -> F64:
    """fmaf(a, b, c) of fp32 values held as float64, exactly: a * b is exact in float64 (48 bits), the
    sum is rounded to odd at 53 bits (TwoSum's error decides the last bit), and rounding that to fp32 is
    then the correctly rounded fp32 sum (53 >= 24 + 2)."""
    p = a * b
    s = p + c
    bb = s - p
    err = (p - (s - bb)) + (c - bb)
    even = (np.ascontiguousarray(s).view(np.int64) & 1) == 0
    odd = np.where((err != 0) & even & np.isfinite(s), np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    with np.errstate(over="ignore"):
        return odd.astype(np.float32).astype(np.float64)


# --------------------------------------------------------------------------------------------
# Timing inputs
# --------------------------------------------------------------------------------------------


def derived(params: dict[str, int], inputs: Mapping[str, Any]) -> dict[str, int]:
    """The record's derived names for these inputs: `hit`, the experts the ids route to (in [0, E)), each
    read once however many pairs route to it; what a call of them must read, and so what its timing's
    bytes per second divide (the record's default, min(E, tokens x k), is only its bound)."""
    ids = np.asarray(inputs["ids"]).reshape(-1)
    return {"hit": int(np.unique(ids[(ids >= 0) & (ids < params["experts"])]).size)}


def timing_routing(
    params: dict[str, int], tokens: int, seed: int
) -> tuple[npt.NDArray[np.int32], np.ndarray]:
    """ids [tokens, k] (k distinct experts per token, drawn uniformly from all E, as a balanced router's
    are: the experts hit, and so the bytes read, are those of a real decode step) and positive router
    weights [tokens, k] f32 summing to one."""
    e, k = params["experts"], params["topk"]
    g = rng(params, f"timing/route/{tokens}", seed)
    ids = np.argsort(g.random((tokens, e)), axis=1)[:, :k].astype(np.int32)
    p = g.uniform(0.05, 1.0, (tokens, k))
    return ids, (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


def timing_codes(params: dict[str, int], name: str, shape: tuple[int, ...], seed: int) -> U8:
    """Random finite E4M3 codes (NaN codes 0x7F/0xFF moved to +-448): every byte of every expert is read
    by a timed call that hits it, so the values only need to be valid."""
    codes = rng(params, f"timing/{name}", seed).integers(0, 256, shape, dtype=np.uint8)
    codes[(codes & 0x7F) == FP8_NAN] -= 1
    return codes


def timing_scales(
    params: dict[str, int], name: str, shape: tuple[int, ...], seed: int
) -> npt.NDArray[np.float32]:
    """Positive f32 scales spread over decades, as a checkpoint's and the activations' are."""
    return (10.0 ** rng(params, f"timing/{name}", seed).uniform(-4.5, -2.0, shape)).astype(np.float32)
