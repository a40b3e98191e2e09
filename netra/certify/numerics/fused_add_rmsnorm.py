"""fused_add_rmsnorm's numerics: test vectors, composed float64 reference and judge (netra.certify.numerics.fused).

residual_out bit-exact; y judged as rmsnorm's.
"""

from __future__ import annotations

import numpy as np

from netra.certify.numerics import fused
from netra.certify.numerics.common import Case, U, Verdict

OP = "fused_add_rmsnorm"
# residual_out is exact (no entry); y is rmsnorm's y of residual_out.
TOLERANCES = {"y": 2.0**-8 + 137 * U}


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    return fused.cases(OP, p, rpb, large, seed)


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    return fused.expected(OP, p, case, a, b)


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    return fused.judge(OP, TOLERANCES, exp, got)
