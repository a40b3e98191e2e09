"""fp8_moe_gate_up's numerics: test vectors, float64 reference and judge (netra.certify.numerics.moe shares
the weights, tokens and the block-scaled dot with fp8_moe_down); the contract: docs/ops/fp8_moe.md.

Per pair p = token * topk + slot with e = ids[token, slot]: gate and up as block-scaled dots of w13[e]'s
rows with the token's xq/xs, h = silu(gate) * up, quantized per 128 columns as silu_mul_fp8_quant. Judged
against the exact h's quantization: every code equal, or one step off where the exact h / s lies within
the derived bound of the midpoint between the two codes; every scale within its derived bound (the
checks of quant.judge_codes_and_scales, with these bounds as absolute windows). Each
bound is computed per element from the case (moe.accumulation, propagated through silu * up and the
scale; docs/ops/fp8_moe.md derives each step), not tuned.
"""

from __future__ import annotations

import numpy as np

from netra.certify import reference as ref
from netra.certify.numerics import fp8_group_quant, moe, quant, silu_mul_fp8_quant
from netra.certify.numerics.common import Case, Verdict, accumulator_key, verdict

OP = "fp8_moe_gate_up"
# The constants the per-element bounds are derived from (the bounds themselves depend on the case):
# h = silu(g) * u computed in fp32 from the kernel's g and u is within H_FP32 (+ quant.GATE_TERM * |g| for
# g < 0) of silu(g) * u, as silu_mul_fp8_quant's h; the scale is RN32(max(amax, 1e-10) / 448) of the
# kernel's amax (SCALE, fp8_group_quant's); the quotient h / s the encoder rounds is within QUOTIENT of
# the kernel's h / s (fp8_group_quant's midpoint window: reciprocal and product).
TOLERANCES = {
    "h_fp32": silu_mul_fp8_quant.TOLERANCES["scales"],
    "scale": fp8_group_quant.TOLERANCES["scales"],
    "quotient": fp8_group_quant.MIDPOINT_WINDOW,
}
SILU_SLOPE = 1.1  # max |silu'(t)| = 1.0998 (at t = 2.3994): |silu(g') - silu(g)| <= 1.1 |g' - g|
# Below g = -88.7 the fp32 exp(-g) overflows and the kernel's h is +-0 (the exact |h| < 1e-34 |u|): h's
# deviation there is |h| itself (from -80, so a g within its bound of the overflow is covered too).
FLUSH_GATE = -80.0


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    """Tokens 1 to 64 (rows_per_block and large_rows do not apply: moe.layout); the weights generated
    once and shared by every case."""
    built = moe.build(p, seed, down=False)
    hit = {int(e) for _, _, ids, _ in built for e in ids.reshape(-1)}
    w13, w13s = moe.weights(p, "w13", (2 * p["inter"], p["hidden"]), hit, seed)
    out = []
    for name, toks, ids, _ in built:
        xq, xs = moe.activations(p, toks, "x", 1, p["hidden"], seed)
        out.append(Case(name, len(toks), {"xq": xq, "xs": xs, "ids": ids, "w13": w13, "w13s": w13s}))
    return out


derived = moe.derived  # the experts its inputs hit (netra.certify.conformance.bytes_moved)


def timing_inputs(p: dict[str, int], tokens: int, seed: int) -> dict[str, np.ndarray]:
    """What certify times a call of `tokens` tokens on: uniform routing over all experts (moe.timing_routing)
    and valid random codes and scales; generated, not read from the conformance cases, whose reserved
    experts hold NaN traps and whose routing is built to test, not to be typical."""
    h, i2 = p["hidden"], 2 * p["inter"]
    ids, _ = moe.timing_routing(p, tokens, seed)
    return {
        "xq": moe.timing_codes(p, "xq", (tokens, h), seed),
        "xs": moe.timing_scales(p, "xs", (tokens, h // moe.BLOCK), seed),
        "ids": ids,
        "w13": moe.timing_codes(p, "w13", (p["experts"], i2, h), seed),
        "w13s": moe.timing_scales(p, "w13s", (p["experts"], i2 // moe.BLOCK, h // moe.BLOCK), seed),
    }


def same_bits(cases: list[Case]) -> list[tuple[tuple[str, int], ...]]:
    """The (case, token) pairs whose outputs (rows token * topk .. + topk of hq and hs) must be identical
    bits: tokens with identical xq, xs and ids rows (the anchor of the cases of 1, 7 and 64 tokens)."""
    return moe.same_bits(OP, cases)


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The float64 reference of tokens a..b (pairs a * topk .. b * topk), with the bounds judging reads."""
    k, n_i, n_h = p["topk"], p["inter"], p["hidden"]
    xq, xs, ids = case.inputs["xq"][a:b], case.inputs["xs"][a:b], case.inputs["ids"][a:b]
    w13, w13s = case.inputs["w13"], case.inputs["w13s"]
    pairs = (b - a) * k
    tok = np.arange(pairs) // k

    def dot(e: int, idx: np.ndarray) -> moe.Dot:
        return moe.block_dot(w13[e], w13s[e], xq[tok[idx]], xs[tok[idx]])

    d = moe.per_expert(ids, dot, pairs, 2 * n_i)
    g, u, mag = d.value[:, :n_i], d.value[:, n_i:], d.magnitude
    h = ref.silu(g) * u
    gq = ref.fp8_group_quant_values(h)
    s = gq.scales
    groups = (pairs, n_i // moe.BLOCK, moe.BLOCK)
    v = np.clip(h.reshape(groups) / s[..., None], -ref.FP8_E4M3_MAX, ref.FP8_E4M3_MAX)
    out: dict[str, np.ndarray] = {"hq": gq.q, "hs": s, "h": h, "scaled": v.reshape(pairs, n_i)}
    for bits in moe.ACCUMULATORS:  # the bounds of each tensor-core accumulation a template may declare
        c = moe.accumulation(n_h // moe.BLOCK, n_h, bits)
        bound = _bounds(g, u, h, s, v, c * mag[:, :n_i], c * mag[:, n_i:])
        out.update({accumulator_key(key, bits): x for key, x in bound.items()})
    return out


def _bounds(
    g: np.ndarray, u: np.ndarray, h: np.ndarray, s: np.ndarray, v: np.ndarray, bg: np.ndarray, bu: np.ndarray
) -> dict[str, np.ndarray]:
    """What judging reads for gate and up within bg and bu of their exact values: the scales' bound, each
    code's midpoint window, and what an accepted code's dequantized value may differ from h by."""
    pairs, n_i = h.shape
    groups = (pairs, n_i // moe.BLOCK, moe.BLOCK)
    # |silu(g')u' - silu(g)u| <= SLOPE * Bg * (|u| + Bu) + |silu(g)| * Bu, then h's own fp32 error
    prop = SILU_SLOPE * bg * (np.abs(u) + bu) + np.abs(ref.silu(g)) * bu
    rel = TOLERANCES["h_fp32"] + quant.GATE_TERM * np.maximum(bg - g, 0.0)
    dev = prop + rel * (np.abs(h) + prop) + np.where(g - bg < FLUSH_GATE, np.abs(h) + prop, 0.0)
    # amax moves by at most the group's largest deviation; the scale is that over 448, rounded once
    dg = np.max(dev.reshape(groups), axis=-1) / ref.FP8_E4M3_MAX
    sb = dg + TOLERANCES["scale"] * (s + dg)
    s_lo = (s - sb)[..., None]
    with np.errstate(divide="ignore", invalid="ignore"):
        w0 = np.where(s_lo > 0, (dev.reshape(groups) + np.abs(v) * sb[..., None]) / s_lo, np.inf)
    window = w0 + TOLERANCES["quotient"] * (np.abs(v) + w0)
    # what an accepted code's dequantized value may differ from h by: its distance to v (half a step of
    # the binade of |v| + window, 2^-10 among the subnormals, plus the window) times s, plus |code| times
    # the scale's bound
    with np.errstate(divide="ignore"):
        binade = np.floor(np.log2(np.abs(v) + window))
    half = np.maximum(np.exp2(binade - 4), 2.0**-10) + window
    allow = ((np.abs(v) + half) * sb[..., None] + half * s[..., None]).reshape(pairs, n_i)
    return {"window": window.reshape(pairs, n_i), "hs_bound": sb, "allow": allow}


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    q, s = got["hq"], got["hs"].astype(np.float64)
    s_ref, sb = exp["hs"], exp["hs_bound"]
    failures, counts = quant.judge_codes_and_scales(
        q,
        s,
        exp["hq"],
        s_ref,
        exp["scaled"],
        window=exp["window"],
        scale_bound=sb,
        scale_relative=False,
        of="h",
        at="pair",
        steps=True,
    )
    pairs, n = q.shape
    deq = (ref.fp8_e4m3_decode(q).reshape(pairs, -1, moe.BLOCK) * s[..., None]).reshape(pairs, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        s_dev = float(np.max(np.abs(s - s_ref) / s_ref)) if s.size else 0.0
        s_tol = float(np.max(sb / s_ref)) if s.size else 0.0
    devs = {
        "hs": (s_dev if not np.isnan(s_dev) else np.inf, s_tol),
        "dequant": (moe.row_relative(deq, exp["h"]), moe.row_relative_bound(exp["allow"], exp["h"])),
    }
    return verdict(devs, counts, failures)
