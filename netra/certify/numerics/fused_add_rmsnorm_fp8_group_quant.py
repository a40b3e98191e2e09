"""fused_add_rmsnorm_fp8_group_quant's numerics: test vectors, composed float64 reference and judge (netra.certify.numerics.fused).

residual_out bit-exact; codes and scales as rmsnorm_fp8_group_quant's of residual_out's norm.
"""

from __future__ import annotations

import numpy as np

from netra.certify.numerics import fused, rmsnorm_fp8_group_quant
from netra.certify.numerics.common import Case, Verdict

OP = "fused_add_rmsnorm_fp8_group_quant"
# the same q and scales as rmsnorm_fp8_group_quant, of residual_out: its tolerances, not a copy
TOLERANCES = rmsnorm_fp8_group_quant.TOLERANCES


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    return fused.cases(OP, p, rpb, large, seed)


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    return fused.expected(OP, p, case, a, b)


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    return fused.judge(OP, TOLERANCES, exp, got)
