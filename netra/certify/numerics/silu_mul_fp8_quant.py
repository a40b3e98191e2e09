"""silu_mul_fp8_quant's numerics: test vectors, float64 reference and judge (netra.certify.numerics.quant).

As fp8_group_quant's, with an allowance for the exp(-g) rounding of negative gates (quant.GATE_TERM).
"""

from __future__ import annotations

import numpy as np

from netra.certify.numerics import quant
from netra.certify.numerics.common import Case, Verdict

OP = "silu_mul_fp8_quant"
# h = silu(g) u in fp32 is within (|g| + 10) u (docs/ops/silu_mul_fp8_quant.md); the scale adds u
# and its own rounding. 16u = 2^-20 covers it when the gate g* at the group maximum is > -6; for
# negative g* the elementwise check adds GATE_TERM * |g*| (4x the |g| u of rounding the exponent
# of exp(-g)), so large negative gates are not failed for an error the contract allows.
TOLERANCES = {"scales": 2.0**-20, "dequant": 1 / 28 + 1e-6}
MIDPOINT_WINDOW = 2.0**-18  # fp8_group_quant's, plus GATE_TERM * max(-g, 0) per element


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    return quant.cases(OP, p, rpb, large, seed)


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    return quant.expected(OP, case, a, b)


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    return quant.judge(OP, TOLERANCES, MIDPOINT_WINDOW, exp, got)
