"""fp8_moe_down's numerics: test vectors, float64 reference and judge (netra.certify.numerics.moe shares the
weights, tokens and the block-scaled dot with fp8_moe_gate_up); the contract: docs/ops/fp8_moe.md.

h's codes and scales are this family's inputs (generated as valid codes and scales directly), so the
reference is computed from the case's own hq/hs: y[pair, n] = the block-scaled dot of w2[e]'s row n with
the pair's h, out[t, n] = bf16 (RNE) of the fp32 fma over the slots in slot order of weights[t, s] *
y[t, s, n]. Judged element-wise: out must be a bf16 value that rounding some value within the derived
accumulation bound of the exact sum can give; where every slot's y is exact in fp32 (moe.block_dot),
exactly the bits of the slot-ordered fp32 fma (so a slot order swap is seen).
"""

from __future__ import annotations

import numpy as np

from netra.certify import reference as ref
from netra.certify.numerics import moe
from netra.certify.numerics.common import Case, Verdict, accumulator_key, first, ordinal16, verdict

OP = "fp8_moe_down"
# The constants the per-element bounds are derived from (the bounds themselves depend on the case): each
# fp32 fma of the slot sum rounds once (SLOT_FMA = 2^-24 of its result); the bf16 output rounds once
# (BF16_HALF_ULP = 2^-8 of its magnitude at most).
TOLERANCES = {"slot_fma": moe.U, "bf16_half_ulp": 2.0**-8}


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    """Tokens 1 to 64 (rows_per_block and large_rows do not apply: moe.layout); the weights generated
    once and shared by every case."""
    k = p["topk"]
    built = moe.build(p, seed, down=True)
    hit = {int(e) for _, _, ids, _ in built for e in ids.reshape(-1)}
    w2, w2s = moe.weights(p, "w2", (p["hidden"], p["inter"]), hit, seed)
    out = []
    for name, toks, ids, wts in built:
        hq, hs = moe.activations(p, toks, "h", k, p["inter"], seed)
        inputs: dict[str, np.ndarray] = {"hq": hq, "hs": hs, "ids": ids, "weights": wts.astype(np.float32)}
        inputs |= {"w2": w2, "w2s": w2s}
        out.append(Case(name, len(toks), inputs))
    return out


derived = moe.derived  # the experts its inputs hit (netra.certify.conformance.bytes_moved)


def timing_inputs(p: dict[str, int], tokens: int, seed: int) -> dict[str, np.ndarray]:
    """What certify times a call of `tokens` tokens on: uniform routing over all experts (moe.timing_routing,
    the same as fp8_moe_gate_up's) and valid random codes and scales."""
    h, n_i, k = p["hidden"], p["inter"], p["topk"]
    ids, wts = moe.timing_routing(p, tokens, seed)
    return {
        "hq": moe.timing_codes(p, "hq", (tokens * k, n_i), seed),
        "hs": moe.timing_scales(p, "hs", (tokens * k, n_i // moe.BLOCK), seed),
        "ids": ids,
        "weights": wts,
        "w2": moe.timing_codes(p, "w2", (p["experts"], h, n_i), seed),
        "w2s": moe.timing_scales(p, "w2s", (p["experts"], h // moe.BLOCK, n_i // moe.BLOCK), seed),
    }


def same_bits(cases: list[Case]) -> list[tuple[tuple[str, int], ...]]:
    """The (case, token) pairs whose output rows must be identical bits: tokens with identical ids and
    weights rows and hq/hs rows (the anchor of the cases of 1, 7 and 64 tokens)."""
    return moe.same_bits(OP, cases)


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The reference of tokens a..b, with the interval of bf16 values judging accepts."""
    k, n_i, n_h = p["topk"], p["inter"], p["hidden"]
    hq, hs = case.inputs["hq"][a * k : b * k], case.inputs["hs"][a * k : b * k]
    ids, w = case.inputs["ids"][a:b], case.inputs["weights"][a:b].astype(np.float64)
    w2, w2s = case.inputs["w2"], case.inputs["w2s"]
    tokens, pairs = b - a, (b - a) * k

    def dot(e: int, idx: np.ndarray) -> moe.Dot:
        return moe.block_dot(w2[e], w2s[e], hq[idx], hs[idx], with_exact=True)

    d = moe.per_expert(ids, dot, pairs, n_h)
    y = d.value.reshape(tokens, k, n_h)
    out: dict[str, np.ndarray] = {}
    for bits in moe.ACCUMULATORS:  # the bounds of each tensor-core accumulation a template may declare
        ex = d.exact(bits)
        by = np.where(ex, 0.0, moe.accumulation(n_i // moe.BLOCK, n_i, bits) * d.magnitude).reshape(
            tokens, k, n_h
        )
        got = _interval(y, by, np.all(ex.reshape(tokens, k, n_h), axis=1), w)
        out.update({accumulator_key(key, bits): x for key, x in got.items()})
    return out


def _interval(y: np.ndarray, by: np.ndarray, exact: np.ndarray, w: np.ndarray) -> dict[str, np.ndarray]:
    """The bf16 values judging accepts for slot values y within by of exact (0 where `exact`: every
    partial sum an fp32 number), summed with router weights w by the contract's slot-ordered fp32 fma."""
    tokens, k, n_h = y.shape
    aw = np.abs(w)[..., None]
    total = np.sum(w[..., None] * y, axis=1)
    chain = np.zeros((tokens, n_h))
    for s in range(k):  # the contract's fp32 fma in slot order, exact where every y is an fp32 value
        chain = moe.fma32(np.broadcast_to(w[:, s, None], chain.shape), y[:, s].astype(np.float32), chain)
    center = np.where(exact, chain, total)
    # each slot's y within its bound; fma i rounds 2^-24 of the partial over slots 0..i, so slot s is in
    # k - s of them; (1 + (k + 1) 2^-24) covers the second-order terms; the float64 sum's own rounding
    times = (k - np.arange(k))[None, :, None]
    first_order = np.sum(aw * by, axis=1) + moe.U * np.sum(times * aw * (np.abs(y) + by), axis=1)
    bound = first_order * (1 + (k + 1) * moe.U) + k * 2.0**-52 * np.sum(aw * np.abs(y), axis=1)
    bound = np.where(exact, 0.0, bound)
    lo = np.where(bound > 0, np.nextafter(center - bound, -np.inf), center)
    hi = np.where(bound > 0, np.nextafter(center + bound, np.inf), center)
    return {
        "out": ref.f64_to_bf16_rne(center),
        "value": center,
        "lo": ref.f64_to_bf16_rne(lo),
        "hi": ref.f64_to_bf16_rne(hi),
        "exact": exact,
        # |out - value| for an accepted out: the bound plus half a bf16 ulp (and half the subnormal one)
        "allow": bound + TOLERANCES["bf16_half_ulp"] * (np.abs(center) + bound) + 2.0**-134,
    }


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    out = got["out"]
    failures: list[str] = []
    o = ordinal16(out)
    nan = (out & 0x7FFF) > 0x7F80
    outside = nan | (o < ordinal16(exp["lo"])) | (o > ordinal16(exp["hi"]))
    if outside.any():
        i = tuple(np.argwhere(outside)[0])
        what = "the slot-ordered fp32 fma's bf16" if exp["exact"][i] else "the bf16 values the bound allows"
        failures.append(
            f"{int(outside.sum())} outputs outside {what} (first at token, column {first(outside)}: got "
            f"{int(out[i]):#06x}, want {int(exp['lo'][i]):#06x}..{int(exp['hi'][i]):#06x})"
        )
    value = exp["value"]
    devs = {
        "out": (moe.row_relative(ref.bf16_to_f64(out), value), moe.row_relative_bound(exp["allow"], value))
    }
    counts = {"outputs": int(out.size), "exact_slot_order": int(np.sum(exp["exact"]))}
    return verdict(devs, counts, failures)
