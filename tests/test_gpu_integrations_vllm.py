"""On an H200 with vLLM installed: netra's vLLM plugin serves RMSNorm and GemmaRMSNorm (with and without the
residual) through the certified kernels at the widths sm_90's table serves, routes every other width to
vLLM's own CUDA forward (per shape, with the reason in routes()), refuses that in strict mode, and a CUDA
graph of the served layers replays what eager computed. The same for vLLM's routed experts: a FusedMoE
layer of an Fp8 checkpoint with 128 x 128 blocks at Qwen3-30B-A3B's shape (vLLM's TRITON backend on
Hopper, which keeps the weights as loaded) runs, through vLLM's MoERunner, fp8_group_quant and the certified
fp8_moe chain at up to 64 tokens, bit for bit what netra.torch computes on the same operands; 65 tokens run
vLLM's own Triton path, bit for bit, and strict mode refuses them; a CUDA graph replays eager.

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


E, K, H, I = 128, 8, 2048, 768  # noqa: E741 - Qwen3-30B-A3B's routed experts
EXPERTS = f"fp8_moe(experts={E},topk={K},hidden={H},inter={I})"


@pytest.fixture(scope="module")
def moe() -> Any:
    """A FusedMoE layer as vLLM builds it for Qwen3-30B-A3B-FP8 (softmax top-8, renormalized), on cuda:0, its
    weights random FP8 codes with block scales, processed as vLLM processes loaded weights."""
    import tempfile

    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized
    from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    import netra.integrations.vllm as plug

    plug.register()
    config = VllmConfig()
    with set_current_vllm_config(config):
        if not model_parallel_is_initialized():
            init_distributed_environment(1, 0, f"file://{tempfile.mkstemp()[1]}", 0, backend="gloo")
            initialize_model_parallel(1, 1)
        layer = FusedMoEFactory(
            num_experts=E, top_k=K, hidden_size=H, intermediate_size=I, params_dtype=torch.bfloat16,
            quant_config=Fp8Config(True, activation_scheme="dynamic", weight_block_size=[128, 128]),
            prefix="model.layers.0.mlp.experts",
        ).to(DEV)  # fmt: skip
        experts = layer.routed_experts
        g = torch.Generator(device=DEV).manual_seed(0)
        with torch.no_grad():
            for name in ("w13_weight", "w2_weight"):
                w = getattr(experts, name)
                w.copy_((torch.randn(w.shape, generator=g, device=DEV) * 64).clamp(-448, 448).to(w.dtype))
                sf = getattr(experts, f"{name}_scale_inv")
                sf.copy_(torch.rand(sf.shape, generator=g, device=DEV) * 1e-3 + 1e-4)
        experts.quant_method.process_weights_after_loading(experts)
    assert type(experts).__name__ == "NetraRoutedExperts"
    assert experts.quant_method.fp8_backend.value == "TRITON"  # vLLM's choice on Hopper without EP
    layer.netra_test_config = config  # what set_forward_context needs to find the layer by name
    return layer


def _call(moe: Any, tokens: int) -> tuple[Any, ...]:
    """The layer through vLLM's MoERunner, the router's top-k for the same tokens, and the tokens."""
    from vllm.forward_context import set_forward_context

    g = torch.Generator(device=DEV).manual_seed(tokens)
    x = torch.randn(tokens, H, generator=g, device=DEV).to(torch.bfloat16)
    logits = torch.randn(tokens, E, generator=g, device=DEV)
    with torch.no_grad(), set_forward_context(None, moe.netra_test_config):
        y = moe(x, logits)
        weights, ids = moe.router.select_experts(hidden_states=x, router_logits=logits)
    return y, x, weights, ids


def _netra(moe: Any, x: Any, weights: Any, ids: Any) -> Any:
    import netra.torch as nt

    e = moe.routed_experts
    xq, xs = nt.fp8_group_quant(x)
    return nt.fp8_moe(
        xq,
        xs,
        ids.int(),
        weights.float(),
        e.w13_weight,
        e.w13_weight_scale_inv,
        e.w2_weight,
        e.w2_weight_scale_inv,
    )


@pytest.mark.parametrize("tokens", [1, 16, 64])
def test_routed_experts_served_run_certified(moe: Any, tokens: int) -> None:
    import netra.integrations.vllm as plug
    import netra.torch as nt

    with nt.strict():
        y, x, weights, ids = _call(moe, tokens)
    assert nt.stats() == {
        f"fp8_group_quant(hidden={H},group=128)": {"certified": 1},
        EXPERTS: {"certified": 1},
    }
    assert plug.routes()[f"{EXPERTS} on cuda:0"] == "netra"
    with torch.no_grad():
        assert torch.equal(y, _netra(moe, x, weights, ids))


def test_routed_experts_past_the_chain_run_vllms_path_and_strict_refuses(moe: Any) -> None:
    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    import netra.torch as nt

    y, x, weights, ids = _call(moe, 65)
    assert nt.stats() == {}
    with torch.no_grad():
        assert torch.equal(
            y, RoutedExperts.forward_modular(moe.routed_experts, x, weights, ids)
        )  # vLLM's Triton
    with (
        nt.strict(),
        pytest.raises(nt.StrictModeError, match="65 tokens; the certified chain takes at most 64"),
    ):
        _call(moe, 65)


def test_routed_experts_cuda_graph_equals_eager(moe: Any) -> None:
    _, x, weights, ids = _call(moe, 8)
    experts = moe.routed_experts
    with torch.no_grad():
        eager = experts.forward_modular(x, weights, ids)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = experts.forward_modular(x, weights, ids)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)
