"""On an H200: netra.torch serves every certified sm_90 contract through its custom operators, byte for byte
what the raw runtime launch writes and within the conformance tolerances of the float64 reference; CUDA
graphs capture and replay the four ops; torch.compile (inductor) of a decoder-block-like function matches
eager; strict mode passes for the certified shapes and refuses an uncertified width.

Run on the GPU machine against an installed wheel whose sm_90 table is certified (docs/torch.md, docs/gpu.md):

    NETRA_TEST_INSTALLED=1 /path/to/venv/bin/pytest tests/test_gpu_torch_ops.py -v

(the venv's pytest script, not `python -m pytest`, which would put this tree on sys.path). Needs torch with
CUDA and numpy besides the wheel. NETRA_TEST_LARGE_ROWS (default 8192) sets the largest conformance case.
Skipped elsewhere (the gpu marker; CI has no GPU).
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from conftest import accepted, release_table

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("torch_state")]

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
from tensor_bits import bf16, host  # noqa: E402

LARGE = int(os.environ.get("NETRA_TEST_LARGE_ROWS", "8192"))
WORKERS = os.cpu_count() or 1
UNFUSED = ("fp8_group_quant", "moe_topk_softmax", "rmsnorm", "silu_mul_fp8_quant")


# what the installed wheel must serve: the certified table this tree releases (checked against the install
# below); the fused families and the routed MoE have their own tests (test_gpu_torch_fused.py, test_gpu_moe.py)
SOURCE_ACCEPTED = accepted(release_table("sm_90"))
SERVED = [k for k in SOURCE_ACCEPTED if k.split("(")[0] in UNFUSED]
DEV = "cuda:0"


def _contract(key: str) -> tuple[str, dict[str, int]]:
    from netra.runtime import Contract

    c = Contract.parse(key)
    return c.op, dict(c.params)


def run_ops(op: str, params: dict[str, int], case: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The case through the custom op; returns its outputs and the raw-launch arguments for the inputs."""
    import netra.torch as nt

    if op == "rmsnorm":
        x, w = bf16(case.inputs["x"], DEV), bf16(case.inputs["w"], DEV)
        y = nt.rmsnorm(x, w, case.scalars["eps"], params["weight_offset"])
        return {"y": y}, {"x": x, "w": w, "eps": case.scalars["eps"]}
    if op in ("fp8_group_quant", "silu_mul_fp8_quant"):
        x = bf16(case.inputs["x"], DEV)
        fn = nt.fp8_group_quant if op == "fp8_group_quant" else nt.silu_mul_fp8_quant
        q, s = fn(x, params["group"])
        return {"q": q, "scales": s}, {"x": x}
    logits = bf16(case.inputs["logits"], DEV)
    ids, w = nt.moe_topk_softmax(logits, params["topk"])
    return {"ids": ids, "weights": w}, {"logits": logits}


def out_ops(
    op: str, params: dict[str, int], like: dict[str, torch.Tensor], inputs: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """The same call with out= into fresh buffers filled with a pattern the kernel must overwrite."""
    import netra.torch as nt

    outs = {name: torch.empty_like(t) for name, t in like.items()}
    for t in outs.values():
        t.view(torch.uint8).fill_(0x5A)
    pair = tuple(outs.values())
    if op == "rmsnorm":
        got = (nt.rmsnorm(inputs["x"], inputs["w"], inputs["eps"], params["weight_offset"], out=pair[0]),)
    elif op == "moe_topk_softmax":
        got = nt.moe_topk_softmax(inputs["logits"], params["topk"], out=pair)
    else:
        fn = nt.fp8_group_quant if op == "fp8_group_quant" else nt.silu_mul_fp8_quant
        got = fn(inputs["x"], params["group"], out=pair)
    assert all(a is b for a, b in zip(got, pair, strict=True))
    return outs


def raw_launch(
    kernel: Any, rows: int, like: dict[str, torch.Tensor], inputs: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """The same kernel through the runtime's own loader (netra.loaders.cuda.Cuda.launch), into fresh outputs."""
    outs = {name: torch.empty_like(t) for name, t in like.items()}
    for t in outs.values():
        t.view(torch.uint8).fill_(0xA5)  # a pattern the kernel must overwrite everywhere
    args = {**{n: t.data_ptr() for n, t in outs.items()}, "rows": rows}
    args.update({n: (v.data_ptr() if isinstance(v, torch.Tensor) else v) for n, v in inputs.items()})
    _cuda().launch(kernel, rows, None, args)
    return outs


_CU: list[Any] = []


def _cuda() -> Any:
    """One loader for the module (each Cuda() keeps its own module handles)."""
    if not _CU:
        from netra.loaders.cuda import Cuda

        _CU.append(Cuda())
    return _CU[0]


# -- the installed release -------------------------------------------------------------------------------


def test_the_installed_wheel_with_a_certified_sm_90_table_is_used() -> None:
    import netra
    import netra.torch as nt
    from netra.runtime import installed, open_catalog

    assert installed.locate().kind == "wheel", (
        f"netra is imported from {netra.__file__}, not an installed wheel"
    )
    assert torch.cuda.get_device_capability(0) == (9, 0)
    cat = open_catalog("sm_90")
    assert cat.table.certification == "hardware"
    installed_accepted = sorted(k for k in cat.contracts() if cat.select(k, policy="accepted"))
    assert installed_accepted == SOURCE_ACCEPTED, sorted(set(installed_accepted) ^ set(SOURCE_ACCEPTED))
    served = nt.prepare(DEV, SERVED)
    for key, what in sorted(served.items()):
        print(f"{key}: {what}")
    assert sorted(served) == sorted(SERVED)
    assert not [k for k, v in served.items() if v.startswith("fallback")], served


# -- every certified contract against the reference, and against the raw launch -----------------------------


def _row_counts(key: str) -> list[int]:
    """Row counts that reach every rule of the contract's row-count dispatch (each boundary and one past it)."""
    import netra.torch as nt
    from netra.torch import dispatch

    k = dispatch.kernels(0, key, _contract(key)[0])
    assert k, f"{key}: {k.reason if hasattr(k, 'reason') else k}"
    tops = [top for top, _ in k.rules if top != dispatch._ALL_ROWS]
    rows = sorted({r for t in tops for r in (t, t + 1)} | {1, 16})
    assert all(nt.kernel_for(key, r, DEV) for r in rows)
    return rows


@pytest.mark.parametrize("key", SERVED)
def test_every_certified_contract_through_the_op_matches_the_reference_and_the_raw_launch(key: str) -> None:
    import netra.torch as nt
    from netra.certify import conformance as cf

    op, params = _contract(key)
    k1 = nt.kernel_for(key, 1, DEV)
    assert k1 and k1.maturity == "accepted", k1
    cases = cf.cases(op, params, rows_per_block=k1.candidate.launch.rows_per_block, large_rows=LARGE)
    extra_rows = [r for r in _row_counts(key) if r not in {c.rows for c in cases}]
    for r in extra_rows:  # a large-style case at each dispatch boundary
        cases.append(cf.cases(op, params, rows_per_block=1, large_rows=r)[-1])
    tactics = set()
    for case in cases:
        outs, inputs = run_ops(op, params, case)
        kernel = nt.kernel_for(key, case.rows, DEV)
        tactics.add(kernel.tactic)
        raw = raw_launch(kernel, case.rows, outs, inputs)
        into = out_ops(op, params, outs, inputs)
        torch.cuda.synchronize()
        got = {n: host(t) for n, t in outs.items()}
        for n, t in raw.items():
            assert np.array_equal(host(t).view(np.uint8), got[n].view(np.uint8)), (
                f"{key} {case.name}: {n} differs from the raw launch"
            )
            assert np.array_equal(host(into[n]).view(np.uint8), got[n].view(np.uint8)), (
                f"{key} {case.name}: {n} written through out= differs from the op's own output"
            )
        exp = cf.expected(op, params, case, workers=WORKERS)
        v = cf.judge(op, params, case, got, exp)
        assert v.passed, f"{key} {case.name} ({kernel.tactic}): {v.reason}"
        print(
            f"{key} {case.name} rows={case.rows} {kernel.tactic}: max_rel_deviation {v.max_rel_deviation:.3g} <= {v.tolerance:.3g}"
        )
    st = nt.stats()
    assert st == {key: {"certified": 2 * len(cases)}}, st  # the functional call and the out= call
    print(f"{key}: tactics used {sorted(tactics)}")


# -- CUDA graphs -----------------------------------------------------------------------------------------------

H, INTER, E = 4096, 14336, 128


def _inputs(seed: int, rows: int) -> dict[str, torch.Tensor]:
    g = torch.Generator(device=DEV).manual_seed(seed)
    return {
        "x": torch.randn(rows, H, device=DEV, generator=g).bfloat16(),
        "w": (1 + 0.1 * torch.randn(H, device=DEV, generator=g)).bfloat16(),
        "gu": torch.randn(rows, 2 * INTER, device=DEV, generator=g).bfloat16(),
        "logits": torch.randn(rows, E, device=DEV, generator=g).bfloat16(),
    }


def _four(t: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    import netra.torch as nt

    y = nt.rmsnorm(t["x"], t["w"], 1e-5)
    q, s = nt.fp8_group_quant(y)
    q2, s2 = nt.silu_mul_fp8_quant(t["gu"])
    ids, wts = nt.moe_topk_softmax(t["logits"], 8)
    return [y, q, s, q2, s2, ids, wts]


def _bytes_equal(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("rows", [1, 16, 8192])
def test_a_cuda_graph_of_all_four_ops_replays_with_the_same_results(rows: int) -> None:
    import netra.torch as nt

    static = _inputs(1, rows)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graph asks
        for _ in range(2):
            _four(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with nt.strict(), torch.cuda.graph(graph):
        outs = _four(static)
    for seed in (2, 3):
        fresh = _inputs(seed, rows)
        for name, t in fresh.items():
            static[name].copy_(t)
        graph.replay()
        torch.cuda.synchronize()
        want = _four(fresh)
        torch.cuda.synchronize()
        assert _bytes_equal(outs, want), f"rows={rows}, seed {seed}: the replay differs from eager"
    st = nt.stats()
    assert all(set(v) == {"certified"} for v in st.values()), st


def _four_into(t: dict[str, torch.Tensor], o: list[torch.Tensor]) -> None:
    import netra.torch as nt

    nt.rmsnorm(t["x"], t["w"], 1e-5, out=o[0])
    nt.fp8_group_quant(o[0], out=(o[1], o[2]))
    nt.silu_mul_fp8_quant(t["gu"], out=(o[3], o[4]))
    nt.moe_topk_softmax(t["logits"], 8, out=(o[5], o[6]))


@pytest.mark.parametrize("rows", [1, 16, 8192])
def test_a_cuda_graph_of_the_four_out_ops_writes_the_static_buffers(rows: int) -> None:
    import netra.torch as nt

    static = _inputs(4, rows)
    bufs = [torch.empty_like(t) for t in _four(static)]  # the caller's buffers, allocated once
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _four_into(static, bufs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with nt.strict(), torch.cuda.graph(graph):
        _four_into(static, bufs)
    for seed in (5, 6):
        fresh = _inputs(seed, rows)
        for name, t in fresh.items():
            static[name].copy_(t)
        for b in bufs:
            b.view(torch.uint8).fill_(0x5A)
        graph.replay()
        torch.cuda.synchronize()
        assert _bytes_equal(bufs, _four(fresh)), f"rows={rows}, seed {seed}: the replay differs from eager"
    st = nt.stats()
    assert all(set(v) == {"certified"} for v in st.values()), st


def test_torch_compile_with_out_ops_writes_the_buffers_like_eager() -> None:
    import netra.torch as nt

    torch._dynamo.reset()
    t = _inputs(8, 16)
    want = _four(t)
    bufs = [torch.empty_like(b) for b in want]
    nt.reset_stats()
    with nt.strict():
        torch.compile(_four_into, dynamic=False, fullgraph=True)(t, bufs)
    torch.cuda.synchronize()
    assert _bytes_equal(bufs, want)
    st = nt.stats()
    assert all(set(v) == {"certified"} for v in st.values()) and len(st) == 4, st


# -- torch.compile ---------------------------------------------------------------------------------------------


def _block(
    x: torch.Tensor, w: torch.Tensor, wgu: torch.Tensor, router: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    import netra.torch as nt

    h = nt.rmsnorm(x, w, 1e-6)
    q, s = nt.fp8_group_quant(h)
    deq = (q.float().unflatten(-1, (-1, 128)) * s.unsqueeze(-1)).flatten(-2).to(torch.bfloat16)
    gu = deq @ wgu
    q2, s2 = nt.silu_mul_fp8_quant(gu)
    logits = h @ router
    ids, wts = nt.moe_topk_softmax(logits, 8)
    return h, q, s, gu, q2, s2, logits, ids, wts


@pytest.mark.parametrize("rows", [1, 16, 256])
def test_torch_compile_of_a_decoder_block_runs_the_certified_kernels_and_matches_eager(rows: int) -> None:
    import netra.torch as nt
    from netra.certify import reference as ref

    torch._dynamo.reset()
    g = torch.Generator(device=DEV).manual_seed(7)
    x = torch.randn(rows, 2048, device=DEV, generator=g).bfloat16()
    w = (1 + 0.1 * torch.randn(2048, device=DEV, generator=g)).bfloat16()
    wgu = (torch.randn(2048, 2 * 768, device=DEV, generator=g) * 0.03).bfloat16()
    router = (torch.randn(2048, 128, device=DEV, generator=g) * 0.03).bfloat16()
    eager = _block(x, w, wgu, router)
    nt.reset_stats()
    compiled_fn = torch.compile(_block, dynamic=False, fullgraph=True)
    with nt.strict():
        got = compiled_fn(x, w, wgu, router)
    torch.cuda.synchronize()
    h, q, s, gu, q2, s2, logits, ids, wts = got
    assert _bytes_equal([h, q, s], list(eager[:3]))  # same inputs, same kernels: the same bytes
    # the matmuls are inductor's: the ops after them must equal the eager ops on what inductor fed them
    assert ref.relative_max_error(host(gu.float()), host(eager[3].float())) < 2e-2
    eq2, es2 = nt.silu_mul_fp8_quant(gu)
    eids, ewts = nt.moe_topk_softmax(logits, 8)
    assert _bytes_equal([q2, s2, ids, wts], [eq2, es2, eids, ewts])
    st = nt.stats()
    assert all(set(v) == {"certified"} for v in st.values()) and len(st) == 4, st


# -- strict mode, fallbacks on the GPU -----------------------------------------------------------------------


def _one_call(key: str, rows: int) -> None:
    import netra.torch as nt

    op, p = _contract(key)
    if op == "rmsnorm":
        nt.rmsnorm(
            torch.randn(rows, p["hidden"], device=DEV).bfloat16(),
            torch.ones(p["hidden"], device=DEV).bfloat16(),
            1e-6,
            p["weight_offset"],
        )
    elif op == "fp8_group_quant":
        nt.fp8_group_quant(torch.randn(rows, p["hidden"], device=DEV).bfloat16())
    elif op == "silu_mul_fp8_quant":
        nt.silu_mul_fp8_quant(torch.randn(rows, 2 * p["inter"], device=DEV).bfloat16())
    else:
        nt.moe_topk_softmax(torch.randn(rows, p["experts"], device=DEV).bfloat16(), p["topk"])


def test_strict_mode_passes_for_every_certified_shape() -> None:
    import netra.torch as nt

    with nt.strict():
        for key in SERVED:
            for rows in (1, 16, 8192):
                _one_call(key, rows)
    torch.cuda.synchronize()
    assert nt.stats() == {key: {"certified": 3} for key in SERVED}


def _first_row(key: str, x: torch.Tensor) -> list[torch.Tensor]:
    """Row 0 of every output of the contract's op on x (bits: compared with torch.equal on int views)."""
    import netra.torch as nt

    op, p = _contract(key)
    if op == "rmsnorm":
        outs: Any = nt.rmsnorm(x, torch.ones(p["hidden"], device=DEV).bfloat16(), 1e-6, p["weight_offset"])
    elif op == "fp8_group_quant":
        outs = nt.fp8_group_quant(x)
    elif op == "silu_mul_fp8_quant":
        outs = nt.silu_mul_fp8_quant(x)
    else:
        outs = nt.moe_topk_softmax(x, p["topk"])
    outs = outs if isinstance(outs, tuple) else (outs,)
    return [o[0].contiguous().view(torch.uint8).clone() for o in outs]


def test_batch_invariant_mode_gives_a_row_the_same_bits_at_every_row_count() -> None:
    """nt.set_batch_invariant(True): one tactic per contract, so row 0 alone and row 0 of 16 and of 8192 rows
    are the same bits for every certified contract (the default may switch tactics by rows)."""
    import netra.torch as nt

    prev = nt.set_batch_invariant(True)
    try:
        for key in SERVED:
            op, p = _contract(key)
            width = 2 * p["inter"] if op == "silu_mul_fp8_quant" else p.get("hidden", p.get("experts"))
            x = torch.randn(8192, width, device=DEV, generator=torch.Generator(DEV).manual_seed(7)).bfloat16()
            with nt.strict():
                alone, of16, of8192 = (_first_row(key, x[:m].contiguous()) for m in (1, 16, 8192))
            for a, b, c in zip(alone, of16, of8192, strict=True):
                assert torch.equal(a, b) and torch.equal(a, c), f"{key}: row 0's bits depend on the row count"
    finally:
        nt.set_batch_invariant(prev)


def test_strict_mode_raises_for_a_width_that_is_not_certified() -> None:
    import netra.torch as nt
    from netra.certify import reference as ref
    from netra.errors import StrictModeError

    x = torch.randn(8, 6144, device=DEV).bfloat16()
    w = torch.randn(6144, device=DEV).bfloat16()
    with nt.strict(), pytest.raises(StrictModeError) as e:
        nt.rmsnorm(x, w, 1e-6)
    assert e.value.contract == "rmsnorm(hidden=6144,weight_offset=0)" and e.value.code == "no_entry"
    print(e.value)
    y = nt.rmsnorm(x, w, 1e-6)  # outside strict mode: the composite, counted
    want = ref.rmsnorm(host(x), host(w), float(np.float32(1e-6)))
    assert ref.relative_max_error(host(y.float()), want) <= 2.0**-8 + 137 * 2.0**-24
    assert nt.stats() == {"rmsnorm(hidden=6144,weight_offset=0)": {"no_entry": 1}}


DRIVER_CHECK = """
import sys, torch
import netra.torch as nt
from netra.torch import composite
from netra.targets.host import Versions
from netra.targets.nvidia import NVIDIA
from netra.errors import StrictModeError

key = "rmsnorm(hidden=4096,weight_offset=0)"
if sys.argv[1] == "old":  # the vendor's reader states a driver below the minimum, before anything loads
    NVIDIA.versions = lambda: Versions("535.104.05", "CUDA 12.2", ("driver: stated",))
x = torch.randn(8, 4096, device="cuda:0").bfloat16()
w = torch.randn(4096, device="cuda:0").bfloat16()
y = nt.rmsnorm(x, w, 1e-6)
torch.cuda.synchronize()
print(nt.stats())
print(nt.prepare()[key])
if sys.argv[1] == "old":
    assert nt.stats() == {key: {"driver": 1}}, nt.stats()
    assert torch.equal(y, composite.rmsnorm(x, w, composite.f32(1e-6), 0))
    try:
        with nt.strict():
            nt.rmsnorm(x, w, 1e-6)
        raise AssertionError("strict mode served a driver fallback")
    except StrictModeError as e:
        assert e.code == "driver" and "535.104.05" in str(e) and ">= 580" in str(e), e
else:
    assert nt.stats() == {key: {"certified": 1}}, nt.stats()
    assert not nt.prepare()[key].startswith("fallback"), nt.prepare()
"""


@pytest.mark.parametrize("driver", ["real", "old"])
def test_the_driver_is_held_to_the_class_minimum_before_the_first_module_load(driver: str) -> None:
    """Issue 30, in a fresh process (no module loaded yet): with this host's driver, as `netra env` reads
    it, every contract is served; with the reader stating 535 (below sm_90's 580) the first call runs the
    composite as the counted `driver` fallback, prepare() says so, and strict mode refuses it."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-c", DRIVER_CHECK, driver], capture_output=True, text=True, check=False
    )
    print(r.stdout)
    assert r.returncode == 0, r.stderr


def test_strided_misaligned_and_fp16_inputs_fall_back_on_the_gpu() -> None:
    import netra.torch as nt

    w = torch.randn(4096, device=DEV).bfloat16()
    x = torch.randn(4096, 8, device=DEV).bfloat16().t()  # [8, 4096], not contiguous
    flat = torch.randn(8 * 4096 + 8, device=DEV).bfloat16()
    misaligned = flat[1 : 1 + 8 * 4096].view(8, 4096)  # contiguous, 2 bytes off a 16-byte boundary
    kernel_y = nt.rmsnorm(x.contiguous(), w, 1e-6)
    kernel_mis = nt.rmsnorm(misaligned.clone(), w, 1e-6)
    composite_y = nt.rmsnorm(x, w, 1e-6)
    composite_mis = nt.rmsnorm(misaligned, w, 1e-6)
    nt.rmsnorm(x.contiguous().half(), w, 1e-6)
    # composite and kernel both round once from fp32: at most one bf16 ulp apart
    for a, b in ((composite_y, kernel_y), (composite_mis, kernel_mis)):
        rel = (a.float() - b.float()).abs() / b.float().abs().clamp_min(1e-30)
        assert float(rel.max()) <= 2.0**-7
    assert nt.stats()["rmsnorm(hidden=4096,weight_offset=0)"] == {
        "certified": 2,
        "layout": 1,
        "alignment": 1,
        "dtype": 1,
    }


def test_the_ops_launch_on_the_current_stream_and_from_another_thread() -> None:
    import netra.torch as nt

    x = torch.randn(64, 4096, device=DEV).bfloat16()
    w = torch.randn(4096, device=DEV).bfloat16()
    want = nt.rmsnorm(x, w, 1e-6)
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = nt.rmsnorm(x, w, 1e-6)
    s.synchronize()
    assert torch.equal(y, want)
    box: dict[str, Any] = {}

    def worker() -> None:
        try:
            box["y"] = nt.rmsnorm(x, w, 1e-6)
            torch.cuda.synchronize()
        except BaseException as e:  # reported below
            box["error"] = e

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert "error" not in box, box.get("error")
    assert torch.equal(box["y"], want)
