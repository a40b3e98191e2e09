"""moe_grouped_topk_sigmoid's numerics: its test vectors (exact ties, near ties, saturated and negative
scores among them), its float64 reference, its judge.

The kernel's sigmoid is an fp32 computation, so its biased scores b' lie within DELTA of the exact b
(derived below), and where two experts' (or two groups') exact scores lie within their summed DELTA of
each other the kernel may rank them either way: such a choice is a rounding effect, not an error. The
judge therefore accepts a row's ids when they equal the reference's, or when every comparison the
kernel made differently is within those bounds: the ids are k distinct experts of at most topk_groups
groups; some topk_groups groups holding them beat every other group (no left-out group's exact score
exceeds a kept one's by more than their two bounds); no left-out expert of the kept groups beats a chosen
one by more than their two bounds; consecutive slots are in order up to the same bounds. Experts with the
same logit and the same bias get bit-identical scores in any kernel, so between those (and between groups
whose two best experts are such pairs) the contract's order is exact: the lower index first, no allowance.
Weights are judged against the reference weights of the ids the kernel chose (a near-tie swap changes
them legitimately), relative_max_error within TOLERANCES.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from netra.certify import reference as ref
from netra.certify.numerics.common import Case, U, Verdict, generator, partial_rows, verdict

F32 = npt.NDArray[np.float32]

# The kernel (kernels/cuda/moe_grouped_topk_sigmoid.cu): e = expf(-x) within 2 ulp (<= 4u relative);
# d = 1 + e rounded: <= 4u (1 - s) + u; s = 1 / d within 1 ulp (2u): relative <= 4u (1 - s) + 3u,
# absolute <= (7s - 4s^2) u <= 49u/16 (s in [0, 1], the maximum at s = 7/8); below x = -20 the
# kernel takes s = expf(x) (1 + e^x rounds to 1 there): <= 4u + 2^-28 relative, absolute far below.
# b' = RN(s' + bias): |b' - b| <= 49u/16 + u |b| (+ u^2 terms). A group's score is the rounded sum of
# its two largest b': |g' - g| <= 2 max_group DELTA + u |g| (the top-2 sum moves by at most twice the
# largest perturbation of its group).
DELTA_BASE = 49 / 16 * U
DELTA_SECOND_ORDER = 2.0**-46  # the u^2 terms, over |b| < 2^20: far below one ulp of any score
# Weights, relative to each: s <= 7u; the sum of k <= 8 selected s as a depth-3 tree: 7u + 3u; plus
# ROUTER_EPS: + u; the 1-ulp quotient s / D: 7u + 11u + 2u; times scale: + u -> 21u per weight, so
# relative_max_error over a tensor (normalized by its largest weight) <= 21u; 2^-19 = 32u is the next
# power of two, which also covers second-order terms and denormal s (x < -87.3: absolute error
# 2^-149, in a tensor whose largest weight is normal).
TOLERANCES = {"weights": 2.0**-19}


def _delta(b: np.ndarray) -> np.ndarray:
    """Bound on |b' - b| per expert (above)."""
    return DELTA_BASE + U * np.abs(b) + DELTA_SECOND_ORDER


def _f32(rng: np.random.Generator, shape: tuple[int, int], scales: npt.ArrayLike) -> F32:
    """Normal fp32 logits, one scale per row (cycled)."""
    s = np.resize(np.asarray(scales, dtype=np.float32), shape[0])[:, None]
    return (rng.standard_normal(shape, dtype=np.float32) * s).astype(np.float32)


def _tied_rows(rng: np.random.Generator, rows: int, e: int, size: int) -> F32:
    """Logits with exactly equal values where they decide the groups or the experts (the case's bias is
    a few distinct values or zero, so (logit, bias) pairs repeat)."""
    out = np.zeros((rows, e), dtype=np.float32)
    for r in range(rows):
        kind = r % 5
        if kind == 0:  # every logit equal: with a zero bias, groups 0.. and experts 0.. first
            out[r] = 0.5
        elif kind == 1:  # +0 and -0 are equal logits
            out[r] = np.where(rng.random(e) < 0.5, np.float32(0.0), np.float32(-0.0))
        elif kind == 2:  # groups whose two best experts are equal pairs: lower group first
            v = -4.0 + rng.integers(0, 8, e) / 8.0
            for grp in rng.permutation(e // size)[:6]:
                at = grp * size + rng.permutation(size)[:2]
                v[at] = (3.0, 2.5)
            out[r] = v
        elif kind == 3:  # few distinct values: ties everywhere
            out[r] = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], e)
        else:  # the maximum repeated across groups
            v = rng.standard_normal(e)
            v[rng.permutation(e)[:12]] = 6.0
            out[r] = v
    return out


def cases(p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    e, size = p["experts"], p["experts"] // p["groups"]
    op = "moe_grouped_topk_sigmoid"
    scale = {"scale": 2.5}  # DeepSeek-V3's routed_scaling_factor (exact in f32)

    def make(
        name: str,
        rows: int,
        fill: Callable[[np.random.Generator, int], F32],
        bias: Callable[[np.random.Generator], F32],
        scalars: dict[str, float] = scale,
    ) -> Case:
        rng = generator(op, p, name, seed)
        x = fill(rng, rows)
        return Case(name, rows, {"logits": x, "bias": bias(rng)}, dict(scalars))

    def rnd(scales: npt.ArrayLike) -> Callable[[np.random.Generator, int], F32]:
        return lambda r, rows: _f32(r, (rows, e), scales)

    def bias_of(sigma: float, shift: float = 0.0) -> Callable[[np.random.Generator], F32]:
        return lambda r: (r.standard_normal(e) * sigma + shift).astype(np.float32)

    def zero_bias(r: np.random.Generator) -> F32:
        return np.zeros(e, dtype=np.float32)

    def few_bias(r: np.random.Generator) -> F32:
        return r.choice(np.array([-0.125, 0.0, 0.0, 0.125], dtype=np.float32), e)

    def saturated(rng: np.random.Generator, rows: int) -> F32:
        # s = 0 or 1 in fp32 (|x| >= 17 rounds 1 - e^-x to 1; x <= -104 underflows), near ties among
        # them; row 0: every s is 0 (weights 0 / (0 + eps) = 0, the bias alone chooses)
        x = _f32(rng, (rows, e), 1.0)
        x[0] = -1e3
        for r in range(1, rows):
            at = rng.permutation(e)[:64]
            x[r, at] = rng.choice(
                np.array([17.0, 18.0, 40.0, 1e3, -1e3, -90.0, -120.0], dtype=np.float32), 64
            )
        return x

    def large_fill(rng: np.random.Generator, rows: int) -> F32:
        x = _f32(rng, (rows, e), (1.0, 3.0, 0.01, 30.0))
        x[1::16] = _tied_rows(rng, len(range(1, rows, 16)), e, size)
        return x

    partial = partial_rows(rpb)
    return [
        make("random_1e0_rows1", 1, rnd(1.0), bias_of(0.1)),
        make("random_3e0_rows3", 3, rnd(3.0), bias_of(0.1)),
        make("random_1e-2_rows3", 3, rnd(0.01), bias_of(0.01)),
        make(f"random_mixed_rows{partial}", partial, rnd((1.0, 3.0, 0.01, 30.0)), bias_of(0.5)),
        make("bias_dominant_rows3", 3, rnd(1.0), bias_of(4.0)),
        make("negative_rows3", 3, rnd(1.0), bias_of(0.5, -3.0)),
        make("saturated_rows3", 3, saturated, bias_of(0.1)),
        make("scale_one_rows3", 3, rnd(1.0), bias_of(0.1), {"scale": 1.0}),
        make("ties_rows10", 10, lambda r, rows: _tied_rows(r, rows, e, size), zero_bias),
        make("ties_bias_rows10", 10, lambda r, rows: _tied_rows(r, rows, e, size), few_bias),
        make(f"large_rows{large}", large, large_fill, few_bias),
    ]


def expected(p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The float64 reference of rows a..b, with what the judge needs per row: every expert's exact s
    and b, its logit and bias (which pairs are identical), and the scale."""
    x = case.inputs["logits"][a:b]
    bias = case.inputs["bias"]
    scale = case.scalars["scale"]
    t = ref.moe_grouped_topk_sigmoid(x, bias, p["topk"], p["groups"], p["topk_groups"], scale)
    rows = b - a
    return {
        "ids": t.ids,
        "weights": t.weights,
        "scores": t.scores,
        "biased": t.biased,
        "logit": x.astype(np.float64),
        "bias": np.broadcast_to(bias.astype(np.float64), x.shape).copy(),
        "scale": np.full((rows, 1), scale),
    }


def _same(x: np.ndarray, bias: np.ndarray, i: int, j: int) -> bool:
    """Identical inputs (+0 and -0 equal): bit-identical scores in any kernel."""
    return bool(x[i] == x[j] and bias[i] == bias[j])


def _row_violation(p: dict[str, int], ids: np.ndarray, r: dict[str, np.ndarray]) -> str:
    """Why a row's ids (not the reference's) are not a choice the rounding allows; "" if they are."""
    e, k, g, tg = p["experts"], p["topk"], p["groups"], p["topk_groups"]
    size = e // g
    if ids.min() < 0 or ids.max() >= e or len(set(ids.tolist())) != k:
        return f"ids {ids.tolist()} are not {k} distinct experts below {e}"
    b, x, bias = r["biased"], r["logit"], r["bias"]
    d = _delta(b)
    grp_b = b.reshape(g, size)
    top2 = np.argsort(-grp_b, axis=-1, kind="stable")[:, :2]
    two = np.take_along_axis(grp_b, top2, axis=-1)
    gs = two.sum(axis=-1)
    gd = 2 * d.reshape(g, size).max(axis=-1) + U * np.abs(gs) + DELTA_SECOND_ORDER
    ident = [
        tuple(sorted((float(x[j * size + t]), float(bias[j * size + t])) for t in top2[j])) for j in range(g)
    ]
    used = sorted(set((ids // size).tolist()))
    if len(used) > tg:
        return f"ids {ids.tolist()} come from {len(used)} groups, more than topk_groups {tg}"

    chosen = np.zeros(e, dtype=bool)
    chosen[ids] = True
    lo, hi = b - d, b + d  # where each exact score may have landed, within its bound

    def groups_ok(kept: tuple[int, ...]) -> str:
        inside = np.zeros(g, dtype=bool)
        inside[list(kept)] = True
        # a dropped group beats a kept one only if their exact scores differ by more than both bounds
        o = int(np.argmax(np.where(inside, -np.inf, gs - gd)))
        a = int(np.argmin(np.where(inside, gs + gd, np.inf)))
        if not inside[o] and gs[o] - gd[o] > gs[a] + gd[a]:
            return f"group {o} (score {gs[o]:.9g}) beats kept group {a} ({gs[a]:.9g})"
        for a in kept:
            for o in range(a):
                if not inside[o] and gs[o] == gs[a] and ident[o] == ident[a]:
                    return f"group {o} ties kept group {a} exactly and comes first"
        return ""

    def experts_ok(kept: tuple[int, ...]) -> str:
        pool = np.zeros(e, dtype=bool)
        for grp in kept:
            pool[grp * size : (grp + 1) * size] = True
        left = pool & ~chosen
        if not left.any():
            return ""
        o = int(np.argmax(np.where(left, lo, -np.inf)))
        c = int(np.argmin(np.where(chosen, hi, np.inf)))
        if lo[o] > hi[c]:
            return f"expert {o} (b {b[o]:.9g}) beats chosen expert {c} ({b[c]:.9g})"
        for c in ids.tolist():
            same = left[:c] & (x[:c] == x[c]) & (bias[:c] == bias[c])
            if same.any():
                return f"expert {int(np.argmax(same))} ties chosen expert {c} exactly and comes first"
        return ""

    why = ""
    rest = [j for j in range(g) if j not in used]
    for fill in itertools.combinations(rest, tg - len(used)):
        kept = tuple(sorted((*used, *fill)))
        why = groups_ok(kept) or experts_ok(kept)
        if not why:
            break
    if why:
        return why
    for s in range(k - 1):
        i, j = int(ids[s]), int(ids[s + 1])
        if b[j] - b[i] > d[i] + d[j]:
            return f"slot {s + 1} (expert {j}, b {b[j]:.9g}) ranks below slot {s} (expert {i}, {b[i]:.9g})"
        if j < i and _same(x, bias, i, j):
            return f"experts {i} and {j} tie exactly: the lower index comes first"
    return ""


def derived(p: dict[str, int], exp: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    """The reference weights of the ids a kernel chose (rows as the reference's where they are not valid
    expert ids: such a row fails on its ids)."""
    s = exp["scores"]
    safe = np.where((ids >= 0) & (ids < s.shape[-1]), ids, 0)
    chosen = np.take_along_axis(s, safe, axis=-1)
    return chosen / (chosen.sum(axis=-1, keepdims=True) + ref.ROUTER_EPS) * exp["scale"]


def judge(p: dict[str, int], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    failures: list[str] = []
    ids = got["ids"].astype(np.int64)
    differ = np.any(ids != exp["ids"], axis=-1)
    wrong = np.zeros_like(differ)
    reasons: list[str] = []
    for r in np.flatnonzero(differ):
        row = {name: exp[name][r] for name in ("biased", "logit", "bias")}
        why = _row_violation(p, ids[r], row)
        if why:
            wrong[r] = True
            reasons.append(f"row {int(r)}: {why}")
    if wrong.any():
        failures.append(
            f"{int(wrong.sum())} rows choose experts the rounding does not allow (first {reasons[0]})"
        )
    want = np.where(wrong[:, None], exp["weights"], derived(p, exp, np.where(wrong[:, None], 0, ids)))
    w = got["weights"].astype(np.float64)
    devs = {"weights": (ref.relative_max_error(w, want), TOLERANCES["weights"])}
    counts = {
        "ids": int(ids.size),
        "rows_near_tie": int((differ & ~wrong).sum()),
        "rows_wrong": int(wrong.sum()),
    }
    if wrong.any():
        counts["first_wrong_row"] = int(np.flatnonzero(wrong)[0])
    return verdict(devs, counts, failures)
