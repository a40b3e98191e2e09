"""fp8_group_quant's numerics: test vectors, float64 reference and judge (netra.certify.numerics.quant).

Codes bit-exact but for one step at an E4M3 midpoint (within MIDPOINT_WINDOW); scales elementwise.
"""

from __future__ import annotations

import numpy as np

from netra.certify.numerics import quant
from netra.certify.numerics.common import Case, Verdict

OP = "fp8_group_quant"
# scale = RN32(max(amax, 1e-10) / 448) with an exact amax: <= u; at the floor the fp32 value of
# 1e-10 (1.3e-8 relative off) adds to it, < 2u = 2^-23. dequant = decode(q) * s against the exact
# x: half a step of the top binade (16 of 448) = 1/28, for the reference as well, plus rounding.
TOLERANCES = {"scales": 2.0**-23, "dequant": 1 / 28 + 1e-6}
# The quotient the encoder sees is within ~4u of the exact x/s (scale rounding, reciprocal, product);
# 2^-18 = 64u leaves room for an rcp-based quotient (gfx950: ~1.5 ulp).
MIDPOINT_WINDOW = 2.0**-18


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    return quant.cases(OP, p, rpb, large, seed)


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    return quant.expected(OP, case, a, b)


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    return quant.judge(OP, TOLERANCES, MIDPOINT_WINDOW, exp, got)
