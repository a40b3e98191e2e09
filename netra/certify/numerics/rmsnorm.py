"""rmsnorm's numerics: its test vectors, its float64 reference, and how its output is judged.

y: bit-exact against the reference rounded once to bf16, except one ulp where the exact value lies
within MIDPOINT_WINDOW of a bf16 rounding midpoint (counted); plus relative_max_error <= TOLERANCES.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from netra.certify import reference as ref
from netra.certify.numerics.common import (
    SCALES,
    U16,
    Case,
    U,
    Verdict,
    bits_f32,
    first,
    generator,
    normal,
    ordinal16,
    partial_rows,
    verdict,
)

# RNE to bf16 is within 2^-8 |y| of any value it rounds (half an ulp of 8 significant bits), and a
# conforming fp32 computation (one rounding at the output) lands within (H/128 + 9) u of the exact
# y before it (docs/ops/rmsnorm.md); at the template's largest H = 16384: 2^-8 + 137u = 3.9144e-3.
TOLERANCES = {"y": 2.0**-8 + 137 * U}
# How close (relative) the exact value must be to a bf16 rounding midpoint for a one-ulp difference to
# be a rounding effect: the fp32 budget before the bf16 rounding is <= (H/128 + 9) u <= 8.2e-6 < 2^-16.
MIDPOINT_WINDOW = 2.0**-16


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    h, wo = p["hidden"], p["weight_offset"]

    def make(
        name: str, rows: int, fill: Callable[[np.random.Generator, int], U16], eps: float = 1e-6
    ) -> Case:
        rng = generator("rmsnorm", p, name, seed)
        x = fill(rng, rows)
        # w: around 1 for x*w, around 0 for Gemma's x*(1 + w); a few exact zeros
        w = rng.standard_normal(h, dtype=np.float32) * np.float32(0.5 if wo == 0 else 0.3)
        w = np.where(rng.random(h) < 0.02, np.float32(0), w + np.float32(1 - wo))
        return Case(name, rows, {"x": x, "w": bits_f32(w)}, {"eps": float(np.float32(eps))})

    def zeros(rng: np.random.Generator, rows: int) -> U16:
        x = normal(rng, rows, h, SCALES)
        x[0::2] = 0
        x[2::4] = 0x8000  # -0.0 rows
        return x

    def huge(rng: np.random.Generator, rows: int) -> U16:
        # one large value per row among small ones: rs is set by it; x^2 stays inside fp32
        x = normal(rng, rows, h, 1e-3)
        pos = rng.integers(0, h, size=rows)
        x[np.arange(rows), pos] = bits_f32(np.float32(10.0) ** rng.uniform(2, 12, rows).astype(np.float32))
        return x

    def large_fill(rng: np.random.Generator, rows: int) -> U16:
        x = normal(rng, rows, h, SCALES)
        x[17::97] = 0
        x[5::31, rng.integers(0, h)] = bits_f32(np.float32(1e6))
        return x

    partial = partial_rows(rpb)
    return [
        make("random_1e0_rows1", 1, lambda r, n: normal(r, n, h, 1.0)),
        make("random_1e-3_rows3", 3, lambda r, n: normal(r, n, h, 1e-3)),
        make("random_1e3_rows3", 3, lambda r, n: normal(r, n, h, 1e3), eps=1e-5),
        make(f"random_mixed_rows{partial}", partial, lambda r, n: normal(r, n, h, SCALES)),
        make("zeros_rows4", 4, zeros),
        make("huge_rows3", 3, huge),
        make(f"large_rows{large}", large, large_fill),
    ]


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The float64 reference of rows a..b."""
    x, w, eps = case.inputs["x"], case.inputs["w"], case.scalars["eps"]
    return {"y": ref.rmsnorm(x[a:b], w, eps, float(p["weight_offset"]))}


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    y = exp["y"]
    y_bits = got["y"]
    ref_bits = ref.f64_to_bf16_rne(y)
    gv = ref.bf16_to_f64(y_bits)
    failures: list[str] = []
    dist = np.abs(ordinal16(y_bits) - ordinal16(ref_bits))
    off = dist != 0
    mid = (gv + ref.bf16_to_f64(ref_bits)) / 2
    with np.errstate(invalid="ignore"):
        near = (dist == 1) & (np.abs(y - mid) <= MIDPOINT_WINDOW * np.abs(y))
    bad = off & ~near
    if bad.any():
        at = first(bad)
        i = tuple(np.argwhere(bad)[0])
        failures.append(
            f"{int(bad.sum())} of {y.size} y differ from the reference rounding away from a bf16 midpoint "
            f"(first at {at}: got {int(y_bits[i]):#06x}, want {int(ref_bits[i]):#06x})"
        )
    counts = {"elements": int(y.size), "bf16_one_ulp_at_midpoint": int((off & near).sum())}
    devs = {"y": (ref.relative_max_error(gv, y), TOLERANCES["y"])}
    return verdict(devs, counts, failures)
