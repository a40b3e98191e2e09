"""Hugging Face transformers models with their RMSNorms served by netra.torch (docs/integrations.md).

    from netra.integrations.transformers import apply_netra
    model = AutoModelForCausalLM.from_pretrained(..., dtype=torch.bfloat16).cuda()
    report = apply_netra(model)            # every supported RMSNorm module now calls nt.rmsnorm
    print(report)                           # what was replaced, what was not and why
    report.restore()                        # the original modules back

Each RMSNorm module of a supported class is swapped, in its parent, for a NetraRMSNorm holding the same
weight Parameter (the state dict, device moves and loading see one tensor), its eps and the class's
weight offset (Gemma's x * (1 + w) is weight_offset=1). The call goes through netra.torch.rmsnorm, which
picks per shape: the certified kernel where this GPU's table serves the contract, the counted composite
otherwise (nt.stats(), nt.strict()). No model code is copied or patched, so what transformers computes
around the norms is untouched; that is also why the residual add stays where it is: every supported
decoder layer adds it inline in its own forward (`hidden_states = residual + hidden_states`), with no
module boundary to swap for fused_add_rmsnorm, and the report says so.

A class is supported when its forward is netra's rmsnorm (docs/ops/rmsnorm.md) up to rounding, read from
the transformers this was tested with (the test extra's pin): in fp32 the outputs are bit-equal for
every supported class, and apply_netra checks that on a probe (one module of each class, copied to the
CPU in fp32) before it replaces any, so a transformers that computes a class otherwise keeps its code. In bf16 Gemma's classes round once, as netra does (bit-equal); the Llama-style
classes round x * rsqrt(...) to the input dtype before multiplying by w, a second rounding netra's
definition leaves out, so their outputs can differ from transformers' by one bf16 ulp.

The routed experts of an FP8 checkpoint (transformers' FP8Experts, what a FineGrainedFP8 model such as
Qwen3-30B-A3B-FP8 holds in each MoE layer: gate_up_proj [E, 2I, H] and down_proj [E, H, I] in E4M3FN with
float32 scales per 128 x 128 block) are swapped for a NetraFP8Experts holding the same Parameters, whose
calls netra.torch serves as fp8_group_quant of the tokens, then fp8_moe (docs/ops/fp8_moe.md), where this
GPU's table serves the contract at the call's token count (`experts="auto"`); every other call runs the
module's own forward (transformers' configured experts implementation), and `expert_routes()` says why,
once per contract and device. In strict mode such a call raises StrictModeError instead.
`experts="netra"` sends every call to netra.torch (its counted composite where nothing is served);
`experts="off"` leaves the experts alone. Only what netra's op computes is swapped: a gate and up
projection concatenated in that order, SiLU, no bias, dynamic activation scales, float32 block scales of
128 x 128, no clamp (the report says why any other is kept). netra's op keeps h = silu(gate) * up in fp32
before quantizing it, where transformers' eager loop rounds the projections to the activations' dtype
first: the outputs agree within that rounding, not bit for bit.

Matching is by the class's module and name, so this imports neither transformers nor its models.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

import netra.torch as nt
from netra.core.ops import contract_key
from netra.errors import IntegrationError, StrictModeError
from netra.torch.composite import f32
from netra.torch.composite import rmsnorm as composite_rmsnorm
from netra.torch.moe import CHAIN, quantized_route


@dataclass(frozen=True)
class NormRule:
    """How one transformers RMSNorm class computes, in netra.torch.rmsnorm's terms."""

    eps: str  # the attribute that holds eps
    weight_offset: int  # 1: x * (1 + w)
    exact: bool  # rounds once, as netra does: bit-equal in bf16 too (else within one bf16 ulp)


_LLAMA = NormRule("variance_epsilon", 0, exact=False)
_GEMMA = NormRule("eps", 1, exact=True)
_MODELS = "transformers.models"
# The supported classes, "<module>.<class>"; each forward was read in the pinned transformers and is
# tested against it (tests/test_integrations_transformers.py).
RULES: dict[str, NormRule] = {
    f"{_MODELS}.llama.modeling_llama.LlamaRMSNorm": _LLAMA,
    f"{_MODELS}.mistral.modeling_mistral.MistralRMSNorm": _LLAMA,
    f"{_MODELS}.qwen2.modeling_qwen2.Qwen2RMSNorm": _LLAMA,
    f"{_MODELS}.qwen3.modeling_qwen3.Qwen3RMSNorm": _LLAMA,
    f"{_MODELS}.qwen3_moe.modeling_qwen3_moe.Qwen3MoeRMSNorm": _LLAMA,
    f"{_MODELS}.deepseek_v3.modeling_deepseek_v3.DeepseekV3RMSNorm": _LLAMA,
    f"{_MODELS}.gemma.modeling_gemma.GemmaRMSNorm": _GEMMA,
    f"{_MODELS}.gemma2.modeling_gemma2.Gemma2RMSNorm": _GEMMA,
}
# The decoder layers of the supported architectures: each adds the residual inline in its forward.
_LAYERS = {name.rsplit("RMSNorm", 1)[0] + "DecoderLayer" for name in RULES}


def class_name(module: torch.nn.Module) -> str:
    """A module's class as "<module>.<class>", the key of RULES."""
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


class NetraRMSNorm(torch.nn.Module):
    """A transformers RMSNorm served by netra.torch.rmsnorm: the original's weight Parameter and eps."""

    def __init__(self, weight: torch.nn.Parameter, eps: float, weight_offset: int, replaces: str) -> None:
        super().__init__()
        self.weight = weight
        self.eps = eps
        self.weight_offset = weight_offset
        self.replaces = replaces

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A view of part of each row (DeepSeek-V3's kv_a_layernorm normalizes the first 512 of the 576
        # columns kv_a_proj_with_mqa writes) is not a layout the kernel reads: one copy costs less than
        # the composite it would fall back to (refused under nt.strict()); the output is new either way.
        if not x.is_contiguous():
            x = x.contiguous()
        return nt.rmsnorm(x, self.weight, self.eps, self.weight_offset)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}, weight_offset={self.weight_offset}"


@dataclass(frozen=True)
class Replaced:
    """One module served by netra.torch: where it is, what it was, the contract its calls ask for."""

    name: str
    cls: str
    contract: str
    exact: bool


@dataclass
class Report:
    """What apply_netra did: the modules replaced, the norms and experts kept and why, and the fused
    add-norms not applied and why. `restore()` puts the original modules back."""

    model: str
    replaced: list[Replaced] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)  # module name -> why it runs transformers' code
    not_fused: dict[str, str] = field(default_factory=dict)  # decoder layer class -> why
    _swaps: list[tuple[torch.nn.Module, str, torch.nn.Module, torch.nn.Module]] = field(
        default_factory=list, repr=False
    )

    def restore(self) -> None:
        """The original modules back in their parents (those still holding the replacement)."""
        for parent, attr, original, replacement in reversed(self._swaps):
            if parent._modules.get(attr) is replacement:
                setattr(parent, attr, original)
        self._swaps.clear()

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "replaced": [
                {"name": r.name, "class": r.cls, "contract": r.contract, "exact": r.exact}
                for r in self.replaced
            ],
            "kept": dict(sorted(self.kept.items())),
            "not_fused": dict(sorted(self.not_fused.items())),
        }

    def __str__(self) -> str:
        contracts = sorted({r.contract for r in self.replaced})
        experts = sum(r.contract.startswith("fp8_moe") for r in self.replaced)
        what = f"{len(self.replaced) - experts} norm modules" + (
            f" and {experts} FP8 experts modules" if experts else ""
        )
        lines = [f"{self.model}: {what} through netra.torch ({', '.join(contracts)})"]
        lines += [f"  kept {name}: {why}" for name, why in sorted(self.kept.items())]
        lines += [f"  not fused in {cls}: {why}" for cls, why in sorted(self.not_fused.items())]
        return "\n".join(lines)


_FP8_EXPERTS = "transformers.integrations.finegrained_fp8.FP8Experts"
_SILU = {"transformers.activations.SiLUActivation"}  # ACT2FN["silu"]: F.silu, as torch.nn.SiLU
EXPERTS_MODES = ("auto", "netra", "off")
_decisions: dict[tuple[str, int], tuple[bool, str]] = {}


def expert_routes() -> dict[str, str]:
    """Each routed-experts contract and device seen in "auto" mode, and where its calls go: "netra", or
    "transformers: <code>: <reason>" (the module's own forward)."""
    return {
        f"{key} on cuda:{index}": "netra" if served else f"transformers: {why}"
        for (key, index), (served, why) in sorted(_decisions.items())
    }


def _experts_served(params: dict[str, int], index: int) -> tuple[bool, str]:
    """Whether this install serves the experts at `params` on cuda:`index`, and why not (asked once per
    contract and device): the tokens' fp8_group_quant and both fp8_moe stages (netra.torch.moe)."""
    key = contract_key("fp8_moe", params)
    if (key, index) not in _decisions:
        why = quantized_route(params, torch.device("cuda", index))
        _decisions[(key, index)] = (not why, why)
    return _decisions[(key, index)]


class NetraFP8Experts(torch.nn.Module):
    """A transformers FP8Experts served by netra.torch: the original's weight and scale Parameters (so the
    state dict, device moves and loading see one tensor each), its own forward for the calls netra does
    not serve."""

    def __init__(self, original: torch.nn.Module, mode: str, replaces: str) -> None:
        super().__init__()
        self.gate_up_proj = original.gate_up_proj
        self.gate_up_proj_scale_inv = original.gate_up_proj_scale_inv
        self.down_proj = original.down_proj
        self.down_proj_scale_inv = original.down_proj_scale_inv
        self.mode = mode
        self.replaces = replaces
        self._original = (original,)  # not a submodule: its Parameters are these; its forward is the fallback

    def params(self, top_k_index: torch.Tensor) -> dict[str, int]:
        experts, two_inter, hidden = (int(d) for d in self.gate_up_proj.shape)
        return {
            "experts": experts,
            "topk": int(top_k_index.shape[-1]),
            "hidden": hidden,
            "inter": two_inter // 2,
        }

    def _route(self, x: torch.Tensor, top_k_index: torch.Tensor) -> str:
        """ "" when netra.torch serves this call, else why the module's own forward runs it."""
        if self.mode == "netra":
            return ""
        if not (x.is_cuda and x.dtype == torch.bfloat16 and x.dim() == 2):
            return "the tokens are not a 2-D bf16 CUDA tensor"
        if x.shape[0] > CHAIN.max_dispatch:
            return f"{x.shape[0]} tokens; the certified chain takes at most {CHAIN.max_dispatch}"
        served, why = _experts_served(self.params(top_k_index), x.device.index or 0)
        return "" if served else why

    def forward(
        self, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor
    ) -> Any:
        why = self._route(hidden_states, top_k_index)
        if not why:
            xq, xs = nt.fp8_group_quant(hidden_states.contiguous())
            y = nt.fp8_moe(
                xq, xs, top_k_index.to(torch.int32), top_k_weights.to(torch.float32), self.gate_up_proj,
                self.gate_up_proj_scale_inv, self.down_proj, self.down_proj_scale_inv,
            )  # fmt: skip
            return y.to(hidden_states.dtype)
        key = contract_key("fp8_moe", self.params(top_k_index))
        if nt.is_strict():
            raise StrictModeError(
                f"{key}: transformers' {self.replaces.rsplit('.', 1)[-1]} runs its own forward: {why}",
                "serve the call with bf16 CUDA tokens at a contract and token count this GPU's table serves "
                "(netra catalog), or leave strict mode",
                contract=key,
                code="transformers",
                reason=why,
            )
        return self._original[0](hidden_states, top_k_index, top_k_weights)

    def extra_repr(self) -> str:
        return f"{tuple(self.gate_up_proj.shape)}, {tuple(self.down_proj.shape)}, mode={self.mode}"


def _plan_experts(module: torch.nn.Module, mode: str) -> tuple[NetraFP8Experts | None, str]:
    """The replacement of one FP8Experts module, or None and why it keeps transformers' code: netra's op
    is gate and up concatenated, SiLU, no bias, dynamic E4M3FN activations, float32 128 x 128 block scales."""
    cls = class_name(module)
    act = getattr(module, "act_fn", None)
    checks = (
        (getattr(module, "has_gate", False), "has no gate projection"),
        (not getattr(module, "has_bias", True), "has biases"),
        (getattr(module, "is_concatenated", True), "interleaves gate and up rows"),
        (not getattr(module, "is_transposed", False), "stores transposed weights"),
        (tuple(getattr(module, "block_size", None) or ()) == (128, 128), "has no 128 x 128 weight blocks"),
        (getattr(module, "activation_scheme", None) == "dynamic", "has static activation scales"),
        (isinstance(act, torch.nn.SiLU) or (act is not None and class_name(act) in _SILU),
         f"activation {type(act).__name__}, not SiLU"),
        (getattr(module, "swiglu_alpha", None) is None and getattr(module, "limit", None) is None,
         "clamps its SwiGLU"),
    )  # fmt: skip
    for ok, why in checks:
        if not ok:
            return None, f"{cls} {why}: netra's fp8_moe does not compute it"
    for name in ("gate_up_proj", "down_proj"):
        w, sf = getattr(module, name, None), getattr(module, f"{name}_scale_inv", None)
        if not isinstance(w, torch.Tensor) or w.dtype != torch.float8_e4m3fn or w.dim() != 3:
            return None, f"{cls}.{name} is not a 3-D float8_e4m3fn tensor"
        if not isinstance(sf, torch.Tensor) or sf.dtype != torch.float32:
            return None, f"{cls}.{name}_scale_inv is not float32 (UE8M0 scales are not netra's op)"
    return NetraFP8Experts(module, mode, cls), ""


def _probe(module: torch.nn.Module, eps: float, weight_offset: int) -> str:
    """ "" if the module's own forward is netra's rmsnorm on a probe (fp32 on CPU, where both are bit-equal
    for every rule), else why not: the rule is checked against the transformers installed, not assumed."""
    if module.weight.device.type == "meta":
        return ""  # nothing to compute with yet; the class's rule stands
    clone = copy.deepcopy(module).to("cpu", torch.float32)
    x = torch.randn(2, clone.weight.shape[0], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs = clone(x)
        ours = composite_rmsnorm(x, clone.weight, f32(eps), weight_offset)
    if isinstance(theirs, torch.Tensor) and torch.equal(theirs, ours):
        return ""
    version = getattr(sys.modules.get("transformers"), "__version__", "unknown")
    return (
        f"{class_name(module)}'s forward is not netra's rmsnorm on a probe (fp32, CPU): "
        f"this transformers ({version}) computes it otherwise than the one the rule was written for"
    )


def _plan(module: torch.nn.Module, probed: dict[type, str]) -> tuple[NetraRMSNorm | None, str]:
    """The replacement of one module, or None and why it keeps transformers' code. `probed` holds each
    class's probe result, so that a class is probed once per apply_netra."""
    cls = class_name(module)
    if isinstance(module, NetraRMSNorm):
        return None, f"already served by netra.torch (an earlier apply_netra, replacing {module.replaces})"
    rule = RULES.get(cls)
    if rule is None:
        return None, f"{cls} has no rule here: its numerics are not known to be netra's rmsnorm"
    weight = getattr(module, "weight", None)
    eps = getattr(module, rule.eps, None)
    if not isinstance(weight, torch.nn.Parameter) or weight.dim() != 1 or not weight.is_floating_point():
        return None, f"{cls} without a 1-D floating-point weight Parameter"
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        return None, f"{cls}.{rule.eps} is {eps!r}, not a number"
    if type(module) not in probed:
        probed[type(module)] = _probe(module, float(eps), rule.weight_offset)
    if probed[type(module)]:
        return None, probed[type(module)]
    return NetraRMSNorm(weight, float(eps), rule.weight_offset, cls), ""


def _is_norm(module: torch.nn.Module) -> bool:
    return "Norm" in type(module).__name__ or isinstance(module, NetraRMSNorm)


def apply_netra(model: torch.nn.Module, *, strict: bool = False, experts: str = "auto") -> Report:
    """Serve every supported RMSNorm module of `model` through netra.torch.rmsnorm, per shape, and its FP8
    routed experts through netra.torch.fp8_moe (`experts`: "auto" where this GPU's table serves the call,
    "netra" every call, "off" none).

    strict=True: every norm and FP8 experts module of the model must be one netra serves; otherwise
    IntegrationError names the first that is not, and the model is left unchanged. Call-time strictness (a
    call that would run the composite, or the experts' own forward, raises) is netra.torch's
    `with nt.strict():` around the forward.
    """
    if not isinstance(model, torch.nn.Module):
        raise IntegrationError(
            f"apply_netra: expected a torch.nn.Module (a transformers model), got {type(model).__name__}",
            "pass the model object, e.g. AutoModelForCausalLM.from_pretrained(...)",
        )
    if experts not in EXPERTS_MODES:
        raise IntegrationError(
            f"apply_netra: experts={experts!r} is not a mode",
            f"pass experts= one of {', '.join(EXPERTS_MODES)}",
        )
    report = Report(type(model).__name__)
    plans: dict[int, tuple[torch.nn.Module, torch.nn.Module]] = {}
    probed: dict[type, str] = {}
    for name, module in model.named_modules():
        cls = class_name(module)
        if cls in _LAYERS:
            report.not_fused[cls] = (
                "the residual add is inline in its forward, with no module to replace; "
                "fused_add_rmsnorm would need the layer's code copied"
            )
        if experts != "off" and (cls == _FP8_EXPERTS or isinstance(module, NetraFP8Experts)):
            if isinstance(module, NetraFP8Experts):
                report.kept[name] = (
                    f"already served by netra.torch (an earlier apply_netra, replacing {module.replaces})"
                )
                continue
            swap, why = _plan_experts(module, experts)
            if swap is None:
                report.kept[name] = why
                continue
            plans[id(module)] = (module, swap)
            e, two_i, h = (int(d) for d in swap.gate_up_proj.shape)
            k = getattr(getattr(module, "config", None), "num_experts_per_tok", "*")  # the router's top-k
            key = f"fp8_moe(experts={e},topk={k},hidden={h},inter={two_i // 2})"
            report.replaced.append(Replaced(name, cls, key, exact=False))
            continue
        if not _is_norm(module):
            continue
        replacement, why = _plan(module, probed)
        if replacement is None:
            report.kept[name] = why
            continue
        plans[id(module)] = (module, replacement)
        key = f"rmsnorm(hidden={replacement.weight.shape[0]},weight_offset={replacement.weight_offset})"
        report.replaced.append(Replaced(name, cls, key, RULES[cls].exact))
    if strict and report.kept:
        name, why = next(iter(report.kept.items()))
        raise IntegrationError(
            f"apply_netra(strict=True): {report.model}.{name} is not served: {why} "
            f"({len(report.kept)} such module(s)); nothing was replaced",
            "drop strict=True to serve the rest (the report lists these), or use a supported architecture",
        )
    for parent in list(model.modules()):
        for attr, child in list(parent._modules.items()):
            if child is not None and id(child) in plans:
                original, replacement = plans[id(child)]
                setattr(parent, attr, replacement)
                report._swaps.append((parent, attr, original, replacement))
    return report
