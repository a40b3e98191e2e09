"""Tests of netra.certify.conformance (CPU only, real numpy): the judge must pass the reference's own outputs and
fail every kind of wrong output, and the test vectors must be deterministic and cover what they claim."""

from __future__ import annotations

import numpy as np
import pytest

from netra.certify import conformance as conf
from netra.certify import reference as ref

CONTRACTS = [
    ("rmsnorm", {"hidden": 256, "weight_offset": 0}),
    ("rmsnorm", {"hidden": 384, "weight_offset": 1}),
    ("fp8_group_quant", {"hidden": 512, "group": 128}),
    ("silu_mul_fp8_quant", {"inter": 384, "group": 128}),
    ("moe_topk_softmax", {"experts": 128, "topk": 8}),
    ("fused_add_rmsnorm", {"hidden": 256, "weight_offset": 0}),
    ("fused_add_rmsnorm", {"hidden": 384, "weight_offset": 1}),
    ("rmsnorm_fp8_group_quant", {"hidden": 512, "weight_offset": 0, "group": 128}),
    ("rmsnorm_fp8_group_quant", {"hidden": 384, "weight_offset": 1, "group": 128}),
    ("fused_add_rmsnorm_fp8_group_quant", {"hidden": 512, "weight_offset": 0, "group": 128}),
    ("fused_add_rmsnorm_fp8_group_quant", {"hidden": 256, "weight_offset": 1, "group": 128}),
]
FUSED_QUANT = {"hidden": 512, "weight_offset": 0, "group": 128}
LARGE = 64


def reference_outputs(op: str, params: dict[str, int], case: conf.Case) -> dict[str, np.ndarray]:
    """What a kernel with no rounding error beyond the contract's would return, in the kernel's dtypes."""
    if op == "rmsnorm":
        y = ref.rmsnorm_bf16(case.inputs["x"], case.inputs["w"], case.scalars["eps"], params["weight_offset"])
        return {"y": y}
    if op == "moe_topk_softmax":
        t = ref.moe_topk_softmax(case.inputs["logits"], k=params["topk"])
        return {"ids": t.ids, "weights": t.weights.astype(np.float32)}
    if op in conf.FUSED:
        x, w, eps, wo = case.inputs["x"], case.inputs["w"], case.scalars["eps"], params["weight_offset"]
        out = {}
        if op in conf.WITH_RESIDUAL:
            x = out["residual_out"] = ref.add_bf16(x, case.inputs["residual"])
        if op == "fused_add_rmsnorm":
            return {**out, "y": ref.rmsnorm_bf16(x, w, eps, wo)}
        gq = ref.fp8_group_quant(ref.rmsnorm_bf16(x, w, eps, wo))
        return {**out, "q": gq.q.copy(), "scales": gq.scales.astype(np.float32)}
    fn = ref.silu_mul_fp8_quant if op == "silu_mul_fp8_quant" else ref.fp8_group_quant
    gq = fn(case.inputs["x"])
    return {"q": gq.q.copy(), "scales": gq.scales.astype(np.float32)}


def get_case(op: str, params: dict[str, int], name: str) -> conf.Case:
    return next(
        c for c in conf.cases(op, params, rows_per_block=8, large_rows=LARGE) if c.name.startswith(name)
    )


@pytest.mark.parametrize(("op", "params"), CONTRACTS)
def test_reference_outputs_pass_every_case(op: str, params: dict[str, int]) -> None:
    for case in conf.cases(op, params, rows_per_block=8, large_rows=LARGE):
        got = reference_outputs(op, params, case)
        for name, (dt, shape) in conf.outputs(op, params, case.rows).items():
            assert got[name].dtype == dt and got[name].shape == shape
        v = conf.judge(op, params, case, got)
        assert v.passed, (case.name, v.reason)
        assert v.max_rel_deviation <= v.tolerance


@pytest.mark.parametrize(("op", "params"), CONTRACTS)
def test_cases_are_deterministic_and_cover_the_kinds(op: str, params: dict[str, int]) -> None:
    a = conf.cases(op, params, rows_per_block=8, large_rows=LARGE)
    b = conf.cases(op, params, rows_per_block=8, large_rows=LARGE)
    c = conf.cases(op, params, rows_per_block=8, large_rows=LARGE, seed=1)
    assert [x.name for x in a] == [x.name for x in b]
    for x, y in zip(a, b, strict=True):
        assert x.rows == y.rows and x.scalars == y.scalars
        for k in x.inputs:
            assert x.inputs[k].dtype == np.uint16
            np.testing.assert_array_equal(x.inputs[k], y.inputs[k])
    assert any(
        not np.array_equal(x.inputs[k], y.inputs[k]) for x, y in zip(a, c, strict=True) for k in x.inputs
    )
    rows = {x.rows for x in a}
    assert {1, 3, LARGE} <= rows and any(r % 8 for r in rows - {1, 3})
    names = " ".join(x.name for x in a)
    for kind in ("1e-3", "1e0", "1e3", "zeros", "huge", "large"):
        assert kind in names
    if op not in ("rmsnorm", "moe_topk_softmax", "fused_add_rmsnorm"):
        assert "midpoints" in names
    if op in conf.WITH_RESIDUAL:
        assert "add_ties" in names
    if op == "moe_topk_softmax":
        assert "ties" in names
    # a partial block at every rows_per_block
    for rpb in (1, 2, 4, 16):
        assert any(x.rows % rpb or rpb == 1 for x in conf.cases(op, params, rows_per_block=rpb, large_rows=1))


def test_zero_and_huge_inputs_are_there() -> None:
    op, p = "fp8_group_quant", {"hidden": 512, "group": 128}
    x = ref.bf16_to_f64(get_case(op, p, "zeros").inputs["x"]).reshape(3, -1, 128)
    assert np.all(x[0] == 0) and np.all(np.signbit(x[1])) and np.any(np.all(x[2] == 0, axis=-1))
    h = ref.bf16_to_f64(get_case(op, p, "huge").inputs["x"]).reshape(3, -1, 128)
    a = np.sort(np.abs(h), axis=-1)
    assert np.all(a[..., -1] >= 300 * a[..., -2])  # one value per group dominates its scale


@pytest.mark.parametrize("op", ["fp8_group_quant", "silu_mul_fp8_quant"])
def test_midpoint_cases_hit_exact_fp8_midpoints(op: str) -> None:
    p = {"hidden": 512, "group": 128} if op == "fp8_group_quant" else {"inter": 384, "group": 128}
    case = get_case(op, p, "midpoints")
    gq = (ref.fp8_group_quant if op == "fp8_group_quant" else ref.silu_mul_fp8_quant)(case.inputs["x"])
    v = np.abs(gq.values.reshape(case.rows, -1, 128) / gq.scales[..., None])
    mids = np.isin(
        v,
        (
            ref.fp8_e4m3_decode(np.arange(0x7E, dtype=np.uint8))
            + ref.fp8_e4m3_decode(np.arange(1, 0x7F, dtype=np.uint8))
        )
        / 2,
    )
    assert mids.mean() > 0.5  # most elements sit exactly on a rounding midpoint
    assert np.all(np.max(v, axis=-1) == 448.0)


@pytest.mark.parametrize("op", ["rmsnorm_fp8_group_quant", "fused_add_rmsnorm_fp8_group_quant"])
@pytest.mark.parametrize("wo", [0, 1])
def test_fused_midpoint_cases_hit_exact_fp8_midpoints(op: str, wo: int) -> None:
    p = {**FUSED_QUANT, "weight_offset": wo}
    case = get_case(op, p, "midpoints")
    exp = conf.expected(op, p, case)
    np.testing.assert_array_equal(exp["scales"], 2.0**-8)  # amax 1.75 = 448 * 2^-8 in every group
    v = np.abs(ref.bf16_to_f64(exp["y"]) / 2.0**-8)
    mids = np.isin(v, np.arange(272, 449, 32))
    assert 0.3 < mids.mean() < 0.7  # about half the elements are exact ties of the quantizer
    assert np.all(np.isin(v, np.arange(256, 449, 16)))  # and the others codes: y is exact


def test_add_ties_hit_exact_bf16_midpoints() -> None:
    op, p = "fused_add_rmsnorm", {"hidden": 256, "weight_offset": 0}
    case = get_case(op, p, "add_ties")
    s = ref.bf16_to_f64(case.inputs["x"]) + ref.bf16_to_f64(case.inputs["residual"])
    r = ref.add_bf16(case.inputs["x"], case.inputs["residual"])
    lo = ref.bf16_to_f64(r)
    up = np.abs(s) > np.abs(lo)  # the neighbour on s's side: one more in magnitude, or one less
    nxt = ref.bf16_to_f64(np.where(up, r + np.uint16(1), r - np.uint16(1)).astype(np.uint16))
    ties = (s != lo) & (np.abs(s - (lo + nxt) / 2) == 0)
    assert ties.mean() > 0.2
    assert r[0, 0] == 0x8000 and r[0, 1] == 0x0000


def test_tied_router_rows_are_there() -> None:
    op, p = "moe_topk_softmax", {"experts": 128, "topk": 8}
    lg = ref.bf16_to_f64(get_case(op, p, "ties").inputs["logits"])
    top = np.sort(lg, axis=-1)[:, ::-1]
    assert np.any(top[:, 7] == top[:, 8])  # a tie across the top-k boundary
    assert np.any(np.all(lg == lg[:, :1], axis=-1))  # a row of equal logits


# ---- failures ------------------------------------------------------------------------------


def test_fp8_code_two_steps_off_fails() -> None:
    op, p = "fp8_group_quant", {"hidden": 512, "group": 128}
    case = get_case(op, p, "random_1e0")
    got = reference_outputs(op, p, case)
    i = int(np.argmax((got["q"][0] & 0x7F) < 0x70))
    got["q"][0, i] += 2  # two steps up in magnitude
    v = conf.judge(op, p, case, got)
    assert not v.passed and "two or more steps" in v.reason


def test_fp8_code_one_step_off_away_from_a_midpoint_fails() -> None:
    op, p = "fp8_group_quant", {"hidden": 512, "group": 128}
    case = get_case(op, p, "random_1e0")
    got = reference_outputs(op, p, case)
    exp = conf.expected(op, p, case)
    vals = exp["scaled"][0]
    codes = ref.fp8_e4m3_decode(got["q"][0])
    i = int(
        np.argmax((np.abs(vals - codes) < 1e-3 * np.abs(vals)) & (np.abs(vals) > 1) & (np.abs(vals) < 400))
    )
    got["q"][0, i] += 1
    v = conf.judge(op, p, case, got, exp)
    assert not v.passed and "away from an E4M3 midpoint" in v.reason


@pytest.mark.parametrize("op", ["fp8_group_quant", "silu_mul_fp8_quant"])
def test_fp8_one_step_at_an_exact_midpoint_is_counted_not_failed(op: str) -> None:
    p = {"hidden": 512, "group": 128} if op == "fp8_group_quant" else {"inter": 384, "group": 128}
    case = get_case(op, p, "midpoints")
    got = reference_outputs(op, p, case)
    exp = conf.expected(op, p, case)
    mid = np.abs(np.abs(exp["scaled"]) - 3.125)  # between 3.0 and 3.25 (step 0.25): ties to 3.0 (even)
    r, i = np.argwhere(mid == 0)[0]
    got["q"][r, i] += 1  # the other neighbour of the tie
    v = conf.judge(op, p, case, got, exp)
    assert v.passed, v.reason
    assert v.counts["fp8_one_step_at_midpoint"] == 1


def test_fp8_nan_code_fails() -> None:
    op, p = "silu_mul_fp8_quant", {"inter": 384, "group": 128}
    case = get_case(op, p, "random_1e0")
    got = reference_outputs(op, p, case)
    got["q"][0, 5] = 0x7F
    v = conf.judge(op, p, case, got)
    assert not v.passed and "NaN" in v.reason


@pytest.mark.parametrize("op", ["fp8_group_quant", "silu_mul_fp8_quant"])
def test_wrong_scale_fails(op: str) -> None:
    p = {"hidden": 512, "group": 128} if op == "fp8_group_quant" else {"inter": 384, "group": 128}
    case = get_case(op, p, "random_mixed")
    got = reference_outputs(op, p, case)
    # a small scale, 1e-5 relative off: invisible to a tensor-wide max error, caught elementwise
    r, g = np.unravel_index(np.argmin(got["scales"]), got["scales"].shape)
    got["scales"][r, g] *= np.float32(1 + 1e-5)
    v = conf.judge(op, p, case, got)
    assert not v.passed and "scales" in v.reason
    got["scales"][r, g] = np.nan
    assert not conf.judge(op, p, case, got).passed


def test_wrong_expert_id_fails_also_between_tied_experts() -> None:
    op, p = "moe_topk_softmax", {"experts": 128, "topk": 8}
    case = get_case(op, p, "random_1e0")
    got = reference_outputs(op, p, case)
    got["ids"][0, 3] = (got["ids"][0, 3] + 1) % 128
    v = conf.judge(op, p, case, got)
    assert not v.passed and "expert ids differ" in v.reason
    # equal logits: the contract orders them by id, so swapping two tied experts is wrong too
    ties = get_case(op, p, "ties")
    got = reference_outputs(op, p, ties)
    assert list(got["ids"][0]) == list(range(8))  # all logits equal
    got["ids"][0, [0, 1]] = got["ids"][0, [1, 0]]
    assert not conf.judge(op, p, ties, got).passed


def test_nan_weight_and_nan_y_fail() -> None:
    op, p = "moe_topk_softmax", {"experts": 128, "topk": 8}
    case = get_case(op, p, "random_1e0")
    got = reference_outputs(op, p, case)
    got["weights"][0, 7] = np.nan
    v = conf.judge(op, p, case, got)
    assert not v.passed and v.max_rel_deviation == np.inf
    op, p = "rmsnorm", {"hidden": 256, "weight_offset": 0}
    case = get_case(op, p, "random_1e0")
    got = reference_outputs(op, p, case)
    got["y"][0, 17] = 0x7FC0
    assert not conf.judge(op, p, case, got).passed


def test_bf16_one_ulp_only_at_a_midpoint() -> None:
    op, p = "rmsnorm", {"hidden": 256, "weight_offset": 0}
    case = get_case(op, p, "large")
    exp = conf.expected(op, p, case)
    got = reference_outputs(op, p, case)
    y = exp["y"]
    lo = ref.bf16_to_f64(got["y"])
    nxt = ref.bf16_to_f64(got["y"] + np.uint16(1))
    dist_mid = np.abs(y - (lo + nxt) / 2)
    near = dist_mid <= 2.0**-18 * np.abs(y)
    far = dist_mid > 2.0**-10 * np.abs(y)
    assert near.any() and far.any()
    one = got["y"].copy()
    one[np.argwhere(near)[0][0], np.argwhere(near)[0][1]] += 1
    v = conf.judge(op, p, case, {"y": one}, exp)
    assert v.passed and v.counts["bf16_one_ulp_at_midpoint"] == 1
    bad = got["y"].copy()
    bad[np.argwhere(far)[0][0], np.argwhere(far)[0][1]] += 1
    v = conf.judge(op, p, case, {"y": bad}, exp)
    assert not v.passed and "away from a bf16 midpoint" in v.reason


@pytest.mark.parametrize("op", ["fused_add_rmsnorm", "fused_add_rmsnorm_fp8_group_quant"])
def test_residual_out_must_be_bit_exact(op: str) -> None:
    p = {"hidden": 512, "weight_offset": 0} if op == "fused_add_rmsnorm" else FUSED_QUANT
    case = get_case(op, p, "add_ties")
    got = reference_outputs(op, p, case)
    got["residual_out"][1, 3] ^= 1  # one ulp: the other side of a tie, say
    v = conf.judge(op, p, case, got)
    assert not v.passed and "residual_out differ from bf16(x + residual)" in v.reason


def test_fused_add_rmsnorm_y_judged_as_rmsnorm() -> None:
    op, p = "fused_add_rmsnorm", {"hidden": 256, "weight_offset": 0}
    case = get_case(op, p, "random_mixed")
    got = reference_outputs(op, p, case)
    assert conf.judge(op, p, case, got).passed
    got["y"][2, 9] += 3
    v = conf.judge(op, p, case, got)
    assert not v.passed and "away from a bf16 midpoint" in v.reason


@pytest.mark.parametrize("op", ["rmsnorm_fp8_group_quant", "fused_add_rmsnorm_fp8_group_quant"])
def test_fused_quant_of_the_other_bf16_rounding_passes_and_is_counted(op: str) -> None:
    """A kernel whose fp32 y rounds to the other bf16 neighbour at a midpoint quantizes that value: its
    codes and scales are conforming, and are counted; the same code change elsewhere fails."""
    case = get_case(op, FUSED_QUANT, "large")
    exp = conf.expected(op, FUSED_QUANT, case)
    got = reference_outputs(op, FUSED_QUANT, case)
    other = exp["y_alt"] != exp["y"]
    assert other.any()
    y = exp["y"].copy()
    y[other] = exp["y_alt"][other]  # every ambiguous y rounded the other way
    gq = ref.fp8_group_quant(y)
    changed = gq.q != got["q"]
    assert changed.any()  # the other rounding moves some codes (and maybe scales)
    kernel = {**got, "q": gq.q.copy(), "scales": gq.scales.astype(np.float32)}
    v = conf.judge(op, FUSED_QUANT, case, kernel, exp)
    assert v.passed, v.reason
    assert v.counts["bf16_other_rounding_codes"] + v.counts["fp8_one_step_at_midpoint"] >= 1
    # a code one step off where y has one rounding only and y / s is no tie fails
    dec = ref.fp8_e4m3_decode(got["q"])
    scaled = ref.bf16_to_f64(exp["y"]).reshape(case.rows, -1, 128) / exp["scales"][..., None]
    scaled = scaled.reshape(case.rows, -1)
    far = (
        ~other
        & (np.abs(scaled - dec) < 1e-3 * np.abs(scaled))
        & (np.abs(scaled) > 1)
        & (np.abs(scaled) < 400)
    )
    r, i = np.argwhere(far)[0]
    bad = {**got, "q": got["q"].copy()}
    bad["q"][r, i] += 1
    v = conf.judge(op, FUSED_QUANT, case, bad, exp)
    assert not v.passed and "away from an E4M3 midpoint" in v.reason


def test_wrong_shape_or_missing_output_fails() -> None:
    op, p = "fp8_group_quant", {"hidden": 512, "group": 128}
    case = get_case(op, p, "random_1e0")
    got = reference_outputs(op, p, case)
    assert not conf.judge(op, p, case, {"q": got["q"]}).passed
    assert not conf.judge(op, p, case, {**got, "scales": got["scales"].astype(np.float64)}).passed


def test_sizes() -> None:
    # docs/ops/*.md "Bytes per row" tables
    assert conf.bytes_moved("fp8_group_quant", {"hidden": 4096, "group": 128}, 1) == 12416
    assert conf.bytes_moved("silu_mul_fp8_quant", {"inter": 14336, "group": 128}, 1) == 72128
    assert conf.bytes_moved("moe_topk_softmax", {"experts": 128, "topk": 8}, 1) == 320
    assert conf.bytes_moved("rmsnorm", {"hidden": 4096, "weight_offset": 0}, 10) == 10 * 16384 + 8192
    # docs/ops/fused_*.md: 8H, 3H + H/32 and 7H + H/32 per row, w (2H) once
    assert (
        conf.bytes_moved("fused_add_rmsnorm", {"hidden": 4096, "weight_offset": 0}, 10)
        == 10 * 8 * 4096 + 8192
    )
    q = {"hidden": 4096, "weight_offset": 1, "group": 128}
    assert conf.bytes_moved("rmsnorm_fp8_group_quant", q, 1) == 3 * 4096 + 128 + 8192
    assert conf.bytes_moved("fused_add_rmsnorm_fp8_group_quant", q, 2) == 2 * (7 * 4096 + 128) + 8192
    o = conf.outputs("fused_add_rmsnorm_fp8_group_quant", q, 3)
    assert o == {
        "residual_out": (np.dtype(np.uint16), (3, 4096)),
        "q": (np.dtype(np.uint8), (3, 4096)),
        "scales": (np.dtype(np.float32), (3, 32)),
    }
    o = conf.outputs("silu_mul_fp8_quant", {"inter": 768, "group": 128}, 3)
    assert o == {"q": (np.dtype(np.uint8), (3, 768)), "scales": (np.dtype(np.float32), (3, 6))}


def test_sm90_scale_recipe_is_correctly_rounded() -> None:
    """kernels/sm_90 compute s = RN(a / 448) as fma(fma(-q0, 448, a), c, q0), q0 = RN(a c), c = RN(1/448):
    checked here in exact integer arithmetic for every fp32 significand a in [1, 2) (448 = 7 * 2^6, so
    the exponent of a does not matter in the normal range)."""

    def rne_shift(n: np.ndarray, k: int) -> np.ndarray:
        q = n >> k
        rem = n - (q << k)
        half = np.int64(1) << (k - 1)
        return q + ((rem > half) | ((rem == half) & (q & 1 == 1))).astype(np.int64)

    def rne_div(n: np.ndarray, d: int) -> np.ndarray:
        q, rem = n // d, n % d
        return q + ((2 * rem > d) | ((2 * rem == d) & (q & 1 == 1))).astype(np.int64)

    c = int(np.float64(np.float32(1) / np.float32(448)) * 2.0**32)  # c = C * 2^-32
    assert np.float32(c * 2.0**-32).view(np.uint32) == 0x3B124925
    a = np.arange(2**23, 2**24, dtype=np.int64)  # a = A * 2^-23
    p = a * c  # a c in units of 2^-55
    q0 = np.where(p >= 1 << 47, rne_shift(p, 24) * 2, rne_shift(p, 23))  # units of 2^-32
    r = a * 512 - 448 * q0  # a - 448 q0, exact, units of 2^-32
    assert np.all(np.abs(r) < 2**24)  # representable: the inner fma is exact
    n = q0 * (1 << 32) + r * c  # q0 + r c, units of 2^-64
    s = np.where(n >= 1 << 56, rne_shift(n, 33) * 2, rne_shift(n, 32))
    truth = np.where(8 * a >= 7 << 24, rne_div(4 * a, 7) * 2, rne_div(8 * a, 7))
    assert np.array_equal(s, truth)


@pytest.mark.parametrize("k", [1, 2, 8])
def test_router_cases_exist_for_every_topk_the_template_declares(k: int) -> None:
    """TOPK is 1 to 8 (kernels/*/moe_topk_softmax.toml): the tie cases must be buildable for each."""
    p = {"experts": 128, "topk": k}
    cs = conf.cases("moe_topk_softmax", p, rows_per_block=8, large_rows=64)
    assert cs
    for c in cs:
        t = ref.moe_topk_softmax(c.inputs["logits"], k)
        got = {"ids": t.ids, "weights": t.weights.astype(np.float32)}
        assert conf.judge("moe_topk_softmax", p, c, got).passed, c.name


# ---- moe_grouped_topk_sigmoid (DeepSeek-V3's router) ----------------------------------------------

GROUPED = "moe_grouped_topk_sigmoid"
DSV3 = {"experts": 256, "topk": 8, "groups": 8, "topk_groups": 4}


def fp32_router(x: np.ndarray, bias: np.ndarray, p: dict[str, int], scale: float) -> dict[str, np.ndarray]:
    """The kernel's arithmetic in numpy fp32 (kernels/cuda/moe_grouped_topk_sigmoid.cu: correctly rounded
    steps where the kernel's are within 1 ulp): a computation the judge must accept, near ties included."""
    f = np.float32
    x = x.astype(f)
    tail = x < f(-20)
    with np.errstate(over="ignore"):
        e = np.exp(np.where(tail, x, -x)).astype(f)
        s = np.where(tail, e, (f(1) / (f(1) + e)).astype(f)).astype(f)
    b = (s + bias.astype(f)).astype(f)
    rows, e_, g, tg, k = x.shape[0], p["experts"], p["groups"], p["topk_groups"], p["topk"]
    two = -np.sort(-b.reshape(rows, g, e_ // g), axis=-1)[..., :2]
    gs = (two[..., 0] + two[..., 1]).astype(f)
    kept = np.argsort(-gs, axis=-1, kind="stable")[:, :tg]
    mask = np.zeros((rows, g), dtype=bool)
    np.put_along_axis(mask, kept, True, axis=-1)
    masked = np.where(np.repeat(mask, e_ // g, axis=-1), b, -np.inf)
    ids = np.argsort(-masked, axis=-1, kind="stable")[:, :k]
    c = np.zeros((rows, 8), dtype=f)
    c[:, :k] = np.take_along_axis(s, ids, axis=-1)
    z = ((c[:, 0] + c[:, 1]) + (c[:, 2] + c[:, 3])) + ((c[:, 4] + c[:, 5]) + (c[:, 6] + c[:, 7]))
    d = (z + f(1e-20)).astype(f)
    w = ((c[:, :k] / d[:, None]).astype(f) * f(scale)).astype(f)
    return {"ids": ids.astype(np.int32), "weights": w}


def _grouped_cases(p: dict[str, int] = DSV3) -> list[conf.Case]:
    return conf.cases(GROUPED, p, rows_per_block=4, large_rows=LARGE)


@pytest.mark.parametrize(
    "p",
    [
        DSV3,
        {"experts": 128, "topk": 4, "groups": 4, "topk_groups": 2},
        {"experts": 256, "topk": 2, "groups": 1, "topk_groups": 1},
    ],
)
def test_grouped_router_judge_passes_the_reference_and_an_fp32_computation(p: dict[str, int]) -> None:
    near = 0
    for case in _grouped_cases(p):
        exp = conf.expected(GROUPED, p, case)
        got = {"ids": exp["ids"].copy(), "weights": exp["weights"].astype(np.float32)}
        assert conf.judge(GROUPED, p, case, got, exp).passed, case.name
        got = fp32_router(case.inputs["logits"], case.inputs["bias"], p, case.scalars["scale"])
        for name, (dt, shape) in conf.outputs(GROUPED, p, case.rows).items():
            assert got[name].dtype == dt and got[name].shape == shape
        v = conf.judge(GROUPED, p, case, got, exp)
        assert v.passed, (case.name, v.reason)
        assert v.counts["rows_wrong"] == 0
        near += v.counts["rows_near_tie"]
    if p == DSV3:
        assert near > 0  # the saturated rows: s = 1.0 in fp32 for l = 17, 18, 40, ranked by index


def test_grouped_router_cases_cover_ties_saturation_and_negative_scores() -> None:
    cases = {c.name: c for c in _grouped_cases()}
    assert {c.rows for c in cases.values()} >= {1, 3, 9, LARGE}
    for c in cases.values():
        assert c.inputs["logits"].dtype == np.float32 and c.inputs["bias"].shape == (256,)
        assert np.all(np.isfinite(c.inputs["logits"]))
    t = ref.moe_grouped_topk_sigmoid(
        *(cases["ties_rows10"].inputs[k] for k in ("logits", "bias")), 8, 8, 4, 2.5
    )
    np.testing.assert_array_equal(t.ids[0], np.arange(8))  # every score equal: groups 0..3, experts 0..7
    np.testing.assert_array_equal(t.groups[0], np.arange(4))
    neg = cases["negative_rows3"]
    assert np.all(
        ref.moe_grouped_topk_sigmoid(neg.inputs["logits"], neg.inputs["bias"], 8, 8, 4, 2.5).biased < 0
    )
    sat = cases["saturated_rows3"]
    r = ref.moe_grouped_topk_sigmoid(sat.inputs["logits"], sat.inputs["bias"], 8, 8, 4, 2.5)
    assert np.all(r.weights[0] == 0) and np.all(r.scores[0] == 0)
    assert cases["scale_one_rows3"].scalars == {"scale": 1.0}
    a, b = _grouped_cases(), _grouped_cases()
    assert all(np.array_equal(x.inputs[k], y.inputs[k]) for x, y in zip(a, b, strict=True) for k in x.inputs)


def _judged(case: conf.Case, change: str) -> conf.Verdict:
    exp = conf.expected(GROUPED, DSV3, case)
    ids, w = exp["ids"].copy(), exp["weights"].astype(np.float32)
    size = 256 // 8
    if change == "swap_exact_tie":  # row 0: every score equal; experts 0 and 1 swapped
        ids[0, :2] = ids[0, 1::-1]
    elif change == "dropped_group":
        dropped = next(j for j in range(8) if j not in exp["ids"][0] // size)
        ids[0, -1] = dropped * size
    elif change == "weaker_expert":  # the kept groups' weakest expert instead of the 8th
        kept = sorted(set((exp["ids"][0] // size).tolist()))
        pool = [e for j in kept for e in range(j * size, (j + 1) * size) if e not in exp["ids"][0]]
        ids[0, -1] = min(pool, key=lambda e: exp["biased"][0, e])
    elif change == "order":
        ids[0, [0, -1]] = ids[0, [-1, 0]]
    elif change == "duplicate":
        ids[0, 1] = ids[0, 0]
    elif change == "weights":
        w[0, 0] *= np.float32(1 + 2.0**-17)
    return conf.judge(GROUPED, DSV3, case, {"ids": ids, "weights": w}, exp)


@pytest.mark.parametrize(
    "change", ["swap_exact_tie", "dropped_group", "weaker_expert", "order", "duplicate", "weights"]
)
def test_grouped_router_judge_fails_every_wrong_choice(change: str) -> None:
    cases = {c.name: c for c in _grouped_cases()}
    case = cases["ties_rows10"] if change == "swap_exact_tie" else cases["random_1e0_rows1"]
    v = _judged(case, change)
    assert not v.passed, change
    if change != "weights":
        assert v.counts["rows_wrong"] == 1 and "row 0" in v.reason


def test_grouped_router_judge_accepts_a_swap_within_the_derived_bound_only() -> None:
    """Two experts whose exact biased scores differ by less than their bounds may be swapped; by more,
    not. Built from the DELTA the numerics module derives, so the test moves with it."""
    num = conf.numerics(GROUPED)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((1, 256)) * 0.1 - 3.0).astype(np.float32)
    bias = np.zeros(256, dtype=np.float32)
    x[0, 3], x[0, 5] = 2.0, 2.0  # experts 3 and 5 of group 0 lead; 5's bias decides by how much
    s = ref.sigmoid(2.0)
    for gap, ok in ((num.DELTA_BASE, True), (4 * num.DELTA_BASE + 4 * 2.0**-24, False)):
        bias[5] = np.float32(gap)
        b5 = s + float(bias[5])
        assert b5 > s
        case = conf.Case("near", 1, {"logits": x, "bias": bias.copy()}, {"scale": 2.5})
        exp = conf.expected(GROUPED, DSV3, case)
        assert list(exp["ids"][0, :2]) == [5, 3]
        ids = exp["ids"].copy()
        ids[0, :2] = [3, 5]
        v = conf.judge(GROUPED, DSV3, case, {"ids": ids, "weights": exp["weights"].astype(np.float32)}, exp)
        assert v.passed is ok, (gap, v.reason)


def test_grouped_router_bytes_moved() -> None:
    assert conf.bytes_moved(GROUPED, DSV3, 1) == 1024 + 1024 + 64
    assert conf.bytes_moved(GROUPED, DSV3, 16) == 16 * (1024 + 64) + 1024


def test_grouped_router_cases_tell_a_zero_mask_from_the_contract() -> None:
    """transformers' route_tokens_to_experts masks dropped groups to 0.0, not minus infinity: with every
    biased score negative (negative_rows3) that picks dropped experts, and the judge must see it."""
    case = next(c for c in _grouped_cases() if c.name == "negative_rows3")
    x, bias = case.inputs["logits"], case.inputs["bias"]
    good = fp32_router(x, bias, DSV3, 2.5)
    t = ref.moe_grouped_topk_sigmoid(x, bias, 8, 8, 4, 2.5)
    mask = np.zeros((3, 8), dtype=bool)
    np.put_along_axis(mask, t.groups, True, axis=-1)
    zeroed = np.where(np.repeat(mask, 32, axis=-1), t.biased, 0.0)
    ids = np.argsort(-zeroed, axis=-1, kind="stable")[:, :8].astype(np.int32)
    assert not np.array_equal(ids, good["ids"])
    s = np.take_along_axis(t.scores, ids, axis=-1)
    w = (s / (s.sum(-1, keepdims=True) + ref.ROUTER_EPS) * 2.5).astype(np.float32)
    v = conf.judge(GROUPED, DSV3, case, {"ids": ids, "weights": w})
    assert not v.passed and v.counts["rows_wrong"] == 3
