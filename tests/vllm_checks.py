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


E, K, H, I, T = 8, 2, 256, 384, 5  # noqa: E741 - the routed experts' checks: experts, top-k, hidden, inter, tokens


def _experts(block: list[int] | None) -> tuple[Any, Any, dict[tuple[int, str], tuple[torch.Tensor, ...]]]:
    """A FusedMoE layer as vLLM builds it for an Fp8 checkpoint (FusedMoEFactory: router, RoutedExperts,
    runner), its experts loaded by vLLM's own weight loader from a checkpoint of per-expert gate_proj,
    up_proj and down_proj FP8 weights with their block scales (returned beside, by (expert, name))."""
    import tempfile

    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.distributed.parallel_state import model_parallel_is_initialized
    from vllm.model_executor.layers.fused_moe.layer import FusedMoEFactory
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config

    with set_current_vllm_config(VllmConfig()):
        if not model_parallel_is_initialized():  # one rank: what Fp8's create_weights asks the TP group
            url = f"file://{tempfile.mkstemp()[1]}"
            init_distributed_environment(1, 0, url, 0, backend="gloo")
            initialize_model_parallel(1, 1)
        moe = FusedMoEFactory(
            num_experts=E, top_k=K, hidden_size=H, intermediate_size=I, params_dtype=torch.bfloat16,
            quant_config=Fp8Config(True, activation_scheme="dynamic", weight_block_size=block),
            prefix=f"model.layers.{len(_LAYERS)}.mlp.experts",
        )  # fmt: skip
    _LAYERS.append(moe)
    layer = moe.routed_experts
    params = dict(layer.named_parameters())
    g = torch.Generator().manual_seed(0)
    ckpt = {}
    for e in range(E):
        for name, rows, cols in (("gate_proj", I, H), ("up_proj", I, H), ("down_proj", H, I)):
            w = (torch.randn(rows, cols, generator=g) * 64).clamp(-448, 448).to(torch.float8_e4m3fn)
            sf = torch.rand(rows // 128, cols // 128, generator=g) * 1e-3 + 1e-4
            ckpt[(e, name)] = (w, sf)
            stem, shard = (
                ("w2", "w2") if name == "down_proj" else ("w13", "w1" if name == "gate_proj" else "w3")
            )
            layer.weight_loader(params[f"{stem}_weight"], w, f"experts.{e}.{name}.weight", shard, e)
            if block:
                layer.weight_loader(
                    params[f"{stem}_weight_scale_inv"], sf, f"experts.{e}.{name}.weight_scale_inv", shard, e
                )
    return moe, layer, ckpt


_LAYERS: list[Any] = []  # each layer's prefix is registered in vLLM's forward context: one per layer


def _tokens(moe: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Tokens and vLLM's router's top-k for them (the CPU router: softmax, renormalized)."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    weights, ids = moe.router.select_experts(hidden_states=x, router_logits=torch.randn(T, E, generator=g))
    return x, weights, ids


def _vllms(fn: Callable[[], Any]) -> dict[str, Any]:
    """What a call did when it ran vLLM's own path on this CPU: vLLM 0.32 has no block-FP8 MoE kernel for a
    CPU without AMX-FP8 (Fp8MoeBackend.NONE), so its path raises; the error and where (file, function)."""
    try:
        fn()
    except Exception as e:  # vLLM's own error is the observation
        return _error(e)
    return {"error": None}


def _error(e: Exception) -> dict[str, Any]:
    import traceback

    last = traceback.extract_tb(e.__traceback__)[-1]
    return {"error": f"{type(e).__name__}: {e}", "where": f"{last.filename.split('/vllm/')[-1]}:{last.name}"}


def _strict(fn: Callable[[], Any]) -> dict[str, Any]:
    """What a call did in strict mode: the StrictModeError netra raised, else what _vllms saw."""
    import netra.torch as nt

    try:
        with nt.strict():
            fn()
    except nt.StrictModeError as e:
        return {"message": str(e), "code": e.code, "reason": e.reason}
    except Exception as e:  # a plugin without the experts: vLLM's path, which raises here
        return _error(e)
    return {"error": None}


def _definition_bound(
    xq: torch.Tensor,
    xs: torch.Tensor,
    weights: torch.Tensor,
    ids: torch.Tensor,
    ckpt: dict[tuple[int, str], tuple[torch.Tensor, ...]],
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """fp8_moe's definition (docs/ops/fp8_moe.md) in float64 on the checkpoint's tensors, from the tokens'
    codes and scales, and per element how far netra's op (here its fp32 composite) may be from it: each
    fp32 sum within n * 2^-24 of its magnitudes, h's fp32 error carried into its group scale and codes (a
    code one E4M3 step off only where h / scale is within that error of a midpoint: counted), the slot sum,
    and the bf16 rounding of out (2^-8 relative). Returns the definition, the bound and the codes that may
    be a step off."""

    def dec(e: int, name: str) -> torch.Tensor:
        w, sf = ckpt[(e, name)]
        return w.double() * sf.double().repeat_interleave(128, 0).repeat_interleave(128, 1)

    def e4m3(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """v rounded to E4M3FN (float64 on the way, exact for these codes) and the spacing of the codes at |v|."""
        a = v.abs().clamp(min=2.0**-6)
        step = torch.exp2(torch.floor(torch.log2(a)) - 3)
        return torch.round(v / step) * step, step

    u = 2.0**-24
    x = xq.double() * xs.double().repeat_interleave(128, 1)
    ref = torch.zeros(T, H, dtype=torch.float64)
    bound = torch.zeros(T, H, dtype=torch.float64)
    near = 0
    for t in range(T):
        for slot in range(K):
            e, w = int(ids[t, slot]), float(weights[t, slot])
            wg, wu, wd = dec(e, "gate_proj"), dec(e, "up_proj"), dec(e, "down_proj")
            g, up = wg @ x[t], wu @ x[t]
            dg, du = H * u * (wg.abs() @ x[t].abs()), H * u * (wu.abs() @ x[t].abs())
            silu = g * torch.sigmoid(g)
            h = silu * up
            dh = 1.1 * dg * (up.abs() + du) + silu.abs() * du + 4 * u * (h.abs() + 1.1 * dg * du)
            scale = h.abs().view(-1, 128).amax(1).clamp(min=1e-10) / 448
            dscale = dh.view(-1, 128).amax(1) / 448 + 2 * u * scale
            scale, dscale = scale.repeat_interleave(128), dscale.repeat_interleave(128)
            v = h / scale
            code, step = e4m3(v)
            window = (dh + v.abs() * dscale) / (scale - dscale) + 2**-18 * v.abs()
            off = ((v - code).abs() - step / 2).abs() <= window  # within reach of the other code
            near += int(off.sum())
            hq = code * scale
            dhq = code.abs() * dscale + off * step * (scale + dscale)
            y = wd @ hq
            dy = wd.abs() @ dhq + I * u * (wd.abs() @ (hq.abs() + dhq))
            ref[t] += w * y
            bound[t] += abs(w) * dy + K * u * abs(w) * (y.abs() + dy)
    bound += 2**-8 * (ref.abs() + bound)
    return ref, bound, near


@check
def experts() -> dict[str, Any]:
    """vLLM's routed experts (FusedMoE with Fp8 128 x 128 blocks) through the plugin: the class vLLM builds,
    an unserved call (CPU tokens) on vLLM's own path, strict mode, and with NETRA_VLLM=netra netra.torch's
    op on vLLM's loaded weights and vLLM's router's top-k, against the same op on the checkpoint's tensors
    (bit for bit) and against the float64 definition (within the derived bound)."""
    import os

    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    import netra.integrations.vllm as plug
    import netra.torch as nt

    out: dict[str, Any] = {}
    os.environ["NETRA_VLLM"] = "auto"
    plug.register()
    moe, layer, ckpt = _experts([128, 128])
    x, weights, ids = _tokens(moe)
    out["types"] = [type(layer).__qualname__, type(layer).__mro__[1].__qualname__, type(moe).__qualname__]
    out["router"] = [str(weights.dtype), str(ids.dtype), list(ids.shape)]
    nt.reset_stats()
    with torch.no_grad():
        out["auto"] = _vllms(lambda: layer.forward_modular(x, weights, ids))
        out["vllm"] = _vllms(lambda: RoutedExperts.forward_modular(layer, x, weights, ids))
        out["auto_stats"] = nt.stats()
        out["strict"] = _strict(lambda: layer.forward_modular(x, weights, ids))
        os.environ["NETRA_VLLM"] = "netra"
        plug.register()
        nt.reset_stats()
        try:
            got = layer.forward_modular(x, weights, ids)
        except Exception as e:  # on a plugin without the experts: vLLM's path, which raises here
            got, out["netra"] = None, {"error": f"{type(e).__name__}: {e}"}
        out["netra_stats"] = nt.stats()
        w13 = torch.stack([torch.cat([ckpt[(e, "gate_proj")][0], ckpt[(e, "up_proj")][0]]) for e in range(E)])
        w13s = torch.stack(
            [torch.cat([ckpt[(e, "gate_proj")][1], ckpt[(e, "up_proj")][1]]) for e in range(E)]
        )
        w2 = torch.stack([ckpt[(e, "down_proj")][0] for e in range(E)])
        w2s = torch.stack([ckpt[(e, "down_proj")][1] for e in range(E)])
        xq, xs = nt.fp8_group_quant(x)
        want = nt.fp8_moe(xq, xs, ids.int(), weights.float(), w13, w13s, w2, w2s)
    os.environ["NETRA_VLLM"] = "auto"
    plug.register()
    if got is None:
        return out
    ref, bound, near = _definition_bound(xq, xs, weights, ids, ckpt)
    err = (got.double() - ref).abs()
    out["netra"] = {
        "dtype": str(got.dtype),
        "shape": list(got.shape),
        "equal_to_checkpoint_operands": bool(torch.equal(got, want)),
        "within_bound": bool((err <= bound).all()),
        "max_error_over_bound": float((err / bound).max()),
        "bound_over_magnitude": float(bound.max() / ref.abs().max()),
        "codes_near_a_midpoint": near,
    }
    return out


@check
def experts_variant() -> dict[str, Any]:
    """A layer netra has no op for (Fp8 with one scale per tensor, no blocks) keeps vLLM's path even with
    NETRA_VLLM=netra, and routes() and strict mode name why."""
    import os

    from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts

    import netra.integrations.vllm as plug
    import netra.torch as nt

    os.environ["NETRA_VLLM"] = "netra"
    plug.register()
    moe, layer, _ = _experts(None)
    x, weights, ids = _tokens(moe)
    nt.reset_stats()
    with torch.no_grad():
        out = {
            "netra": _vllms(lambda: layer.forward_modular(x, weights, ids)),
            "vllm": _vllms(lambda: RoutedExperts.forward_modular(layer, x, weights, ids)),
            "stats": nt.stats(),
        }
        out["strict"] = _strict(lambda: layer.forward_modular(x, weights, ids))
    out["routes"] = {k: v for k, v in plug.routes().items() if k.startswith("fp8_moe")}
    os.environ["NETRA_VLLM"] = "auto"
    plug.register()
    return out


@check
def experts_max_tokens() -> dict[str, Any]:
    """NETRA_VLLM_MOE_MAX_TOKENS in auto mode: a call of more tokens than it allows keeps vLLM's path
    (strict mode names why), one within it goes on to the other checks (here: CPU tokens)."""
    import os

    import netra.integrations.vllm as plug

    os.environ["NETRA_VLLM"] = "auto"
    plug.register()
    moe, layer, _ = _experts([128, 128])
    x, weights, ids = _tokens(moe)  # T tokens
    out: dict[str, Any] = {}
    with torch.no_grad():
        for cap in (T - 1, T, 0):
            os.environ["NETRA_VLLM"], os.environ[plug.MOE_MAX_TOKENS] = "auto", str(cap)
            plug.register()
            out[str(cap)] = {
                "auto": _vllms(lambda: layer.forward_modular(x, weights, ids)),
                "strict": _strict(lambda: layer.forward_modular(x, weights, ids)),
            }
    del os.environ[plug.MOE_MAX_TOKENS]
    plug.register()
    return out


@check
def route() -> dict[str, Any]:
    """The per-contract route on a torch without CUDA: vLLM's forward, with netra.torch's reason."""
    import netra.integrations.vllm as plug

    served = plug._served("rmsnorm(hidden=4096,weight_offset=0)", 0)
    return {"served": served, "routes": {k: v for k, v in plug.routes().items() if k.startswith("rmsnorm")}}


@check
def experts_route() -> dict[str, Any]:
    """The routed experts' route at Qwen3-30B-A3B's contract on a torch without CUDA: vLLM's path, with the
    reason of the first contract netra.torch does not serve (the tokens' quantization)."""
    import netra.integrations.vllm as plug

    served = getattr(plug, "_experts_served", None)
    params = {"experts": 128, "topk": 8, "hidden": 2048, "inter": 768}
    return {
        "served": served(params, 0) if served else None,
        "routes": {k: v for k, v in plug.routes().items() if k.startswith("fp8_moe") and "cuda" in k},
    }


if __name__ == "__main__":
    names = sys.argv[1:] or list(CHECKS)
    print(json.dumps({name: CHECKS[name]() for name in names}, sort_keys=True))
