"""moe_topk_softmax's numerics: its test vectors (tied logits among them), its float64 reference, its judge.

Expert ids: exact, order included. The contract fixes the order of equal logits (lower id first), so a
swap of tied experts is a contract violation, not a rounding effect, and is not allowed. Router
weights: relative_max_error within TOLERANCES.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from netra.certify import reference as ref
from netra.certify.numerics.common import (
    SCALES,
    U16,
    Case,
    Verdict,
    bits_exact,
    bits_f32,
    first,
    generator,
    normal,
    partial_rows,
    verdict,
)

# w_s = e_s / sum e: exp within 2 ulp (4u), the k-term sum (k-1)u plus the e errors (4u), the
# quotient 2u: <= 17u w relative; rounding d = l_s - l_0 moves e by <= e |d| u <= u/e absolute.
# Over a tensor whose largest weight is >= 1/k = 1/8: <= 17u + 8u/e ~ 20u; 2^-18 = 64u leaves room
# for a less careful exp (the gfx950 kernel's 2^(d log2 e)).
TOLERANCES = {"weights": 2.0**-18}


def _tied_rows(rng: np.random.Generator, rows: int, e: int, k: int) -> U16:
    """Router rows with equal logits where they decide the selection."""
    out = np.zeros((rows, e), dtype=np.uint16)
    for r in range(rows):
        kind = r % 5
        if kind == 0:  # every logit equal: ids 0..k-1, equal weights
            out[r] = bits_exact(np.full(e, 0.5))
        elif kind == 1:  # a tie across the top-k boundary
            v = -4.0 + rng.integers(0, 8, e) / 8.0
            sure = max(k - 2, 0)  # experts above the tie (none when k <= 2)
            top = rng.permutation(e)[: min(sure + 6, e)]
            v[top[:sure]] = 3.0 + np.arange(sure) / 4
            v[top[sure:]] = 2.0  # up to six experts share the last places
            out[r] = bits_exact(v)
        elif kind == 2:  # +0 and -0 are equal logits
            out[r] = bits_exact(-1.0 - rng.integers(0, 4, e) / 4.0)
            z = rng.permutation(e)[: k + 2]
            out[r, z] = np.where(np.arange(k + 2) % 2 == 0, 0x0000, 0x8000)
        elif kind == 3:  # few distinct values: ties everywhere
            out[r] = bits_exact(rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], e))
        else:  # the maximum repeated
            v = rng.standard_normal(e)
            v[rng.permutation(e)[:3]] = 6.0
            out[r] = bits_f32(v.astype(np.float32))
    return out


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    e, k = p["experts"], p["topk"]

    def make(name: str, rows: int, fill: Callable[[np.random.Generator, int], U16]) -> Case:
        return Case(name, rows, {"logits": fill(generator("moe_topk_softmax", p, name, seed), rows)})

    def rnd(scales: npt.ArrayLike) -> Callable[[np.random.Generator, int], U16]:
        return lambda r, rows: normal(r, rows, e, scales)

    def zeros(rng: np.random.Generator, rows: int) -> U16:
        x = rnd(1.0)(rng, rows)
        x[0] = 0
        x[1] = np.where(np.arange(e) % 3 == 0, 0x8000, 0).astype(np.uint16)
        return x

    def huge(rng: np.random.Generator, rows: int) -> U16:
        # gaps beyond exp's range: all but the top weights underflow (flush or denormal)
        x = rnd(1.0)(rng, rows)
        x[np.arange(rows), rng.integers(0, e, rows)] = bits_f32(
            np.array([1e4, 120.0, 3e38][:rows], dtype=np.float32)
        )
        return x

    def large_fill(rng: np.random.Generator, rows: int) -> U16:
        x = rnd((1.0, 2.0, 4.0, 1e-3, 50.0))(rng, rows)
        x[1::16] = _tied_rows(rng, len(range(1, rows, 16)), e, k)
        return x

    partial = partial_rows(rpb)
    return [
        make("random_1e0_rows1", 1, rnd(1.0)),
        make("random_1e-3_rows3", 3, rnd(1e-3)),
        make("random_1e3_rows3", 3, rnd(1e3)),
        make(f"random_mixed_rows{partial}", partial, rnd(SCALES)),
        make("zeros_rows3", 3, zeros),
        make("huge_rows3", 3, huge),
        make("ties_rows10", 10, lambda r, rows: _tied_rows(r, rows, e, k)),
        make(f"large_rows{large}", large, large_fill),
    ]


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The float64 reference of rows a..b."""
    t = ref.moe_topk_softmax(case.inputs["logits"][a:b], k=p["topk"])
    return {"ids": t.ids, "weights": t.weights}


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    failures: list[str] = []
    wrong = got["ids"] != exp["ids"]
    if wrong.any():
        i = tuple(np.argwhere(wrong)[0])
        failures.append(
            f"{int(wrong.sum())} expert ids differ (first at {first(wrong)}: got {int(got['ids'][i])}, "
            f"want {int(exp['ids'][i])})"
        )
    w = got["weights"].astype(np.float64)
    devs = {"weights": (ref.relative_max_error(w, exp["weights"]), TOLERANCES["weights"])}
    return verdict(devs, {"ids": int(wrong.size), "ids_wrong": int(wrong.sum())}, failures)
