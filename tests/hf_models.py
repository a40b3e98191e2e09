"""Published model configurations, written down from each model's config.json on the Hugging Face Hub (the
values that shape the norms and the decoder; no network at test time), and tiny random models built from
them with the real transformers.

`published(name)` is the config as released (the GPU tests run it with two layers: the published norm
widths; `served(table)` names those whose every norm contract a release table certifies); `tiny(name)`
shrinks what costs CPU time (layers, hidden, heads, vocab, experts) and keeps what decides the norms'
numerics: the architecture, eps, Gemma's (1 + w), Qwen3's 128-wide q/k norms.
"""

from __future__ import annotations

import functools
from typing import Any

# model -> (model_type, the published config.json values used here)
PUBLISHED: dict[str, tuple[str, dict[str, Any]]] = {
    # meta-llama/Llama-3.1-8B
    "Llama-3.1-8B": (
        "llama",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_hidden_layers": 32,
            "rms_norm_eps": 1e-05,
            "rope_theta": 500000.0,
            "vocab_size": 128256,
            "max_position_embeddings": 131072,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # meta-llama/Llama-3.1-70B
    "Llama-3.1-70B": (
        "llama",
        {
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_hidden_layers": 80,
            "rms_norm_eps": 1e-05,
            "rope_theta": 500000.0,
            "vocab_size": 128256,
            "max_position_embeddings": 131072,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # mistralai/Mistral-7B-v0.3
    "Mistral-7B-v0.3": (
        "mistral",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 32,
            "rms_norm_eps": 1e-05,
            "rope_theta": 1000000.0,
            "vocab_size": 32768,
            "max_position_embeddings": 32768,
            "sliding_window": None,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # Qwen/Qwen2.5-7B
    "Qwen2.5-7B": (
        "qwen2",
        {
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "num_hidden_layers": 28,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "vocab_size": 152064,
            "max_position_embeddings": 131072,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # Qwen/Qwen3-8B
    "Qwen3-8B": (
        "qwen3",
        {
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_hidden_layers": 36,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # Qwen/Qwen3-14B
    "Qwen3-14B": (
        "qwen3",
        {
            "hidden_size": 5120,
            "intermediate_size": 17408,
            "num_attention_heads": 40,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_hidden_layers": 40,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # Qwen/Qwen3-32B
    "Qwen3-32B": (
        "qwen3",
        {
            "hidden_size": 5120,
            "intermediate_size": 25600,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "num_hidden_layers": 64,
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # Qwen/Qwen3-30B-A3B
    "Qwen3-30B-A3B": (
        "qwen3_moe",
        {
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "num_hidden_layers": 48,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "norm_topk_prob": True,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "rms_norm_eps": 1e-06,
            "rope_theta": 1000000.0,
            "vocab_size": 151936,
            "max_position_embeddings": 40960,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # deepseek-ai/DeepSeek-V3 (quantization_config, FP8 e4m3 in 128 x 128 blocks, left out: the norms
    # and the decoder are built in the dtype asked for)
    "DeepSeek-V3": (
        "deepseek_v3",
        {
            "hidden_size": 7168,
            "intermediate_size": 18432,
            "moe_intermediate_size": 2048,
            "num_attention_heads": 128,
            "num_key_value_heads": 128,
            "q_lora_rank": 1536,
            "kv_lora_rank": 512,
            "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64,
            "v_head_dim": 128,
            "num_hidden_layers": 61,
            "first_k_dense_replace": 3,
            "n_routed_experts": 256,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
            "n_group": 8,
            "topk_group": 4,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.5,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0,
            "rope_scaling": {
                "type": "yarn",
                "factor": 40,
                "original_max_position_embeddings": 4096,
                "beta_fast": 32,
                "beta_slow": 1,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
            },
            "vocab_size": 129280,
            "max_position_embeddings": 163840,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
        },
    ),
    # google/gemma-7b
    "Gemma-7B": (
        "gemma",
        {
            "hidden_size": 3072,
            "intermediate_size": 24576,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "head_dim": 256,
            "num_hidden_layers": 28,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0,
            "vocab_size": 256000,
            "max_position_embeddings": 8192,
            "hidden_activation": "gelu_pytorch_tanh",
        },
    ),
    # google/gemma-2-9b
    "Gemma-2-9B": (
        "gemma2",
        {
            "hidden_size": 3584,
            "intermediate_size": 14336,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "head_dim": 256,
            "num_hidden_layers": 42,
            "rms_norm_eps": 1e-06,
            "rope_theta": 10000.0,
            "vocab_size": 256000,
            "max_position_embeddings": 8192,
            "query_pre_attn_scalar": 256,
            "sliding_window": 4096,
            "attn_logit_softcapping": 50.0,
            "final_logit_softcapping": 30.0,
            "hidden_activation": "gelu_pytorch_tanh",
        },
    ),
}
# Gemma's norm weights are stored as w in x * (1 + w); Llama's as w in x * w.
OFFSET = {name: 1 if mt.startswith("gemma") else 0 for name, (mt, _) in PUBLISHED.items()}
# Norm modules per decoder layer: input and post-attention, Gemma-2's pre/post feed-forward, Qwen3's q/k,
# DeepSeek-V3's MLA q_a/kv_a (over the q and kv latents).
NORMS_PER_LAYER = {
    "llama": 2, "mistral": 2, "qwen2": 2, "gemma": 2, "gemma2": 4, "qwen3": 4, "qwen3_moe": 4, "deepseek_v3": 4,
}  # fmt: skip
_SHRINK = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "vocab_size": 512}


def published(name: str, layers: int | None = None) -> Any:
    """The transformers config of `name` as released (with `layers` decoder layers if given)."""
    from transformers import AutoConfig

    model_type, values = PUBLISHED[name]
    values = dict(values)
    if layers is not None:
        values["num_hidden_layers"] = layers
    return AutoConfig.for_model(model_type, **values)


def tiny(name: str) -> Any:
    """The config of `name` shrunk for CPU: two layers, hidden 256, two heads (head_dim 128, so Qwen3's q/k
    norms keep their published width), eight experts; eps, offsets and softcaps as published. DeepSeek-V3
    keeps its MLA widths (the q_a/kv_a norms at 1536 and 512, kv_a's a view of part of each row) and
    has one dense layer, then one MoE layer (eight experts in four groups, two groups and two experts
    chosen)."""
    from transformers import AutoConfig

    model_type, values = PUBLISHED[name]
    values = {**values, **_SHRINK, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128}
    if model_type == "qwen3_moe":
        values.update(moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2)
    if model_type == "deepseek_v3":  # MLA expands its latent to every head: as many kv heads as heads
        del values["head_dim"]  # its config derives it: qk_rope_head_dim, the rotary width
        values.update(
            num_key_value_heads=2, moe_intermediate_size=128, first_k_dense_replace=1, n_routed_experts=8,
            num_experts_per_tok=2, n_group=4, topk_group=2,
        )  # fmt: skip
    if model_type == "gemma2":
        values.update(query_pre_attn_scalar=128, sliding_window=16)
    return AutoConfig.for_model(model_type, **values)


def build(config: Any, dtype: Any, device: str = "cpu", seed: int = 0) -> Any:
    """A random model of `config` in eval mode, its norm weights random too (the published init, ones or
    zeros, would hide a weight or an offset applied wrongly)."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    with torch.device(device):  # made where it runs: the published embeddings are gigabytes
        model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name and p.dim() == 1:
                p.normal_(0.0, 0.5)
    return model


@functools.cache  # collected by the GPU test's parametrize and asked again by the CPU tests
def norm_contracts(name: str) -> frozenset[str]:
    """The rmsnorm contracts apply_netra asks for on the published config of `name`, read from its report
    on a two-layer build on the meta device (no memory; the probe skips meta weights): the widths and
    offsets are apply_netra's own, not restated here. strict=True: a norm it would keep is an error."""
    import torch

    from netra.integrations.transformers import apply_netra

    model = build(published(name, layers=2), torch.bfloat16, "meta")
    return frozenset(r.contract for r in apply_netra(model, strict=True).replaced)


def served(table: dict[str, Any]) -> list[str]:
    """The published models whose every norm contract has an accepted candidate in `table` (a release
    table's JSON, e.g. release/tables/sm_90.json): those whose norms strict mode serves certified."""
    from conftest import accepted

    certified = set(accepted(table))
    return [name for name in PUBLISHED if norm_contracts(name) <= certified]


def fp8_experts(model: Any, seed: int = 0) -> list[str]:
    """Each routed-experts module of `model` (Qwen3-MoE's `mlp.experts`) made what loading a FineGrainedFP8
    checkpoint (Qwen3-30B-A3B-FP8) makes of it: transformers' own FP8Experts class, gate_up_proj [E, 2I, H]
    and down_proj [E, H, I] in E4M3FN with float32 scales per 128 x 128 block, random (each block's codes
    spanning the format, scales about 2^-8). Returns the modules' names."""
    import torch
    from transformers.integrations.finegrained_fp8 import ALL_FP8_EXPERTS_FUNCTIONS, FP8Experts
    from transformers.integrations.moe import use_experts_implementation

    cls = use_experts_implementation(FP8Experts, experts_interface=ALL_FP8_EXPERTS_FUNCTIONS)
    gen = torch.Generator().manual_seed(seed)
    names = []
    for name, module in list(model.named_modules()):
        if not name.endswith(".experts"):
            continue
        device = next(module.parameters()).device
        fp8 = cls(config=module.config, block_size=(128, 128))
        with torch.no_grad():
            for proj in ("gate_up_proj", "down_proj"):
                w, sf = getattr(fp8, proj), getattr(fp8, f"{proj}_scale_inv")
                codes = (torch.randn(w.shape, generator=gen) * 96).clamp(-448, 448).to(torch.float8_e4m3fn)
                scales = torch.rand(sf.shape, generator=gen) * 2**-7 + 2**-9
                w.data = codes.to(device)
                sf.data = scales.to(device)
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent), attr, fp8)
        names.append(name)
    return names


def moe_reference(
    x: Any, ids: Any, w: Any, w13: Any, w13s: Any, w2: Any, w2s: Any, swap: bool = False
) -> Any:
    """docs/ops/fp8_moe.md's definition in float64, written here from the page (not netra's code): the
    tokens quantized per 128 columns, h = silu(gate) * up quantized per 128, the down projection, the
    router-weighted sum over the slots. `swap` takes up for gate: the wiring error the bound must catch."""
    import torch

    def quant(v: Any) -> Any:  # per 128 columns: s = max(amax, 1e-10) / 448, codes E4M3FN round to nearest
        g = v.double().reshape(*v.shape[:-1], -1, 128)
        s = (g.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448).float().double()
        return ((g / s).clamp(-448, 448).float().to(torch.float8_e4m3fn).double() * s).reshape(v.shape)

    def blocks(codes: Any, scales: Any) -> Any:
        return codes.double() * scales.double().repeat_interleave(128, -2).repeat_interleave(128, -1)

    w13, w13s, w2, w2s, x = (t.detach() for t in (w13, w13s, w2, w2s, x))
    w13d, w2d, xd = blocks(w13, w13s), blocks(w2, w2s), quant(x)
    inter = w13.shape[1] // 2
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            gu = w13d[e] @ xd[t]
            gate, up = (gu[inter:], gu[:inter]) if swap else (gu[:inter], gu[inter:])
            out[t] += float(w[t, j]) * (w2d[e] @ quant(gate * torch.sigmoid(gate) * up))
    return out
