"""On an H200: Hugging Face transformers models of the published shapes (two decoder layers of each config in
tests/hf_models.py whose every norm contract release/tables/sm_90.json certifies: hf_models.served) with
netra.integrations.transformers.apply_netra: every norm call served by the certified kernel under strict mode,
the logits those of the unpatched model within a bf16 tolerance (the kernel reduces in another order than
torch, and the Llama-style norms round twice where netra rounds once), and a CUDA graph of the forward equal
to eager.

Run on the GPU machine against an installed wheel (docs/gpu.md), with the image's transformers:

    NETRA_TEST_INSTALLED=1 /path/to/venv/bin/pytest tests/test_gpu_integrations_transformers.py -v

Skipped elsewhere (the gpu marker; CI has no GPU).
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("torch_state")]

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_models  # noqa: E402
from conftest import release_table  # noqa: E402

DEV = "cuda:0"
# The published configs whose every norm contract (apply_netra's, on the config's own modules) has an
# accepted candidate in sm_90's release table: derived, so a width certified there is tested here.
SERVED = hf_models.served(release_table("sm_90"))


def _tokens(seq: int) -> Any:
    return torch.randint(0, 32000, (1, seq), generator=torch.Generator().manual_seed(3)).to(DEV)


def _forward(model: Any, tokens: Any) -> Any:
    with torch.no_grad():
        return model(tokens, use_cache=False).logits


@pytest.mark.parametrize("name", SERVED)
def test_published_shapes_served_certified(name: str) -> None:
    import netra.torch as nt
    from netra.integrations.transformers import apply_netra

    model = hf_models.build(hf_models.published(name, layers=2), torch.bfloat16, DEV)
    for seq in (1, 16):  # a decode step, a short prefill
        tokens = _tokens(seq)
        before = _forward(model, tokens)
        report = apply_netra(model, strict=True)
        nt.prepare(keys=sorted({r.contract for r in report.replaced}))
        nt.reset_stats()
        with nt.strict():
            after = _forward(model, tokens)
        stats = nt.stats()
        assert set(stats) == {r.contract for r in report.replaced}
        assert all(set(paths) == {"certified"} for paths in stats.values()), stats
        assert sum(p["certified"] for p in stats.values()) == len(report.replaced)
        # not bit for bit even for Gemma-2: the kernel sums the squares in its own order, torch's mean in
        # another (the kernel is certified against the float64 reference, docs/certify.md)
        torch.testing.assert_close(after.float(), before.float(), atol=0.05, rtol=0.05)
        report.restore()


@pytest.mark.parametrize("name", SERVED)
def test_cuda_graph_equals_eager(name: str) -> None:
    from netra.integrations.transformers import apply_netra

    model = hf_models.build(hf_models.published(name, layers=2), torch.bfloat16, DEV)
    apply_netra(model, strict=True)
    tokens = _tokens(1)
    eager = _forward(model, tokens)  # warm-up: loads every module before the capture
    assert torch.equal(_replayed(model, tokens), eager)


def _replayed(model: Any, tokens: Any) -> Any:
    """The forward captured in a CUDA graph under strict mode (after a warm-up on a side stream), replayed."""
    import netra.torch as nt

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        _forward(model, tokens)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with nt.strict(), torch.cuda.graph(graph):
        captured = _forward(model, tokens)
    graph.replay()
    torch.cuda.synchronize()
    return captured


# The routed experts of an FP8 checkpoint: Qwen3-30B-A3B's published shape (128 experts, top-8, hidden 2048,
# inter 768) made transformers' FP8Experts (hf_models.fp8_experts), one decoder layer. transformers' own FP8
# experts need a kernel it downloads from the Hugging Face hub, which the H200 cannot reach: the reference is
# the float64 definition (hf_models.moe_reference) on the GPU.
MOE = "Qwen3-30B-A3B"


@pytest.mark.skipif(MOE not in SERVED, reason=f"{MOE}'s norms are not all certified in sm_90's table")
def test_fp8_experts_served_certified_and_in_cuda_graphs() -> None:
    import netra.torch as nt
    from netra.integrations.transformers import apply_netra

    model = hf_models.build(hf_models.published(MOE, layers=1), torch.bfloat16, DEV)
    experts = hf_models.fp8_experts(model)
    report = apply_netra(model, strict=True)
    moe = sorted(r.contract for r in report.replaced if r.contract.startswith("fp8_moe"))
    assert moe == ["fp8_moe(experts=128,topk=8,hidden=2048,inter=768)"], moe
    stages = [f"{op}(experts=128,topk=8,hidden=2048,inter=768)" for op in ("fp8_moe_gate_up", "fp8_moe_down")]
    norms = sorted({r.contract for r in report.replaced} - set(moe))
    said = nt.prepare(keys=[*norms, "fp8_group_quant(hidden=2048,group=128)", *stages])
    assert not any(v.startswith("fallback") for v in said.values()), said
    mod = model.get_submodule(experts[0])
    gen = torch.Generator().manual_seed(7)
    for tokens in (1, 8, 64):
        x = torch.randn(tokens, 2048, generator=gen).to(torch.bfloat16).to(DEV)
        ids_ = torch.stack([torch.randperm(128, generator=gen)[:8] for _ in range(tokens)]).to(DEV)
        w = torch.softmax(torch.randn(tokens, 8, generator=gen), -1).to(torch.bfloat16).to(DEV)
        nt.reset_stats()
        with nt.strict(), torch.no_grad():
            got = mod(x, ids_, w)
        stats = nt.stats()
        assert all(set(paths) == {"certified"} for paths in stats.values()), stats
        ref = hf_models.moe_reference(
            x, ids_, w, mod.gate_up_proj, mod.gate_up_proj_scale_inv, mod.down_proj, mod.down_proj_scale_inv
        )
        err = float((got.double() - ref).norm() / ref.norm())
        assert err < 2e-2, (tokens, err)
    # the whole decoder layer's decode step in strict mode, eager and as a CUDA graph
    tokens = _tokens(1)
    nt.reset_stats()
    with nt.strict():
        eager = _forward(model, tokens)
    assert all(set(paths) == {"certified"} for paths in nt.stats().values()), nt.stats()
    assert torch.equal(_replayed(model, tokens), eager)
    report.restore()
