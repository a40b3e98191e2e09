"""vLLM's norm layers and FP8 routed experts served by netra.torch, as a vLLM general plugin (docs/integrations.md).

Installing netra-kernel registers the entry point `vllm.general_plugins: netra = netra.integrations.vllm:register`;
vLLM calls `register()` in every process it starts, before models are built. It registers out-of-tree
CustomOps (`CustomOp.register_oot`) for the two norm classes netra's families compute, and an out-of-tree
PluggableLayer for vLLM's routed experts (below):

| vLLM class | netra.torch call | contract |
| --- | --- | --- |
| `RMSNorm` (x) | `rmsnorm(x, w, eps)` | `rmsnorm(hidden=H,weight_offset=0)` |
| `RMSNorm` (x, residual) | `fused_add_rmsnorm_(x, residual, w, eps)`: residual updated in place, as vLLM's kernel does | `fused_add_rmsnorm(hidden=H,weight_offset=0)` |
| `GemmaRMSNorm` (x) | `rmsnorm(x, w, eps, weight_offset=1)` | `rmsnorm(hidden=H,weight_offset=1)` |
| `GemmaRMSNorm` (x, residual) | `fused_add_rmsnorm(x, residual, w, eps, 1)`: new tensors, as vLLM's Gemma path | `fused_add_rmsnorm(hidden=H,weight_offset=1)` |

Routing is per shape: a call goes to netra.torch only where this GPU's table serves its contract at the
policy (`nt.kernel_for`), with bf16 contiguous CUDA tensors and none of vLLM's variants netra has no
contract for (no weight, a variance over part of the row); every other call runs
vLLM's own forward, and `routes()` says why, once per contract and device. In strict mode (`nt.strict()`)
a call routed to vLLM raises StrictModeError instead. NETRA_VLLM=netra sends every call netra has a
contract for to netra.torch (its counted composite where nothing is served), NETRA_VLLM=vllm none; the
default is auto. In vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1) register() makes netra.torch serve
one tactic per contract for every row count (nt.set_batch_invariant), so a token's bits do not depend on the
batch; a caller who turns that off again sends the calls back to vLLM, with the reason.

vLLM calls a CustomOp's forward_cuda only where custom ops are on: with torch.compile (inductor) its
default is custom_ops=["none"], which runs forward_native, vLLM's reference that this plugin never
replaces. Turn them on with `compilation_config={"custom_ops": ["+RMSNorm", "+GemmaRMSNorm"]}` (an
out-of-tree op is named by the in-tree class it replaces) or ["all"], or run eager (enforce_eager).

The routed experts of vLLM's FusedMoE layers are a PluggableLayer, `RoutedExperts` (what FusedMoEFactory
builds in every MoE layer: the expert weights, their loader, and the quant method's kernel);
register() replaces it with NetraRoutedExperts (`RoutedExperts.register_oot`), whose forward_modular (what
vLLM's MoERunner calls with the tokens and the top-k its router computed) goes to netra.torch:

| vLLM class | netra.torch calls | contracts |
| --- | --- | --- |
| `RoutedExperts` with `Fp8MoEMethod` (x, topk_weights, topk_ids) | `fp8_group_quant(x)`, then `fp8_moe(xq, xs, ids, weights, w13_weight, w13_weight_scale_inv, w2_weight, w2_weight_scale_inv)` | `fp8_group_quant(hidden=H,group=128)`, `fp8_moe_gate_up(...)`, `fp8_moe_down(...)` |

Why this extension point: vLLM 0.32's FP8 MoE kernels are a closed list (oracle/fp8.py's backends, with a
TODO for out-of-tree ones), a quant method is chosen by the checkpoint's quantization config, and a
MoERunner by the model's code; the MoE classes a plugin can replace are two PluggableLayers (RoutedExperts,
the router's GateLinear) and three CustomOps (the unquantized and modular quant methods, the grouped
top-k router), and only RoutedExperts runs every FP8 layer's experts. Its forward_modular receives exactly netra's operands: the unquantized tokens, vLLM's router's top-k (its
scoring, renormalization, grouping, correction bias and routed scaling already applied) and the
checkpoint's weights, gate rows then up rows, with 128 x 128 block scales. A layer is netra's only where
it computes what fp8_moe computes: vLLM's Fp8MoEMethod with 128 x 128 blocks and dynamic activation
scales, float8_e4m3fn weights with float32 scales, SiLU without clamp, no bias, no LoRA, the router's
weights applied to the output, no expert parallelism or all-to-all dispatch, and a backend that keeps the
weights as loaded (TRITON, what vLLM picks for block FP8 on Hopper without expert parallelism, or
VLLM_CUTLASS; NONE where vLLM has no kernel); a backend that converts them (DeepGEMM, FlashInfer,
Marlin, AITER, ...) or routes inside its kernel (forward_monolithic) keeps vLLM's path. A tensor-parallel
shard is served where netra has a contract for its shape (the runner all-reduces after). Per call, in
auto mode, netra.torch runs it with bf16 CUDA tokens, at most the chain's 64 tokens (fewer where
NETRA_VLLM_MOE_MAX_TOKENS says: 0 leaves every call to vLLM's kernel), where this GPU's table
serves the tokens' quantization and both stages at the policy; every other call runs vLLM's path, with
the reason in routes() and StrictModeError in strict mode, as for the norms (a layer netra has no op for:
"vllm: variant: <what>").

Not registered, and why: vLLM's QuantFP8 group quantization floors its scale at 1/(448 * 512), netra's
fp8_group_quant at 1e-10/448 (docs/ops/fp8_group_quant.md): groups whose largest magnitude is below 1/512
get another scale and other codes, so netra's kernel is not vLLM's op. vLLM has no SiluAndMul+quant class
(its fusion pass matches the two ops in the compiled graph) and no class for the MoE top-k softmax that
netra's family computes (its routers fuse the choice of experts with their own scoring): the routed
experts take the top-k vLLM's router computed.
"""

from __future__ import annotations

import os
from typing import Any

import torch

import netra.torch as nt
from netra.core.ops import contract_key
from netra.errors import IntegrationError, StrictModeError
from netra.torch.moe import CHAIN, quantized_route

SWITCH = "NETRA_VLLM"
MODES = ("auto", "netra", "vllm")
MOE_MAX_TOKENS = "NETRA_VLLM_MOE_MAX_TOKENS"  # auto mode: calls of more tokens keep vLLM's routed experts
_decisions: dict[tuple[str, int], tuple[bool, str]] = {}
_variants: dict[tuple[str, str], str] = {}  # (contract, device) -> what a layer computes that netra does not


def mode() -> str:
    """The routing mode NETRA_VLLM asks for: auto (default), netra or vllm."""
    value = os.environ.get(SWITCH, "auto") or "auto"
    if value not in MODES:
        raise IntegrationError(
            f"{SWITCH}={value!r} is not a routing mode", f"set {SWITCH} to one of {', '.join(MODES)}"
        )
    return value


def moe_max_tokens() -> int:
    """The most tokens of a routed-experts call auto mode sends to netra.torch: NETRA_VLLM_MOE_MAX_TOKENS,
    from 0 to the certified chain's most (the default). Where vLLM's kernel is the faster one on a GPU (docs/
    performance.md, "Where it stands": from 16 tokens on an H100), a serving engine keeps netra's norms and
    vLLM's routed experts for the larger calls."""
    most = CHAIN.max_dispatch
    value = os.environ.get(MOE_MAX_TOKENS, "") or str(most)
    if not (value.isdigit() and int(value) <= most):
        raise IntegrationError(
            f"{MOE_MAX_TOKENS}={value!r} is not a token count from 0 to {most}",
            f"set {MOE_MAX_TOKENS} to at most {most} (the certified chain's most tokens), or 0 to leave "
            "every routed-experts call to vLLM",
        )
    return int(value)


def routes() -> dict[str, str]:
    """Each contract and device seen, and where its calls go: "netra", or "vllm: <code>: <reason>"; a
    layer netra has no op for (routed experts vLLM computes otherwise) "vllm: variant: <what>", on any
    device."""
    out = {
        f"{key} on cuda:{index}": "netra" if served else f"vllm: {why}"
        for (key, index), (served, why) in _decisions.items()
    }
    for (key, device), why in _variants.items():
        out.setdefault(f"{key} on {device}", f"vllm: variant: {why}")
    return dict(sorted(out.items()))


@torch.compiler.assume_constant_result
def _served(key: str, index: int) -> bool:
    """Whether this install serves `key` on CUDA device `index` (asked once; a constant to torch.compile)."""
    if (key, index) not in _decisions:
        kernel = nt.kernel_for(key, device=torch.device("cuda", index))
        _decisions[(key, index)] = (True, "") if kernel else (False, f"{kernel.code}: {kernel.reason}")
    return _decisions[(key, index)][0]


def _netra(
    layer: Any, op: str, weight_offset: int, x: torch.Tensor, residual: torch.Tensor | None, variant: str
) -> bool:
    """Whether netra.torch runs this call: the layer's variant, the per-call checks, then the contract's
    route. `variant` names what netra has no contract for ("" if nothing)."""
    key = contract_key(op, {"hidden": x.shape[-1], "weight_offset": weight_offset})
    index = x.device.index or 0
    if variant:
        why = variant
    elif _MODE != "auto":
        return _MODE == "netra"
    elif not (
        x.is_cuda
        and x.dtype == torch.bfloat16
        and layer.weight.dtype == torch.bfloat16
        and x.is_contiguous()
        and (residual is None or (residual.dtype == torch.bfloat16 and residual.is_contiguous()))
    ):
        why = "x, the residual or w is not a bf16 contiguous CUDA tensor"
    elif _served(key, index):
        return True
    else:
        why = _decisions[(key, index)][1]
    if nt.is_strict():
        raise StrictModeError(
            f"{key}: vLLM's {type(layer).__mro__[1].__name__} runs its own forward: {why}",
            "serve the call with bf16 contiguous CUDA tensors at a width this GPU's table serves "
            "(netra catalog), or leave strict mode",
            contract=key,
            code="vllm",
            reason=why,
        )
    return False


_MODE = "auto"
_MOE_MAX = CHAIN.max_dispatch
_REGISTERED: dict[str, type] = {}


def register() -> None:
    """vLLM's general-plugin hook: the out-of-tree classes above, once per process (vLLM may call it again)."""
    global _MODE, _MOE_MAX
    _MODE, _MOE_MAX = mode(), moe_max_tokens()
    from vllm import envs

    if envs.VLLM_BATCH_INVARIANT:  # a token's bits must not depend on the batch: one tactic for every M
        nt.set_batch_invariant(True)
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm

    class NetraRMSNorm(RMSNorm):
        """vLLM's RMSNorm, its forward_cuda through netra.torch where the contract is served."""

        def forward_cuda(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
            op = "fused_add_rmsnorm" if residual is not None else "rmsnorm"
            variant = (
                "a norm without weight"
                if not self.has_weight
                else "a variance over part of the row"
                if self.variance_size_override is not None
                else _batch_invariant()
            )
            if _netra(self, op, 0, x, residual, variant):
                eps = self.variance_epsilon
                if residual is None:
                    return nt.rmsnorm(x, self.weight.data, eps)
                return nt.fused_add_rmsnorm_(x, residual, self.weight.data, eps), residual
            return super().forward_cuda(x, residual)

    class NetraGemmaRMSNorm(GemmaRMSNorm):
        """vLLM's GemmaRMSNorm (x * (1 + w)) through netra.torch with weight_offset=1 where served."""

        def forward_cuda(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
            op = "fused_add_rmsnorm" if residual is not None else "rmsnorm"
            if _netra(self, op, 1, x, residual, _batch_invariant()):
                eps = self.variance_epsilon
                if residual is None:
                    return nt.rmsnorm(x, self.weight.data, eps, 1)
                return nt.fused_add_rmsnorm(x, residual, self.weight.data, eps, 1)
            return super().forward_cuda(x, residual)

    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
    from vllm.model_executor.layers.quantization.fp8 import Fp8MoEMethod

    class NetraRoutedExperts(RoutedExperts):
        """vLLM's routed experts, forward_modular through netra.torch's fp8_moe where the layer computes
        netra's op and this GPU serves the call; vLLM's own forward_modular for every other call."""

        def forward_modular(
            self,
            x: torch.Tensor,
            topk_weights: torch.Tensor,
            topk_ids: torch.Tensor,
            shared_experts: Any = None,
            shared_experts_input: torch.Tensor | None = None,
        ) -> Any:
            variant = self.__dict__.get("_netra_variant")
            if variant is None:  # the layer's configuration is fixed once built: read it once (8 us a call)
                variant = self._netra_variant = _experts_variant(self, Fp8MoEMethod)
            if _netra_experts(self, x, topk_ids, variant):
                xq, xs = nt.fp8_group_quant(x.contiguous())
                return nt.fp8_moe(
                    xq, xs, topk_ids.to(torch.int32), topk_weights.to(torch.float32), self.w13_weight,
                    self.w13_weight_scale_inv, self.w2_weight, self.w2_weight_scale_inv,
                )  # fmt: skip
            return super().forward_modular(x, topk_weights, topk_ids, shared_experts, shared_experts_input)

    for base, ours in (
        (RMSNorm, NetraRMSNorm),
        (GemmaRMSNorm, NetraGemmaRMSNorm),
        (RoutedExperts, NetraRoutedExperts),
    ):
        ours.__qualname__ = ours.__name__  # named as a module-level class in vLLM's logs and repr
        name = base.__name__
        if op_registry_oot.get(name) is _REGISTERED.get(name) is not None:
            continue  # this process registered it already
        if name in op_registry_oot:
            raise IntegrationError(
                f"vLLM's {name} already has an out-of-tree replacement ({op_registry_oot[name].__qualname__}), "
                "so netra's is not registered",
                "uninstall the other plugin, or set VLLM_PLUGINS to the one plugin you want",
            )
        # CustomOp's and PluggableLayer's register_oot alike: keyed by the in-tree class's name, swapped in __new__
        base.register_oot(ours)
        _REGISTERED[name] = ours


def _batch_invariant() -> str:
    """Why vLLM's batch-invariant mode keeps this call vLLM's ("" when it is off, or when netra.torch serves
    one tactic per contract for every row count, which register() asks for when the mode is on)."""
    from vllm import envs

    if not envs.VLLM_BATCH_INVARIANT or nt.batch_invariant():
        return ""
    return "vLLM's batch-invariant mode, while netra.torch picks tactics by row count (nt.set_batch_invariant(False))"


# vLLM's FP8 MoE backends that leave the weights as loaded (oracle/fp8.py, convert_to_fp8_moe_kernel_format):
# the checkpoint's layout is netra's operands. NONE: vLLM has no kernel for the layer (its CPU platform
# without AMX-FP8), so nothing converts them either.
_AS_LOADED = ("TRITON", "VLLM_CUTLASS", "NONE")
_OPERANDS = ("w13_weight", "w13_weight_scale_inv", "w2_weight", "w2_weight_scale_inv")  # fp8_moe's order


def _experts_variant(layer: Any, fp8_method: Any) -> str:
    """What the layer computes that netra's fp8_moe does not ("" if nothing): read from vLLM's own
    configuration of the layer, so a layer netra has no op for keeps vLLM's path in every mode."""
    method = layer.quant_method
    config = layer.moe_config
    parallel = config.moe_parallel_config
    if not isinstance(method, fp8_method):
        return f"{type(method).__name__}: netra's fp8_moe computes vLLM's Fp8MoEMethod only"
    backend = method.fp8_backend.value
    operands = [getattr(layer, n, None) for n in _OPERANDS]
    checks = (
        (
            method.block_quant
            and list(method.moe_block_shape) == [128, 128]
            and method.weight_scale_refine is None,
            "weights not in 128 x 128 blocks",
        ),
        (method.quant_config.activation_scheme == "dynamic", "static activation scales"),
        (
            [getattr(t, "dtype", None) for t in operands] == [torch.float8_e4m3fn, torch.float32] * 2,
            "weights not float8_e4m3fn with float32 block scales",
        ),
        (backend in _AS_LOADED, f"vLLM's {backend} backend converts the weights to its own layout"),
        (config.activation.value == "silu", f"activation {config.activation.value}, not SiLU"),
        (
            config.swiglu_limit is None and config.swiglu_alpha is None and config.swiglu_beta is None,
            "a clamped or scaled SwiGLU",
        ),
        (not config.has_bias, "expert biases"),
        (not config.is_lora_enabled, "LoRA on the experts"),
        (not layer.apply_router_weight_on_input, "router weights applied to the input"),
        (
            layer.expert_map is None and not parallel.use_all2all_kernels,
            "expert parallelism or all-to-all dispatch",
        ),
    )
    return next((why for ok, why in checks if not ok), "")


def _experts_served(params: dict[str, int], index: int) -> bool:
    """Whether this install serves the tokens' quantization and both fp8_moe stages on CUDA device
    `index` at the policy (asked once per contract and device; routes() says why not)."""
    key = contract_key("fp8_moe", params)
    if (key, index) not in _decisions:
        why = quantized_route(params, torch.device("cuda", index))
        _decisions[(key, index)] = (not why, why)
    return _decisions[(key, index)][0]


def _netra_experts(layer: Any, x: torch.Tensor, ids: torch.Tensor, variant: str) -> bool:
    """Whether netra.torch runs this call of the routed experts: the layer's variant, the per-call
    checks (auto mode), then the contract's route; StrictModeError in strict mode otherwise."""
    experts, two_inter, hidden = (int(d) for d in layer.w13_weight.shape)
    params = {"experts": experts, "topk": int(ids.shape[-1]), "hidden": hidden, "inter": two_inter // 2}
    key = contract_key("fp8_moe", params)
    index = x.device.index or 0
    cap = _MOE_MAX
    capped = cap < CHAIN.max_dispatch
    if variant:
        why = variant
        _variants.setdefault((key, str(x.device)), variant)
    elif _MODE != "auto":
        return _MODE == "netra"
    elif capped and x.dim() == 2 and x.shape[0] > cap:
        why = f"{x.shape[0]} tokens; {MOE_MAX_TOKENS}={cap} leaves calls of more to vLLM"
    elif not (x.is_cuda and x.dtype == torch.bfloat16 and x.dim() == 2 and ids.is_cuda):
        why = "the tokens are not a 2-D bf16 CUDA tensor"
    elif x.shape[0] > CHAIN.max_dispatch:
        why = f"{x.shape[0]} tokens; the certified chain takes at most {CHAIN.max_dispatch}"
    elif _experts_served(params, index):
        return True
    else:
        why = _decisions[(key, index)][1]
    if nt.is_strict():
        raise StrictModeError(
            f"{key}: vLLM's RoutedExperts runs its own forward: {why}",
            "serve the call with at most "
            f"{cap} bf16 CUDA tokens at a contract this GPU's table serves (netra catalog), "
            + (f"raise {MOE_MAX_TOKENS}, " if capped else "")
            + "or leave strict mode",
            contract=key,
            code="vllm",
            reason=why,
        )
    return False
