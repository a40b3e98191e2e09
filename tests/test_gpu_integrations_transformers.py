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
    import netra.torch as nt
    from netra.integrations.transformers import apply_netra

    model = hf_models.build(hf_models.published(name, layers=2), torch.bfloat16, DEV)
    apply_netra(model, strict=True)
    tokens = _tokens(1)
    eager = _forward(model, tokens)  # warm-up: loads every module before the capture
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
    assert torch.equal(captured, eager)
