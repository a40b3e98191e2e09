"""netra.integrations.transformers on CPU, with the real transformers (the test extra's pin) and tiny random
models built from published configs (tests/hf_models.py; no network).

On CPU netra.torch runs its composite for every norm call (the `device` fallback, counted), so these check
the wiring the GPU serves through the same calls: every supported norm module replaced, its weight, eps and
offset passed on, outputs equal to the unpatched model's (bit for bit in fp32 for every architecture and in
bf16 for Gemma's, within one bf16 ulp per norm output for the Llama-style classes, which round twice where
netra rounds once: docs/ops/rmsnorm.md), every call counted, and restore() undoing it all. The published
shapes, served certified under strict mode and in CUDA graphs, are tests/test_gpu_integrations_transformers.py.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import hf_models  # noqa: E402
from conftest import REPO  # noqa: E402

import netra.torch as nt  # noqa: E402
from netra.errors import IntegrationError  # noqa: E402
from netra.integrations.transformers import NetraRMSNorm, apply_netra  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_state")
MODELS = sorted(hf_models.PUBLISHED)


def ids(batch: int = 2, seq: int = 7) -> Any:
    return torch.randint(0, 512, (batch, seq), generator=torch.Generator().manual_seed(1))


def logits(model: Any, tokens: Any) -> Any:
    with torch.no_grad():
        return model(tokens).logits


def norm_modules(model: Any) -> list[str]:
    return sorted(n for n, m in model.named_modules() if "Norm" in type(m).__name__)


@pytest.mark.parametrize("name", MODELS)
def test_fp32_outputs_equal_and_every_call_counted(name: str) -> None:
    model = hf_models.build(hf_models.tiny(name), torch.float32)
    tokens = ids()
    before = logits(model, tokens)
    originals = dict(model.named_modules())
    norms = norm_modules(model)
    model_type = hf_models.PUBLISHED[name][0]
    assert len(norms) == 2 * hf_models.NORMS_PER_LAYER[model_type] + 1  # two layers and the final norm

    report = apply_netra(model)
    assert sorted(r.name for r in report.replaced) == norms
    assert report.kept == {}
    assert all(isinstance(model.get_submodule(n), NetraRMSNorm) for n in norms)
    offset = hf_models.OFFSET[name]
    assert {r.contract for r in report.replaced} >= {f"rmsnorm(hidden=256,weight_offset={offset})"}
    assert list(report.not_fused) == [
        f"transformers.models.{model_type}.modeling_{model_type}.{_layer(model)}"
    ]

    nt.reset_stats()
    after = logits(model, tokens)
    assert torch.equal(before, after)
    stats = nt.stats()
    # one call per norm module per forward, every one the composite on CPU (the `device` fallback)
    assert sum(n for paths in stats.values() for n in paths.values()) == len(norms)
    assert {code for paths in stats.values() for code in paths} == {"device"}
    assert set(stats) == {r.contract for r in report.replaced}

    report.restore()
    assert all(model.get_submodule(n) is originals[n] for n in norms)
    assert torch.equal(logits(model, tokens), before)


def _layer(model: Any) -> str:
    return type(model.model.layers[0]).__name__


@pytest.mark.parametrize("name", MODELS)
def test_bf16_norm_outputs_against_transformers(name: str) -> None:
    """Every norm module's output on the inputs the model gives it: Gemma's bit-equal, the Llama-style
    classes within one bf16 ulp (they round x * rsqrt to bf16 before * w; netra rounds once)."""
    model = hf_models.build(hf_models.tiny(name), torch.bfloat16)
    tokens = ids()
    seen: dict[str, Any] = {}

    def keep(name: str) -> Any:
        def hook(module: Any, args: Any, out: Any) -> None:  # returns None: the output stays
            seen.setdefault(name, (args[0], out))

        return hook

    hooks = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if "Norm" in type(m).__name__]
    before = logits(model, tokens)
    for h in hooks:
        h.remove()
    report = apply_netra(model)
    exact = {r.exact for r in report.replaced}
    assert exact == {hf_models.OFFSET[name] == 1}
    for n, (x, hf) in seen.items():
        with torch.no_grad():
            ours = model.get_submodule(n)(x)
        assert ours.dtype == hf.dtype == torch.bfloat16
        if exact == {True}:
            assert torch.equal(ours, hf), n
        else:
            assert _ulps(ours, hf) <= 1, n
    if exact == {True}:
        assert torch.equal(logits(model, tokens), before)


def _ulps(a: Any, b: Any) -> int:
    """The largest distance between two bf16 tensors in units in the last place (same-sign values)."""
    ia, ib = a.view(torch.int16).int(), b.view(torch.int16).int()
    same = (a.sign() == b.sign()) | (a == 0) | (b == 0)
    assert bool(same.all())
    return int((ia - ib).abs().max())


def test_a_view_of_part_of_each_row_reaches_netra_contiguous(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSeek-V3's kv_a_layernorm normalizes the first kv_lora_rank columns of kv_a_proj_with_mqa's output,
    a view whose rows are not contiguous; the kernel reads contiguous rows (on a GPU such a call would run
    the composite, and strict mode would refuse it), so NetraRMSNorm hands netra.torch a contiguous copy.
    Every call is watched on its way into nt.rmsnorm, which still computes it."""
    model = hf_models.build(hf_models.tiny("DeepSeek-V3"), torch.bfloat16)
    apply_netra(model)
    given: dict[str, bool] = {}
    passed: list[bool] = []
    rmsnorm = nt.rmsnorm

    def watch(x: Any, *args: Any) -> Any:
        passed.append(x.is_contiguous())
        return rmsnorm(x, *args)

    def keep(name: str) -> Any:
        def hook(module: Any, args: Any) -> None:
            given[name] = args[0].is_contiguous()

        return hook

    monkeypatch.setattr(nt, "rmsnorm", watch)
    for n, m in model.named_modules():
        if isinstance(m, NetraRMSNorm):
            m.register_forward_pre_hook(keep(n))
    logits(model, ids())
    assert sorted(n for n, contiguous in given.items() if not contiguous) == [
        f"model.layers.{i}.self_attn.kv_a_layernorm" for i in (0, 1)
    ]
    assert len(passed) == len(given) == 9 and all(passed)


def test_state_dict_and_parameters_unchanged() -> None:
    """The replacement holds the original's Parameter: loading, saving and device moves see one tensor."""
    model = hf_models.build(hf_models.tiny("Qwen3-8B"), torch.float32)
    keys = list(model.state_dict())
    weight = model.model.layers[0].self_attn.q_norm.weight
    apply_netra(model)
    assert list(model.state_dict()) == keys
    assert model.model.layers[0].self_attn.q_norm.weight is weight
    assert model.model.layers[0].self_attn.q_norm.eps == pytest.approx(1e-6)


def test_unsupported_norms_are_reported_and_strict_refuses() -> None:
    """A norm class without a rule (Phi-3's) stays transformers' code and the report says why; strict=True
    refuses with one line and changes nothing."""
    from transformers import AutoConfig

    config = AutoConfig.for_model(
        "phi3", hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, vocab_size=512, pad_token_id=0,
    )  # fmt: skip
    model = hf_models.build(config, torch.float32)
    with pytest.raises(IntegrationError, match=r"^apply_netra\(strict=True\): Phi3ForCausalLM\.model\.") as e:
        apply_netra(model, strict=True)
    assert "\n" not in str(e.value)
    assert not any(isinstance(m, NetraRMSNorm) for m in model.modules())

    report = apply_netra(model)
    assert report.replaced == []
    assert set(report.kept) == set(norm_modules(model))
    assert all("Phi3RMSNorm has no rule here" in why for why in report.kept.values())
    assert "kept model.norm: transformers.models.phi3.modeling_phi3.Phi3RMSNorm has no rule" in str(report)


def test_twice_and_restore() -> None:
    model = hf_models.build(hf_models.tiny("Gemma-2-9B"), torch.float32)
    first = apply_netra(model)
    second = apply_netra(model)
    assert second.replaced == []
    assert all(why.startswith("already served by netra.torch") for why in second.kept.values())
    first.restore()
    assert not any(isinstance(m, NetraRMSNorm) for m in model.modules())
    assert first.as_dict()["replaced"][0]["contract"] == "rmsnorm(hidden=256,weight_offset=1)"


def test_not_a_model() -> None:
    with pytest.raises(
        IntegrationError, match=r"^apply_netra: expected a torch.nn.Module .*, got dict; hint:"
    ):
        apply_netra({})  # type: ignore[arg-type]


def test_strict_mode_refuses_the_composite() -> None:
    """nt.strict() around the forward: on CPU every norm call would run the composite, so the first raises."""
    model = hf_models.build(hf_models.tiny("Llama-3.1-8B"), torch.bfloat16)
    apply_netra(model, strict=True)
    with nt.strict(), pytest.raises(nt.StrictModeError, match=r"rmsnorm\(hidden=256,weight_offset=0\)"):
        logits(model, ids())


def test_torch_compile_fullgraph() -> None:
    """torch.compile of the patched model (aot_eager, fullgraph): the norms trace as netra operators and
    the outputs equal eager."""
    model = hf_models.build(hf_models.tiny("Qwen3-30B-A3B"), torch.float32)
    apply_netra(model)
    tokens = ids(1, 5)
    eager = logits(model, tokens)
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    assert torch.equal(logits(compiled, tokens), eager)


def test_the_package_imports_no_engine() -> None:
    """`import netra.integrations` imports neither torch nor an engine; the transformers integration imports
    torch (through netra.torch) but not transformers."""
    import subprocess
    import sys

    from conftest import REPO

    code = (
        "import sys, netra.integrations\n"
        "assert not {'torch', 'transformers', 'vllm'} & set(sys.modules)\n"
        "import netra.integrations.transformers\n"
        "assert 'torch' in sys.modules and not {'transformers', 'vllm'} & set(sys.modules)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr


def test_a_class_computed_otherwise_keeps_its_code() -> None:
    """The rules are checked, not assumed: a class under a supported name whose forward is not netra's
    rmsnorm (here eps outside the root, as a transformers release could write it) fails the probe and
    stays transformers' code, named in the report; the real classes of the model are still served."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    class Changed(LlamaRMSNorm):  # type: ignore[misc]
        def forward(self, x: Any) -> Any:
            xf = x.float()
            y = xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + self.variance_epsilon)
            return self.weight * y.to(x.dtype)

    Changed.__module__, Changed.__name__ = LlamaRMSNorm.__module__, LlamaRMSNorm.__name__
    Changed.__qualname__ = LlamaRMSNorm.__qualname__
    model = hf_models.build(hf_models.tiny("Llama-3.1-8B"), torch.float32)
    changed = Changed(256, eps=1e-5)
    changed.weight = model.model.norm.weight
    model.model.norm = changed
    before = logits(model, ids())
    report = apply_netra(model)
    assert report.kept == {
        "model.norm": "transformers.models.llama.modeling_llama.LlamaRMSNorm's forward is not netra's rmsnorm "
        "on a probe (fp32, CPU): this transformers (5.17.0) computes it otherwise than the one the rule was "
        "written for"
    }
    assert len(report.replaced) == 4 and model.model.norm is changed
    assert torch.equal(logits(model, ids()), before)


# The five published models the H200 run of 2026-12-05 served certified (docs/integrations.md).
RUN_ON_H200 = ["Llama-3.1-8B", "Mistral-7B-v0.3", "Qwen3-8B", "Qwen3-30B-A3B", "Gemma-2-9B"]


def _accepting(table: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """`table` with every candidate of the contracts in `keys` accepted and every other at experiment."""
    table = copy.deepcopy(table)
    for entry in table["entries"]:
        for candidate in entry["candidates"]:
            candidate["maturity"] = "accepted" if entry["key"] in keys else "experiment"
    return table


def test_the_gpu_tests_models_are_derived_from_the_table() -> None:
    """hf_models.served, the GPU test's parameters: sm_90's release table keeps the five the H200 ran, and
    on tables certifying other contracts a model is in exactly when each of its norm contracts is
    certified, its weight offset included (Gemma-2-9B's 3584 with offset 1 has an entry, Qwen2.5-7B's
    with offset 0 none; Gemma-7B's 3072 none), DeepSeek-V3's MLA latent norms included."""
    table = json.loads((REPO / "release" / "tables" / "sm_90.json").read_text())
    assert [name for name in hf_models.served(table) if name in RUN_ON_H200] == RUN_ON_H200

    h4096, h128 = "rmsnorm(hidden=4096,weight_offset=0)", "rmsnorm(hidden=128,weight_offset=0)"
    assert hf_models.served(_accepting(table, set())) == []
    assert hf_models.served(_accepting(table, {h4096})) == ["Llama-3.1-8B", "Mistral-7B-v0.3"]
    with_qk = hf_models.served(_accepting(table, {h4096, h128}))
    assert with_qk == ["Llama-3.1-8B", "Mistral-7B-v0.3", "Qwen3-8B"]
    every = hf_models.served(_accepting(table, {entry["key"] for entry in table["entries"]}))
    assert every == [name for name in hf_models.PUBLISHED if name not in ("Qwen2.5-7B", "Gemma-7B")]
    assert {"Qwen3-14B", "Qwen3-32B", "Llama-3.1-70B", "DeepSeek-V3"} < set(every)

    # DeepSeek-V3: the 7168-wide norms and MLA's q_a (1536) and kv_a (512) latent norms, each needed
    assert "DeepSeek-V3" in hf_models.served(table)
    mla = {f"rmsnorm(hidden={h},weight_offset=0)" for h in (7168, 1536, 512)}
    assert hf_models.served(_accepting(table, mla)) == ["DeepSeek-V3"]
    for key in sorted(mla):
        assert hf_models.served(_accepting(table, mla - {key})) == [], key


def test_published_norms_are_the_model_manifests() -> None:
    """The norm contracts apply_netra finds in each published config are the rmsnorm contracts of the
    model's manifest (manifests/models/, read by netra's own parser): the configs here and the manifests
    cite the same config.json."""
    from netra.core import models, toml
    from netra.core.ops import contract_key

    manifests = {}
    for path in sorted((REPO / "manifests" / "models").glob("*.toml")):
        m = models.parse(toml.load(path), f"manifests/models/{path.name}")
        manifests[m.model] = {contract_key(op, params) for op, params in m.needs if op == "rmsnorm"}
    checked = [name for name in hf_models.PUBLISHED if name in manifests]
    assert {"Qwen3-14B", "Qwen3-32B", "Llama-3.1-70B", "DeepSeek-V3", *RUN_ON_H200} <= set(checked)
    for name in checked:
        assert hf_models.norm_contracts(name) == manifests[name], name


# ---- the routed experts of an FP8 checkpoint (transformers' FP8Experts) --------------------------------


def _moe_model(seed: int = 0) -> tuple[Any, list[str]]:
    model = hf_models.build(hf_models.tiny("Qwen3-30B-A3B"), torch.bfloat16, seed=seed)
    return model, hf_models.fp8_experts(model, seed)


def test_fp8_experts_served_through_fp8_moe_within_the_definitions_rounding() -> None:
    from netra.integrations.transformers import NetraFP8Experts

    model, experts = _moe_model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    report = apply_netra(model, experts="netra")
    assert experts and {r.name for r in report.replaced if r.contract.startswith("fp8_moe")} == set(experts)
    assert sorted(model.state_dict()) == sorted(state)  # the same Parameters under the same names
    mod = model.get_submodule(experts[0])
    assert isinstance(mod, NetraFP8Experts)
    gen = torch.Generator().manual_seed(5)
    x = (torch.randn(5, 256, generator=gen) * 2).to(torch.bfloat16)
    ids_ = torch.stack([torch.randperm(8, generator=gen)[:2] for _ in range(5)])
    w = torch.softmax(torch.randn(5, 2, generator=gen), -1).to(torch.bfloat16)
    nt.reset_stats()
    with torch.no_grad():
        got = mod(x, ids_, w).double()
    ref = hf_models.moe_reference(
        x, ids_, w, mod.gate_up_proj, mod.gate_up_proj_scale_inv, mod.down_proj, mod.down_proj_scale_inv
    )
    bad = hf_models.moe_reference(
        x, ids_, w, mod.gate_up_proj, mod.gate_up_proj_scale_inv, mod.down_proj, mod.down_proj_scale_inv, True
    )
    err = float((got - ref).norm() / ref.norm())
    print(f"relative error {err:.2e}")
    assert err < 2e-2, err  # bf16 output, the fp32 sums, a few FP8 codes one step apart at most
    assert float((bad - ref).norm() / ref.norm()) > 0.3  # the bound tells a swapped gate and up apart
    stats = nt.stats()
    assert any(k.startswith("fp8_moe(") for k in stats), (
        stats
    )  # the call went through netra.torch (CPU: composite)
    with torch.no_grad():
        assert torch.isfinite(model(ids()).logits).all()  # the whole model runs with the experts swapped
    report.restore()
    assert type(model.get_submodule(experts[0])).__name__ == "FP8Experts"


def test_fp8_experts_auto_routes_calls_netra_does_not_serve_to_transformers() -> None:
    from netra.errors import StrictModeError
    from netra.integrations.transformers import expert_routes

    model, experts = _moe_model()
    apply_netra(model)  # auto: on CPU tensors no call is netra's
    mod = model.get_submodule(experts[0])
    x = torch.zeros(3, 256, dtype=torch.bfloat16)
    ids_ = torch.tensor([[0, 1], [2, 3], [4, 5]])
    why = mod._route(x, ids_)
    assert "CUDA" in why
    with (
        nt.strict(),
        pytest.raises(StrictModeError, match=r"fp8_moe\(experts=8,topk=2,hidden=256,inter=128\)"),
    ):
        mod(x, ids_, torch.full((3, 2), 0.5, dtype=torch.bfloat16))
    assert isinstance(expert_routes(), dict)


def test_fp8_experts_netra_does_not_compute_are_kept_and_strict_refuses() -> None:
    model, experts = _moe_model()
    model.get_submodule(experts[0]).activation_scheme = "static"
    report = apply_netra(model)
    assert "static activation scales" in report.kept[experts[0]]
    assert experts[1] not in report.kept
    model2, experts2 = _moe_model()
    model2.get_submodule(experts2[1]).block_size = (1, 128)
    before = {n: type(m) for n, m in model2.named_modules()}
    with pytest.raises(IntegrationError, match="128 x 128"):
        apply_netra(model2, strict=True)
    assert {n: type(m) for n, m in model2.named_modules()} == before  # nothing replaced
    off = apply_netra(model2, experts="off")
    assert not any(r.contract.startswith("fp8_moe") for r in off.replaced) and not set(experts2) & set(
        off.kept
    )
    with pytest.raises(IntegrationError, match="experts="):
        apply_netra(model2, experts="sometimes")
