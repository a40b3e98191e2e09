"""netra.torch without a GPU (CI): the composites against the float64 reference, the fake implementations
under FakeTensorMode and torch.compile, strict mode, stats and logging, input checks, and the dispatch
and launch machinery with the GPU parts replaced by recorders (the real launches are in
tests/test_gpu_torch_ops.py, on the H200).
"""

from __future__ import annotations

import ctypes
import logging
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
pytestmark = pytest.mark.usefixtures("torch_state")

from tensor_bits import bf16, bits16, codes  # noqa: E402

import netra.torch as nt  # noqa: E402
from netra.certify import conformance as cf  # noqa: E402
from netra.certify import reference as ref  # noqa: E402
from netra.core.ops import FAMILIES  # noqa: E402
from netra.errors import AlteredFileError, ContractError, CudaError, KernargError, StrictModeError  # noqa: E402
from netra.loaders import cuda as cuda_loader  # noqa: E402  (the loader netra.torch reaches through Vendor.open_loader)
from netra.loaders import launch as loader_launch  # noqa: E402
from netra.runtime.tables import Dispatch  # noqa: E402
from netra.torch import composite, dispatch, ops  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LOG = "netra.torch"


# -- conversions between the reference's bit patterns and torch ------------------------------------------


def run_op(op: str, params: dict[str, int], inputs: dict[str, np.ndarray], scalars: dict[str, float]) -> dict:
    """One op through the public API on CPU tensors, outputs in the reference's formats."""
    if op == "rmsnorm":
        y = nt.rmsnorm(bf16(inputs["x"]), bf16(inputs["w"]), scalars["eps"], params["weight_offset"])
        return {"y": bits16(y)}
    if op in ("fp8_group_quant", "silu_mul_fp8_quant"):
        fn = nt.fp8_group_quant if op == "fp8_group_quant" else nt.silu_mul_fp8_quant
        q, s = fn(bf16(inputs["x"]), params["group"])
        return {"q": codes(q), "scales": s.numpy()}
    ids, w = nt.moe_topk_softmax(bf16(inputs["logits"]), params["topk"])
    return {"ids": ids.numpy(), "weights": w.numpy()}


# -- the composites equal the reference --------------------------------------------------------------------

CONTRACTS = [
    ("rmsnorm", {"hidden": 128, "weight_offset": 0}),
    ("rmsnorm", {"hidden": 2048, "weight_offset": 0}),
    ("rmsnorm", {"hidden": 3584, "weight_offset": 1}),
    ("rmsnorm", {"hidden": 256, "weight_offset": 1}),
    ("rmsnorm", {"hidden": 6144, "weight_offset": 0}),  # not served: the composite alone
    ("fp8_group_quant", {"hidden": 2048, "group": 128}),
    ("fp8_group_quant", {"hidden": 3584, "group": 128}),
    ("fp8_group_quant", {"hidden": 384, "group": 128}),
    ("silu_mul_fp8_quant", {"inter": 768, "group": 128}),
    ("silu_mul_fp8_quant", {"inter": 1536, "group": 128}),
    ("silu_mul_fp8_quant", {"inter": 256, "group": 128}),
    ("moe_topk_softmax", {"experts": 128, "topk": 8}),
    ("moe_topk_softmax", {"experts": 64, "topk": 4}),
    ("moe_topk_softmax", {"experts": 256, "topk": 2}),
]


@pytest.mark.parametrize(
    ("op", "params"), CONTRACTS, ids=[f"{o}-{'-'.join(map(str, p.values()))}" for o, p in CONTRACTS]
)
def test_the_composite_passes_the_conformance_judge(op: str, params: dict[str, int]) -> None:
    """Every conformance vector (1, 3, 9 and 64 rows; scales 1e-3..1e3; zeros; huge values; FP8
    midpoints and saturation; tied logits), judged exactly as certification judges a kernel."""
    for case in cf.cases(op, params, rows_per_block=4, large_rows=64):
        got = run_op(op, params, case.inputs, case.scalars)
        v = cf.judge(op, params, case, got)
        assert v.passed, f"{op} {params} {case.name}: {v.reason}"


def test_leading_dimensions_flatten_into_rows() -> None:
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((2, 3, 5, 256), dtype=np.float32)).bfloat16()
    w = torch.from_numpy(rng.standard_normal(256, dtype=np.float32)).bfloat16()
    flat = x.reshape(-1, 256)
    y = nt.rmsnorm(x, w, 1e-6)
    assert y.shape == x.shape and torch.equal(y.reshape(-1, 256), nt.rmsnorm(flat, w, 1e-6))
    for fn in (nt.fp8_group_quant, nt.silu_mul_fp8_quant):
        q, s = fn(x)
        qf, sf = fn(flat)
        assert q.shape[:-1] == x.shape[:-1] and s.shape[:-1] == x.shape[:-1]
        assert torch.equal(q.reshape(qf.shape).view(torch.uint8), qf.view(torch.uint8))
        assert torch.equal(s.reshape(sf.shape), sf)
    ids, wts = nt.moe_topk_softmax(x, 8)
    assert ids.shape == (2, 3, 5, 8) and wts.shape == (2, 3, 5, 8)
    r = ref.moe_topk_softmax(bits16(x), 8)
    assert np.array_equal(ids.numpy(), r.ids)
    assert ref.relative_max_error(wts.numpy(), r.weights) <= cf.TOLERANCES["moe_topk_softmax"]["weights"]


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 1e-3, 0.1, 3.0])
def test_rmsnorm_receives_eps_as_the_kernels_do(eps: float) -> None:
    """eps is given as a Python float; the composite uses its fp32 value, like the kernel argument."""
    rng = np.random.default_rng(2)
    x = cf.bits_f32(rng.standard_normal((33, 512), dtype=np.float32) * np.float32(1e-2))
    w = cf.bits_f32(rng.standard_normal(512, dtype=np.float32))
    case = cf.Case("eps", 33, {"x": x, "w": w}, {"eps": composite.f32(eps)})
    params = {"hidden": 512, "weight_offset": 0}
    got = {"y": bits16(nt.rmsnorm(bf16(x), bf16(w), eps))}
    v = cf.judge("rmsnorm", params, case, got)
    assert v.passed, v.reason


def test_weight_offset_1_is_gemmas_x_times_1_plus_w() -> None:
    rng = np.random.default_rng(3)
    x = bf16(cf.bits_f32(rng.standard_normal((4, 3584), dtype=np.float32)))
    w = bf16(cf.bits_f32(rng.standard_normal(3584, dtype=np.float32) * np.float32(0.3)))
    y1 = nt.rmsnorm(x, w, 1e-6, 1)
    exact = ref.rmsnorm_bf16(bits16(x), bits16(w), composite.f32(1e-6), 1.0)
    assert np.mean(bits16(y1) == exact) > 0.999
    assert not torch.equal(y1, nt.rmsnorm(x, w, 1e-6, 0))


def test_router_ties_go_to_the_lower_expert_id_and_zeros_tie() -> None:
    e = 128
    logits = np.full((4, e), ref.f64_to_bf16_rne(-1.0), dtype=np.uint16)
    logits[0] = ref.f64_to_bf16_rne(0.5)  # all equal: ids 0..7, equal weights
    logits[1, [90, 7, 33]] = ref.f64_to_bf16_rne(2.0)  # a tie at the top
    logits[2, 9] = 0x8000  # -0.0 at the lower id, +0.0 at the higher: equal, lower id first
    logits[2, 4] = 0x0000
    logits[3, 3] = 0x0000
    logits[3, 1] = 0x8000
    ids, wts = nt.moe_topk_softmax(bf16(logits), 8)
    r = ref.moe_topk_softmax(logits, 8)
    assert np.array_equal(ids.numpy(), r.ids)
    assert list(ids[0]) == list(range(8)) and torch.allclose(wts[0], torch.full((8,), 0.125))
    assert list(ids[1][:3]) == [7, 33, 90]
    assert list(ids[2][:2]) == [4, 9] and list(ids[3][:2]) == [1, 3]
    assert ref.relative_max_error(wts.numpy(), r.weights) <= cf.TOLERANCES["moe_topk_softmax"]["weights"]


def test_fp8_rounding_midpoints_round_to_even_and_saturate_at_448() -> None:
    """With amax = 448 the scale is exactly 1: every x/s is exact, so the codes must equal the
    reference bit for bit (ties to even); the amax element is the largest finite code; no NaN code."""
    values = ref.fp8_e4m3_decode(np.arange(0x7F, dtype=np.uint8))
    mids = (values[:-1] + values[1:]) / 2
    row = np.concatenate([[448.0], mids, [0.0]])  # 1 + 126 + 1 = one group of 128
    row = np.concatenate([row, -row])  # two groups, one negated (sign survives)
    x = ref.f64_to_bf16_rne(np.stack([row, row * 2.0**-20]))
    assert np.array_equal(ref.bf16_to_f64(x)[0], row)  # midpoints of E4M3 are bf16 values
    q, s = nt.fp8_group_quant(bf16(x))
    r = ref.fp8_group_quant(x)
    assert np.array_equal(codes(q), r.q)
    assert np.array_equal(s.numpy().astype(np.float64), r.scales)  # exact: powers of two
    assert codes(q)[0, 0] == 0x7E and codes(q)[0, 128] == 0xFE
    # saturation: the rounded quotient would exceed 448 without the clamp
    big = ref.f64_to_bf16_rne(np.array([[448.0 * 1.0078125] + [449.0] * 127]))
    q2, _ = nt.fp8_group_quant(bf16(big))
    assert set(codes(q2)[0]) <= {0x7E, 0x7D, 0x7C}
    assert not np.any((codes(q2) & 0x7F) == 0x7F)


def test_fp8_zeros_keep_their_sign_and_get_the_floor_scale() -> None:
    x = np.zeros((2, 128), dtype=np.uint16)
    x[1] = 0x8000
    q, s = nt.fp8_group_quant(bf16(x))
    assert set(codes(q)[0]) == {0x00} and set(codes(q)[1]) == {0x80}
    assert s[0, 0].item() == np.float32(np.float32(1e-10) / np.float32(448.0))


def test_silu_mul_keeps_h_in_fp32() -> None:
    """Rounding h to bf16 before quantizing (a non-conforming shortcut) fails the judge on the same
    vectors the composite passes: the check is sensitive to it."""
    params = {"inter": 768, "group": 128}
    case = next(
        c for c in cf.cases("silu_mul_fp8_quant", params, rows_per_block=4, large_rows=64) if c.rows == 64
    )
    got = run_op("silu_mul_fp8_quant", params, case.inputs, case.scalars)
    assert cf.judge("silu_mul_fp8_quant", params, case, got).passed
    xf = bf16(case.inputs["x"]).float()
    h = (torch.nn.functional.silu(xf[:, :768]) * xf[:, 768:]).bfloat16().float()
    q, s = composite._quantize(h, 128)
    bad = cf.judge("silu_mul_fp8_quant", params, case, {"q": codes(q), "scales": s.numpy()})
    assert not bad.passed


def test_other_float_dtypes_run_the_composite_with_the_same_semantics() -> None:
    rng = np.random.default_rng(4)
    x32 = torch.from_numpy(rng.standard_normal((3, 256), dtype=np.float32))
    w32 = torch.from_numpy(rng.standard_normal(256, dtype=np.float32))
    y = nt.rmsnorm(x32.half(), w32, 1e-6)
    assert y.dtype == torch.float16
    exact = (
        x32.half().double()
        / torch.sqrt((x32.half().double() ** 2).mean(-1, keepdim=True) + 1e-6)
        * w32.double()
    )
    assert torch.allclose(y.double(), exact, rtol=2e-3, atol=1e-3)
    q, s = nt.fp8_group_quant(x32)
    assert q.dtype == torch.float8_e4m3fn and s.dtype == torch.float32
    ids, wts = nt.moe_topk_softmax(x32, 4)
    assert ids.dtype == torch.int32 and wts.dtype == torch.float32
    assert torch.equal(ids.long(), torch.sort(x32, dim=-1, descending=True, stable=True).indices[:, :4])


def test_outputs_are_contiguous_for_strided_inputs() -> None:
    # seed 104: rows whose fp32 sum of squares torch reduces to other bits over a strided row than over a
    # contiguous one (2 of the first 300 seeds): the composite must give the same bits whatever the strides
    gen = torch.Generator().manual_seed(104)
    x = torch.randn(256, 6, generator=gen).bfloat16().t()  # [6, 256], not contiguous
    w = torch.randn(256, generator=gen).bfloat16()
    y = nt.rmsnorm(x, w, 1e-6)
    assert y.is_contiguous() and torch.equal(y, nt.rmsnorm(x.contiguous(), w, 1e-6))
    for out in (*nt.fp8_group_quant(x), *nt.silu_mul_fp8_quant(x), *nt.moe_topk_softmax(x, 8)):
        assert out.is_contiguous()


# -- fake implementations, torch.compile, opcheck -----------------------------------------------------------


def _fake_cases() -> list[tuple[Any, tuple, list[tuple[tuple[int, ...], Any]]]]:
    bf = torch.bfloat16
    return [
        (lambda x, w: nt.rmsnorm(x, w, 1e-6), ((2, 3, 4096), (4096,)), [((2, 3, 4096), bf)]),
        (lambda x, w: nt.rmsnorm(x, w, 1e-6, 1), ((7, 3584), (3584,)), [((7, 3584), bf)]),
        (
            lambda x: nt.fp8_group_quant(x),
            ((5, 2048),),
            [((5, 2048), torch.float8_e4m3fn), ((5, 16), torch.float32)],
        ),
        (
            lambda x: nt.silu_mul_fp8_quant(x),
            ((4, 2, 1536),),
            [((4, 2, 768), torch.float8_e4m3fn), ((4, 2, 6), torch.float32)],
        ),
        (lambda x: nt.moe_topk_softmax(x, 8), ((9, 128),), [((9, 8), torch.int32), ((9, 8), torch.float32)]),
    ]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_fake_implementations_give_shapes_and_dtypes_under_fake_tensor_mode(device: str) -> None:
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    for fn, shapes, want in _fake_cases():
        with FakeTensorMode():
            args = [torch.empty(s, dtype=torch.bfloat16, device=device) for s in shapes]
            out = fn(*args)
        out = out if isinstance(out, tuple) else (out,)
        assert [(tuple(o.shape), o.dtype) for o in out] == want
        assert all(isinstance(o, FakeTensor) and o.device.type == device and o.is_contiguous() for o in out)
    assert nt.stats() == {}  # nothing ran


def test_fake_implementations_check_their_inputs() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(), pytest.raises(ContractError, match="not a multiple of the group size 128"):
        nt.fp8_group_quant(torch.empty(3, 200, dtype=torch.bfloat16))


def _block(x: torch.Tensor, w: torch.Tensor, w_gate_up: torch.Tensor, router: torch.Tensor) -> tuple:
    h = nt.rmsnorm(x, w, 1e-6)
    q, s = nt.fp8_group_quant(h)
    deq = (q.float().unflatten(-1, (-1, 128)) * s.unsqueeze(-1)).flatten(-2).to(torch.bfloat16)
    q2, s2 = nt.silu_mul_fp8_quant(deq @ w_gate_up)
    ids, wts = nt.moe_topk_softmax(h @ router, 8)
    return h, q, s, q2, s2, ids, wts


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype == torch.float8_e4m3fn:
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_torch_compile_traces_the_ops_as_single_nodes_and_matches_eager() -> None:
    from torch._dynamo.backends.registry import lookup_backend

    seen: list[Any] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        seen.extend(n.target for n in gm.graph.nodes if n.op == "call_function")
        return lookup_backend("aot_eager")(gm, example_inputs)

    torch._dynamo.reset()
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 8, 512, generator=g).bfloat16()
    w = torch.randn(512, generator=g).bfloat16()
    wgu = (torch.randn(512, 512, generator=g) * 0.05).bfloat16()
    router = (torch.randn(512, 128, generator=g) * 0.05).bfloat16()
    eager = _block(x, w, wgu, router)
    compiled = torch.compile(_block, backend=backend, fullgraph=True)(x, w, wgu, router)
    assert all(_same(a, b) for a, b in zip(eager, compiled, strict=True))
    netra_nodes = [t for t in seen if str(t).startswith("netra.")]
    assert sorted(map(str, netra_nodes)) == [
        "netra.fp8_group_quant.default",
        "netra.moe_topk_softmax.default",
        "netra.rmsnorm.default",
        "netra.silu_mul_fp8_quant.default",
    ]
    # the compiled calls ran the registered implementation: counted like eager ones
    assert all(v == {"device": 2} for v in nt.stats().values())


def test_aot_eager_fullgraph_outputs() -> None:
    torch._dynamo.reset()
    x = torch.randn(3, 1536).bfloat16()
    fn = torch.compile(lambda t: nt.silu_mul_fp8_quant(t), backend="aot_eager", fullgraph=True)
    q, s = fn(x)
    assert (q.dtype, tuple(q.shape), s.dtype, tuple(s.shape)) == (
        torch.float8_e4m3fn,
        (3, 768),
        torch.float32,
        (3, 6),
    )


@pytest.mark.parametrize("name", ["rmsnorm", "fp8_group_quant", "silu_mul_fp8_quant", "moe_topk_softmax"])
def test_opcheck(name: str) -> None:
    x = torch.randn(4, 512).bfloat16()
    args = {
        "rmsnorm": (x, torch.randn(512).bfloat16(), 1e-6, 0),
        "fp8_group_quant": (x, 128),
        "silu_mul_fp8_quant": (x, 128),
        "moe_topk_softmax": (x, 8),
    }[name]
    result = torch.library.opcheck(getattr(torch.ops.netra, name).default, args)
    assert set(result.values()) == {"SUCCESS"}, result


def test_eager_calls_skip_the_dispatcher_only_when_nothing_else_is_active() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    assert ops._eager()
    with FakeTensorMode():
        assert not ops._eager()
    with torch.device("cpu"):  # a TorchFunctionMode
        assert not ops._eager()
    x, w = torch.randn(2, 256).bfloat16(), torch.randn(256).bfloat16()
    assert torch.equal(nt.rmsnorm(x, w, 1e-6), torch.ops.netra.rmsnorm(x, w, 1e-6))
    p = torch.nn.Parameter(w.clone())
    with torch.no_grad():
        assert torch.equal(nt.rmsnorm(x, p, 1e-6), nt.rmsnorm(x, w, 1e-6))


# -- strict mode, stats, logging -------------------------------------------------------------------------------


def test_strict_mode_raises_naming_the_contract_and_the_reason() -> None:
    x = torch.randn(3, 256).bfloat16()
    with nt.strict():
        assert nt.is_strict()
        with pytest.raises(StrictModeError) as e:
            nt.fp8_group_quant(x)
    err = e.value
    assert err.contract == "fp8_group_quant(hidden=256,group=128)" and err.code == "device"
    assert "fp8_group_quant(hidden=256,group=128)" in str(err) and "cpu tensor" in str(err)
    assert "\n" not in str(err)
    assert not nt.is_strict()
    assert nt.stats() == {}  # a refused call ran nothing
    nt.fp8_group_quant(x)  # outside strict mode: the composite
    assert nt.stats() == {"fp8_group_quant(hidden=256,group=128)": {"device": 1}}


def test_strict_mode_nests_and_set_strict_returns_the_previous_setting() -> None:
    assert nt.set_strict(True) is False
    with nt.strict(False):
        nt.rmsnorm(torch.randn(2, 128).bfloat16(), torch.ones(128).bfloat16(), 1e-6)
        assert not nt.is_strict()
    assert nt.is_strict()
    with pytest.raises(StrictModeError, match=r"rmsnorm\(hidden=128,weight_offset=0\)"):
        torch.ops.netra.rmsnorm(torch.randn(2, 128).bfloat16(), torch.ones(128).bfloat16(), 1e-6)
    assert nt.set_strict(False) is True


def test_stats_count_per_contract_and_reason() -> None:
    x256, x512 = torch.randn(2, 256).bfloat16(), torch.randn(5, 512).bfloat16()
    for _ in range(3):
        nt.rmsnorm(x256, torch.ones(256).bfloat16(), 1e-6)
    nt.rmsnorm(x512, torch.ones(512).bfloat16(), 1e-6)
    nt.rmsnorm(x512, torch.ones(512).bfloat16(), 1e-6, 1)
    nt.fp8_group_quant(x256)
    torch.ops.netra.fp8_group_quant(x256)  # the dispatcher path counts too
    nt.moe_topk_softmax(x256, 2)
    assert nt.stats() == {
        "rmsnorm(hidden=256,weight_offset=0)": {"device": 3},
        "rmsnorm(hidden=512,weight_offset=0)": {"device": 1},
        "rmsnorm(hidden=512,weight_offset=1)": {"device": 1},
        "fp8_group_quant(hidden=256,group=128)": {"device": 2},
        "moe_topk_softmax(experts=256,topk=2)": {"device": 1},
    }
    reasons = nt.fallback_reasons()
    assert reasons["moe_topk_softmax(experts=256,topk=2)"] == {
        "device": ["logits is a cpu tensor; Netra's kernels run on CUDA devices"]
    }
    nt.reset_stats()
    assert nt.stats() == {} and nt.fallback_reasons() == {}


def test_one_log_line_per_contract_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    x = torch.randn(2, 640).bfloat16()  # a width no other test uses: its line has not been logged yet
    with caplog.at_level(logging.WARNING, logger=LOG):
        for _ in range(4):
            nt.fp8_group_quant(x)
    lines = [r.getMessage() for r in caplog.records if r.name == LOG]
    assert lines == [
        "fp8_group_quant(hidden=640,group=128) runs the PyTorch composite: x is a cpu tensor; "
        "Netra's kernels run on CUDA devices (device)"
    ]


# -- bad inputs: one-line errors --------------------------------------------------------------------------------

_X = torch.randn(4, 256).bfloat16()
_W = torch.randn(256).bfloat16()
BAD = [
    ("rmsnorm int x", lambda: nt.rmsnorm(_X.to(torch.int32), _W, 1e-6), "x has dtype torch.int32"),
    ("rmsnorm 0-D x", lambda: nt.rmsnorm(_X[0, 0], _W, 1e-6), "x is a 0-D tensor"),
    ("rmsnorm 2-D w", lambda: nt.rmsnorm(_X, _W.reshape(2, 128), 1e-6), r"w has shape \[2, 128\]"),
    ("rmsnorm w length", lambda: nt.rmsnorm(_X, _W[:255], 1e-6), "w has 255 elements but x's rows have 256"),
    ("rmsnorm w not a tensor", lambda: nt.rmsnorm(_X, [1.0] * 256, 1e-6), "w must be a torch.Tensor"),
    ("rmsnorm eps", lambda: nt.rmsnorm(_X, _W, "1e-6"), "eps must be a number"),
    ("rmsnorm weight_offset", lambda: nt.rmsnorm(_X, _W, 1e-6, 1.0), "weight_offset must be an integer"),
    ("rmsnorm negative offset", lambda: nt.rmsnorm(_X, _W, 1e-6, -1), "weight_offset = -1 is below 0"),
    ("rmsnorm devices", lambda: nt.rmsnorm(_X, _W.to("meta"), 1e-6), "x is on cpu but w on meta"),
    (
        "quant group",
        lambda: nt.fp8_group_quant(torch.randn(2, 200).bfloat16()),
        "hidden 200 is not a multiple",
    ),
    ("quant group type", lambda: nt.fp8_group_quant(_X, 128.0), "group must be an integer"),
    ("quant empty rows", lambda: nt.fp8_group_quant(torch.randn(2, 0).bfloat16()), "rows of length 0"),
    ("silu odd", lambda: nt.silu_mul_fp8_quant(torch.randn(2, 257).bfloat16()), "not 2 \\* inter"),
    (
        "silu group",
        lambda: nt.silu_mul_fp8_quant(torch.randn(2, 400).bfloat16()),
        "inter 200 is not a multiple",
    ),
    ("moe topk 0", lambda: nt.moe_topk_softmax(_X, 0), "topk = 0 is below 1"),
    ("moe topk > E", lambda: nt.moe_topk_softmax(_X, 300), "topk = 300 exceeds the 256 experts"),
    ("moe bool topk", lambda: nt.moe_topk_softmax(_X, True), "topk must be an integer"),
    ("moe int logits", lambda: nt.moe_topk_softmax(_X.to(torch.int64), 8), "logits has dtype torch.int64"),
]


@pytest.mark.parametrize(("fn", "match"), [(f, m) for _, f, m in BAD], ids=[n for n, _, _ in BAD])
def test_bad_inputs_get_one_line_contract_errors(fn: Any, match: str) -> None:
    with pytest.raises(ContractError, match=match) as e:
        fn()
    assert "\n" not in str(e.value) and str(e.value).startswith("netra.torch.") and "hint:" in str(e.value)
    assert nt.stats() == {}


def test_bad_inputs_through_the_operator_and_the_fake() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with pytest.raises(ContractError, match="w has 255 elements"):
        torch.ops.netra.rmsnorm(_X, _W[:255], 1e-6)
    with FakeTensorMode(), pytest.raises(ContractError, match="eps must be a number"):
        nt.rmsnorm(torch.empty(2, 256), torch.empty(256), "x")


# -- `import netra` stays free of torch --------------------------------------------------------------------------


def test_import_netra_does_not_import_torch() -> None:
    code = (
        "import sys, netra, netra.runtime, netra.loaders.cuda, netra.loaders.launch, netra.runtime.kernarg, netra.errors\n"
        "from netra.errors import StrictModeError\n"
        "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))\n"
        "assert 'netra.torch' not in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


# -- the launch machinery, with the GPU replaced by recorders --------------------------------------------------


def _tables() -> list[tuple[str, Any]]:
    from netra.runtime import open_catalog

    out = []
    for cls in ("sm_90", "gfx950"):
        cat = open_catalog(cls)
        out += [(e.op, c) for e in cat.table.entries.values() for c in e.candidates]
    return out


def _values(op: str, rng: np.random.Generator) -> tuple:
    """Random values for the family's arguments in order: pointers (tensors, workspaces), then its
    runtime values (rows or tokens, and eps for the norms)."""
    names = dispatch.NAMES[op]
    ptr = [int(v) * 256 for v in rng.integers(1, 2**40, size=len(names))]
    scalar = {  # the family's runtime values (rows or tokens, eps), by their kernarg types
        v.name: int(rng.integers(1, 2**32)) if v.integral else float(rng.uniform(0, 1))
        for v in FAMILIES[op].launch.values
    }
    return tuple(scalar[n] if n in scalar else ptr[i] for i, n in enumerate(names))


def test_the_compiled_kernarg_packer_writes_kernel_pack_bytes_for_every_table_candidate() -> None:
    rng = np.random.default_rng(6)
    cands = _tables()
    assert len(cands) > 20
    for op, c in cands:
        names = dispatch.NAMES[op]
        st = loader_launch.packer(c.kernarg, names)
        assert st is not None, f"{c.artifact}: layout {c.kernarg}"
        for _ in range(4):
            vals = _values(op, rng)
            buf = bytearray(c.kernarg.size)
            st.pack_into(buf, 0, *vals)
            assert bytes(buf) == c.kernarg.pack(**dict(zip(names, vals, strict=True))), c.artifact


class FakeLib:
    def __init__(self, results: list[int] | None = None) -> None:
        self.calls: list[tuple] = []
        self.results = list(results or [])

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, shared, stream, params, extra) -> int:
        size = ctypes.c_size_t.from_address(extra[3]).value
        assert list(extra)[0::2] == [1, 2, None]  # BUFFER_POINTER, BUFFER_SIZE, END (0)
        data = ctypes.string_at(extra[1], size)
        self.calls.append((fn, (gx, gy, gz), (bx, by, bz), shared, stream, params, data))
        return self.results.pop(0) if self.results else 0


class FakeCuda:
    """The parts of netra.loaders.cuda.Cuda the launcher and dispatch use."""

    def __init__(self, results: list[int] | None = None) -> None:
        self.lib = FakeLib(results)
        self.loaded: list[str] = []
        self.bound: list[int] = []

    def function(self, kernel: Any) -> int:
        self.loaded.append(kernel.artifact)
        return 0xF00 + len(self.loaded)

    def check(self, rc: int, what: str) -> None:
        if rc:
            raise CudaError(f"{what}: error {rc}", "fake")

    def context(self, device: int = 0) -> int:
        self.bound.append(device)
        return 1

    def current_device(self) -> int:
        return 0

    def prepare(self, kernel: Any, names: Any, stream: Any, rebind: Any) -> Any:
        return cuda_loader.prepare(self, kernel, names, stream, rebind)


def fake_kernel(c: Any, contract: str = "k") -> Any:
    return types.SimpleNamespace(
        artifact=c.artifact, symbol=c.symbol, contract=contract, gpu_class="sm_90", loader="cuda", tactic=c.tactic,
        kernarg=c.kernarg, candidate=c, block=c.launch.block, dynamic_lds_bytes=c.launch.dynamic_lds_bytes,
        pack=c.kernarg.pack, maturity="accepted",
    )  # fmt: skip


def _sm90(key: str) -> Any:
    from netra.runtime import open_catalog

    return open_catalog("sm_90").table.entries[key]


def _sm90_lock() -> Any:
    from netra.runtime import open_catalog

    return open_catalog("sm_90").lock


def _driver(monkeypatch: pytest.MonkeyPatch, version: str | None) -> None:
    """This host's NVIDIA driver, as the vendor's reader (what `netra env` prints) would find it."""
    from netra.targets.host import Versions
    from netra.targets.nvidia import NVIDIA

    monkeypatch.setattr(NVIDIA, "versions", lambda: Versions(version, None, ("driver: stated by the test",)))
    monkeypatch.setattr(dispatch, "_drivers", {})


def test_the_launcher_packs_in_place_and_launches_with_the_tables_geometry() -> None:
    entry = _sm90("fp8_group_quant(hidden=2048,group=128)")
    for c in entry.candidates:
        cu = FakeCuda()
        launch = cuda_loader.prepare(
            cu, fake_kernel(c), dispatch.NAMES["fp8_group_quant"], lambda: 77, lambda: None
        )
        for rows in (1, 9, 8192):
            launch(rows, 0x1000, 0x2000, 0x3000, rows)
        rpb, gy, gz = c.launch.grid_axes[0][1], c.launch.grid_axes[1], c.launch.grid_axes[2]
        for rows, call in zip((1, 9, 8192), cu.lib.calls, strict=True):
            fn, grid, block, shared, stream, params, data = call
            assert grid == (-(-rows // rpb), gy, gz) == c.launch.grid(rows)
            assert block == c.launch.block and shared == c.launch.dynamic_lds_bytes and stream == 77
            assert params is None and fn == 0xF01
            assert data == c.kernarg.pack(q=0x1000, scales=0x2000, x=0x3000, rows=rows)


def test_the_launcher_rebinds_a_thread_without_a_context_and_reports_errors() -> None:
    c = _sm90("rmsnorm(hidden=4096,weight_offset=0)").candidates[0]
    names = dispatch.NAMES["rmsnorm"]
    cu = FakeCuda(results=[cuda_loader.CUDA_ERROR_INVALID_CONTEXT, 0])
    rebinds: list[int] = []
    launch = cuda_loader.prepare(cu, fake_kernel(c), names, lambda: 0, lambda: rebinds.append(1))
    launch(3, 16, 32, 48, 3, 1e-6)
    assert rebinds == [1] and len(cu.lib.calls) == 2
    cu = FakeCuda(results=[700])
    launch = cuda_loader.prepare(cu, fake_kernel(c), names, lambda: 0, lambda: None)
    with pytest.raises(CudaError, match="cuLaunchKernel"):
        launch(3, 16, 32, 48, 3, 1e-6)
    with pytest.raises(KernargError, match="rows"):
        launch(2**32, 16, 32, 48, 2**32, 1e-6)  # u32 rows: Kernel.pack's error, not struct's


def test_a_layout_in_another_order_is_packed_by_kernel_pack() -> None:
    from netra.runtime.kernarg import KernargArg, KernargLayout

    c = _sm90("moe_topk_softmax(experts=128,topk=8)").candidates[0]
    swapped = KernargLayout(
        28,
        (
            KernargArg("weights", 0, 8, "global_buffer", "f32*"),
            KernargArg("ids", 8, 8, "global_buffer", "i32*"),
            KernargArg("logits", 16, 8, "global_buffer", "bf16*"),
            KernargArg("rows", 24, 4, "by_value", "u32"),
        ),
    )
    assert loader_launch.packer(swapped, dispatch.NAMES["moe_topk_softmax"]) is None
    k = fake_kernel(c)
    k.kernarg, k.pack = swapped, swapped.pack
    cu = FakeCuda()
    cuda_loader.prepare(cu, k, dispatch.NAMES["moe_topk_softmax"], lambda: 0, lambda: None)(5, 1, 2, 3, 5)
    assert cu.lib.calls[0][-1] == swapped.pack(ids=1, weights=2, logits=3, rows=5)
    wrong = KernargLayout(8, (KernargArg("y", 0, 8, "global_buffer", "bf16*"),))
    k.kernarg = wrong
    with pytest.raises(KernargError, match="takes the arguments y"):
        cuda_loader.prepare(cu, k, dispatch.NAMES["moe_topk_softmax"], lambda: 0, lambda: None)


# -- the dispatch hot path, with CPU tensors standing in for CUDA ones ----------------------------------------


@pytest.fixture
def as_cuda(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make dispatch treat CPU tensors as CUDA tensors (plans made here are forgotten afterwards)."""
    monkeypatch.setattr(dispatch, "_device_route", lambda key, tensors: None)
    saved = [(t, dict(t)) for t in dispatch._TABLES]
    for t, _ in saved:
        t.clear()
    yield
    for t, old in saved:
        t.clear()
        t.update(old)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, rows: int, *vals: Any) -> None:
        self.calls.append((rows, *vals))


def test_the_hot_path_allocates_outputs_launches_and_counts(
    as_cuda: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder()
    monkeypatch.setattr(
        dispatch, "kernels", lambda index, key, op: dispatch.Served(((dispatch._ALL_ROWS, None),), (rec,))
    )
    x = torch.randn(2, 3, 2048).bfloat16()
    w = torch.randn(2048).bfloat16()
    y = nt.rmsnorm(x, w, 1e-5)
    assert y.shape == x.shape and y.dtype == torch.bfloat16 and y.is_contiguous()
    assert rec.calls == [(6, y.data_ptr(), x.data_ptr(), w.data_ptr(), 6, 1e-5)]
    q, s = nt.fp8_group_quant(x)
    assert (q.dtype, q.shape, s.dtype, s.shape) == (torch.float8_e4m3fn, x.shape, torch.float32, (2, 3, 16))
    assert rec.calls[-1] == (6, q.data_ptr(), s.data_ptr(), x.data_ptr(), 6)
    q, s = nt.silu_mul_fp8_quant(x)
    assert (q.shape, s.shape) == ((2, 3, 1024), (2, 3, 8))
    ids, wts = nt.moe_topk_softmax(x[..., :128].contiguous(), 8)
    assert (ids.dtype, ids.shape, wts.dtype, wts.shape) == (torch.int32, (2, 3, 8), torch.float32, (2, 3, 8))
    empty = nt.rmsnorm(torch.empty(0, 2048, dtype=torch.bfloat16), w, 1e-6)  # zero rows: no launch
    assert empty.shape == (0, 2048) and len(rec.calls) == 4
    assert nt.stats() == {
        "rmsnorm(hidden=2048,weight_offset=0)": {"certified": 2},
        "fp8_group_quant(hidden=2048,group=128)": {"certified": 1},
        "silu_mul_fp8_quant(inter=1024,group=128)": {"certified": 1},
        "moe_topk_softmax(experts=128,topk=8)": {"certified": 1},
    }
    with nt.strict():  # certified calls pass strict mode
        nt.rmsnorm(x, w, 1e-5)


def test_strided_misaligned_and_other_dtype_inputs_take_the_composite(
    as_cuda: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder()
    monkeypatch.setattr(
        dispatch, "kernels", lambda index, key, op: dispatch.Served(((dispatch._ALL_ROWS, None),), (rec,))
    )
    w = torch.randn(256).bfloat16()
    base = torch.randn(4 * 256 + 8).bfloat16()
    strided = torch.randn(256, 4).bfloat16().t()
    misaligned = base[1 : 1 + 4 * 256].view(4, 256)  # contiguous, 2 bytes past a 16-byte boundary
    assert misaligned.is_contiguous() and misaligned.data_ptr() % 16
    y = nt.rmsnorm(strided, w, 1e-6)
    assert torch.equal(y, composite.rmsnorm(strided.contiguous(), w, composite.f32(1e-6), 0))
    nt.rmsnorm(misaligned, w, 1e-6)
    nt.rmsnorm(strided.contiguous().half(), w, 1e-6)
    nt.fp8_group_quant(strided)
    assert rec.calls == []
    key = "rmsnorm(hidden=256,weight_offset=0)"
    assert nt.stats() == {
        key: {"layout": 1, "alignment": 1, "dtype": 1},
        "fp8_group_quant(hidden=256,group=128)": {"layout": 1},
    }
    reasons = nt.fallback_reasons()[key]
    assert reasons["layout"] == [
        "x is not row-major contiguous; the kernel reads contiguous rows (call .contiguous() to use it)"
    ]
    assert reasons["alignment"] == [
        "x does not start on a 16-byte boundary; the kernel reads its rows with 16-byte loads"
    ]
    assert reasons["dtype"] == ["x is torch.float16; the certified kernels take x, w as torch.bfloat16"]
    with nt.strict(), pytest.raises(StrictModeError, match="layout"):
        nt.rmsnorm(strided, w, 1e-6)


class FakeCatalog:
    """A catalog whose entry has a certified row-count dispatch: rows <= 16 -> one of the table's tactics,
    more rows -> another (two with different rows per block, whatever the table's tactics are today)."""

    def __init__(self, key: str) -> None:
        entry = _sm90(key)
        by_rpb = {c.launch.rows_per_block: c for c in entry.candidates}
        assert len(by_rpb) >= 2, f"{key}: the test needs two tactics with different rows per block"
        small, large = (by_rpb[r] for r in sorted(by_rpb)[:2])
        self.small, self.large = fake_kernel(small, key), fake_kernel(large, key)
        self.table = types.SimpleNamespace(
            entries={
                key: types.SimpleNamespace(
                    dispatch=(Dispatch(16, small.tactic), Dispatch(None, large.tactic))
                )
            }
        )
        self.asked: list[int | None] = []
        self.lock = _sm90_lock()  # the class's locked toolchain: what its code objects need of the driver

    def select(
        self, key: str, policy: str = "accepted", *, tactic: str | None = None, rows: int | None = None
    ) -> Any:
        self.asked.append(rows)
        if tactic is not None:  # the runtime's answer for one named tactic (set_tactics asks so)
            from netra.runtime.catalog import Fallback

            hit = [k for k in (self.small, self.large) if k.tactic == tactic]
            return (
                hit[0]
                if hit
                else Fallback("sm_90", key, "no_tactic", f"{key} has no tactic {tactic!r}", policy)
            )
        return self.large if rows is None or rows > 16 else self.small

    from netra.runtime import Catalog as _Real

    served = _Real.served  # the runtime's own rule resolution, over this catalog's select and table


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, as_cuda: Any) -> FakeCuda:
    cu = FakeCuda()
    monkeypatch.setattr(dispatch, "_loader", lambda gpu_class: cu)
    monkeypatch.setattr(dispatch, "_classes", {0: "sm_90"})
    monkeypatch.setattr(dispatch, "_kernels", {})
    monkeypatch.setattr(dispatch, "_stream_of", lambda index: lambda: 99)
    monkeypatch.setattr(torch.cuda, "device", lambda index: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # kernel_for asks before anything else
    monkeypatch.setattr(torch.version, "hip", None)  # a CUDA build of torch
    _driver(monkeypatch, "580.159.04")  # the H200 runs' driver: the sm_90 minimum is met
    return cu


def test_kernels_are_selected_once_per_rule_and_chosen_by_rows(
    fake_gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    import netra.runtime

    key = "rmsnorm(hidden=2048,weight_offset=0)"
    cat = FakeCatalog(key)
    monkeypatch.setattr(netra.runtime, "open_catalog", lambda cls: cat)
    w = torch.randn(2048).bfloat16()
    counts = (1, 16, 17, 8192, 3)
    for rows in counts:
        nt.rmsnorm(torch.randn(rows, 2048).bfloat16(), w, 1e-6)
    assert cat.asked == [None, 16, 17]  # the default, then one select per rule, at a row count it covers
    assert fake_gpu.loaded == [cat.small.artifact, cat.large.artifact]  # each module loaded once
    want = [(cat.small if r <= 16 else cat.large).candidate.launch.grid(r) for r in counts]
    assert [c[1] for c in fake_gpu.lib.calls] == want
    assert all(c[4] == 99 for c in fake_gpu.lib.calls)
    assert nt.kernel_for(key, 16, "cuda:0") is cat.small and nt.kernel_for(key, 17, "cuda:0") is cat.large
    assert nt.prepare("cuda:0", [key]) == {key: f"{cat.small.tactic} (rows <= 16), {cat.large.tactic}"}
    assert nt.stats() == {key: {"certified": 5}}
    with nt.strict():
        nt.rmsnorm(torch.randn(2, 2048).bfloat16(), w, 1e-6)


def test_batch_invariant_serves_one_tactic_for_every_row_count(
    fake_gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nt.set_batch_invariant(True): the table's first ranked tactic at every row count (a token's bits then
    do not depend on M), one module loaded; switching back restores the certified dispatch by rows."""
    import netra.runtime

    key = "rmsnorm(hidden=2048,weight_offset=0)"
    cat = FakeCatalog(key)
    monkeypatch.setattr(netra.runtime, "open_catalog", lambda cls: cat)
    w = torch.randn(2048).bfloat16()
    assert nt.kernel_for(key, 1, "cuda:0") is cat.small  # by rows first: the plan the switch must drop
    assert nt.set_batch_invariant(True) is False and nt.batch_invariant()
    try:
        counts = (1, 16, 8192)
        for rows in counts:
            nt.rmsnorm(torch.randn(rows, 2048).bfloat16(), w, 1e-6)
        assert [c[1] for c in fake_gpu.lib.calls] == [cat.large.candidate.launch.grid(r) for r in counts]
        assert all(nt.kernel_for(key, r, "cuda:0") is cat.large for r in (1, 16, 17, 8192))
        assert nt.prepare("cuda:0", [key]) == {key: cat.large.tactic}
    finally:
        assert nt.set_batch_invariant(False) is True
    assert nt.kernel_for(key, 1, "cuda:0") is cat.small and nt.kernel_for(key, 17, "cuda:0") is cat.large
    with pytest.raises(ContractError, match="set_batch_invariant takes True or False"):
        nt.set_batch_invariant(1)  # type: ignore[arg-type]


def test_a_class_without_a_table_and_an_uncertified_width_fall_back(
    fake_gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dispatch, "_classes", {0: "sm_80"})
    x = torch.randn(2, 4096).bfloat16()
    nt.rmsnorm(x, torch.ones(4096).bfloat16(), 1e-6)
    rt = nt.kernel_for("rmsnorm(hidden=4096,weight_offset=0)", 1, "cuda:0")
    assert not rt and rt.code == "no_table" and rt.reason.startswith("no certified table for sm_80 (cuda:0)")
    monkeypatch.setattr(dispatch, "_classes", {0: "sm_90"})
    nt.rmsnorm(torch.randn(2, 6144).bfloat16(), torch.ones(6144).bfloat16(), 1e-6)  # the real sm_90 table
    st = nt.stats()
    assert st == {
        "rmsnorm(hidden=4096,weight_offset=0)": {"no_table": 1},
        "rmsnorm(hidden=6144,weight_offset=0)": {"no_entry": 1},
    }
    assert (
        "not in the certified sm_90 table"
        in nt.fallback_reasons()["rmsnorm(hidden=6144,weight_offset=0)"]["no_entry"][0]
    )
    assert fake_gpu.lib.calls == []


def test_a_driver_below_the_class_minimum_is_the_driver_fallback_before_any_module_load(
    fake_gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30: the driver is read (as `netra env` reads it) and held to the minimum of the class's locked
    toolchain before the first module load; a driver below it is the counted `driver` fallback (the
    composite runs), named with the driver found, the minimum and the fix, and refused in strict mode.
    Before, the module load itself failed with a CudaError."""
    import netra.runtime
    from netra import targets

    key = "rmsnorm(hidden=2048,weight_offset=0)"
    cat = FakeCatalog(key)
    monkeypatch.setattr(netra.runtime, "open_catalog", lambda cls: cat)
    _driver(monkeypatch, "535.104.05")
    need = targets.get("sm_90").driver_need(cat.lock.toolchains["sm_90"])
    assert need.minimum == "580"  # nvcc 13's cubins (the locked toolchain)
    x, w = torch.randn(3, 2048).bfloat16(), torch.randn(2048).bfloat16()
    with caplog.at_level(logging.WARNING, logger=LOG):
        y = nt.rmsnorm(x, w, 1e-6)
        nt.rmsnorm(x, w, 1e-6)
    assert torch.equal(y, composite.rmsnorm(x, w, composite.f32(1e-6), 0))
    assert fake_gpu.loaded == [] and fake_gpu.lib.calls == []  # no module loaded, nothing launched
    assert nt.stats() == {key: {"driver": 2}}
    (reason,) = nt.fallback_reasons()[key]["driver"]
    assert reason.startswith(
        "sm_90 code objects need NVIDIA driver >= 580, this host has 535.104.05: upgrade the NVIDIA driver "
        "(the minimum: cubins of nvcc 13.0"
    ), reason
    assert [r.getMessage() for r in caplog.records] == [
        f"{key} runs the PyTorch composite: {reason} (driver)"
    ]
    rt = nt.kernel_for(key, 1, "cuda:0")
    assert not rt and (rt.code, rt.reason) == ("driver", reason)
    assert nt.prepare("cuda:0", [key]) == {key: f"fallback driver: {reason}"}
    with nt.strict(), pytest.raises(StrictModeError) as e:
        nt.rmsnorm(x, w, 1e-6)
    assert "\n" not in str(e.value) and e.value.code == "driver" and "535.104.05" in str(e.value)
    # A driver that meets the minimum, or one that cannot be read (the load reports what fails), serves.
    for found in ("580.65.06", None):
        monkeypatch.setattr(dispatch, "_kernels", {})
        dispatch._rms.clear()
        _driver(monkeypatch, found)
        nt.rmsnorm(x, w, 1e-6)
    assert fake_gpu.loaded == [cat.small.artifact, cat.large.artifact] * 2
    assert nt.stats()[key] == {"driver": 2, "certified": 2}


def test_a_rocm_torch_is_the_platform_fallback_not_a_class_read_from_its_capability(
    fake_gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30: ROCm's torch calls an AMD GPU a `cuda` device and reports its gfx target as a compute
    capability (9.4 for gfx942); netra.torch said `no_table` for "sm_94". It is the `platform` fallback,
    saying netra.torch serves NVIDIA classes only, and no class is read from the capability."""
    monkeypatch.setattr(torch.version, "hip", "7.0.51831")
    monkeypatch.setattr(dispatch, "_classes", {})
    asked: list[int] = []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: asked.append(index) or (9, 4))
    key = "rmsnorm(hidden=4096,weight_offset=0)"
    x, w = torch.randn(2, 4096).bfloat16(), torch.ones(4096).bfloat16()
    nt.rmsnorm(x, w, 1e-6)
    (reason,) = nt.fallback_reasons()[key]["platform"]
    assert reason == (
        f"this torch {torch.__version__} is built for HIP 7.0.51831, not CUDA: netra.torch serves sm_100, sm_90 "
        "only today; gfx950 through HIP is not wired into netra.torch (netra.runtime and netra.loaders.hip "
        "serve it)"
    )
    rt = nt.kernel_for(key, 1, "cuda:0")
    assert not rt and (rt.code, rt.reason) == ("platform", reason)
    assert nt.prepare("cuda:0") == {"*": f"fallback platform: {reason}"}
    assert nt.prepare("cuda:0", [key]) == {key: f"fallback platform: {reason}"}
    assert asked == [] and fake_gpu.loaded == []
    assert nt.stats() == {key: {"platform": 1}}
    with pytest.raises(ContractError, match="not a CUDA device"):  # a wrong argument still raises
        nt.prepare("cpu")


def test_integrity_errors_propagate_and_are_never_cached(
    fake_gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    import netra.runtime

    def broken(cls: str) -> Any:
        raise AlteredFileError(
            "tables/sm_90.json: the certified table of GPU class sm_90 is altered", "reinstall"
        )

    monkeypatch.setattr(netra.runtime, "open_catalog", broken)
    x, w = torch.randn(2, 4096).bfloat16(), torch.ones(4096).bfloat16()
    for _ in range(2):
        with pytest.raises(AlteredFileError, match="altered"):
            nt.rmsnorm(x, w, 1e-6)
    assert nt.stats() == {}


def test_a_first_certified_call_inside_graph_capture_is_refused(
    fake_gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    import netra.runtime

    cat = FakeCatalog("fp8_group_quant(hidden=4096,group=128)")
    monkeypatch.setattr(netra.runtime, "open_catalog", lambda cls: cat)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(CudaError, match="inside a CUDA graph capture"):
        nt.fp8_group_quant(torch.randn(2, 4096).bfloat16())


def test_set_tactics_serves_exactly_the_named_tactic(
    fake_gpu: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nt.set_tactics({contract: tactic}): that candidate at every row count, above the policy and the table's
    row-count dispatch; a tactic the table lacks is the contract's `no_tactic` fallback, which strict mode
    refuses naming it; None serves by the table's dispatch again. Malformed mappings raise one line and
    change nothing."""
    import netra.runtime

    key = "rmsnorm(hidden=2048,weight_offset=0)"
    cat = FakeCatalog(key)
    monkeypatch.setattr(netra.runtime, "open_catalog", lambda cls: cat)
    w = torch.ones(2048).bfloat16()
    assert nt.kernel_for(key, 1, "cuda:0") is cat.small  # by rows first: the plan set_tactics must drop
    assert nt.set_tactics({"rmsnorm(weight_offset=0,hidden=2048)": cat.large.tactic}) == {}  # canonical key
    try:
        assert nt.tactics() == {key: cat.large.tactic}
        assert all(nt.kernel_for(key, r, "cuda:0") is cat.large for r in (1, 16, 8192))
        nt.rmsnorm(torch.randn(3, 2048).bfloat16(), w, 1e-6)
        assert [c[1] for c in fake_gpu.lib.calls] == [cat.large.candidate.launch.grid(3)]  # not the small one
        assert nt.prepare("cuda:0", [key]) == {key: cat.large.tactic}
        assert nt.set_tactics({key: "no-such"}) == {key: cat.large.tactic}
        rt = nt.kernel_for(key, 1, "cuda:0")
        assert not rt and rt.code == "no_tactic" and rt.reason.startswith("set_tactics no-such: "), rt
        with nt.strict(), pytest.raises(StrictModeError, match="no_tactic"):
            nt.rmsnorm(torch.randn(3, 2048).bfloat16(), w, 1e-6)
    finally:
        nt.set_tactics(None)
    assert nt.tactics() == {} and nt.kernel_for(key, 1, "cuda:0") is cat.small
    assert nt.kernel_for(key, 17, "cuda:0") is cat.large
    with pytest.raises(ContractError, match="set_tactics: chosen must be a dict"):
        nt.set_tactics([key])  # type: ignore[arg-type]
    with pytest.raises(ContractError, match=r"is not a netra\.torch op"):
        nt.set_tactics({"moe_align(experts=8)": "x"})
    with pytest.raises(ContractError, match=r"chosen\['rmsnorm"):
        nt.set_tactics({key: ""})
    assert nt.tactics() == {}  # a refused mapping changes nothing


def test_set_policy() -> None:
    with pytest.raises(ContractError, match="policy 'rejected'"):
        nt.set_policy("rejected")
    assert nt.set_policy("verified") == "accepted" and nt.policy() == "verified"
    assert nt.set_policy("accepted") == "verified"


# -- out=: caller-owned outputs ----------------------------------------------------------------------------------


def _outs_like(results: Any) -> tuple[torch.Tensor, ...]:
    results = results if isinstance(results, tuple) else (results,)
    return tuple(
        torch.full_like(r, 7) if r.dtype != torch.float8_e4m3fn else torch.empty_like(r) for r in results
    )


OUT_CALLS = [
    ("rmsnorm", lambda x, w, out=None: nt.rmsnorm(x, w, 1e-6, 1, out=out), (3, 2, 512)),
    ("fp8_group_quant", lambda x, w, out=None: nt.fp8_group_quant(x, out=out), (5, 512)),
    ("silu_mul_fp8_quant", lambda x, w, out=None: nt.silu_mul_fp8_quant(x, out=out), (5, 512)),
    ("moe_topk_softmax", lambda x, w, out=None: nt.moe_topk_softmax(x, 8, out=out), (4, 3, 512)),
]


@pytest.mark.parametrize(("op", "call", "shape"), OUT_CALLS, ids=[c[0] for c in OUT_CALLS])
def test_out_writes_the_callers_tensors_with_the_functional_results(op: str, call: Any, shape: tuple) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=g).bfloat16()
    w = torch.randn(512, generator=g).bfloat16()
    want = call(x, w)
    want = want if isinstance(want, tuple) else (want,)
    outs = _outs_like(want)
    got = call(x, w, outs[0] if op == "rmsnorm" else outs)
    got = got if isinstance(got, tuple) else (got,)
    assert all(a is b for a, b in zip(got, outs, strict=True))  # the caller's tensors, returned
    assert all(_same(a, b) for a, b in zip(outs, want, strict=True))
    # through the out= operators (what compiled code calls), written afresh
    fresh = _outs_like(want)
    if op == "rmsnorm":
        torch.ops.netra.rmsnorm_out(fresh[0], x, w, 1e-6, 1)
    elif op == "moe_topk_softmax":
        torch.ops.netra.moe_topk_softmax_out(*fresh, x, 8)
    else:
        getattr(torch.ops.netra, f"{op}_out")(*fresh, x, 128)
    assert all(_same(a, b) for a, b in zip(fresh, want, strict=True))
    assert list(nt.stats().values()) == [{"device": 3}]  # one contract, three composite runs


def test_out_into_strided_outputs_runs_the_composite_and_writes_them(
    as_cuda: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder()
    monkeypatch.setattr(
        dispatch, "kernels", lambda index, key, op: dispatch.Served(((dispatch._ALL_ROWS, None),), (rec,))
    )
    x, w = torch.randn(4, 256).bfloat16(), torch.randn(256).bfloat16()
    strided = torch.empty(256, 4, dtype=torch.bfloat16).t()
    base = torch.empty(4 * 256 + 8, dtype=torch.bfloat16)
    misaligned = base[1 : 1 + 4 * 256].view(4, 256)
    assert nt.rmsnorm(x, w, 1e-6, out=strided) is strided
    assert torch.equal(strided, composite.rmsnorm(x, w, composite.f32(1e-6), 0))
    nt.rmsnorm(x, w, 1e-6, out=misaligned)
    assert torch.equal(misaligned, strided)
    q, s = torch.empty(4, 256, dtype=torch.float8_e4m3fn), torch.empty(2, 4).t()  # scales strided
    nt.fp8_group_quant(x, out=(q, s))
    want_q, want_s = composite.fp8_group_quant(x, 128)
    assert _same(q, want_q) and torch.equal(s, want_s)
    assert rec.calls == []
    key = "rmsnorm(hidden=256,weight_offset=0)"
    assert nt.stats() == {
        key: {"layout": 1, "alignment": 1},
        "fp8_group_quant(hidden=256,group=128)": {"layout": 1},
    }
    assert nt.fallback_reasons()[key]["layout"] == [
        "y is not row-major contiguous; the kernel reads contiguous rows (call .contiguous() to use it)"
    ]
    assert nt.fallback_reasons()["fp8_group_quant(hidden=256,group=128)"]["layout"][0].startswith("scales ")
    with nt.strict(), pytest.raises(StrictModeError, match="alignment"):
        nt.rmsnorm(x, w, 1e-6, out=misaligned)


def test_out_on_the_hot_path_launches_into_the_callers_buffers(
    as_cuda: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder()
    monkeypatch.setattr(
        dispatch, "kernels", lambda index, key, op: dispatch.Served(((dispatch._ALL_ROWS, None),), (rec,))
    )
    x, w = torch.randn(2, 3, 2048).bfloat16(), torch.randn(2048).bfloat16()
    y = torch.empty_like(x)
    assert nt.rmsnorm(x, w, 1e-5, out=y) is y
    assert rec.calls == [(6, y.data_ptr(), x.data_ptr(), w.data_ptr(), 6, 1e-5)]
    q, s = torch.empty(2, 3, 1024, dtype=torch.float8_e4m3fn), torch.empty(2, 3, 8)
    assert nt.silu_mul_fp8_quant(x, out=[q, s]) == (q, s)  # a list is accepted, a tuple returned
    assert rec.calls[-1] == (6, q.data_ptr(), s.data_ptr(), x.data_ptr(), 6)
    logits = x[..., :128].contiguous()
    ids, wts = torch.empty(2, 3, 8, dtype=torch.int32), torch.empty(2, 3, 8)
    nt.moe_topk_softmax(logits, 8, out=(ids, wts))
    assert rec.calls[-1] == (6, ids.data_ptr(), wts.data_ptr(), logits.data_ptr(), 6)
    torch.ops.netra.fp8_group_quant_out(
        torch.empty(2, 3, 2048, dtype=torch.float8_e4m3fn), torch.empty(2, 3, 16), x
    )
    assert len(rec.calls) == 4
    assert nt.stats() == {
        "rmsnorm(hidden=2048,weight_offset=0)": {"certified": 1},
        "silu_mul_fp8_quant(inter=1024,group=128)": {"certified": 1},
        "moe_topk_softmax(experts=128,topk=8)": {"certified": 1},
        "fp8_group_quant(hidden=2048,group=128)": {"certified": 1},
    }
    # an output overlapping an input is refused before anything is launched, on the hot path too
    with pytest.raises(ContractError, match="out y shares memory with x"):
        nt.rmsnorm(x, w, 1e-5, out=x)
    both = torch.empty(2, 3, 16, dtype=torch.float32)
    with pytest.raises(ContractError, match="out ids shares memory with out weights"):
        nt.moe_topk_softmax(logits, 8, out=(both[..., :8].view(torch.int32), both[..., :8]))
    assert len(rec.calls) == 4


_Y = torch.empty(4, 256, dtype=torch.bfloat16)
BAD_OUT = [
    (
        "shape",
        lambda: nt.rmsnorm(_X, _W, 1e-6, out=_Y[:3]),
        r"out y is torch.bfloat16 \[3, 256\], but the call writes torch.bfloat16 \[4, 256\]",
    ),
    ("dtype", lambda: nt.rmsnorm(_X, _W, 1e-6, out=_Y.float()), r"out y is torch.float32 \[4, 256\]"),
    ("device", lambda: nt.rmsnorm(_X, _W, 1e-6, out=_Y.to("meta")), "out y is on meta but the input on cpu"),
    ("not a tensor", lambda: nt.rmsnorm(_X, _W, 1e-6, out=[0.0]), "out y must be a torch.Tensor, got list"),
    ("not a pair", lambda: nt.fp8_group_quant(_X, out=_Y), r"out must be a pair of tensors \(q, scales\)"),
    (
        "pair of 3",
        lambda: nt.moe_topk_softmax(_X, 8, out=(_Y, _Y, _Y)),
        r"out must be a pair of tensors \(ids, weights\)",
    ),
    (
        "scales shape",
        lambda: nt.fp8_group_quant(
            _X, out=(torch.empty(4, 256, dtype=torch.float8_e4m3fn), torch.empty(4, 3))
        ),
        r"out scales is torch.float32 \[4, 3\], but the call writes torch.float32 \[4, 2\]",
    ),
    (
        "ids dtype",
        lambda: nt.moe_topk_softmax(_X, 8, out=(torch.empty(4, 8), torch.empty(4, 8))),
        "out ids is torch.float32",
    ),
    ("in place", lambda: nt.rmsnorm(_X, _W, 1e-6, out=_X), "out y shares memory with x"),
    ("into w", lambda: nt.rmsnorm(_X[:1], _W, 1e-6, out=_W.view(1, 256)), "out y shares memory with w"),
    ("op overlap", lambda: torch.ops.netra.rmsnorm_out(_X, _X, _W, 1e-6), "out y shares memory with x"),
    (
        "op shape",
        lambda: torch.ops.netra.moe_topk_softmax_out(
            torch.empty(4, 7, dtype=torch.int32), torch.empty(4, 8), _X, 8
        ),
        r"out ids is torch.int32 \[4, 7\]",
    ),
]


@pytest.mark.parametrize(("fn", "match"), [(f, m) for _, f, m in BAD_OUT], ids=[n for n, _, _ in BAD_OUT])
def test_bad_outputs_get_one_line_contract_errors(fn: Any, match: str) -> None:
    before = _X.clone()
    with pytest.raises(ContractError, match=match) as e:
        fn()
    assert "\n" not in str(e.value) and str(e.value).startswith("netra.torch.") and "hint:" in str(e.value)
    assert nt.stats() == {} and torch.equal(_X, before)  # nothing ran, nothing was written


def test_out_operators_fake_and_compile_and_opcheck() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(3, 512, dtype=torch.bfloat16)
        q, s = torch.empty(3, 512, dtype=torch.float8_e4m3fn), torch.empty(3, 4)
        assert nt.fp8_group_quant(x, out=(q, s)) == (q, s)
        with pytest.raises(ContractError, match=r"out scales is torch.float32 \[3, 5\]"):
            nt.fp8_group_quant(x, out=(q, torch.empty(3, 5)))
    assert nt.stats() == {}

    def block(
        x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, q: torch.Tensor, s: torch.Tensor
    ) -> torch.Tensor:
        nt.rmsnorm(x, w, 1e-6, out=y)
        nt.fp8_group_quant(y, out=(q, s))
        return s.sum()

    torch._dynamo.reset()
    g = torch.Generator().manual_seed(9)
    x, w = torch.randn(6, 512, generator=g).bfloat16(), torch.randn(512, generator=g).bfloat16()
    bufs = [
        torch.empty(6, 512, dtype=torch.bfloat16),
        torch.empty(6, 512, dtype=torch.float8_e4m3fn),
        torch.empty(6, 4),
    ]
    cbufs = [torch.empty_like(b) for b in bufs]
    total = block(x, w, *bufs)
    ctotal = torch.compile(block, backend="aot_eager", fullgraph=True)(x, w, *cbufs)
    assert torch.equal(total, ctotal) and all(_same(a, b) for a, b in zip(bufs, cbufs, strict=True))
    y = torch.empty(4, 512, dtype=torch.bfloat16)
    xs = torch.randn(4, 512).bfloat16()
    cases = {
        "rmsnorm_out": (y, xs, torch.randn(512).bfloat16(), 1e-6, 0),
        "fp8_group_quant_out": (torch.empty(4, 512, dtype=torch.float8_e4m3fn), torch.empty(4, 4), xs, 128),
        "silu_mul_fp8_quant_out": (
            torch.empty(4, 256, dtype=torch.float8_e4m3fn),
            torch.empty(4, 2),
            xs,
            128,
        ),
        "moe_topk_softmax_out": (torch.empty(4, 8, dtype=torch.int32), torch.empty(4, 8), xs, 8),
    }
    every = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for name, args in cases.items():
        # test_schema compares the mutated outputs with arithmetic that CPU torch lacks for float8: for
        # the quantizers it is left out, and their mutations are checked from the schema itself
        fp8 = any(isinstance(a, torch.Tensor) and a.dtype == torch.float8_e4m3fn for a in args)
        op = getattr(torch.ops.netra, name).default
        result = torch.library.opcheck(op, args, test_utils=every[1:] if fp8 else every)
        assert set(result.values()) == {"SUCCESS"}, (name, result)
        mutated = [a.name for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        assert mutated == [a.name for a in op._schema.arguments][: 1 if name == "rmsnorm_out" else 2]
        assert not op._schema.returns


@pytest.mark.parametrize("capability", [(9, 0), (10, 0), (8, 0), (12, 1)])
def test_a_devices_class_is_named_by_the_registrys_vendors(
    capability: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """netra.torch names a device's class through the registry's vendors, as the CUDA loader does."""
    monkeypatch.setattr(dispatch, "_classes", {})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index: capability)
    assert dispatch.gpu_class(3) == cuda_loader.gpu_class_of(capability)


# -- moe_grouped_topk_sigmoid (DeepSeek-V3's router) ----------------------------------------------------

GROUPED = "moe_grouped_topk_sigmoid"
DSV3 = {"experts": 256, "topk": 8, "groups": 8, "topk_groups": 4}


def _router(p: dict[str, int], logits: Any, bias: Any, scale: float = 2.5, **kw: Any) -> Any:
    return nt.moe_grouped_topk_sigmoid(logits, bias, p["topk"], p["groups"], p["topk_groups"], scale, **kw)


@pytest.mark.parametrize(
    "p", [DSV3, {"experts": 128, "topk": 4, "groups": 4, "topk_groups": 2}], ids=["dsv3", "e128"]
)
def test_grouped_router_composite_passes_the_conformance_judge(p: dict[str, int]) -> None:
    for case in cf.cases(GROUPED, p, rows_per_block=4, large_rows=64):
        x, b = torch.from_numpy(case.inputs["logits"]), torch.from_numpy(case.inputs["bias"])
        ids, w = _router(p, x, b, case.scalars["scale"])
        got = {"ids": ids.numpy(), "weights": w.numpy()}
        v = cf.judge(GROUPED, p, case, got)
        assert v.passed, (case.name, v.reason)


def test_grouped_router_composite_ties_and_leading_dimensions() -> None:
    x = torch.zeros(2, 3, 256)
    x[1, 2, ::2] = -0.0
    ids, w = _router(DSV3, x, torch.zeros(256))
    assert (ids.dtype, ids.shape, w.dtype, w.shape) == (torch.int32, (2, 3, 8), torch.float32, (2, 3, 8))
    assert ids.is_contiguous() and w.is_contiguous()
    assert ids.reshape(6, 8).tolist() == [list(range(8))] * 6
    assert torch.all(w == 2.5 / 8)
    # bf16 logits (an engine's bf16 gate) run the composite on their exact fp32 values
    xb = torch.randn(5, 256).bfloat16()
    bias = torch.randn(256) * 0.1
    i1, w1 = _router(DSV3, xb, bias)
    i2, w2 = _router(DSV3, xb.float(), bias)
    assert torch.equal(i1, i2) and torch.equal(w1, w2)


def test_grouped_router_fakes_compile_and_opcheck() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        ids, w = torch.ops.netra.moe_grouped_topk_sigmoid(
            torch.empty(3, 4, 256), torch.empty(256), 8, 8, 4, 2.5
        )
        assert (ids.shape, ids.dtype, w.shape, w.dtype) == ((3, 4, 8), torch.int32, (3, 4, 8), torch.float32)
        with pytest.raises(ContractError, match="groups = 7 does not divide the 256 experts"):
            torch.ops.netra.moe_grouped_topk_sigmoid(torch.empty(3, 256), torch.empty(256), 8, 7, 4, 2.5)
    x, bias = torch.randn(6, 256), torch.randn(256) * 0.1

    def f(x: torch.Tensor, bias: torch.Tensor) -> Any:
        return nt.moe_grouped_topk_sigmoid(x, bias, 8, 8, 4, 2.5)

    got = torch.compile(f, backend="aot_eager", fullgraph=True)(x, bias)
    want = f(x, bias)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    outs = (torch.empty(6, 8, dtype=torch.int32), torch.empty(6, 8))
    for op, args in (
        (torch.ops.netra.moe_grouped_topk_sigmoid.default, (x, bias, 8, 8, 4, 2.5)),
        (torch.ops.netra.moe_grouped_topk_sigmoid_out.default, (*outs, x, bias, 8, 8, 4, 2.5)),
    ):
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, result


def test_grouped_router_out_strict_and_counted_fallback() -> None:
    x, bias = torch.randn(4, 256), torch.randn(256) * 0.1
    ids, w = torch.empty(4, 8, dtype=torch.int32), torch.empty(4, 8)
    assert _router(DSV3, x, bias, out=(ids, w)) == (ids, w)
    want = _router(DSV3, x, bias)
    assert torch.equal(ids, want[0]) and torch.equal(w, want[1])
    key = "moe_grouped_topk_sigmoid(experts=256,topk=8,groups=8,topk_groups=4)"
    assert nt.stats() == {key: {"device": 2}}
    assert "logits is a cpu tensor" in nt.fallback_reasons()[key]["device"][0]
    with nt.strict(), pytest.raises(StrictModeError, match=re.escape(key)):
        _router(DSV3, x, bias)


BAD_ROUTER = [
    (
        "bias shape",
        lambda: _router(DSV3, torch.zeros(2, 256), torch.zeros(128)),
        r"bias has shape \[128\], not \[256\]",
    ),
    (
        "groups",
        lambda: nt.moe_grouped_topk_sigmoid(torch.zeros(2, 256), torch.zeros(256), 8, 7, 4, 2.5),
        "groups = 7",
    ),
    (
        "topk_groups",
        lambda: nt.moe_grouped_topk_sigmoid(torch.zeros(2, 256), torch.zeros(256), 8, 8, 9, 2.5),
        "topk_groups = 9 exceeds the 8 groups",
    ),
    (
        "topk",
        lambda: nt.moe_grouped_topk_sigmoid(torch.zeros(2, 256), torch.zeros(256), 65, 8, 2, 2.5),
        "topk = 65 exceeds the 64 experts of 2 kept groups",
    ),
    ("scale", lambda: _router(DSV3, torch.zeros(2, 256), torch.zeros(256), "2.5"), "scale must be a number"),
    (
        "int logits",
        lambda: _router(DSV3, torch.zeros(2, 256, dtype=torch.int64), torch.zeros(256)),
        "logits has dtype",
    ),
    (
        "out dtype",
        lambda: _router(
            DSV3, torch.zeros(2, 256), torch.zeros(256), out=(torch.empty(2, 8), torch.empty(2, 8))
        ),
        r"out ids is torch.float32 \[2, 8\], but the call writes torch.int32 \[2, 8\]",
    ),
]


@pytest.mark.parametrize(
    ("fn", "match"), [(f, m) for _, f, m in BAD_ROUTER], ids=[n for n, _, _ in BAD_ROUTER]
)
def test_grouped_router_bad_calls_get_one_line_contract_errors(fn: Any, match: str) -> None:
    with pytest.raises(ContractError, match=match) as e:
        fn()
    assert "\n" not in str(e.value) and "docs/ops/moe_grouped_topk_sigmoid.md" in str(e.value)


def test_grouped_router_hot_path_launches_with_fp32_inputs_and_the_scale(
    as_cuda: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rec = Recorder()
    monkeypatch.setattr(
        dispatch, "kernels", lambda index, key, op: dispatch.Served(((dispatch._ALL_ROWS, None),), (rec,))
    )
    x, bias = torch.randn(2, 3, 256), torch.randn(256)
    ids, w = _router(DSV3, x, bias)
    assert (ids.dtype, ids.shape, w.dtype, w.shape) == (torch.int32, (2, 3, 8), torch.float32, (2, 3, 8))
    # the kernel's arguments in ABI order: ids, weights, logits, bias, rows, scale
    assert rec.calls == [(6, ids.data_ptr(), w.data_ptr(), x.data_ptr(), bias.data_ptr(), 6, 2.5)]
    oi, ow = torch.empty(2, 3, 8, dtype=torch.int32), torch.empty(2, 3, 8)
    _router(DSV3, x, bias, 1, out=(oi, ow))  # an int scale is passed as a float
    assert rec.calls[-1] == (6, oi.data_ptr(), ow.data_ptr(), x.data_ptr(), bias.data_ptr(), 6, 1.0)
    key = "moe_grouped_topk_sigmoid(experts=256,topk=8,groups=8,topk_groups=4)"
    assert nt.stats() == {key: {"certified": 2}}
    # bf16 logits are another dtype: the composite, named
    _router(DSV3, x.bfloat16(), bias)
    assert nt.stats()[key] == {"certified": 2, "dtype": 1}
    assert (
        "the certified kernels take logits, bias as torch.float32" in nt.fallback_reasons()[key]["dtype"][0]
    )
    # a strided logits tensor: layout fallback; an output over the bias: refused before any launch
    _router(DSV3, torch.randn(6, 512)[:, ::2], bias)
    assert nt.stats()[key]["layout"] == 1
    both = torch.empty(256 + 16)
    with pytest.raises(ContractError, match="out weights shares memory with bias"):
        _router(DSV3, x, both[:256], out=(oi, both[:48].view(2, 3, 8)))
    assert len(rec.calls) == 2
