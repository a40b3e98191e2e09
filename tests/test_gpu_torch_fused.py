"""On an H200: the fused serving ops (fused_add_rmsnorm, rmsnorm_fp8_group_quant,
fused_add_rmsnorm_fp8_group_quant) for every sm_90 contract of the installed table, through netra.torch's
operators: byte for byte the raw runtime launch, within the conformance judge of the float64 reference
(the composition of the unfused references), residual_out bit-equal to torch's bf16 add, out= and the
in-place operators writing the same bytes; inside a CUDA graph; under torch.compile (inductor).

They run before certification too: while a fused entry has no accepted candidate, the tests serve it at
the `experiment` policy (netra.torch.set_policy, the runtime's opt-in to lower maturities) and say so;
once certified, at the default policy. Run like tests/test_gpu_torch_ops.py (docs/gpu.md):

    NETRA_TEST_INSTALLED=1 /path/to/venv/bin/pytest tests/test_gpu_torch_fused.py -v

Skipped elsewhere (the gpu marker; CI has no GPU).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import release_table

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("torch_state")]

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
from tensor_bits import bf16, host  # noqa: E402

LARGE = int(os.environ.get("NETRA_TEST_LARGE_ROWS", "8192"))
WORKERS = os.cpu_count() or 1
DEV = "cuda:0"
FAMILIES = ("fused_add_rmsnorm", "fused_add_rmsnorm_fp8_group_quant", "rmsnorm_fp8_group_quant")
# every fused contract of the sm_90 table this tree releases; the install must list exactly these (checked below)
FUSED = sorted(e["key"] for e in release_table("sm_90")["entries"] if e["contract"]["op"] in FAMILIES)


def _contract(key: str) -> tuple[str, dict[str, int]]:
    from netra.runtime import Contract

    c = Contract.parse(key)
    return c.op, dict(c.params)


@pytest.fixture(scope="module")
def fused_policy() -> str:
    """`accepted` once every fused entry has an accepted candidate, else `experiment` (before certification)."""
    from netra.runtime import open_catalog

    cat = open_catalog("sm_90")
    entries = [cat.table.entries[k] for k in FUSED]
    pol = (
        "accepted"
        if all(any(c.maturity == "accepted" for c in e.candidates) for e in entries)
        else "experiment"
    )
    print(f"fused contracts served at policy {pol!r}")
    return pol


@pytest.fixture
def served(fused_policy: str) -> Iterator[str]:
    import netra.torch as nt

    prev = nt.set_policy(fused_policy)
    try:
        yield fused_policy
    finally:
        nt.set_policy(prev)


def call(op: str, p: dict[str, int], x: Any, r: Any, w: Any, eps: float, out: Any = None) -> dict[str, Any]:
    """The functional op (or its out= form): outputs by kernel argument name."""
    import netra.torch as nt

    wo = p["weight_offset"]
    if op == "fused_add_rmsnorm":
        y, ro = nt.fused_add_rmsnorm(x, r, w, eps, wo, out=out)
        return {"y": y, "residual_out": ro}
    if op == "rmsnorm_fp8_group_quant":
        q, s = nt.rmsnorm_fp8_group_quant(x, w, eps, wo, p["group"], out=out)
        return {"q": q, "scales": s}
    q, s, ro = nt.fused_add_rmsnorm_fp8_group_quant(x, r, w, eps, wo, p["group"], out=out)
    return {"q": q, "scales": s, "residual_out": ro}


def in_place(op: str, p: dict[str, int], x: Any, r: Any, w: Any, eps: float) -> dict[str, Any]:
    """The in-place operator on r (a copy the caller owns): outputs by name, residual_out being r."""
    import netra.torch as nt

    if op == "fused_add_rmsnorm":
        return {"y": nt.fused_add_rmsnorm_(x, r, w, eps, p["weight_offset"]), "residual_out": r}
    q, s = nt.fused_add_rmsnorm_fp8_group_quant_(x, r, w, eps, p["weight_offset"], p["group"])
    return {"q": q, "scales": s, "residual_out": r}


_CU: list[Any] = []


def raw_launch(kernel: Any, rows: int, like: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """The same kernel through the runtime's own loader, into fresh outputs filled with a pattern."""
    if not _CU:
        from netra.loaders.cuda import Cuda

        _CU.append(Cuda())
    outs = {n: torch.empty_like(t) for n, t in like.items()}
    for t in outs.values():
        t.view(torch.uint8).fill_(0xA5)
    args = {**{n: t.data_ptr() for n, t in outs.items()}, "rows": rows}
    args.update({n: (v.data_ptr() if isinstance(v, torch.Tensor) else v) for n, v in inputs.items()})
    _CU[0].launch(kernel, rows, None, args)
    return outs


def _same(a: Any, b: Any) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def test_the_sm_90_table_lists_every_fused_contract(fused_policy: str) -> None:
    import netra.torch as nt
    from netra.runtime import open_catalog

    cat = open_catalog("sm_90")
    assert sorted(k for k in cat.contracts() if k.split("(")[0] in FAMILIES) == FUSED
    prev = nt.set_policy(fused_policy)
    try:
        got = nt.prepare(DEV, FUSED)
    finally:
        nt.set_policy(prev)
    for key, what in sorted(got.items()):
        print(f"{key}: {what}")
    assert not [k for k, v in got.items() if v.startswith("fallback")], got


@pytest.mark.parametrize("key", FUSED)
def test_every_fused_contract_through_the_op_matches_the_reference_and_the_raw_launch(
    key: str, served: str
) -> None:
    import netra.torch as nt
    from netra.certify import conformance as cf

    op, p = _contract(key)
    k1 = nt.kernel_for(key, 1, DEV)
    assert k1, k1
    cases = cf.cases(op, p, rows_per_block=k1.candidate.launch.rows_per_block, large_rows=LARGE)
    chain_diff = 0
    for case in cases:
        x, w, eps = bf16(case.inputs["x"], DEV), bf16(case.inputs["w"], DEV), case.scalars["eps"]
        r = bf16(case.inputs["residual"], DEV) if "residual" in case.inputs else None
        outs = call(op, p, x, r, w, eps)
        kernel = nt.kernel_for(key, case.rows, DEV)
        inputs = {"x": x, "w": w, "eps": eps, **({"residual": r} if r is not None else {})}
        raw = raw_launch(kernel, case.rows, outs, inputs)
        bufs = {n: torch.empty_like(t) for n, t in outs.items()}
        for t in bufs.values():
            t.view(torch.uint8).fill_(0x5A)
        into = call(op, p, x, r, w, eps, out=tuple(bufs.values()))
        assert all(into[n] is bufs[n] for n in bufs)
        inplace = in_place(op, p, x, r.clone(), w, eps) if r is not None else None
        torch.cuda.synchronize()
        for n, t in outs.items():
            assert _same(raw[n], t), f"{key} {case.name}: {n} differs from the raw launch"
            assert _same(bufs[n], t), f"{key} {case.name}: {n} written through out= differs"
            if inplace is not None:
                assert _same(inplace[n], t), f"{key} {case.name}: {n} of the in-place operator differs"
        if r is not None:
            assert _same(outs["residual_out"], x + r), (
                f"{key} {case.name}: residual_out is not torch's bf16 add"
            )
        got = {n: host(t) for n, t in outs.items()}
        v = cf.judge(op, p, case, got, cf.expected(op, p, case, workers=WORKERS))
        assert v.passed, f"{key} {case.name} ({kernel.tactic}): {v.reason}"
        # against the chain of Netra's unfused kernels: equal but for one-ulp y differences where the
        # two reduce in another order (kernels/sm_90: H = 2048 at 512 threads); counted, not failed
        base = outs["residual_out"] if r is not None else x
        y = nt.rmsnorm(base, w, eps, p["weight_offset"])
        chain = (
            {"y": y}
            if op == "fused_add_rmsnorm"
            else dict(zip(("q", "scales"), nt.fp8_group_quant(y), strict=True))
        )
        torch.cuda.synchronize()
        chain_diff += sum(
            int((host(outs[n]).view(np.uint8) != host(t).view(np.uint8)).sum()) for n, t in chain.items()
        )
        print(
            f"{key} {case.name} rows={case.rows} {kernel.tactic}: {v.max_rel_deviation:.3g} <= {v.tolerance:.3g}; {v.counts}"
        )
    print(f"{key}: bytes differing from the unfused Netra chain: {chain_diff}")
    st = nt.stats()[key]
    assert st == {"certified": (3 if op != "rmsnorm_fp8_group_quant" else 2) * len(cases)}, st


def _static(op: str, p: dict[str, int], rows: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=DEV).manual_seed(seed)
    h = p["hidden"]
    return {
        "x": torch.randn(rows, h, device=DEV, generator=g).bfloat16(),
        "r": torch.randn(rows, h, device=DEV, generator=g).bfloat16(),
        "w": (0.1 * torch.randn(h, device=DEV, generator=g) + (1 - p["weight_offset"])).bfloat16(),
    }


def _run(op: str, p: dict[str, int], t: dict[str, torch.Tensor], res: torch.Tensor) -> list[torch.Tensor]:
    """The functional op, then the in-place one on `res`: every output."""
    r = t["r"] if op != "rmsnorm_fp8_group_quant" else None
    got = list(call(op, p, t["x"], r, t["w"], 1e-6).values())
    if r is not None:
        got += list(in_place(op, p, t["x"], res, t["w"], 1e-6).values())
    return got


@pytest.mark.parametrize("rows", [1, 16, 8192])
@pytest.mark.parametrize("key", FUSED)
def test_a_cuda_graph_of_the_fused_ops_replays_with_the_same_results(
    key: str, rows: int, served: str
) -> None:
    import netra.torch as nt

    op, p = _contract(key)
    static = _static(op, p, rows, 1)
    res = static["r"].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _run(op, p, static, res.clone())  # warm-up: the module is loaded outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with nt.strict(), torch.cuda.graph(graph):
        outs = _run(op, p, static, res)
    for seed in (2, 3):
        fresh = _static(op, p, rows, seed)
        for n, t in fresh.items():
            static[n].copy_(t)
        res.copy_(fresh["r"])
        graph.replay()
        torch.cuda.synchronize()
        want = _run(op, p, fresh, fresh["r"].clone())
        torch.cuda.synchronize()
        assert all(_same(a, b) for a, b in zip(outs, want, strict=True)), f"{key} rows={rows} seed {seed}"
    assert set(nt.stats()[key]) == {"certified"}


@pytest.mark.parametrize("key", FUSED)
def test_torch_compile_of_the_fused_ops_matches_eager(key: str, served: str) -> None:
    import netra.torch as nt

    torch._dynamo.reset()
    op, p = _contract(key)
    t = _static(op, p, 16, 9)
    want = _run(op, p, t, t["r"].clone())
    nt.reset_stats()
    res = t["r"].clone()
    with nt.strict():
        got = torch.compile(lambda tt, rr: _run(op, p, tt, rr), dynamic=False, fullgraph=True)(t, res)
    torch.cuda.synchronize()
    assert all(_same(a, b) for a, b in zip(got, want, strict=True))
    if op != "rmsnorm_fp8_group_quant":
        assert _same(res, want[-1])  # the in-place write of the compiled graph
    assert set(nt.stats()[key]) == {"certified"}, nt.stats()
