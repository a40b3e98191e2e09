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

Matching is by the class's module and name, so this imports neither transformers nor its models.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

import netra.torch as nt
from netra.errors import IntegrationError
from netra.torch.composite import f32
from netra.torch.composite import rmsnorm as composite_rmsnorm


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
    """What apply_netra did: the modules replaced, the norms kept and why, and the fused add-norms not
    applied and why. `restore()` puts the original modules back."""

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
        lines = [
            f"{self.model}: {len(self.replaced)} norm modules through netra.torch ({', '.join(contracts)})"
        ]
        lines += [f"  kept {name}: {why}" for name, why in sorted(self.kept.items())]
        lines += [f"  not fused in {cls}: {why}" for cls, why in sorted(self.not_fused.items())]
        return "\n".join(lines)


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


def apply_netra(model: torch.nn.Module, *, strict: bool = False) -> Report:
    """Serve every supported RMSNorm module of `model` through netra.torch.rmsnorm, per shape.

    strict=True: every norm module of the model must be one netra serves; otherwise IntegrationError
    names the first that is not, and the model is left unchanged. Call-time strictness (a call that would
    run the composite raises) is netra.torch's `with nt.strict():` around the forward.
    """
    if not isinstance(model, torch.nn.Module):
        raise IntegrationError(
            f"apply_netra: expected a torch.nn.Module (a transformers model), got {type(model).__name__}",
            "pass the model object, e.g. AutoModelForCausalLM.from_pretrained(...)",
        )
    report = Report(type(model).__name__)
    plans: dict[int, tuple[torch.nn.Module, NetraRMSNorm]] = {}
    probed: dict[type, str] = {}
    for name, module in model.named_modules():
        cls = class_name(module)
        if cls in _LAYERS:
            report.not_fused[cls] = (
                "the residual add is inline in its forward, with no module to replace; "
                "fused_add_rmsnorm would need the layer's code copied"
            )
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
