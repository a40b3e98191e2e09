"""vLLM's norm layers served by netra.torch, as a vLLM general plugin (docs/integrations.md).

Installing netra-kernel registers the entry point `vllm.general_plugins: netra = netra.integrations.vllm:register`;
vLLM calls `register()` in every process it starts, before models are built. It registers out-of-tree
CustomOps (`CustomOp.register_oot`) for the two norm classes netra's families compute:

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

Not registered, and why: vLLM's QuantFP8 group quantization floors its scale at 1/(448 * 512), netra's
fp8_group_quant at 1e-10/448 (docs/ops/fp8_group_quant.md): groups whose largest magnitude is below 1/512
get another scale and other codes, so netra's kernel is not vLLM's op. vLLM has no SiluAndMul+quant class
(its fusion pass matches the two ops in the compiled graph) and no class for the MoE top-k softmax that
netra's family computes (its routers fuse the choice of experts with their own scoring).
"""

from __future__ import annotations

import os
from typing import Any

import torch

import netra.torch as nt
from netra.core.ops import contract_key
from netra.errors import IntegrationError, StrictModeError

SWITCH = "NETRA_VLLM"
MODES = ("auto", "netra", "vllm")
_decisions: dict[tuple[str, int], tuple[bool, str]] = {}


def mode() -> str:
    """The routing mode NETRA_VLLM asks for: auto (default), netra or vllm."""
    value = os.environ.get(SWITCH, "auto") or "auto"
    if value not in MODES:
        raise IntegrationError(
            f"{SWITCH}={value!r} is not a routing mode", f"set {SWITCH} to one of {', '.join(MODES)}"
        )
    return value


def routes() -> dict[str, str]:
    """Each contract and device seen, and where its calls go: "netra", or "vllm: <code>: <reason>"."""
    return {
        f"{key} on cuda:{index}": "netra" if served else f"vllm: {why}"
        for (key, index), (served, why) in sorted(_decisions.items())
    }


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
_REGISTERED: dict[str, type] = {}


def register() -> None:
    """vLLM's general-plugin hook: the out-of-tree CustomOps above, once per process (vLLM may call it again)."""
    global _MODE
    _MODE = mode()
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

    for base, ours in ((RMSNorm, NetraRMSNorm), (GemmaRMSNorm, NetraGemmaRMSNorm)):
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
        base.register_oot(ours)
        _REGISTERED[name] = ours


def _batch_invariant() -> str:
    """Why vLLM's batch-invariant mode keeps this call vLLM's ("" when it is off, or when netra.torch serves
    one tactic per contract for every row count, which register() asks for when the mode is on)."""
    from vllm import envs

    if not envs.VLLM_BATCH_INVARIANT or nt.batch_invariant():
        return ""
    return "vLLM's batch-invariant mode, while netra.torch picks tactics by row count (nt.set_batch_invariant(False))"
