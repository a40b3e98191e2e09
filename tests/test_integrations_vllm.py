"""netra.integrations.vllm against the real vLLM (0.32.0) on its CPU platform, in the venv tools/vllm-venv
makes once and keeps (requirements/vllm.txt; about two minutes and 2.1 GB the first time).

Each check runs in that venv (tests/vllm_checks.py, one process each, netra from this tree) and reports JSON:
vLLM's own plugin loader finds netra's entry point and its out-of-tree classes replace RMSNorm and
GemmaRMSNorm at construction; forward_cuda (what vLLM calls on a CUDA platform with custom ops on) routes a
call netra does not serve (here: CPU tensors) to vLLM's own forward, bit for bit, and refuses it in strict
mode; with every call sent to netra.torch (NETRA_VLLM=netra) the outputs match vLLM's forward_native (Gemma's
norm bit for bit, RMSNorm's within one bf16 ulp: vLLM rounds x * rsqrt to bf16 before * w, netra rounds
once; the fused add within one more: vLLM normalizes the unrounded fp32 sum, netra the bf16 residual_out),
the residual is bf16(x + residual) exactly and updated in place where vLLM's kernel does it; and vLLM's
QuantFP8 disagrees with netra's fp8_group_quant on small groups, which is why it is not registered;
torch.compile (fullgraph) traces the plugin's forward in both routes; a contract's route on a torch without
CUDA is vLLM's forward, with netra.torch's reason in routes().

vLLM's routed experts (a FusedMoE layer of an Fp8 checkpoint with 128 x 128 blocks, built by vLLM's
FusedMoEFactory, loaded by vLLM's weight loader from per-expert gate, up and down projections, called with
vLLM's router's top-k): vLLM builds netra's NetraRoutedExperts; vLLM 0.32 has no block-FP8 MoE kernel on a
CPU without AMX-FP8 (Fp8MoeBackend.NONE), so its own path raises here, and a call netra does not serve is
seen to take that path by the same error from the same vLLM function as the in-tree class; with
NETRA_VLLM=netra the output is netra.torch's fp8_moe on the checkpoint's tensors, bit for bit, and within a
bound derived from the float64 definition (tests/vllm_checks.py); a layer netra has no op for keeps vLLM's
path in every mode, and strict mode names why.
The served paths on an H200 are tests/test_gpu_integrations_vllm.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from conftest import REPO

CHECKS = REPO / "tests" / "vllm_checks.py"
TOOL = REPO / "tools" / "vllm-venv"


@pytest.fixture(scope="module")
def vllm_python() -> str:
    r = subprocess.run([str(TOOL)], capture_output=True, text=True, timeout=1200, check=False)
    assert r.returncode == 0, f"tools/vllm-venv failed:\n{r.stdout}\n{r.stderr[-4000:]}"
    return r.stdout.strip().splitlines()[-1]


ENV = {"VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": str(REPO)}  # vLLM's CPU platform; netra from this tree


@pytest.fixture(scope="module")
def results(vllm_python: str) -> dict[str, Any]:
    """Every check of tests/vllm_checks.py, run once in the vLLM venv."""
    r = subprocess.run(
        [vllm_python, str(CHECKS)], capture_output=True, text=True, timeout=600, check=False, cwd="/",
        env={**os.environ, **ENV, "NETRA_VLLM": "auto"},
    )  # fmt: skip
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr[-4000:]}"
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def test_plugin_registers_through_vllms_loader(results: dict[str, Any]) -> None:
    out = results["plugin"]
    assert out["oot"] == {
        "GemmaRMSNorm": "netra.integrations.vllm.NetraGemmaRMSNorm",
        "RMSNorm": "netra.integrations.vllm.NetraRMSNorm",
        "RoutedExperts": "netra.integrations.vllm.NetraRoutedExperts",
    }
    assert out["types"] == ["NetraRMSNorm", "NetraGemmaRMSNorm"]
    assert out["bases"] == ["RMSNorm", "GemmaRMSNorm"]
    # an out-of-tree op is named by the class it replaces: custom_ops=["+RMSNorm"] turns it on
    assert out["names"] == ["RMSNorm", "GemmaRMSNorm"]
    assert out["enabled"] == [True, True] and out["enabled_by_name"] == [True, False]
    assert out["cpu_dispatch"] == "forward_cpu"  # vLLM's CPU platform never calls forward_cuda


def test_unserved_calls_run_vllms_forward(results: dict[str, Any]) -> None:
    out = results["numerics_auto"]
    for label in ("rms256", "rms4096", "gemma256", "gemma4096"):
        case = out[label]
        assert case["equal"] and case["fused_ulps"] == 0 and case["residual_equal"], (label, case)
        assert case["stats"] == {}, (label, case)  # netra.torch was never called
    assert out["routes"] == {}  # CPU tensors never reach the per-contract route


def test_netra_route_numerics_against_vllm(results: dict[str, Any]) -> None:
    out = results["numerics_netra"]
    for hidden in (256, 4096):
        rms, gemma = out[f"rms{hidden}"], out[f"gemma{hidden}"]
        # vLLM normalizes the fp32 sum x + residual, netra the residual_out it rounded to bf16
        # (docs/ops/fused_add_rmsnorm.md): one ulp apart at most, even where the norm rounds once
        assert gemma["equal"] and gemma["fused_ulps"] <= 1 and gemma["residual_equal"], gemma
        assert not gemma["residual_in_place"]  # vLLM's Gemma path returns a new residual
        assert rms["ulps"] <= 1 and rms["fused_ulps"] <= 2 and rms["residual_equal"], rms
        assert rms["residual_in_place"]  # as vLLM's fused_add_rms_norm kernel
        for offset, case in ((0, rms), (1, gemma)):
            assert case["stats"] == {
                f"rmsnorm(hidden={hidden},weight_offset={offset})": {"device": 2},
                f"fused_add_rmsnorm(hidden={hidden},weight_offset={offset})": {"device": 1},
            }


def test_strict_mode_refuses_vllms_forward(results: dict[str, Any]) -> None:
    out = results["strict"]
    assert out["code"] == "vllm"
    assert out["raised"] == (
        "rmsnorm(hidden=256,weight_offset=0): vLLM's RMSNorm runs its own forward: x, the residual or w is not "
        "a bf16 contiguous CUDA tensor; hint: serve the call with bf16 contiguous CUDA tensors at a width this "
        "GPU's table serves (netra catalog), or leave strict mode"
    )


def test_quant_fp8_is_not_netras_op(results: dict[str, Any]) -> None:
    out = results["quant_fp8"]
    assert out["typical"] == {"codes_equal": True, "scales_equal": True}
    assert out["small"]["scales_equal"] is False


def test_torch_compile_fullgraph_equals_eager(results: dict[str, Any]) -> None:
    assert results["compiled"] == {
        f"{mode}-{label}": [True, True] for mode in ("netra", "auto") for label in ("rms", "gemma")
    }


def test_route_without_cuda_is_vllms_forward_with_the_reason(results: dict[str, Any]) -> None:
    out = results["route"]
    assert out["served"] is False
    assert list(out["routes"]) == ["rmsnorm(hidden=4096,weight_offset=0) on cuda:0"]
    assert out["routes"]["rmsnorm(hidden=4096,weight_offset=0) on cuda:0"].startswith(
        "vllm: device: this torch "
    )


def test_a_variant_without_contract_runs_vllms_forward(results: dict[str, Any]) -> None:
    assert results["variant"] == {"equal": True, "stats": {}, "raised": "a norm without weight"}


def test_batch_invariant_mode_is_served_by_one_tactic_per_contract(results: dict[str, Any]) -> None:
    out = results["batch_invariant"]
    assert out["invariant_after_register"] is True and out["served_by_netra"] is True
    assert out["by_rows_stats"] == {} and out["raised"].startswith(
        "vLLM's batch-invariant mode, while netra.torch"
    )


def test_bad_mode_is_one_line(vllm_python: str) -> None:
    r = subprocess.run(
        [vllm_python, "-c", "import netra.integrations.vllm as v; v.register()"],
        capture_output=True, text=True, timeout=600, check=False, cwd="/",
        env={**os.environ, **ENV, "NETRA_VLLM": "fast"},
    )  # fmt: skip
    assert r.returncode != 0
    assert (
        "IntegrationError: NETRA_VLLM='fast' is not a routing mode; hint: set NETRA_VLLM to one of auto, netra, vllm"
        in r.stderr
    )


# vLLM's own error for a block-FP8 MoE call on this CPU: no backend (Fp8MoeBackend.NONE), no kernel
VLLM_NO_KERNEL = {
    "error": "AttributeError: 'NoneType' object has no attribute 'is_monolithic'",
    "where": "model_executor/layers/fused_moe/fused_moe_method_base.py:is_monolithic",
}
EXPERTS = "fp8_moe(experts=8,topk=2,hidden=256,inter=384)"


def test_routed_experts_unserved_call_runs_vllms_path(results: dict[str, Any]) -> None:
    out = results["experts"]
    assert out["types"] == ["NetraRoutedExperts", "RoutedExperts", "MoERunner"]  # vLLM built netra's class
    assert out["router"] == ["torch.float32", "torch.int32", [5, 2]]
    assert out["vllm"] == VLLM_NO_KERNEL  # the in-tree class's forward_modular on CPU tokens
    assert out["auto"] == out["vllm"] and out["auto_stats"] == {}  # the same path; netra.torch never called


def test_routed_experts_strict_mode_refuses_vllms_path(results: dict[str, Any]) -> None:
    assert results["experts"]["strict"] == {
        "code": "vllm",
        "reason": "the tokens are not a 2-D bf16 CUDA tensor",
        "message": f"{EXPERTS}: vLLM's RoutedExperts runs its own forward: the tokens are not a 2-D bf16 CUDA "
        "tensor; hint: serve the call with at most 64 bf16 CUDA tokens at a contract this GPU's table serves "
        "(netra catalog), or leave strict mode",
    }


def test_routed_experts_max_tokens_leaves_larger_calls_to_vllm(results: dict[str, Any]) -> None:
    """NETRA_VLLM_MOE_MAX_TOKENS=4 keeps a 5-token call on vLLM's path, named in strict mode; at 5 the
    call goes on to the next check (CPU tokens); 0 keeps every call vLLM's."""
    out = results["experts_max_tokens"]
    for cap in ("4", "0"):
        assert out[cap]["auto"] == VLLM_NO_KERNEL, cap
        assert out[cap]["strict"] == {
            "code": "vllm",
            "reason": f"5 tokens; NETRA_VLLM_MOE_MAX_TOKENS={cap} leaves calls of more to vLLM",
            "message": f"{EXPERTS}: vLLM's RoutedExperts runs its own forward: 5 tokens; "
            f"NETRA_VLLM_MOE_MAX_TOKENS={cap} leaves calls of more to vLLM; hint: serve the call with at most "
            f"{cap} bf16 CUDA tokens at a contract this GPU's table serves (netra catalog), raise "
            "NETRA_VLLM_MOE_MAX_TOKENS, or leave strict mode",
        }, cap
    assert out["5"]["strict"]["reason"] == "the tokens are not a 2-D bf16 CUDA tensor"


def test_bad_moe_max_tokens_is_one_line(vllm_python: str) -> None:
    for value in ("65", "-1", "four"):
        r = subprocess.run(
            [vllm_python, "-c", "import netra.integrations.vllm as v; v.register()"],
            capture_output=True, text=True, timeout=600, check=False, cwd="/",
            env={**os.environ, **ENV, "NETRA_VLLM_MOE_MAX_TOKENS": value},
        )  # fmt: skip
        assert r.returncode != 0, value
        assert (
            f"IntegrationError: NETRA_VLLM_MOE_MAX_TOKENS={value!r} is not a token count from 0 to 64; hint: set "
            "NETRA_VLLM_MOE_MAX_TOKENS to at most 64 (the certified chain's most tokens), or 0 to leave every "
            "routed-experts call to vLLM" in r.stderr
        ), (value, r.stderr[-2000:])


def test_routed_experts_netra_route_is_netras_op_on_vllms_weights(results: dict[str, Any]) -> None:
    out = results["experts"]
    assert out["netra_stats"] == {
        "fp8_group_quant(hidden=256,group=128)": {"device": 1},
        EXPERTS: {"device": 1},
    }
    got = out["netra"]
    assert got["dtype"] == "torch.bfloat16" and got["shape"] == [5, 256]
    # vLLM's loader put gate rows then up rows in w13, and its router's ids and weights went through as they are
    assert got["equal_to_checkpoint_operands"] is True
    assert got["within_bound"] is True and got["max_error_over_bound"] <= 1
    # the bound is tight enough to see a mistake: gate and up swapped are 185 bounds off (checked by hand)
    assert got["bound_over_magnitude"] < 2**-6


def test_routed_experts_variant_keeps_vllms_path(results: dict[str, Any]) -> None:
    out = results["experts_variant"]  # Fp8 with one scale per tensor, NETRA_VLLM=netra
    assert out["netra"] == out["vllm"] == VLLM_NO_KERNEL and out["stats"] == {}
    assert out["strict"]["reason"] == "weights not in 128 x 128 blocks"
    assert out["routes"] == {f"{EXPERTS} on cpu": "vllm: variant: weights not in 128 x 128 blocks"}


def test_routed_experts_route_without_cuda_is_vllms_with_the_reason(results: dict[str, Any]) -> None:
    out = results["experts_route"]
    assert out["served"] is False
    assert list(out["routes"]) == ["fp8_moe(experts=128,topk=8,hidden=2048,inter=768) on cuda:0"]
    assert next(iter(out["routes"].values())).startswith(
        "vllm: device: fp8_group_quant(hidden=2048,group=128): this torch "
    )
