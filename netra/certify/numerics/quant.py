"""The numerics fp8_group_quant and silu_mul_fp8_quant share: their test vectors, reference and judge, whose
code and scale checks (judge_codes_and_scales) fp8_moe_gate_up's judge calls too.

FP8 codes: bit-exact (as values: +0 and -0 are equal) against the reference, except one step where
the exact scaled value lies within the family's window of an E4M3 rounding midpoint (counted); two
steps or a NaN code always fail. Scales: elementwise relative error within the family's tolerance.
silu adds GATE_TERM * max(-g, 0) per element (4x the |g| u error of exp(-g), which only matters for g < 0).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from netra.certify import reference as ref
from netra.certify.numerics.common import (
    F64,
    SCALES,
    U16,
    Case,
    Verdict,
    bits_exact,
    first,
    generator,
    huge_per_group,
    midpoint_rows,
    normal,
    partial_rows,
    verdict,
)

GATE_TERM = 2.0**-22


def cases(op: str, p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    silu = op == "silu_mul_fp8_quant"
    n = p["inter"] if silu else p["hidden"]

    def make(name: str, rows: int, fill: Callable[[np.random.Generator, int], U16]) -> Case:
        return Case(name, rows, {"x": fill(generator(op, p, name, seed), rows)})

    def rnd(scales: npt.ArrayLike) -> Callable[[np.random.Generator, int], U16]:
        # silu: gate and up at the same scale (the row is [g | u])
        return lambda r, rows: normal(r, rows, 2 * n if silu else n, scales)

    def zeros(rng: np.random.Generator, rows: int) -> U16:
        x = rnd(SCALES)(rng, rows)
        x[0] = 0
        x[1] = 0x8000  # -0.0: codes 0x80 (silu: h = -0 * -0 = +0 or similar, all zero)
        x[2, : 128 * (n // 256)] = 0  # some whole groups zero (silu: zero gates), the rest random
        return x

    def huge(rng: np.random.Generator, rows: int) -> U16:
        if not silu:
            x = rnd(1.0)(rng, rows)
            huge_per_group(rng, x, n, 3, 38.5)  # up to the bf16 range: tiny and subnormal codes
            return x
        g = normal(rng, rows, n, 1.0)
        u = normal(rng, rows, n, 1.0)
        huge_per_group(rng, g, n, 1.3, 4)  # large positive or negative gates: silu = g or ~0
        huge_per_group(rng, u, n, 2, 12)
        return np.concatenate([g, u], axis=1)

    def midpoints(rng: np.random.Generator, rows: int) -> U16:
        v, pow2 = midpoint_rows(rng, rows, n)
        if not silu:
            return bits_exact(v * pow2)
        # silu(g) = g exactly in fp32 and float64 for g >= 64 (exp(-64) < 2^-90): h = 64 u exactly
        g = np.full((rows, n), 64.0)
        return np.concatenate([bits_exact(g), bits_exact(v * pow2 / 64)], axis=1)

    def large_fill(rng: np.random.Generator, rows: int) -> U16:
        x = rnd(SCALES)(rng, rows)
        x[7::101] = 0
        mid = midpoints(rng, len(range(3, rows, 53)))
        x[3::53] = mid
        return x

    partial = partial_rows(rpb)
    return [
        make("random_1e0_rows1", 1, rnd(1.0)),
        make("random_1e-3_rows3", 3, rnd(1e-3)),
        make("random_1e3_rows3", 3, rnd(1e3)),
        make(f"random_mixed_rows{partial}", partial, rnd(SCALES)),
        make("zeros_rows3", 3, zeros),
        make("huge_rows3", 3, huge),
        make("midpoints_rows4", 4, midpoints),
        make(f"large_rows{large}", large, large_fill),
    ]


def expected(op: str, case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The float64 reference of rows a..b, with the quotients and values judging reads."""
    x = case.inputs["x"]
    silu = op == "silu_mul_fp8_quant"
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


def judge(
    op: str, tol: dict[str, float], window: float, exp: dict[str, np.ndarray], got: dict[str, np.ndarray]
) -> Verdict:
    """The codes and scales of fp8_group_quant or silu_mul_fp8_quant (tolerances and window: the family's)."""
    silu = op == "silu_mul_fp8_quant"
    q, s = got["q"], got["scales"].astype(np.float64)
    s_ref = exp["scales"]
    v = exp["scaled"]
    failures, counts = judge_codes_and_scales(
        q,
        s,
        exp["q"],
        s_ref,
        v,
        window=(window + (GATE_TERM * exp["neg_gate"] if silu else 0.0)) * np.abs(v),
        scale_bound=tol["scales"] + (GATE_TERM * exp["neg_gate_at_max"] if silu else 0.0),
        scale_relative=True,
        of="h" if silu else "x",
        at="row",
    )
    rows, n = q.shape
    deq = (ref.fp8_e4m3_decode(q).reshape(rows, -1, ref.FP8_GROUP) * s[..., None]).reshape(rows, n)
    devs = {
        "scales": (ref.relative_max_error(s, s_ref), tol["scales"]),
        "dequant": (ref.relative_max_error(deq, exp["values"]), tol["dequant"]),
    }
    return verdict(devs, counts, failures)


def judge_codes_and_scales(
    q: npt.NDArray[np.uint8],
    s: F64,
    q_ref: npt.NDArray[np.uint8],
    s_ref: F64,
    scaled: F64,
    *,
    window: F64,
    scale_bound: npt.ArrayLike,
    scale_relative: bool,
    of: str,
    at: str,
    steps: bool = False,
) -> tuple[list[str], dict[str, int]]:
    """The FP8 code and scale checks this module's judge and fp8_moe_gate_up's share (fused's judges two
    candidate references and has its own), so the rules and their messages exist once: a code equal to
    the reference's, or one step off where the exact quotient `scaled` lies within `window` (absolute,
    per element) of the midpoint between the two codes (counted); never two steps or NaN; each scale
    within `scale_bound` of the reference's (relative to it, or absolute). `of` names the quantized
    tensor and `at` its rows in the messages. With `steps` (a window that may span more than one step:
    fp8_moe_gate_up's coarser accumulations), a code two or more steps off is accepted too where it is the
    encoder's for some quotient within the window (reference.fp8_rounds_within; counted). Returns the
    failures (one line each) and the counts."""
    failures: list[str] = []
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        s_dev = np.abs(s - s_ref) / s_ref if scale_relative else np.abs(s - s_ref)
    bound = np.broadcast_to(scale_bound, s.shape)
    bad_s = ~(s_dev <= bound)
    if bad_s.any():
        i = tuple(np.argwhere(bad_s)[0])
        failures.append(
            f"{int(bad_s.sum())} scales of {of} outside their bound (first at {at}, group {first(bad_s)}: "
            f"got {float(s[i])!r}, want {float(s_ref[i])!r} +- {float(bound[i]):.3e}"
            f"{' relative' if scale_relative else ''})"
        )
    dist = ref.fp8_step_distance(q, q_ref)
    within = ref.fp8_rounds_within(q, scaled, window) if steps else np.zeros(q.shape, dtype=bool)
    beyond = (dist > 1) & ~within
    if beyond.any():
        i = tuple(np.argwhere(beyond)[0])
        failures.append(
            f"{int(beyond.sum())} codes of {of} two or more steps from the reference, or NaN (first at {at}, "
            f"column {first(beyond)}: got {int(q[i]):#04x}, want {int(q_ref[i]):#04x})"
        )
    one = dist == 1
    mid = (ref.fp8_e4m3_decode(q) + ref.fp8_e4m3_decode(q_ref)) / 2
    with np.errstate(invalid="ignore"):
        near = one & (np.abs(scaled - mid) <= window)
    off = one & ~near
    if off.any():
        i = tuple(np.argwhere(off)[0])
        failures.append(
            f"{int(off.sum())} codes of {of} one step off, away from an E4M3 midpoint by more than their "
            f"window (first at {at}, column {first(off)}: got {int(q[i]):#04x}, want {int(q_ref[i]):#04x}, "
            f"{of}/s = {float(scaled[i])!r} +- {float(window[i]):.3e})"
        )
    counts = {"codes": int(q.size), "fp8_one_step_at_midpoint": int(near.sum()), "scales": int(s.size)}
    if steps:
        counts["fp8_steps_within_window"] = int(np.sum((dist > 1) & within))
    return failures, counts
