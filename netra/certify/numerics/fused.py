"""The numerics the three fused families share: their test vectors, composed reference and judge.

The reference is the composition of the unfused ones. residual_out = bf16(x + residual) is bit-exact
(one rounding of an exact sum: no allowance); y is judged as rmsnorm's; q and scales as
fp8_group_quant's of the bf16 y, where a y the kernel may round the other way (within rmsnorm's window
of a bf16 midpoint) may be quantized as that other bf16 value (counted).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from netra.certify import reference as ref
from netra.certify.numerics import fp8_group_quant, rmsnorm
from netra.certify.numerics.common import (
    F64,
    SCALES,
    U16,
    Case,
    Verdict,
    bits_exact,
    first,
    generator,
    normal,
    ordinal16,
    verdict,
)

FUSED_QUANT = ("rmsnorm_fp8_group_quant", "fused_add_rmsnorm_fp8_group_quant")
WITH_RESIDUAL = ("fused_add_rmsnorm", "fused_add_rmsnorm_fp8_group_quant")
FUSED = ("fused_add_rmsnorm", *FUSED_QUANT)


def _split(rng: np.random.Generator, t: U16) -> tuple[U16, U16]:
    """(x, residual) whose bf16 sum is about t: residual = t * u, u uniform in [-1, 2), x = bf16(t - residual).

    Zero rows of t stay exactly zero (x = residual = t), so the norm's zero and huge rows survive the add."""
    tv = ref.bf16_to_f64(t)
    u = rng.uniform(-1.0, 2.0, size=t.shape)
    r = ref.f64_to_bf16_rne(tv * u)
    x = ref.f64_to_bf16_rne(tv - ref.bf16_to_f64(r))
    zero = tv == 0
    return np.where(zero, t, x).astype(np.uint16), np.where(zero, t, r).astype(np.uint16)


def _add_ties(rng: np.random.Generator, rows: int, h: int) -> tuple[U16, U16]:
    """Sums that land exactly on bf16 rounding midpoints (ties to even), just beside them, far below
    residual's ulp, and cancelling to +0 and -0: where a second rounding or a wrong tie rule shows."""
    r = normal(rng, rows, h, SCALES)
    r = np.where((r & 0x7FFF) == 0, np.uint16(0x3F80), r).astype(np.uint16)
    rv = ref.bf16_to_f64(r)
    _, e = np.frexp(np.abs(rv))
    half_ulp = np.ldexp(1.0, e - 1 - 8)  # half of 2^(e-1-7), the ulp of rv's binade
    kind = rng.integers(0, 6, size=r.shape)
    sign = np.where(rng.random(r.shape) < 0.5, -1.0, 1.0)
    xv = np.select(
        [kind == 0, kind == 1, kind == 2, kind == 3, kind == 4],
        [
            sign * half_ulp,
            sign * half_ulp * (1 + 2.0**-7),
            sign * half_ulp * 3,
            sign * half_ulp * 2.0**-20,
            -rv,
        ],
        default=sign * half_ulp * (1 - 2.0**-7),
    )
    x = bits_exact(xv)
    x[0, :2] = (0x8000, 0x0000)
    r[0, :2] = (0x8000, 0x8000)  # -0 + -0 = -0, +0 + -0 = +0
    return x, r


def cases(op: str, p: dict[str, int], rpb: int, large: int, seed: int) -> list[Case]:
    """rmsnorm's cases of the same (hidden, weight_offset) as the norm's input (for the fused adds: split
    into x + residual), plus the add's ties and, for the quantizing two, a case of exact FP8 midpoints."""
    h, wo = p["hidden"], p["weight_offset"]
    norm = {"hidden": h, "weight_offset": wo}
    add = op in WITH_RESIDUAL
    out = []
    for c in rmsnorm.cases(norm, rpb, large, seed):
        inputs = dict(c.inputs)
        if add:
            x, r = _split(generator(op, p, c.name, seed), c.inputs["x"])
            inputs = {"x": x, "residual": r, "w": c.inputs["w"]}
        out.append(Case(c.name, c.rows, inputs, dict(c.scalars)))
    w = out[0].inputs["w"]
    if add:
        x, r = _add_ties(generator(op, p, "add_ties", seed), 4, h)
        out.insert(
            -1, Case("add_ties_rows4", 4, {"x": x, "residual": r, "w": w}, {"eps": float(np.float32(1e-6))})
        )
    if op in FUSED_QUANT:
        out.insert(-1, _norm_midpoints(op, p, seed))
    return out


def _norm_midpoints(op: str, p: dict[str, int], seed: int) -> Case:
    """y = x * (w + weight_offset) exactly, with |x| = 1 and eps = 0 (rstd = 1): per group one y of
    1.75 (amax, so s = 2^-8 exactly) and the others FP8 values or midpoints of [256, 448] times 2^-8
    (exact in bf16, and so is w = y - 1 for weight_offset 1): every y / s is a code or a tie."""
    h, wo = p["hidden"], p["weight_offset"]
    rows = 4
    rng = generator(op, p, "midpoints", seed)
    top = np.arange(256, 449, 16, dtype=np.float64) / 256  # 256 .. 448 in steps of 16: codes and midpoints
    y = rng.choice(top, size=h)
    y[rng.integers(0, 128, size=h // 128) + 128 * np.arange(h // 128)] = 1.75
    sign = np.where(rng.random((rows, h)) < 0.5, -1.0, 1.0)
    inputs: dict[str, np.ndarray] = {"x": bits_exact(sign), "w": bits_exact(y - wo)}  # rows: signs differ
    if op in WITH_RESIDUAL:
        a = rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=(rows, h))
        inputs = {"x": bits_exact(sign * a), "residual": bits_exact(sign * (1 - a)), "w": inputs["w"]}
    return Case("midpoints_rows4", rows, inputs, {"eps": 0.0})


def _other_bf16(y: F64, bits: U16) -> U16:
    """The bf16 neighbour of `bits` on the side of the exact value y (bits itself where y is exact)."""
    step = np.sign(y - ref.bf16_to_f64(bits)).astype(np.int64)
    o = ordinal16(bits) + step
    return np.where(o < 0, 0x8000 | (-o), o).astype(np.uint16)


def expected(op: str, p: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The composed reference of rows a..b. Quantizing families: the bf16 y (`y`), the other bf16 value a
    conforming kernel may round y to (`y_alt`: where y is within rmsnorm's window of a bf16 midpoint,
    else y), and fp8_group_quant of y (`q`, `scales`) and of y_alt (`scales_alt`)."""
    x, w, eps = case.inputs["x"][a:b], case.inputs["w"], case.scalars["eps"]
    wo = float(p["weight_offset"])
    out: dict[str, np.ndarray] = {}
    if op in WITH_RESIDUAL:
        fa = ref.fused_add_rmsnorm(x, case.inputs["residual"][a:b], w, eps, wo)
        out["residual_out"] = fa.residual_out
        y64 = fa.y
        if op == "fused_add_rmsnorm":
            out["y"] = y64
            return out
        gq = ref.fused_add_rmsnorm_fp8_group_quant(x, case.inputs["residual"][a:b], w, eps, wo, p["group"])[1]
    else:
        y64 = ref.rmsnorm(x, w, eps, wo)
        gq = ref.rmsnorm_fp8_group_quant(x, w, eps, wo, p["group"])
    y = ref.f64_to_bf16_rne(y64)
    other = _other_bf16(y64, y)
    mid = (ref.bf16_to_f64(y) + ref.bf16_to_f64(other)) / 2
    with np.errstate(invalid="ignore"):
        near = np.abs(y64 - mid) <= rmsnorm.MIDPOINT_WINDOW * np.abs(y64)
    y_alt = np.where(near, other, y).astype(np.uint16)
    out.update(
        q=gq.q,
        scales=gq.scales,
        y=y,
        y_alt=y_alt,
        scales_alt=ref.fp8_group_quant(y_alt, p["group"]).scales,
    )
    return out


def _judge_residual_out(exp: dict[str, np.ndarray], got: dict[str, np.ndarray], failures: list[str]) -> None:
    r, want = got["residual_out"], exp["residual_out"]
    wrong = r != want
    if wrong.any():
        i = tuple(np.argwhere(wrong)[0])
        failures.append(
            f"{int(wrong.sum())} of {r.size} residual_out differ from bf16(x + residual) (first at "
            f"{first(wrong)}: got {int(r[i]):#06x}, want {int(want[i]):#06x})"
        )


def _quant_at(values: F64, scale: F64) -> tuple[npt.NDArray[np.uint8], F64]:
    """fp8_group_quant's codes of values [rows, H] at given group scales [rows, H/128], and the quotients."""
    rows, n = values.shape
    v = values.reshape(rows, -1, ref.FP8_GROUP) / scale[..., None]
    scaled = np.clip(v, -ref.FP8_E4M3_MAX, ref.FP8_E4M3_MAX).reshape(rows, n)
    return ref.fp8_e4m3_encode(scaled), scaled


def judge(op: str, tol: dict[str, float], exp: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> Verdict:
    """residual_out bit-exact; y as rmsnorm's; q and scales as fp8_group_quant's of the bf16 y, or of the
    other bf16 value a conforming kernel may round y to (counted)."""
    failures: list[str] = []
    counts: dict[str, int] = {}
    devs: dict[str, tuple[float, float]] = {}
    if op in WITH_RESIDUAL:
        _judge_residual_out(exp, got, failures)
        counts["residual_out"] = int(got["residual_out"].size)
    if op == "fused_add_rmsnorm":
        v = rmsnorm.judge({}, exp, got)
        if not v.passed:
            failures.append(v.reason)
        return Verdict(
            passed=not failures,
            max_rel_deviation=v.max_rel_deviation,
            tolerance=v.tolerance,
            counts={**counts, **v.counts},
            reason="; ".join(failures) if failures else "ok",
            deviations=v.deviations,
        )
    q, s = got["q"], got["scales"].astype(np.float64)
    s_ref, s_alt = exp["scales"], exp["scales_alt"]
    # the scale the kernel's amax gave: the reference's, or the other one where the amax was a bf16 tie
    use_alt = np.abs(s - s_alt) < np.abs(s - s_ref)
    s_used = np.where(use_alt, s_alt, s_ref)
    with np.errstate(invalid="ignore", over="ignore"):
        rel = np.abs(s - s_used) / s_used
    bad_s = ~(rel <= tol["scales"])
    if bad_s.any():
        i = tuple(np.argwhere(bad_s)[0])
        failures.append(
            f"{int(bad_s.sum())} scales off by more than their tolerance (first at {first(bad_s)}: "
            f"got {s[i]!r}, want {s_ref[i]!r})"
        )
    dec = ref.fp8_e4m3_decode(q)
    exact: dict[str, np.ndarray] = {}
    near: dict[str, np.ndarray] = {}
    far = np.ones(q.shape, dtype=bool)
    for which in ("y", "y_alt"):  # codes of the reference's bf16 y and of the other rounding, at s_used
        want, scaled = _quant_at(ref.bf16_to_f64(exp[which]), s_used)
        dist = ref.fp8_step_distance(q, want)
        mid = (dec + ref.fp8_e4m3_decode(want)) / 2
        exact[which] = dist == 0
        with np.errstate(invalid="ignore"):
            near[which] = (dist == 1) & (
                np.abs(scaled - mid) <= fp8_group_quant.MIDPOINT_WINDOW * np.abs(scaled)
            )
        far &= dist > 1
    ok_ref = exact["y"] | near["y"]
    ok = ok_ref | exact["y_alt"] | near["y_alt"]
    at_mid = ok & ~exact["y"] & ~exact["y_alt"]
    if far.any():
        i = tuple(np.argwhere(far)[0])
        failures.append(
            f"{int(far.sum())} codes two or more steps from the reference, or NaN (first at "
            f"{first(far)}: got {int(q[i]):#04x}, want {int(exp['q'][i]):#04x})"
        )
    off_mid = ~ok & ~far
    if off_mid.any():
        i = tuple(np.argwhere(off_mid)[0])
        failures.append(
            f"{int(off_mid.sum())} codes one step off away from an E4M3 midpoint (first at "
            f"{first(off_mid)}: got {int(q[i]):#04x}, want {int(exp['q'][i]):#04x})"
        )
    rows, n = q.shape
    deq = (dec.reshape(rows, -1, ref.FP8_GROUP) * s[..., None]).reshape(rows, n)
    devs["scales"] = (ref.relative_max_error(s, s_used), tol["scales"])
    devs["dequant"] = (ref.relative_max_error(deq, ref.bf16_to_f64(exp["y"])), tol["dequant"])
    counts.update(
        codes=int(q.size),
        fp8_one_step_at_midpoint=int(at_mid.sum()),
        scales=int(s.size),
        bf16_other_rounding_codes=int(np.count_nonzero(ok & ~ok_ref)),
        bf16_other_rounding_scales=int(np.count_nonzero(use_alt & (s_alt != s_ref))),
    )
    return verdict(devs, counts, failures)
