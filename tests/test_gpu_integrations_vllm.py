"""On an H200 with vLLM installed: netra's vLLM plugin serves RMSNorm and GemmaRMSNorm (with and without the
residual) through the certified kernels at the widths sm_90's table serves, routes every other width to
vLLM's own CUDA forward (per shape, with the reason in routes()), refuses that in strict mode, and a CUDA
graph of the served layers replays what eager computed.

The GPU image has no vLLM: carry its wheels (requirements/vllm.txt's closure, a CUDA torch of vLLM's pin)
as docs/gpu.md describes, then

    NETRA_TEST_INSTALLED=1 /path/to/venv/bin/pytest tests/test_gpu_integrations_vllm.py -v

Skipped where vLLM is not importable or there is no H200 (the gpu marker; CI has no GPU).
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("torch_state")]

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")

DEV = "cuda:0"


def _layers(hidden: int) -> tuple[Any, Any]:
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm

    import netra.integrations.vllm as plug

    plug.register()
    with set_current_vllm_config(VllmConfig(compilation_config=CompilationConfig(custom_ops=["all"]))):
        norm = RMSNorm(hidden, eps=1e-6, dtype=torch.bfloat16).to(DEV)
        gemma = GemmaRMSNorm(hidden, eps=1e-6).to(DEV, torch.bfloat16)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
        gemma.weight.normal_(0.0, 0.5)
    return norm, gemma


@pytest.mark.parametrize(("hidden", "offset"), [(4096, 0), (2048, 0), (3584, 1)])
def test_served_widths_run_certified(hidden: int, offset: int) -> None:
    import netra.integrations.vllm as plug
    import netra.torch as nt

    norm, gemma = _layers(hidden)
    layer = gemma if offset else norm
    x = torch.randn(16, hidden, device=DEV).to(torch.bfloat16)
    r = torch.randn(16, hidden, device=DEV).to(torch.bfloat16)
    with nt.strict(), torch.no_grad():
        y = layer(x)
        rr = r.clone()
        _, fr = layer(x, rr)
    assert nt.stats() == {
        f"rmsnorm(hidden={hidden},weight_offset={offset})": {"certified": 1},
        f"fused_add_rmsnorm(hidden={hidden},weight_offset={offset})": {"certified": 1},
    }
    assert plug.routes()[f"rmsnorm(hidden={hidden},weight_offset={offset}) on cuda:0"] == "netra"
    ref = layer.forward_native(x)
    assert (y.float() - ref.float()).abs().max() <= ref.float().abs().max() * 2**-7
    assert torch.equal(fr, (x.float() + r.float()).to(torch.bfloat16))


def test_unserved_width_runs_vllms_forward_and_strict_refuses() -> None:
    import netra.integrations.vllm as plug
    import netra.torch as nt

    norm, _ = _layers(6144)
    x = torch.randn(4, 6144, device=DEV).to(torch.bfloat16)
    with torch.no_grad():
        y = norm(x)
    assert nt.stats() == {}
    assert plug.routes()["rmsnorm(hidden=6144,weight_offset=0) on cuda:0"].startswith("vllm: no_entry")
    with torch.no_grad():
        assert torch.equal(y, type(norm).__mro__[1].forward_cuda(norm, x))  # vLLM's own forward
    with nt.strict(), pytest.raises(nt.StrictModeError), torch.no_grad():
        norm(x)


def test_cuda_graph_equals_eager() -> None:
    norm, _ = _layers(4096)
    x = torch.randn(8, 4096, device=DEV).to(torch.bfloat16)
    with torch.no_grad():
        eager = norm(x)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = norm(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
