"""Tests of the float64 reference (no GPU): the yardstick must be right before kernels are measured."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netra.certify import reference as ref


def bf16(values: list[float] | np.ndarray) -> np.ndarray:
    """bf16 bits of values that are exactly representable; fails loudly if one is not."""
    v = np.asarray(values, dtype=np.float64)
    bits = ref.f64_to_bf16_rne(v)
    np.testing.assert_array_equal(ref.bf16_to_f64(bits), v)
    return bits


# ---------------------------------------------------------------------------------------------
# FP8 E4M3FN
# ---------------------------------------------------------------------------------------------

# Known gfx950 conversion results: the reference must reproduce them bit for bit.
GFX950_CODES = [
    (1.0, 0x38),
    (-1.0, 0xB8),
    (0.5, 0x30),
    (3.0, 0x44),
    (0.1, 0x1D),
    (1.0625, 0x38),  # midpoint of 1.0 and 1.125: ties to the even mantissa
    (1.125, 0x39),
    (240.0, 0x77),
    (448.0, 0x7E),
    (2.0**-9, 0x01),
    (2.0**-6, 0x08),
    (1e-10, 0x00),
    (-0.0, 0x80),
]


@pytest.mark.parametrize(("value", "code"), GFX950_CODES)
def test_fp8_encode_matches_gfx950(value: float, code: int) -> None:
    got = ref.fp8_e4m3_encode(np.array([value]))
    assert got.dtype == np.uint8
    assert int(got[0]) == code, f"{value!r} -> {int(got[0]):#04x}, expected {code:#04x}"


def test_fp8_decode_matches_gfx950_table() -> None:
    for value, code in GFX950_CODES:
        if value in (0.1, 1.0625, 1e-10):  # not representable: decode gives the rounded value
            continue
        got = ref.fp8_e4m3_decode(np.array([code], dtype=np.uint8))[0]
        assert got == value and math.copysign(1.0, got) == math.copysign(1.0, value)


def test_fp8_round_trip_all_codes() -> None:
    codes = np.arange(256, dtype=np.uint8)
    values = ref.fp8_e4m3_decode(codes)
    nan = np.isnan(values)
    assert sorted(codes[nan].tolist()) == [0x7F, 0xFF]
    np.testing.assert_array_equal(ref.fp8_e4m3_encode(values[~nan]), codes[~nan])
    assert values[0x7E] == 448.0 and values[0xFE] == -448.0
    assert values[0x01] == 2.0**-9 and values[0x08] == 2.0**-6


def test_fp8_encode_is_nearest_even_against_brute_force() -> None:
    codes = np.arange(256, dtype=np.uint8)
    table = ref.fp8_e4m3_decode(codes)
    finite = ~np.isnan(table)
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, 4000) * rng.choice([2.0**-9, 2.0**-5, 1.0, 16.0, 448.0], 4000)
    # Exact midpoints between neighbours must be in the sample: they are where RNE matters.
    pos = np.sort(np.unique(np.abs(table[finite])))
    x = np.concatenate([x, (pos[1:] + pos[:-1]) / 2, -(pos[1:] + pos[:-1]) / 2])
    got = ref.fp8_e4m3_encode(x)
    dist = np.abs(table[finite][None, :] - x[:, None])
    best = dist.min(axis=1, keepdims=True)
    for i in range(x.size):
        cands = codes[finite][dist[i] == best[i, 0]]
        if cands.size > 1:  # tie: the even mantissa wins (+-0 are the same value)
            cands = cands[(cands & 1) == 0]
        if x[i] == 0:
            continue
        cands = cands[(cands >> 7) == (x[i] < 0)]
        assert int(got[i]) in cands.tolist(), (x[i], int(got[i]), cands)


def test_fp8_encode_out_of_range_is_nan() -> None:
    # 464 is the midpoint of 448 and (absent) 480 and ties to 448; anything above becomes NaN.
    got = ref.fp8_e4m3_encode(np.array([460.0, 464.0, -464.0, 464.5, -1000.0, np.inf, np.nan]))
    assert got.tolist() == [0x7E, 0x7E, 0xFE, 0x7F, 0xFF, 0x7F, 0x7F]


def test_fp8_rejects_non_uint8_codes() -> None:
    with pytest.raises(TypeError):
        ref.fp8_e4m3_decode(np.array([0x38], dtype=np.int64))


# ---------------------------------------------------------------------------------------------
# bf16
# ---------------------------------------------------------------------------------------------


def test_bf16_to_f64() -> None:
    got = ref.bf16_to_f64(np.array([0x3F80, 0xC000, 0x0001, 0x7F80], dtype=np.uint16))
    assert got.tolist() == [1.0, -2.0, 2.0**-133, math.inf]
    with pytest.raises(TypeError):
        ref.bf16_to_f64(np.array([1.0], dtype=np.float32))


def test_bf16_rne_ties_and_no_double_rounding() -> None:
    x = np.array(
        [
            1 + 2**-8,  # tie between 0x3f80 and 0x3f81: even wins
            1 + 3 * 2**-8,  # tie between 0x3f81 and 0x3f82: even wins
            -(1 + 2**-8),
            1 + 2**-8 + 2**-30,  # above the tie; a float32 detour would land on the tie
            1 + 2**-8 - 2**-30,
        ]
    )
    assert ref.f64_to_bf16_rne(x).tolist() == [0x3F80, 0x3F82, 0xBF80, 0x3F81, 0x3F80]


def test_bf16_special_values() -> None:
    x = np.array([np.nan, -np.nan, np.inf, 3.4e38, -0.0, 2.0**-134, 3 * 2.0**-134])
    got = ref.f64_to_bf16_rne(x)
    assert got.dtype == np.uint16
    assert got.tolist() == [0x7FC0, 0xFFC0, 0x7F80, 0x7F80, 0x8000, 0x0000, 0x0002]


def test_bf16_round_trip_all_patterns() -> None:
    bits = np.arange(65536, dtype=np.uint16)
    values = ref.bf16_to_f64(bits)
    ok = ~np.isnan(values)
    np.testing.assert_array_equal(ref.f64_to_bf16_rne(values[ok]), bits[ok])


# ---------------------------------------------------------------------------------------------
# RMSNorm
# ---------------------------------------------------------------------------------------------


def test_rmsnorm_hand_computed() -> None:
    # mean(3^2, 4^2) = 12.5; + eps 3.5 = 16; rstd = 1/4.
    x = bf16([[3.0, 4.0], [0.0, -2.0]])
    w = bf16([2.0, 0.5])
    y = ref.rmsnorm(x, w, eps=3.5)
    # Row 2: mean = 2; + 3.5 = 5.5.
    expected = [[1.5, 0.5], [0.0, -2.0 / math.sqrt(5.5) * 0.5]]
    np.testing.assert_allclose(y, expected, rtol=1e-15, atol=0)
    assert ref.rmsnorm_bf16(x, w, eps=3.5)[0].tolist() == [0x3FC0, 0x3F00]


def test_rmsnorm_weight_offset() -> None:
    x = bf16([[3.0, 4.0]])
    w = bf16([2.0, 0.5])
    y = ref.rmsnorm(x, w, eps=3.5, weight_offset=1.0)
    np.testing.assert_array_equal(y, [[0.75 * 3.0, 1.0 * 1.5]])


def test_rmsnorm_bf16_rounds_once() -> None:
    # x = [1] with eps = 0: y = w exactly, so any representable w must come back bit-exact,
    # and the row scale must be applied per row.
    x = bf16([[1.0], [-4.0]])
    w = bf16([1.5])
    assert ref.rmsnorm_bf16(x, w, eps=0.0).tolist() == [[0x3FC0], [0xBFC0]]


def test_rmsnorm_rejects_wrong_weight_shape() -> None:
    with pytest.raises(ValueError):
        ref.rmsnorm(bf16([[1.0, 2.0]]), bf16([1.0, 2.0, 3.0]), eps=1e-6)


# ---------------------------------------------------------------------------------------------
# FP8 group quantization
# ---------------------------------------------------------------------------------------------


def test_group_quant_scale_and_saturation() -> None:
    rng = np.random.default_rng(2)
    vals = rng.uniform(-3, 3, size=(2, 256))
    vals[0, 5] = 7.0  # amax of row 0, group 0
    vals[0, 200] = -5.0  # amax of row 0, group 1 (negative)
    vals[1, :128] = 0.0  # all-zero group
    x = ref.f64_to_bf16_rne(vals)
    xf = ref.bf16_to_f64(x)
    r = ref.fp8_group_quant(x)
    assert r.q.shape == (2, 256) and r.q.dtype == np.uint8
    assert r.scales.shape == (2, 2)
    assert r.scales[0, 0] == 7.0 / 448.0
    assert r.scales[0, 1] == 5.0 / 448.0
    assert r.scales[1, 0] == 1e-10 / 448.0
    assert r.scales[1, 1] == np.max(np.abs(xf[1, 128:])) / 448.0
    assert r.q[0, 5] == 0x7E and r.q[0, 200] == 0xFE  # amax lands exactly on +-448
    assert not np.any(r.q[1, :128])
    # The largest magnitude of every group maps to 448 and nothing exceeds it or becomes NaN.
    assert np.all((r.q & 0x7F) <= 0x7E)
    np.testing.assert_array_equal(r.values, xf)
    np.testing.assert_array_equal(r.dequant, ref.fp8_e4m3_decode(r.q) * np.repeat(r.scales, 128, axis=1))
    # Round-to-nearest bound: half a step of the top binade (16 of 448) relative to amax.
    err = np.abs(r.dequant - xf).reshape(2, 2, 128).max(axis=-1)
    assert np.all(err <= r.scales * 16.0 * (1 + 1e-12))


def test_group_quant_codes_follow_encoder() -> None:
    # amax 448 gives scale 1, so the codes are exactly the encoder's codes.
    vals = np.array([[448.0, 1.0625, 0.1, -3.0] + [0.0] * 124])
    r = ref.fp8_group_quant(ref.f64_to_bf16_rne(vals))
    assert r.scales[0, 0] == 1.0
    expected = ref.fp8_e4m3_encode(ref.bf16_to_f64(ref.f64_to_bf16_rne(vals)))
    np.testing.assert_array_equal(r.q, expected)
    assert r.q[0, :4].tolist() == [0x7E, 0x38, 0x1D, 0xC4]


def test_group_quant_every_element_its_own_amax() -> None:
    # group=1: every nonzero element is its group's amax and must land on +-448 exactly.
    x = bf16([[1.0, -2.0, 3.0, 0.0]])
    r = ref.fp8_group_quant(x, group=1)
    assert r.q.tolist() == [[0x7E, 0xFE, 0x7E, 0x00]]


def test_group_quant_rejects_ragged_rows() -> None:
    with pytest.raises(ValueError):
        ref.fp8_group_quant(bf16([[1.0] * 100]))


# ---------------------------------------------------------------------------------------------
# SiLU-and-mul + FP8 group quantization
# ---------------------------------------------------------------------------------------------


def test_silu_known_values() -> None:
    got = ref.silu(np.array([0.0, 1.0, -1.0, 2.0, -1000.0, 1000.0]))
    expected = [0.0, 0.7310585786300049, -0.2689414213699951, 1.7615941559557649, 0.0, 1000.0]
    np.testing.assert_allclose(got, expected, rtol=1e-15, atol=0)


def test_silu_mul_uses_gate_first_half() -> None:
    g = [0.0, 1.0, -1.0, 2.0] + [0.0] * 124
    u = [5.0, 2.0, 3.0, -0.5] + [1.0] * 124
    x = bf16([g + u])
    r = ref.silu_mul_fp8_quant(x)
    h = ref.silu(np.array(g)) * np.array(u)
    np.testing.assert_allclose(r.values[0], h, rtol=1e-15, atol=0)
    amax = 2 * 0.7310585786300049
    assert r.scales.shape == (1, 1)
    assert r.scales[0, 0] == pytest.approx(amax / 448.0, rel=1e-15)
    assert r.q[0, 1] == 0x7E  # h = 2 * silu(1) is the amax
    assert r.q[0, 0] == 0x00
    # Swapping halves must change the result: the gate is the first half.
    swapped = ref.silu_mul_fp8_quant(bf16([u + g]))
    assert not np.array_equal(swapped.values, r.values)


def test_silu_mul_matches_group_quant_of_h() -> None:
    rng = np.random.default_rng(3)
    x = ref.f64_to_bf16_rne(rng.normal(0, 2, size=(3, 2 * 256)))
    r = ref.silu_mul_fp8_quant(x)
    xf = ref.bf16_to_f64(x)
    h = ref.silu(xf[:, :256]) * xf[:, 256:]
    np.testing.assert_array_equal(r.values, h)
    assert r.q.shape == (3, 256) and r.scales.shape == (3, 2)
    amax = np.abs(h).reshape(3, 2, 128).max(axis=-1)
    np.testing.assert_array_equal(r.scales, amax / 448.0)


# ---------------------------------------------------------------------------------------------
# MoE top-k softmax
# ---------------------------------------------------------------------------------------------


def test_topk_equal_logits_pick_lower_ids() -> None:
    r = ref.moe_topk_softmax(bf16([[0.5] * 128]), k=8)
    assert r.ids.dtype == np.int32
    assert r.ids.tolist() == [list(range(8))]
    np.testing.assert_allclose(r.weights, np.full((1, 8), 1 / 8), rtol=1e-15)


def test_topk_order_and_boundary_tie() -> None:
    logits = np.zeros(16)
    logits[[9, 4]] = 3.0  # tie for first place: 4 before 9
    logits[7] = 2.0
    logits[[12, 2]] = 1.0  # tie for the last slot: 2 wins, 12 is dropped
    r = ref.moe_topk_softmax(bf16([logits.tolist()]), k=4)
    assert r.ids.tolist() == [[4, 9, 7, 2]]
    e = np.exp([3.0, 3.0, 2.0, 1.0])
    np.testing.assert_allclose(r.weights[0], e / e.sum(), rtol=1e-15)
    assert math.isclose(float(r.weights.sum()), 1.0, rel_tol=1e-15)
    assert np.all(np.diff(r.weights[0]) <= 0)


def test_topk_weights_sum_to_one_and_renormalize() -> None:
    rng = np.random.default_rng(4)
    logits = ref.f64_to_bf16_rne(rng.normal(0, 3, size=(64, 128)))
    r = ref.moe_topk_softmax(logits, k=8)
    np.testing.assert_allclose(r.weights.sum(axis=-1), 1.0, rtol=1e-14)
    lf = ref.bf16_to_f64(logits)
    p = np.exp(lf - lf.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    sel = np.take_along_axis(p, r.ids.astype(np.int64), axis=-1)
    np.testing.assert_allclose(r.weights, sel / sel.sum(axis=-1, keepdims=True), rtol=1e-13)
    # Selected are the k largest, in descending order.
    assert np.all(np.sort(p, axis=-1)[:, -8:][:, ::-1] == sel)


def test_topk_many_ties_match_brute_force() -> None:
    # Few distinct values over 128 experts: ties everywhere, including across the k boundary.
    rng = np.random.default_rng(5)
    logits = rng.integers(0, 3, size=(32, 128)).astype(np.float64)
    r = ref.moe_topk_softmax(ref.f64_to_bf16_rne(logits), k=8)
    for row, ids in zip(logits, r.ids, strict=True):
        expected = sorted(range(128), key=lambda e, row=row: (-row[e], e))[:8]
        assert ids.tolist() == expected


def test_topk_distinct_logits_are_not_false_ties() -> None:
    # exp(2**-130) == exp(0) == 1.0 in float64, but 2**-130 > 0 so id 3 outranks id 0.
    r = ref.moe_topk_softmax(ref.f64_to_bf16_rne(np.array([[0.0, -1.0, -2.0, 2.0**-130]])), k=2)
    assert r.ids.tolist() == [[3, 0]]


def test_topk_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        ref.moe_topk_softmax(bf16([[0.0] * 4]), k=5)
    with pytest.raises(ValueError):
        ref.moe_topk_softmax(ref.f64_to_bf16_rne(np.array([[0.0, np.nan]])), k=1)


# ---------------------------------------------------------------------------------------------
# Deviation metrics
# ---------------------------------------------------------------------------------------------


def test_relative_max_error() -> None:
    assert ref.relative_max_error([1.0, -4.0], [1.0, -4.0]) == 0.0
    assert ref.relative_max_error([1.5, -4.0], [1.0, -4.0]) == 0.5 / 4.0
    assert ref.relative_max_error([np.nan, 0.0], [1.0, 0.0]) == math.inf
    assert ref.relative_max_error([0.0], [0.0]) == 0.0
    assert ref.relative_max_error([1e-30], [0.0]) == math.inf
    with pytest.raises(ValueError):
        ref.relative_max_error([1.0], [1.0, 2.0])


def test_fp8_step_distance() -> None:
    u8 = np.uint8
    a = np.array([0x38, 0x38, 0x38, 0x80, 0x01, 0x7E, 0x7F, 0x08], dtype=u8)
    b = np.array([0x38, 0x39, 0x3A, 0x00, 0x81, 0x7D, 0x7F, 0x07], dtype=u8)
    assert ref.fp8_step_distance(a, b).tolist() == [0, 1, 2, 0, 2, 1, 256, 1]
    assert ref.count_fp8_beyond_one_step(a, b) == 3


# ---------------------------------------------------------------------------------------------
# Fused families: the composition of the unfused references, bit for bit
# ---------------------------------------------------------------------------------------------


def test_add_bf16_rounds_once_to_even() -> None:
    # 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7: ties to 1 (even); 1 + 3 * 2^-8 ties up to 1 + 2^-6
    x = bf16([2.0**-8, 3 * 2.0**-8, 2.0**-8 * (1 + 2.0**-7), -1.0, -0.0, 0.0])
    r = bf16([1.0, 1.0, 1.0, 1.0, -0.0, -0.0])
    assert ref.add_bf16(x, r).tolist() == [0x3F80, 0x3F82, 0x3F81, 0x0000, 0x8000, 0x0000]


def _add_f32_then_bf16(x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """What a kernel does: the fp32 sum of two bf16 values, then RNE to bf16 (integer arithmetic)."""
    s = (ref.bf16_to_f64(x).astype(np.float32) + ref.bf16_to_f64(r).astype(np.float32)).view(np.uint32)
    return ((s + np.uint32(0x7FFF) + ((s >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


FUSED_CONTRACTS = [
    ("fused_add_rmsnorm", {"hidden": 256, "weight_offset": 0}),
    ("fused_add_rmsnorm", {"hidden": 384, "weight_offset": 1}),
    ("rmsnorm_fp8_group_quant", {"hidden": 512, "weight_offset": 0, "group": 128}),
    ("rmsnorm_fp8_group_quant", {"hidden": 384, "weight_offset": 1, "group": 128}),
    ("fused_add_rmsnorm_fp8_group_quant", {"hidden": 512, "weight_offset": 0, "group": 128}),
    ("fused_add_rmsnorm_fp8_group_quant", {"hidden": 256, "weight_offset": 1, "group": 128}),
]


@pytest.mark.parametrize(("op", "params"), FUSED_CONTRACTS)
def test_fused_reference_is_the_unfused_composition_on_every_conformance_vector(
    op: str, params: dict[str, int]
) -> None:
    """The fused references equal the unfused chain bit for bit: the add as a kernel does it (fp32 sum,
    one RNE to bf16), rmsnorm rounded to bf16 (the unfused kernel's output), then fp8_group_quant."""
    from netra.certify import conformance as conf

    for case in conf.cases(op, params, rows_per_block=8, large_rows=64):
        x, w, eps = case.inputs["x"], case.inputs["w"], case.scalars["eps"]
        wo = params["weight_offset"]
        if op == "fused_add_rmsnorm":
            got = ref.fused_add_rmsnorm(x, case.inputs["residual"], w, eps, wo)
            r = _add_f32_then_bf16(x, case.inputs["residual"])
            np.testing.assert_array_equal(got.residual_out, r, err_msg=case.name)
            np.testing.assert_array_equal(got.y, ref.rmsnorm(r, w, eps, wo), err_msg=case.name)
            continue
        if op == "fused_add_rmsnorm_fp8_group_quant":
            r_out, gq = ref.fused_add_rmsnorm_fp8_group_quant(x, case.inputs["residual"], w, eps, wo)
            x = _add_f32_then_bf16(x, case.inputs["residual"])
            np.testing.assert_array_equal(r_out, x, err_msg=case.name)
        else:
            gq = ref.rmsnorm_fp8_group_quant(x, w, eps, wo)
        unfused = ref.fp8_group_quant(ref.rmsnorm_bf16(x, w, eps, wo))
        for field in ("q", "scales", "dequant", "values"):
            np.testing.assert_array_equal(getattr(gq, field), getattr(unfused, field), err_msg=case.name)


def test_fused_reference_rejects_mismatched_residual() -> None:
    with pytest.raises(ValueError):
        ref.fused_add_rmsnorm(bf16([[1.0, 2.0]]), bf16([[1.0, 2.0, 3.0]]), bf16([1.0, 1.0]), 1e-6)


# ---------------------------------------------------------------------------------------------
# MoE grouped top-k sigmoid (DeepSeek-V3's router)
# ---------------------------------------------------------------------------------------------


def _brute_router(x: np.ndarray, bias: np.ndarray, k: int, g: int, tg: int, scale: float) -> list[list[int]]:
    """The definition written as plainly as possible: Python sorts with (score, index) keys."""
    out = []
    size = len(bias) // g
    for row in x:
        s = [1.0 / (1.0 + math.exp(-float(v))) for v in row]
        b = [si + float(bi) for si, bi in zip(s, bias, strict=True)]
        gs = [sum(sorted(b[j * size : (j + 1) * size], reverse=True)[:2]) for j in range(g)]
        kept = sorted(range(g), key=lambda j, gs=gs: (-gs[j], j))[:tg]
        pool = [e for j in kept for e in range(j * size, (j + 1) * size)]
        out.append(sorted(pool, key=lambda e, b=b: (-b[e], e))[:k])
    return out


def test_grouped_router_matches_the_plain_definition() -> None:
    rng = np.random.default_rng(11)
    x = rng.normal(0, 2, size=(16, 256)).astype(np.float32)
    bias = rng.normal(0, 0.3, size=256).astype(np.float32)
    r = ref.moe_grouped_topk_sigmoid(x, bias, 8, 8, 4, 2.5)
    assert r.ids.dtype == np.int32 and r.ids.shape == (16, 8)
    assert r.ids.tolist() == _brute_router(x, bias, 8, 8, 4, 2.5)
    s = np.take_along_axis(r.scores, r.ids.astype(np.int64), axis=-1)
    np.testing.assert_allclose(r.weights, 2.5 * s / s.sum(axis=-1, keepdims=True), rtol=1e-14)
    np.testing.assert_allclose(r.weights.sum(axis=-1), 2.5, rtol=1e-14)
    # the chosen experts come from at most 4 groups, the kept ones
    assert all(
        set((ids // 32).tolist()) <= set(kept.tolist()) for ids, kept in zip(r.ids, r.groups, strict=True)
    )


def test_grouped_router_ties_to_the_lower_index() -> None:
    # every score equal: groups 0..3 kept, experts 0..7 chosen, equal weights
    r = ref.moe_grouped_topk_sigmoid(np.zeros((1, 256), np.float32), np.zeros(256, np.float32), 8, 8, 4, 2.5)
    assert r.ids.tolist() == [list(range(8))] and r.groups.tolist() == [[0, 1, 2, 3]]
    np.testing.assert_allclose(r.weights, np.full((1, 8), 2.5 / 8), rtol=1e-15)
    # +0 and -0 are equal logits
    x = np.where(np.arange(256) % 2 == 0, np.float32(0.0), np.float32(-0.0)).astype(np.float32)[None]
    assert ref.moe_grouped_topk_sigmoid(x, np.zeros(256, np.float32), 8, 8, 4, 2.5).ids.tolist() == [
        list(range(8))
    ]
    # group 5 and group 2 tie exactly (same two best pairs): group 2 is kept first
    x = np.full((1, 256), -4.0, np.float32)
    x[0, [2 * 32 + 7, 2 * 32 + 9, 5 * 32 + 1, 5 * 32 + 3]] = [3.0, 2.5, 3.0, 2.5]
    r = ref.moe_grouped_topk_sigmoid(x, np.zeros(256, np.float32), 2, 8, 1, 1.0)
    assert r.groups.tolist() == [[2]] and r.ids.tolist() == [[71, 73]]


def test_grouped_router_chooses_by_biased_and_weighs_by_unbiased_scores() -> None:
    x = np.zeros((1, 256), np.float32)
    x[0, 40] = 4.0  # the best unbiased score, in group 1
    bias = np.zeros(256, np.float32)
    bias[200] = 1.0  # lifts expert 200 (group 6) above it
    r = ref.moe_grouped_topk_sigmoid(x, bias, 2, 8, 2, 2.5)
    assert r.ids.tolist() == [[200, 40]]
    s40, s200 = ref.sigmoid(4.0), 0.5
    np.testing.assert_allclose(r.weights[0], 2.5 * np.array([s200, s40]) / (s200 + s40), rtol=1e-15)


def test_grouped_router_stays_inside_the_kept_groups_when_scores_are_negative() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, size=(4, 256)).astype(np.float32)
    bias = np.full(256, -5.0, np.float32)  # every b < 0: a 0.0 mask would pick dropped experts
    r = ref.moe_grouped_topk_sigmoid(x, bias, 8, 8, 4, 2.5)
    assert np.all(r.biased < 0)
    for ids, kept in zip(r.ids, r.groups, strict=True):
        assert set((ids // 32).tolist()) <= set(kept.tolist())


def test_grouped_router_saturation_and_zero_scores() -> None:
    assert ref.sigmoid(np.array([-1e3, 0.0, 1e3])).tolist() == [0.0, 0.5, 1.0]
    assert ref.sigmoid(-745.0) > 0 and np.isfinite(ref.sigmoid(-1e308))
    x = np.full((1, 256), -1e3, np.float32)  # every s underflows to 0: weights 0, not NaN
    bias = np.arange(256, dtype=np.float32) / 256
    r = ref.moe_grouped_topk_sigmoid(x, bias, 8, 8, 4, 2.5)
    assert np.all(r.weights == 0.0)
    assert r.ids.tolist() == [list(range(255, 247, -1))]  # the bias alone chooses


def test_grouped_router_rejects_bad_input() -> None:
    x, b = np.zeros((1, 256), np.float32), np.zeros(256, np.float32)
    for args in ((x, b[:128], 8, 8, 4), (x, b, 8, 7, 4), (x, b, 8, 8, 9), (x, b, 200, 8, 4), (x, b, 0, 8, 4)):
        with pytest.raises(ValueError):
            ref.moe_grouped_topk_sigmoid(*args, 2.5)
    with pytest.raises(ValueError):
        ref.moe_grouped_topk_sigmoid(np.full((1, 256), np.inf, np.float32), b, 8, 8, 4, 2.5)


def test_fp8_rounds_within_is_the_encoders_codes_for_the_window() -> None:
    """A code qualifies where some quotient within the window rounds to it: half the gap to its neighbour
    on the value's side (1.0's neighbours: 0.9375 below, 1.125 above), two steps where the window reaches,
    saturation past 448, never a NaN code."""
    one, neg_one, top, nan = 0x38, 0xB8, 0x7E, 0x7F
    assert ref.fp8_e4m3_decode(np.array([one, neg_one, top], dtype=np.uint8)).tolist() == [1.0, -1.0, 448.0]
    got = ref.fp8_rounds_within(
        np.array([one, one, one, one, one, neg_one, neg_one, top, nan], dtype=np.uint8),
        np.array([1.06, 1.07, 1.07, 0.97, 1.25, -1.06, -1.07, 1000.0, 1.0]),
        np.array([0.0, 0.0, 0.01, 0.0, 0.19, 0.0, 0.0, 0.0, 10.0]),
    )
    assert got.tolist() == [True, False, True, True, True, True, False, True, False]
    assert not ref.fp8_rounds_within(np.array([one], dtype=np.uint8), np.array([0.96]), np.array([0.0]))[0]
