"""rmsnorm_fp8_group_quant's numerics: test vectors, composed float64 reference and judge (netra.certify.numerics.fused).

Codes and scales as fp8_group_quant's of the bf16 y, or of the other rounding of y at a midpoint.
"""

from __future__ import annotations

import numpy as np

from netra.certify.numerics import fused
from netra.certify.numerics.common import Case, Verdict

OP = "rmsnorm_fp8_group_quant"
# scales as fp8_group_quant's; dequant against the reference's bf16 y: fp8_group_quant's 1/28, plus
# one bf16 rounding (<= 2^-8 of the tensor's max) where the kernel's y rounded the other way at a
# midpoint, which also moves that group's scale by <= 2^-8: 1/28 (1 + 2^-8) + 2^-8 < 1/28 + 2^-7.
TOLERANCES = {"scales": 2.0**-23, "dequant": 1 / 28 + 2.0**-7}


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    return fused.cases(OP, p, rpb, large, seed)


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    return fused.expected(OP, p, case, a, b)


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    return fused.judge(OP, TOLERANCES, exp, got)
