"""Run inside the vLLM venv (tools/vllm-venv) by tests/test_integrations_vllm.py: `python vllm_checks.py` runs
every check against the real vLLM on its CPU platform, in one process (importing vLLM takes seconds), and
prints one JSON object, {check: result}; the tests assert on it.

netra comes from the tree (PYTHONPATH); vLLM finds netra's plugin through the editable install's entry point.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import torch

CHECKS: dict[str, Callable[[], dict[str, Any]]] = {}


def check(fn: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    CHECKS[fn.__name__] = fn
    return fn


def _config(custom_ops: list[str]) -> Any:
    from vllm.config import CompilationConfig, VllmConfig, set_current_vllm_config

    return set_current_vllm_config(VllmConfig(compilation_config=CompilationConfig(custom_ops=custom_ops)))


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    assert a.dtype == b.dtype == torch.bfloat16 and a.shape == b.shape
    assert bool(((a.sign() == b.sign()) | (a == 0) | (b == 0)).all())
    return int((a.view(torch.int16).int() - b.view(torch.int16).int()).abs().max())


def _layers(hidden: int) -> tuple[Any, Any]:
    from vllm.model_executor.layers.layernorm import GemmaRMSNorm, RMSNorm

    torch.manual_seed(0)
    norm = RMSNorm(hidden, eps=1e-6, dtype=torch.bfloat16)
    gemma = GemmaRMSNorm(hidden, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
        gemma.weight.data = torch.randn(hidden).to(torch.bfloat16) * 0.5
    return norm, gemma


@check
def plugin() -> dict[str, Any]:
    """vLLM's own loader finds netra's entry point; the OOT classes replace vLLM's at construction."""
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    import netra.integrations.vllm as plug

    plug.register()  # vLLM may call a plugin more than once: idempotent
    with _config(["all"]):
        norm, gemma = _layers(256)
        method = norm._forward_method.__name__
        enabled = [type(norm).enabled(), type(gemma).enabled()]
    with _config(["none", "+RMSNorm"]):
        named = [type(norm).enabled(), type(gemma).enabled()]
    return {
        "oot": {k: f"{v.__module__}.{v.__qualname__}" for k, v in sorted(op_registry_oot.items())},
        "types": [type(norm).__qualname__, type(gemma).__qualname__],
        "bases": [type(norm).__mro__[1].__qualname__, type(gemma).__mro__[1].__qualname__],
        "names": [type(norm).name, type(gemma).name],
        "enabled": enabled,
        "enabled_by_name": named,
        "cpu_dispatch": method,
    }


def _numerics(mode: str) -> dict[str, Any]:
    """forward_cuda (what a CUDA platform calls) against vLLM's forward_native on the same inputs."""
    import os

    os.environ["NETRA_VLLM"] = mode
    import netra.integrations.vllm as plug
    import netra.torch as nt

    plug.register()
    out: dict[str, Any] = {}
    with _config(["all"]):
        for hidden in (256, 4096):
            norm, gemma = _layers(hidden)
            x = torch.randn(5, hidden).to(torch.bfloat16)
            r = torch.randn(5, hidden).to(torch.bfloat16)
            for label, layer in (("rms", norm), ("gemma", gemma)):
                nt.reset_stats()
                ref = layer.forward_native(x.clone())
                got = layer.forward_cuda(x.clone())
                ref_y, ref_r = layer.forward_native(x.clone(), r.clone())
                rr = r.clone()
                got_y, got_r = layer.forward_cuda(x.clone(), rr)
                out[f"{label}{hidden}"] = {
                    "ulps": _ulps(got, ref),
                    "equal": bool(torch.equal(got, ref)),
                    "fused_ulps": _ulps(got_y, ref_y),
                    "residual_equal": bool(torch.equal(got_r, ref_r)),
                    "residual_in_place": got_r is rr,
                    "stats": nt.stats(),
                }
    out["routes"] = plug.routes()
    return out


@check
def numerics_auto() -> dict[str, Any]:
    return _numerics("auto")


@check
def numerics_netra() -> dict[str, Any]:
    return _numerics("netra")


@check
def strict() -> dict[str, Any]:
    """Strict mode: a call routed to vLLM's forward (here: a CPU tensor) raises StrictModeError."""
    import os

    import netra.integrations.vllm as plug
    import netra.torch as nt

    os.environ["NETRA_VLLM"] = "auto"
    plug.register()
    with _config(["all"]):
        norm, _ = _layers(256)
        with nt.strict():
            try:
                norm.forward_cuda(torch.randn(2, 256).to(torch.bfloat16))
            except nt.StrictModeError as e:
                return {"raised": str(e), "code": e.code}
    return {"raised": None}


@check
def quant_fp8() -> dict[str, Any]:
    """Why vLLM's QuantFP8 is not registered: its scale floor is 1/(448*512), netra's 1e-10/448."""
    from vllm.model_executor.layers.quantization.input_quant_fp8 import QuantFP8
    from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape

    import netra.torch as nt

    with _config(["all"]):
        quant = QuantFP8(static=False, group_shape=GroupShape(1, 128), compile_native=False)
    torch.manual_seed(0)
    big = torch.randn(4, 256).to(torch.bfloat16)
    small = (big * 1e-4).to(torch.bfloat16)  # every |x| < 1/512
    res = {}
    for label, x in (("typical", big), ("small", small)):
        vq, vs = quant.forward_native(x)
        nq, ns = nt.fp8_group_quant(x)
        res[label] = {
            "scales_equal": bool(torch.equal(vs.float(), ns)),
            "codes_equal": bool(torch.equal(vq.view(torch.uint8), nq.view(torch.uint8))),
        }
    return res


@check
def compiled() -> dict[str, Any]:
    """torch.compile (aot_eager, fullgraph) of the plugin's forward_cuda, with and without the residual, in
    both routes: no graph break, the outputs of eager."""
    import os

    import netra.integrations.vllm as plug

    out = {}
    for mode in ("netra", "auto"):
        os.environ["NETRA_VLLM"] = mode
        plug.register()
        with _config(["all"]), torch.no_grad():
            norm, gemma = _layers(256)
            x, r = torch.randn(3, 256).to(torch.bfloat16), torch.randn(3, 256).to(torch.bfloat16)
            for label, layer in (("rms", norm), ("gemma", gemma)):
                torch._dynamo.reset()
                fn = torch.compile(layer.forward_cuda, backend="aot_eager", fullgraph=True)
                ey, er = layer.forward_cuda(x.clone(), r.clone())
                cy, cr = fn(x.clone(), r.clone())
                out[f"{mode}-{label}"] = [
                    bool(torch.equal(layer.forward_cuda(x), fn(x))),
                    bool(torch.equal(ey, cy) and torch.equal(er, cr)),
                ]
    os.environ["NETRA_VLLM"] = "auto"
    plug.register()
    return out


@check
def variant() -> dict[str, Any]:
    """A layer variant netra has no contract for (RMSNorm without weight) runs vLLM's forward even when every
    call is sent to netra, and strict mode names the variant."""
    import os

    from vllm.model_executor.layers.layernorm import RMSNorm

    import netra.integrations.vllm as plug
    import netra.torch as nt

    os.environ["NETRA_VLLM"] = "netra"
    plug.register()
    with _config(["all"]), torch.no_grad():
        layer = RMSNorm(256, eps=1e-6, has_weight=False, dtype=torch.bfloat16)
        x = torch.randn(3, 256).to(torch.bfloat16)
        nt.reset_stats()
        equal = bool(torch.equal(layer.forward_cuda(x), layer.forward_native(x)))
        stats = nt.stats()
        try:
            with nt.strict():
                layer.forward_cuda(x)
            raised = None
        except nt.StrictModeError as e:
            raised = e.reason
    os.environ["NETRA_VLLM"] = "auto"
    plug.register()
    return {"equal": equal, "stats": stats, "raised": raised}


@check
def batch_invariant() -> dict[str, Any]:
    """vLLM's batch-invariant mode: register() makes netra.torch serve one tactic per contract for every row
    count, and the calls go to netra; with netra.torch switched back to dispatch by rows they stay vLLM's,
    and strict mode names the mode."""
    import os

    from vllm.model_executor.layers.layernorm import RMSNorm

    import netra.integrations.vllm as plug
    import netra.torch as nt

    os.environ["NETRA_VLLM"], os.environ["VLLM_BATCH_INVARIANT"] = "netra", "1"
    out: dict[str, Any] = {}
    try:
        plug.register()
        out["invariant_after_register"] = nt.batch_invariant()
        with _config(["all"]), torch.no_grad():
            layer = RMSNorm(256, eps=1e-6, dtype=torch.bfloat16)
            x = torch.randn(3, 256).to(torch.bfloat16)
            nt.reset_stats()
            layer.forward_cuda(x)
            out["served_by_netra"] = bool(nt.stats())
            nt.set_batch_invariant(False)  # vLLM's own batch-invariant forward is Triton's: not on CPU, so
            nt.reset_stats()  # the route is read from strict mode, which refuses before vLLM's forward runs
            try:
                with nt.strict():
                    layer.forward_cuda(x)
                out["raised"] = None
            except nt.StrictModeError as e:
                out["raised"] = e.reason
            out["by_rows_stats"] = nt.stats()
    finally:
        del os.environ["VLLM_BATCH_INVARIANT"]
        os.environ["NETRA_VLLM"] = "auto"
        nt.set_batch_invariant(False)
        plug.register()
    return out


@check
def route() -> dict[str, Any]:
    """The per-contract route on a torch without CUDA: vLLM's forward, with netra.torch's reason."""
    import netra.integrations.vllm as plug

    return {"served": plug._served("rmsnorm(hidden=4096,weight_offset=0)", 0), "routes": plug.routes()}


if __name__ == "__main__":
    names = sys.argv[1:] or list(CHECKS)
    print(json.dumps({name: CHECKS[name]() for name in names}, sort_keys=True))
