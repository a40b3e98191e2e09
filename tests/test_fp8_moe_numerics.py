"""The routed FP8 MoE's numerics (netra/certify/numerics/fp8_moe_gate_up.py, fp8_moe_down.py, moe.py), on the
CPU with real numpy: the float64 reference against a straightforward float64 computation written here (its
own FP8 decoding, loops over pairs, no shared helper), the judges against a numpy emulation of the kernel's
fp32 path (docs/ops/fp8_moe.md: mma steps truncated toward zero, blocks added in another order than the
kernel's, fp32 silu * up and quantization, an fp32 fma per slot in slot order; the WGMMA tactics' partial
sums kept to 14 significant bits instead), and every wrong output the judges must refuse."""

from __future__ import annotations

import re

import numpy as np
import pytest

from netra.certify import conformance as cf
from netra.certify import reference as ref
from netra.certify.numerics import common, moe

SMALL = {"experts": 8, "topk": 2, "hidden": 256, "inter": 128}
QWEN30B = {"experts": 128, "topk": 8, "hidden": 2048, "inter": 768}
UP, DOWN = "fp8_moe_gate_up", "fp8_moe_down"


def decode(codes: np.ndarray) -> np.ndarray:
    """E4M3FN from the bits, written out (not reference's table): NaN for 0x7f / 0xff."""
    c = codes.astype(np.int64)
    e, m = (c >> 3) & 0xF, (c & 7).astype(np.float64)
    mag = np.where(e == 0, m / 8 * 2.0**-6, (1 + m / 8) * np.exp2(e - 7.0))
    mag = np.where((c & 0x7F) == 0x7F, np.nan, mag)
    return np.where(c & 0x80, -mag, mag)


def dequant(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """[rows, K] codes with [rows/128, K/128] (or [K/128] for one row) scales, as float64 values."""
    s = np.asarray(scales, dtype=np.float64)
    if s.ndim == 1:
        return decode(codes) * np.repeat(s, 128)
    return decode(codes) * np.repeat(np.repeat(s, 128, axis=0), 128, axis=1)


def straight_gate_up(p: dict[str, int], case: cf.Case) -> np.ndarray:
    """Exact h per pair: dequantize, multiply, silu * up (float64, one pair at a time)."""
    k, n_i = p["topk"], p["inter"]
    x = case.inputs
    h = np.zeros((case.rows * k, n_i))
    for t in range(case.rows):
        xv = dequant(x["xq"][t], x["xs"][t])
        for s in range(k):
            e = int(x["ids"][t, s])
            gu = dequant(x["w13"][e], x["w13s"][e]) @ xv
            g = gu[:n_i]
            with np.errstate(over="ignore"):
                h[t * k + s] = g / (1 + np.exp(-g)) * gu[n_i:]
    return h


def straight_down(p: dict[str, int], case: cf.Case, slot_fma: bool = False) -> np.ndarray:
    """The exact router-weighted sum of the down projections (float64); slot_fma: the contract's fp32 fma
    over the slots in slot order instead, of y rounded to fp32 (long double: exact for these values)."""
    k = p["topk"]
    x = case.inputs
    out = np.zeros((case.rows, p["hidden"]))
    for t in range(case.rows):
        acc = np.zeros(p["hidden"], dtype=np.float32)
        for s in range(k):
            e = int(x["ids"][t, s])
            y = dequant(x["w2"][e], x["w2s"][e]) @ dequant(x["hq"][t * k + s], x["hs"][t * k + s])
            out[t] += float(x["weights"][t, s]) * y
            ld = np.longdouble(x["weights"][t, s]) * y.astype(np.float32).astype(np.longdouble)
            acc = (ld + acc.astype(np.longdouble)).astype(np.float32)
        if slot_fma:
            out[t] = acc
    return out


# --------------------------------------------------------------------------------------------
# The kernel's fp32 path, emulated
# --------------------------------------------------------------------------------------------


def _toward_zero(v: np.ndarray) -> np.ndarray:
    r = v.astype(np.float32)
    over = np.abs(r.astype(np.float64)) > np.abs(v)
    return np.where(over, np.nextafter(r, np.float32(0)), r)


def _truncate(v: np.ndarray, bits: int) -> np.ndarray:
    """v (float64) toward zero to `bits` significant bits, as fp32 (an FP22 partial is an fp32 number)."""
    if bits == 24:
        return _toward_zero(v)
    m, e = np.frexp(v)
    return np.ldexp(np.trunc(m * 2.0**bits) / 2.0**bits, e).astype(np.float32)


def fp32_dot(
    w: np.ndarray, ws: np.ndarray, x: np.ndarray, xs: np.ndarray, bits: int = 24, split: int = 1
) -> np.ndarray:
    """rows of w (codes [R, K], scales [R/128, K/128]) against one x (codes [K], scales [K/128]): per block
    four mma steps of 32, each truncated to `bits` significant bits (fp32's 24, or the 14 of wgmma e4m3's
    partials); scale product and scaled block in fp32; the blocks added last to first (the prototype adds
    them first to last). split S > 1: as KSPLIT, S equal runs of blocks each summed from zero, then the
    runs' sums added in rank order."""
    r, kl = w.shape
    nb = kl // 128
    prod = (decode(w).astype(np.float32) * decode(x).astype(np.float32)).reshape(r, nb, 4, 32)
    part = np.zeros((r, nb), dtype=np.float32)
    for st in range(4):
        part = _truncate(part.astype(np.float64) + prod[:, :, st].astype(np.float64).sum(-1), bits)
    scale = np.repeat(ws, 128, axis=0).astype(np.float32) * xs.astype(np.float32)[None, :]
    scaled = part * scale
    run = nb // split
    total = np.zeros(r, dtype=np.float32)
    for q in range(split):
        acc = np.zeros(r, dtype=np.float32)
        for b in reversed(range(q * run, (q + 1) * run)):
            acc = acc + scaled[:, b]
        total = acc if q == 0 else total + acc
    return total


def kernel_gate_up(
    p: dict[str, int], case: cf.Case, expert: dict[int, int] | None = None, bits: int = 24, split: int = 1
) -> dict[str, np.ndarray]:
    """hq, hs as an fp32 kernel computes them (bits: its tensor core's partials; split: KSPLIT's runs of
    k blocks); expert: pair -> expert read instead of the routed one."""
    k, n_i = p["topk"], p["inter"]
    x = case.inputs
    h = np.zeros((case.rows * k, n_i), dtype=np.float32)
    for pr in range(case.rows * k):
        t = pr // k
        e = (expert or {}).get(pr, int(x["ids"][t, pr % k]))
        gu = fp32_dot(x["w13"][e], x["w13s"][e], x["xq"][t], x["xs"][t], bits, split)
        g, u = gu[:n_i], gu[n_i:]
        with np.errstate(over="ignore", invalid="ignore"):
            h[pr] = g / (np.float32(1) + np.exp(-g)) * u
    grp = h.reshape(len(h), -1, 128)
    amax = np.max(np.abs(grp), axis=-1)
    s = (np.maximum(amax, np.float32(1e-10)).astype(np.float64) / 448).astype(np.float32)
    with np.errstate(invalid="ignore"):
        q = np.clip(grp / s[..., None], np.float32(-448), np.float32(448))
    return {"hq": ref.fp8_e4m3_encode(q.astype(np.float64)).reshape(h.shape), "hs": s}


def kernel_down(
    p: dict[str, int],
    case: cf.Case,
    order: list[int] | None = None,
    expert: dict[int, int] | None = None,
    bits: int = 24,
) -> dict[str, np.ndarray]:
    """out as an fp32 kernel computes it: y per pair in fp32, then an fma per slot (long double: exact
    here), in `order` (slot order unless told)."""
    k = p["topk"]
    x = case.inputs
    out = np.zeros((case.rows, p["hidden"]), dtype=np.float32)
    for t in range(case.rows):
        ys = []
        for s in range(k):
            e = (expert or {}).get(t * k + s, int(x["ids"][t, s]))
            ys.append(fp32_dot(x["w2"][e], x["w2s"][e], x["hq"][t * k + s], x["hs"][t * k + s], bits))
        acc = np.zeros(p["hidden"], dtype=np.float32)
        for s in order or range(k):
            ld = np.longdouble(x["weights"][t, s]) * ys[s].astype(np.longdouble) + acc.astype(np.longdouble)
            acc = ld.astype(np.float32)
        out[t] = acc
    return {"out": common.bits_f32(out)}


def assert_close_rows(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """Equal but for float64 rounding: 1e-12 of each row's largest value (sums cancel)."""
    top = np.max(np.abs(want), axis=-1, keepdims=True)
    assert np.all(np.abs(got - want) <= 1e-12 * top), what


@pytest.fixture(scope="module")
def small() -> dict[str, list[cf.Case]]:
    return {op: cf.cases(op, SMALL, rows_per_block=1) for op in (UP, DOWN)}


def case_named(cases: list[cf.Case], name: str) -> cf.Case:
    return next(c for c in cases if c.name == name)


# --------------------------------------------------------------------------------------------
# The reference
# --------------------------------------------------------------------------------------------


def test_the_reference_is_the_straightforward_float64_computation(small: dict[str, list[cf.Case]]) -> None:
    for case in small[UP]:
        h = cf.expected(UP, SMALL, case)["h"]
        want = straight_gate_up(SMALL, case)
        assert_close_rows(h, want, case.name)
        gq = ref.fp8_group_quant_values(want)
        assert np.array_equal(cf.expected(UP, SMALL, case)["hq"], gq.q), case.name
    for case in small[DOWN]:
        e = cf.expected(DOWN, SMALL, case)
        want = straight_down(SMALL, case)
        exact = e["exact"]
        assert_close_rows(np.where(exact, want, e["value"]), want, case.name)
        # where every y is exact in fp32, the value is the contract's slot-ordered fp32 fma, bit for bit
        assert np.array_equal(e["value"][exact], straight_down(SMALL, case, slot_fma=True)[exact])
    assert (
        np.sum(cf.expected(DOWN, SMALL, case_named(small[DOWN], "exact_slots_tokens4"))["exact"]) == 4 * 256
    )


def test_reference_rows_concatenate_over_token_spans(small: dict[str, list[cf.Case]]) -> None:
    for op in (UP, DOWN):
        case = case_named(small[op], "uniform_tokens64")
        mod = cf.numerics(op)
        whole = mod.expected(SMALL, case, 0, 64)
        parts = [mod.expected(SMALL, case, a, b) for a, b in ((0, 5), (5, 40), (40, 64))]
        for key, v in whole.items():
            np.testing.assert_array_equal(np.concatenate([q[key] for q in parts]), v, err_msg=key)


def test_the_cases_cover_what_the_contract_asks(small: dict[str, list[cf.Case]]) -> None:
    up, down = small[UP], small[DOWN]
    assert [c.rows for c in up] == [1, 2, 3, 7, 16, 64, 64, 40, 4]
    assert {c.name for c in down} - {c.name for c in up} == {"signed_weights_tokens5", "exact_slots_tokens4"}
    r = moe.roles(SMALL, 0)
    for op, cases in small.items():
        w = "w13" if op == UP else "w2"
        arr, scales = cases[0].inputs[w], cases[0].inputs[w + "s"]
        assert all(c.inputs[w] is arr for c in cases)  # generated once, shared
        hit = {int(e) for c in cases for e in c.inputs["ids"].reshape(-1)}
        for e in range(SMALL["experts"]):
            nan = np.all(arr[e] == 0x7F) and np.all(np.isnan(scales[e]))
            assert nan == (e not in hit), (op, e)
            assert not np.any((arr[e] & 0x7F) == 0x7F) or e not in hit
        assert set(r.reserved) and not set(r.reserved) & hit
        for c in cases:
            ids = c.inputs["ids"]
            assert ids.dtype == np.int32 and all(len(set(row)) == len(row) for row in ids.tolist())
    same = case_named(up, "same_experts_tokens64").inputs["ids"]
    assert {frozenset(row) for row in same.tolist()} == {frozenset(same[0].tolist())}
    zeros = case_named(up, "zeros_tokens16").inputs["xq"]
    assert np.all(zeros[5] == 0) and np.all(np.any(zeros != 0, axis=1) == (np.arange(16) != 5))
    sat = case_named(up, "saturated_tokens4").inputs["xq"]
    assert np.all((sat & 0x7F) == 0x7E)
    wts = {c.name: c.inputs["weights"] for c in down}
    for name, w in wts.items():
        if name not in ("signed_weights_tokens5", "exact_slots_tokens4"):
            assert np.all(w > 0) and np.allclose(w.sum(axis=1), 1, rtol=1e-6), name
    assert np.any(wts["signed_weights_tokens5"] < 0)
    scales = np.concatenate([np.log10(c.inputs["xs"][:, 0]) for c in up])
    assert scales.min() < -4 and scales.max() > 0  # 1e-3 .. 1e3 activations (xs = amax / 448)
    assert (
        cf.cases(UP, SMALL, rows_per_block=4, large_rows=7)[3].inputs["xq"].tobytes()
        == up[3].inputs["xq"].tobytes()
    )
    other = cf.cases(UP, SMALL, rows_per_block=1, seed=1)
    assert not np.array_equal(other[5].inputs["xq"], up[5].inputs["xq"])


def test_same_bits_names_the_anchor_in_1_7_and_64_tokens(small: dict[str, list[cf.Case]]) -> None:
    want = [
        (
            ("anchor_tokens1", 0),
            ("random_mixed_tokens7", 0),
            ("uniform_tokens64", 0),
            ("same_experts_tokens64", 0),
            ("same_experts_tokens40", 0),
        )
    ]
    for op in (UP, DOWN):
        assert cf.numerics(op).same_bits(small[op]) == want
        # and the emulated kernel does give the anchor the same bits in each
        outs = [
            (kernel_gate_up if op == UP else kernel_down)(SMALL, case_named(small[op], name))
            for name, _ in want[0]
        ]
        rows = 2 if op == UP else 1
        for o in outs[1:]:
            for key in o:
                assert np.array_equal(o[key][:rows], outs[0][key][:rows])


def test_outputs_are_sized_by_tokens_and_pairs() -> None:
    assert cf.outputs(UP, SMALL, 7) == {
        "hq": (np.dtype(np.uint8), (14, 128)),
        "hs": (np.dtype(np.float32), (14, 1)),
    }
    assert cf.outputs(DOWN, SMALL, 7) == {"out": (np.dtype(np.uint16), (7, 256))}


# --------------------------------------------------------------------------------------------
# The judges
# --------------------------------------------------------------------------------------------


def test_the_judges_accept_the_reference_and_the_emulated_kernel(small: dict[str, list[cf.Case]]) -> None:
    for case in small[UP]:
        e = cf.expected(UP, SMALL, case)
        for got in ({"hq": e["hq"].copy(), "hs": e["hs"].astype(np.float32)}, kernel_gate_up(SMALL, case)):
            v = cf.judge(UP, SMALL, case, got, e)
            assert v.passed, (case.name, v.reason)
            assert v.max_rel_deviation <= v.tolerance
    for case in small[DOWN]:
        e = cf.expected(DOWN, SMALL, case)
        for got in ({"out": e["out"].copy()}, kernel_down(SMALL, case)):
            v = cf.judge(DOWN, SMALL, case, got, e)
            assert v.passed, (case.name, v.reason)
            assert v.max_rel_deviation <= v.tolerance
    exact = case_named(small[DOWN], "exact_slots_tokens4")
    assert (
        cf.judge(DOWN, SMALL, exact, kernel_down(SMALL, exact)).counts["exact_slot_order"] == exact.rows * 256
    )


def test_gate_up_refuses_a_code_two_steps_off_a_wrong_expert_and_a_scale_off_by_four_bounds(
    small: dict[str, list[cf.Case]],
) -> None:
    case = case_named(small[UP], "random_mixed_tokens7")
    e = cf.expected(UP, SMALL, case)
    good = kernel_gate_up(SMALL, case)
    assert cf.judge(UP, SMALL, case, good, e).passed

    q = good["hq"].copy()
    i = tuple(np.argwhere((q > 0x08) & (q < 0x70))[0])
    q[i] += 2
    v = cf.judge(UP, SMALL, case, {**good, "hq": q}, e)
    assert not v.passed and "two or more steps" in v.reason

    reserved = moe.roles(SMALL, 0).reserved[0]
    v = cf.judge(UP, SMALL, case, kernel_gate_up(SMALL, case, expert={3: reserved}), e)
    assert not v.passed and "NaN" in v.reason and "scales of h" in v.reason

    hs = good["hs"].copy()
    hs[0, 0] = np.float32(e["hs"][0, 0] + 4 * e["hs_bound"][0, 0])
    v = cf.judge(UP, SMALL, case, {**good, "hs": hs}, e)
    assert not v.passed and "scales of h outside their bound" in v.reason
    hs[0, 0] = np.float32(e["hs"][0, 0] + 0.5 * e["hs_bound"][0, 0])
    assert cf.judge(UP, SMALL, case, {**good, "hs": hs}, e).passed


def test_gate_up_allows_one_step_only_near_a_midpoint(small: dict[str, list[cf.Case]]) -> None:
    case = case_named(small[UP], "uniform_tokens64")
    e = cf.expected(UP, SMALL, case)
    got = {"hq": e["hq"].copy(), "hs": e["hs"].astype(np.float32)}
    far = np.abs(np.abs(e["scaled"]) - 100) < 20  # |h/s| near 100: steps of 8, far from a midpoint
    i = tuple(np.argwhere(far & (e["hq"] < 0x7E))[0])
    got["hq"][i] += 1
    v = cf.judge(UP, SMALL, case, got, e)
    assert not v.passed and "codes of h one step off, away from an E4M3 midpoint" in v.reason
    # the same code is accepted where the exact h / s lies on the midpoint between the two codes
    mid = (ref.fp8_e4m3_decode(got["hq"][i]) + ref.fp8_e4m3_decode(e["hq"][i])) / 2
    at_mid = {**e, "scaled": e["scaled"].copy()}
    at_mid["scaled"][i] = mid
    v = cf.judge(UP, SMALL, case, got, at_mid)
    assert v.passed and v.counts["fp8_one_step_at_midpoint"] == 1, v.reason


def _wording(reason: str) -> str:
    """The first failure of a verdict with its numbers and its row label (row or pair) left out."""
    first = reason.split("; ")[0]
    return re.sub(r"\b(row|pair)\b", "AT", re.sub(r"0x[0-9a-f]+|[-+]?\d[\d.e+-]*|nan|inf", "N", first))


def test_gate_up_and_silu_mul_fp8_quant_refuse_codes_and_scales_with_one_wording(
    small: dict[str, list[cf.Case]],
) -> None:
    """Both judges check codes and scales through quant.judge_codes_and_scales: a code one step off far
    from a midpoint, and a scale one percent off, fail in each with the same message but for the row label."""
    silu_p = {"inter": 384, "group": 128}
    silu_case = next(c for c in cf.cases("silu_mul_fp8_quant", silu_p, rows_per_block=8) if c.rows == 1)
    silu_e = cf.expected("silu_mul_fp8_quant", silu_p, silu_case)
    up_case = case_named(small[UP], "uniform_tokens64")
    up_e = cf.expected(UP, SMALL, up_case)
    judges = {
        "silu": (
            "q",
            "scales",
            silu_e,
            lambda got: cf.judge("silu_mul_fp8_quant", silu_p, silu_case, got, silu_e),
        ),
        "up": ("hq", "hs", up_e, lambda got: cf.judge(UP, SMALL, up_case, got, up_e)),
    }
    reasons: dict[str, list[str]] = {}
    for name, (qk, sk, e, judge) in judges.items():
        good = {qk: e[qk].copy(), sk: e[sk].astype(np.float32)}
        assert judge(good).passed
        # a quotient within 1e-3 of a code and well inside the range: half a step from either midpoint
        sc, dec = e["scaled"], ref.fp8_e4m3_decode(e[qk])
        far = (np.abs(sc - dec) < 1e-3 * np.abs(sc)) & (np.abs(sc) > 1) & (np.abs(sc) < 400)
        code = {**good, qk: good[qk].copy()}
        code[qk][tuple(np.argwhere(far)[0])] += 1
        scale = {**good, sk: good[sk].copy()}
        scale[sk][0, 0] *= np.float32(1.01)
        reasons[name] = [judge(code).reason, judge(scale).reason]
    for silu_reason, up_reason, start in zip(
        reasons["silu"],
        reasons["up"],
        (
            "1 codes of h one step off, away from an E4M3 midpoint by more than their window (first at ",
            "1 scales of h outside their bound (first at ",
        ),
        strict=True,
    ):
        assert silu_reason.startswith(start + "row, ") and up_reason.startswith(start + "pair, "), (
            silu_reason,
            up_reason,
        )
        assert _wording(silu_reason).replace(" relative", "") == _wording(up_reason), (silu_reason, up_reason)


def test_down_refuses_a_wrong_expert_a_slot_order_swap_and_one_ulp_beyond_the_bound(
    small: dict[str, list[cf.Case]],
) -> None:
    case = case_named(small[DOWN], "exact_slots_tokens4")
    e = cf.expected(DOWN, SMALL, case)
    good = kernel_down(SMALL, case)
    assert cf.judge(DOWN, SMALL, case, good, e).passed
    swapped = kernel_down(SMALL, case, order=[1, 0])
    assert not np.array_equal(swapped["out"], good["out"])  # the swap changes bits here
    v = cf.judge(DOWN, SMALL, case, swapped, e)
    assert not v.passed and "slot-ordered fp32 fma" in v.reason

    case = case_named(small[DOWN], "signed_weights_tokens5")
    e = cf.expected(DOWN, SMALL, case)
    reserved = moe.roles(SMALL, 0).reserved[0]
    v = cf.judge(DOWN, SMALL, case, kernel_down(SMALL, case, expert={1: reserved}), e)
    assert not v.passed and "outputs outside" in v.reason

    out = e["hi"].copy()
    pos = np.argwhere((out > 0) & (out < 0x7F00))[0]
    out[tuple(pos)] += 1  # one bf16 ulp past the largest value the bound allows
    v = cf.judge(DOWN, SMALL, case, {"out": out}, e)
    assert not v.passed and "outputs outside the bf16 values the bound allows" in v.reason
    out[tuple(pos)] -= 1
    assert cf.judge(DOWN, SMALL, case, {"out": out}, e).passed


def test_the_accumulation_constant_counts_the_roundings() -> None:
    # 4 mma steps at 2^-23, the scale product and the scaled block at 2^-24, blocks - 1 additions at
    # 2^-24, one 2^-24 more for second-order terms; plus the float64 reference's own k * 2^-52
    assert moe.accumulation(16, 2048) == (4 + 0.5 + 0.5 + 7.5 + 0.5) * 2.0**-23 + 2048 * 2.0**-52
    # wgmma e4m3's partials: each of the 4 steps at 2^-13 instead
    assert (
        moe.accumulation(16, 2048, 14) == 4 * 2.0**-13 + (0.5 + 0.5 + 7.5 + 0.5) * 2.0**-23 + 2048 * 2.0**-52
    )
    with pytest.raises(ValueError, match="accumulator_bits 16"):
        moe.accumulation(16, 2048, 16)


def test_a_wgmma_candidate_is_judged_by_its_accumulation_and_only_by_it(
    small: dict[str, list[cf.Case]],
) -> None:
    """The 14-bit partials of wgmma e4m3 (every step truncated) pass the judges of that accumulation, and
    are refused by the fp32 ones in some case: the two models differ, and the candidate's says which
    holds. A family without bounds for an accumulation refuses it by name."""
    refused = 0
    for op, kernel in ((UP, kernel_gate_up), (DOWN, kernel_down)):
        for case in small[op]:
            e = cf.expected(op, SMALL, case)
            got = kernel(SMALL, case, bits=14)
            v = cf.judge(op, SMALL, case, got, e, accumulator_bits=14)
            assert v.passed, (op, case.name, v.reason)
            assert v.max_rel_deviation <= v.tolerance
            refused += not cf.judge(op, SMALL, case, got, e).passed
    assert refused > 0
    with pytest.raises(ValueError, match="no bounds for accumulator_bits 16"):
        cf.for_accumulator(UP, cf.expected(UP, SMALL, small[UP][0]), 16)


def test_a_split_k_is_judged_by_the_bounds_of_its_accumulation() -> None:
    """KSPLIT (fp8_moe_gate_up_tc, docs/ops/fp8_moe.md "Split k"): each CTA of a cluster sums its run of k
    blocks from zero and the runs' sums are then added in rank order, still blocks - 1 merges of the
    scaled blocks, which the judges' bound counts in any order. The emulated kernel split in 2 and 8 at
    hidden 1024 (8 blocks) passes the judges of its accumulation (14 bits, as the tensor cores keep, and
    fp32) in every case; its codes are not all the unsplit emulation's (the split is seen)."""
    p = {"experts": 4, "topk": 2, "hidden": 1024, "inter": 128}
    moved = 0
    for case in cf.cases(UP, p, rows_per_block=1):
        e = cf.expected(UP, p, case)
        for bits in (14, 24):
            whole = kernel_gate_up(p, case, bits=bits)
            for split in (2, 8):
                got = kernel_gate_up(p, case, bits=bits, split=split)
                v = cf.judge(UP, p, case, got, e, accumulator_bits=bits)
                assert v.passed, (case.name, bits, split, v.reason)
                moved += not np.array_equal(got["hq"], whole["hq"])
    assert moved > 0


def test_fma32_is_the_correctly_rounded_fp32_fma() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal(4000).astype(np.float32).astype(np.float64)
    b = rng.standard_normal(4000).astype(np.float32).astype(np.float64)
    c = (-a * b * (1 + rng.standard_normal(4000) * 2.0**-20)).astype(np.float32).astype(np.float64)
    want = (np.longdouble(a) * np.longdouble(b) + np.longdouble(c)).astype(np.float32)
    assert np.array_equal(moe.fma32(a, b, c), want.astype(np.float64))
    # (1 + 2^-23) + 2^-24 - 2^-70: float64 rounds it onto the fp32 midpoint, whose tie would go to the
    # even 1 + 2^-22; the exact sum is below the midpoint, so the fma gives 1 + 2^-23
    c = np.array([1.0 + 2.0**-23])
    got = moe.fma32(c, np.array([2.0**-24 * (1 - 2.0**-23)]), c)
    assert got[0] == 1.0 + 2.0**-23 and np.float32(got[0] + 0.0) != np.float32(c[0] + 2.0**-24)


# --------------------------------------------------------------------------------------------
# A Qwen3-30B-A3B contract at one token
# --------------------------------------------------------------------------------------------


def test_qwen3_30b_a3b_at_one_token() -> None:
    for op in (UP, DOWN):
        case = cf.cases(op, QWEN30B, rows_per_block=1)[0]
        assert case.name == "anchor_tokens1"
        e = cf.expected(op, QWEN30B, case)
        if op == UP:
            assert_close_rows(e["h"], straight_gate_up(QWEN30B, case), op)
            got = kernel_gate_up(QWEN30B, case)
        else:
            assert_close_rows(e["value"], straight_down(QWEN30B, case), op)
            got = kernel_down(QWEN30B, case)
        v = cf.judge(op, QWEN30B, case, got, e)
        assert v.passed, v.reason


@pytest.mark.parametrize("op", ["fp8_moe_gate_up", "fp8_moe_down"])
def test_timing_inputs_route_like_a_balanced_router_over_valid_codes(op: str) -> None:
    """certify times the MoE on its numerics' timing_inputs (netra.certify.measure.timing_inputs): inputs
    shaped and typed as the conformance cases', each token on TOPK distinct experts drawn from all of them
    (so the bytes a timed call reads are those of a real decode step), no NaN code, positive scales and
    router weights that sum to one (the H200 run of 2026-12-05 timed garbage ids before this existed)."""
    from netra.certify import conformance, measure

    p = {"experts": 16, "topk": 4, "hidden": 256, "inter": 128}
    like = conformance.cases(op, p, rows_per_block=1, large_rows=1, seed=0)[0]
    got = measure.timing_inputs(like, 64, 3, op, p)
    assert set(got) == set(like.inputs)
    for name, a in like.inputs.items():
        assert got[name].dtype == a.dtype and got[name].shape[1:] == a.shape[1:], name
    ids = got["ids"]
    assert ids.shape == (64, 4) and all(len(set(r)) == 4 for r in ids.tolist())
    assert ids.min() >= 0 and ids.max() < 16 and len(set(ids.reshape(-1).tolist())) == 16
    for name, a in got.items():
        if a.dtype == np.uint8:
            assert not ((a & 0x7F) == 0x7F).any(), f"{name} holds an FP8 NaN code"
        elif name != "ids" and name != "weights":
            assert (a > 0).all() and np.isfinite(a).all(), name
    if "weights" in got:
        assert np.allclose(got["weights"].sum(axis=1), 1.0, atol=1e-6) and (got["weights"] > 0).all()
    again = measure.timing_inputs(like, 64, 3, op, p)
    assert all(np.array_equal(got[k], again[k]) for k in got), "timing inputs must be reproducible"


@pytest.mark.parametrize("op", ["fp8_moe_gate_up", "fp8_moe_down"])
def test_timing_bytes_count_the_experts_the_timing_inputs_hit(op: str) -> None:
    """certify divides a timing by the bytes the timed call must read: each expert its ids route to once,
    not the record's bound min(E, tokens x k) (which put the 2026-12-05 certify's figure at 16 tokens above
    what HBM gives). One token on k experts reads exactly the bound; 16 uniform tokens fewer than it."""
    from netra.certify import conformance, measure
    from netra.core.ops import FAMILIES

    p = {"experts": 128, "topk": 8, "hidden": 256, "inter": 128}
    like = conformance.cases(op, p, rows_per_block=1, large_rows=1, seed=0)[0]
    for tokens in (1, 16):
        got = measure.timing_inputs(like, tokens, 3, op, p)
        hit = len(set(got["ids"].reshape(-1).tolist()))
        moved = conformance.bytes_moved(op, p, tokens, got)
        assert moved == FAMILIES[op].bytes_moved(p, tokens, {"hit": hit})
        bound = conformance.bytes_moved(op, p, tokens)
        assert (moved == bound) if tokens == 1 else (hit < 16 * 8 and moved < bound), (tokens, hit)
    # an id outside [0, E) (an expert another rank holds) is read by no one
    ids = np.array(got["ids"])
    ids[:, 0] = p["experts"] + 5
    ids[0, 1] = -1
    inside = {int(e) for e in ids.reshape(-1) if 0 <= e < p["experts"]}
    assert conformance.numerics(op).derived(p, {**got, "ids": ids}) == {"hit": len(inside)}
