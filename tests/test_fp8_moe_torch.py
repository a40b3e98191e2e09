"""nt.fp8_moe, the routed FP8 MoE chain, without a GPU (CI): its schemas derived from the chain's view of
its stages' records, the composite against an independent float64 computation, the semantics of ids
naming no expert, every malformed call refused in one line, out=, fake, torch.compile, strict mode and
counts (the certified chain on the H200: tests/test_gpu_moe.py)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
pytestmark = pytest.mark.usefixtures("torch_state")

import netra.torch as nt  # noqa: E402
from netra.core.ops import CHAINS, FAMILIES, STAGES, chain_family  # noqa: E402
from netra.errors import ContractError, StrictModeError  # noqa: E402
from netra.torch import signatures  # noqa: E402

FP8 = torch.float8_e4m3fn
E, K, H, I = 4, 2, 256, 128  # noqa: E741  (the contract names: experts, topk, hidden, inter)


def make(m: int, seed: int = 0, ids: list[list[int]] | None = None) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)

    def f8(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * 3).to(FP8)

    ids_t = (
        torch.tensor(ids, dtype=torch.int32)
        if ids is not None
        else torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(m)]).int()
    )
    return (
        f8(m, H),
        torch.rand(m, H // 128, generator=g) + 0.5,
        ids_t,
        torch.rand(m, K, generator=g),
        f8(E, 2 * I, H),
        torch.rand(E, 2 * I // 128, H // 128, generator=g) * 0.01,
        f8(E, H, I),
        torch.rand(E, H // 128, I // 128, generator=g) * 0.01,
    )


def reference(args: tuple[torch.Tensor, ...]) -> np.ndarray:
    """The contract in float64, written out token by token, slot by slot (docs/ops/fp8_moe.md)."""
    xq, xs, ids, weights, w13, w13s, w2, w2s = (t.double() if t.dtype != torch.int32 else t for t in args)
    m = xq.shape[0]
    out = np.zeros((m, H))
    for t in range(m):
        x = np.array([float(xq[t, k]) * float(xs[t, k // 128]) for k in range(H)])
        for s in range(K):
            e = int(ids[t, s])
            if not 0 <= e < E:
                continue
            s13 = np.repeat(np.repeat(w13s[e].numpy(), 128, 0), 128, 1)
            gu = (w13[e].numpy() * s13) @ x
            gate, up = gu[:I], gu[I:]
            h = gate / (1 + np.exp(-gate)) * up
            q, sc = [], []
            for b in range(I // 128):
                blk = h[128 * b : 128 * (b + 1)]
                scale = max(np.abs(blk).max(), 1e-10) / 448
                q.append(torch.tensor(np.clip(blk / scale, -448, 448)).float().to(FP8).double().numpy())
                sc.append(np.full(128, scale))
            hd = np.concatenate(q) * np.concatenate(sc)
            s2 = np.repeat(np.repeat(w2s[e].numpy(), 128, 0), 128, 1)
            out[t] += float(weights[t, s]) * ((w2[e].numpy() * s2) @ hd)
    return out


def test_the_schemas_are_derived_from_the_chain_of_records() -> None:
    view = chain_family("fp8_moe")
    assert (
        CHAINS["fp8_moe"].stages == ("fp8_moe_gate_up", "fp8_moe_down")
        and set(CHAINS["fp8_moe"].stages) <= STAGES
    )
    assert signatures.all_schemas(view) == {
        "fp8_moe": "fp8_moe(Tensor xq, Tensor xs, Tensor ids, Tensor weights, Tensor w13, Tensor w13s, "
        "Tensor w2, Tensor w2s) -> Tensor",
        "fp8_moe_out": "fp8_moe_out(Tensor(a!) out, Tensor xq, Tensor xs, Tensor ids, Tensor weights, "
        "Tensor w13, Tensor w13s, Tensor w2, Tensor w2s) -> ()",
    }
    assert str(torch.ops.netra.fp8_moe.default._schema).startswith("netra::fp8_moe(Tensor xq")
    # a stage is no operator of its own: it is called through its chain
    assert not hasattr(torch.ops.netra, "fp8_moe_gate_up") and "fp8_moe_down" in FAMILIES
    # what a token must read: 8 experts x 3 x 2048 x 768 FP8 bytes for Qwen3-30B-A3B, plus scales and xq
    p = {"experts": 128, "topk": 8, "hidden": 2048, "inter": 768}
    assert view.bytes_moved(p, 1) == 8 * (3 * 2048 * 768 + 4 * (12 * 16 + 16 * 6)) + 2048 + 64 + 64 + 2 * 2048


@pytest.mark.parametrize("m", [1, 3])
def test_the_composite_matches_float64_and_is_counted(m: int) -> None:
    args = make(m, seed=m)
    y = nt.fp8_moe(*args)
    ref = reference(args)
    assert y.dtype == torch.bfloat16 and tuple(y.shape) == (m, H)
    err = np.abs(y.double().numpy() - ref).max(axis=1) / np.abs(ref).max(axis=1)
    # bf16 output rounding (2^-9 of an element) plus fp32 against float64 and one-step FP8 code flips of h
    assert err.max() < 2e-2, err
    key = f"fp8_moe(experts={E},topk={K},hidden={H},inter={I})"
    assert nt.stats()[key] == {"device": 1}
    assert "xq is a cpu tensor" in nt.fallback_reasons()[key]["device"][0]


def test_a_slot_naming_no_expert_contributes_nothing_and_a_token_with_none_gets_zeros() -> None:
    args = make(3, seed=7, ids=[[0, 1], [2, -1], [-1, 9]])
    y = nt.fp8_moe(*args)
    ref = reference(args)
    assert torch.count_nonzero(y[2]) == 0 and not np.any(ref[2])
    assert np.abs(y[1].double().numpy() - ref[1]).max() <= 2e-2 * np.abs(ref[1]).max()


def test_out_fake_and_compile_agree_with_the_eager_call() -> None:
    args = make(2, seed=3)
    y = nt.fp8_moe(*args)
    out = torch.full((2, H), float("nan"), dtype=torch.bfloat16)
    assert nt.fp8_moe(*args, out=out) is out and torch.equal(out.view(torch.int16), y.view(torch.int16))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = torch.ops.netra.fp8_moe(*[mode.from_tensor(t) for t in args])
    assert tuple(fake.shape) == (2, H) and fake.dtype == torch.bfloat16
    compiled = torch.compile(lambda *a: nt.fp8_moe(*a), fullgraph=True)
    assert torch.equal(compiled(*args).view(torch.int16), y.view(torch.int16))


def test_strict_mode_refuses_the_composite() -> None:
    with nt.strict(), pytest.raises(StrictModeError, match=r"fp8_moe.*cpu tensor"):
        nt.fp8_moe(*make(1))


def _bad(**change: Any) -> tuple[Any, ...]:
    names = ("xq", "xs", "ids", "weights", "w13", "w13s", "w2", "w2s")
    given = dict(zip(names, make(2), strict=True))
    return tuple(
        change.get(n, given[n]) if n not in change or not callable(change[n]) else change[n](given[n])
        for n in names
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"w2s": 3}, "w2s must be a torch.Tensor, got int"),
        ({"ids": lambda t: t.float()}, "ids has dtype torch.float32"),
        ({"xq": lambda t: t.float()}, "xq has dtype torch.float32"),
        ({"w2": lambda t: t[:, :, :64].contiguous()}, "w2 is [4, 256, 64], expected [4, 256, 128]"),
        ({"xs": lambda t: t[:, :1].contiguous()}, "xs is [2, 1], expected [2, 2]"),
        ({"weights": lambda t: t[:1]}, "weights is [1, 2], expected [2, 2]"),
        ({"w13": lambda t: t[0]}, "w13 is 2-D"),
        ({"w13": lambda t: t[:, :, :200].contiguous()}, "hidden and inter must be positive multiples of 128"),
        ({"w13s": lambda t: t.double()}, "w13s has dtype torch.float64"),
    ],
)
def test_every_malformed_call_is_one_line_naming_the_operand(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ContractError) as e:
        nt.fp8_moe(*_bad(**change))
    text = str(e.value)
    assert text.startswith("netra.torch.fp8_moe: ") and message in text and "\n" not in text
    assert "docs/ops/fp8_moe.md" in text


def test_int64_ids_take_the_composite_with_the_reason() -> None:
    args = list(make(2, seed=5))
    y32 = nt.fp8_moe(*args)
    args[2] = args[2].long()
    y64 = nt.fp8_moe(*args)
    assert torch.equal(y32.view(torch.int16), y64.view(torch.int16))


def test_an_expanded_out_is_refused_and_nothing_written() -> None:
    out = torch.zeros(1, H, dtype=torch.bfloat16).expand(2, H)
    with pytest.raises(ContractError, match="out out has elements that share one memory location") as e:
        nt.fp8_moe(*make(2), out=out)
    assert "\n" not in str(e.value) and not out.any()


def test_out_must_be_bf16_of_the_call_shape() -> None:
    with pytest.raises(ContractError, match="out must be a bf16 tensor of shape \\[2, 256\\]"):
        nt.fp8_moe(*make(2), out=torch.empty(2, H))


def test_the_programmatic_launch_structures_have_cuda_h_layout() -> None:
    """cuLaunchKernelEx's CUlaunchConfig and CUlaunchAttribute as cuda.h lays them out (x86_64): what the
    chain's second stage is launched with (the prototype's ran so on the H200)."""
    import ctypes

    from netra.loaders import cuda

    assert ctypes.sizeof(cuda._LaunchAttribute) == 72 and cuda._LaunchAttribute.value.offset == 8
    assert ctypes.sizeof(cuda._LaunchConfig) == 56
    assert (
        cuda._LaunchConfig.stream.offset,
        cuda._LaunchConfig.attrs.offset,
        cuda._LaunchConfig.nattrs.offset,
    ) == (
        32,
        40,
        48,
    )
    from netra.torch import dispatch

    assert dispatch.OVERLAPS == {"fp8_moe_down": True}


def test_set_policy_makes_the_operator_choose_its_kernels_again() -> None:
    """nt.fp8_moe keeps its own plans (the chain's two stages); a policy change must drop them, or a call
    keeps the kernels (or the fallback) chosen under the old policy (seen on the H200: bench_moe's switch
    from 'accepted' to 'experiment' still took the composite)."""
    from netra.torch import moe

    prev = nt.set_policy("accepted")
    try:
        nt.fp8_moe(*make(1))
        assert moe._plans, "the call made no plan: this test no longer sees what it checks"
        nt.set_policy("experiment")
        assert not moe._plans, "set_policy left nt.fp8_moe's plans of the old policy in place"
    finally:
        nt.set_policy(prev)


def test_deepseek_v3_s_routed_experts_are_a_locked_contract_answered_below_policy() -> None:
    """DeepSeek-V3 (E 256, k 8, H 7168, I 2048): the call's contract, derived from the operands (meta
    tensors: the shapes alone), is the one the model manifest declares; both stages are in the sm_90 and
    sm_100 tables (locked, not certified), and the default policy answers each with the explicit
    below-policy fallback, never a kernel or an error."""
    from netra.core.ops import contract_key
    from netra.runtime import open_catalog
    from netra.runtime.catalog import Fallback
    from netra.torch import moe

    e, k, h, i, t = 256, 8, 7168, 2048, 3

    def meta(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.empty(*shape, dtype=dtype, device="meta")

    args = (
        meta(t, h, dtype=FP8), meta(t, h // 128), meta(t, k, dtype=torch.int32), meta(t, k),
        meta(e, 2 * i, h, dtype=FP8), meta(e, 2 * i // 128, h // 128), meta(e, h, i, dtype=FP8),
        meta(e, h // 128, i // 128),
    )  # fmt: skip
    shape = moe.check(*args)
    params = {"experts": e, "topk": k, "hidden": h, "inter": i}
    assert shape.params == params and shape.tokens == t
    assert nt.fp8_moe(*args).shape == (t, h)  # the fake: the out= shape of the call
    for cls in ("sm_90", "sm_100"):
        cat = open_catalog(cls)
        for fam in CHAINS["fp8_moe"].stages:
            key = contract_key(fam, params)
            assert key in cat.table.entries, (cls, key)
            if cls == "sm_90":
                got = cat.served(key, "accepted")
                assert isinstance(got, Fallback) and got.code == "below_policy", got


def test_the_engines_route_names_the_first_contract_not_served() -> None:
    """What both integrations route their FP8 experts on: the tokens' quantization first, then the stages;
    on this CPU-only torch the quantization is the first not served, and the reason is the host's."""
    from netra.torch.moe import quantized_route

    params = {"experts": 128, "topk": 8, "hidden": 2048, "inter": 768}
    why = quantized_route(params, torch.device("cuda", 0))
    assert why.startswith("device: fp8_group_quant(hidden=2048,group=128): "), why


def test_the_chains_workspace_is_laid_out_from_the_contract_alone() -> None:
    """The operator carves both stages' scratch from one buffer sized from the contract and the most
    tokens, before any tactic is chosen; the stages' grids may read a tactic's constants (a routed MoE's
    grid_experts), which that layout must not need (every call failed so on an H100, 2026-12-06)."""
    from netra.torch import moe

    params = {"experts": 128, "topk": 8, "hidden": 2048, "inter": 768}
    plans, bases, total = moe._layout(params)
    assert [p.grids for p in plans] == [(), ()] and bases[0] == 0 < bases[1] < total
    assert bases[1] >= plans[0].workspace_bytes and total >= bases[1] + plans[1].workspace_bytes
