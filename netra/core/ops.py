"""The operation families Netra serves and what makes two contracts the same.

A contract is an op family plus its integer parameters. Everything else that makes up a kernel's
identity (dtypes, layout, quantization, rounding) is fixed per family and written here and in
docs/ops/, so two models whose parameters match share one artifact. A model name never enters it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netra.errors import ManifestError


@dataclass(frozen=True)
class OpFamily:
    name: str
    params: tuple[str, ...]  # contract parameters; each maps to the template constant params.upper()
    short: dict[str, str]  # parameter -> short tag used in artifact names
    args: tuple[str, ...]  # the kernel's arguments in ABI order (every template of the family takes them)
    dtypes: dict[str, str]
    layout: str
    quant: str
    doc: str


FAMILIES: dict[str, OpFamily] = {
    f.name: f
    for f in (
        OpFamily(
            name="rmsnorm",
            params=("hidden", "weight_offset"),
            short={"hidden": "h", "weight_offset": "wo"},
            args=("y", "x", "w", "rows", "eps"),
            dtypes={"x": "bf16", "w": "bf16", "y": "bf16", "eps": "f32", "compute": "f32"},
            layout="row-major contiguous [rows, hidden]",
            quant="none",
            doc="docs/ops/rmsnorm.md",
        ),
        OpFamily(
            name="fp8_group_quant",
            params=("hidden", "group"),
            short={"hidden": "h", "group": "g"},
            args=("q", "scales", "x", "rows"),
            dtypes={"x": "bf16", "q": "fp8_e4m3fn", "scales": "f32", "compute": "f32"},
            layout="row-major contiguous [rows, hidden]; scales [rows, hidden/group]",
            quant="fp8 e4m3fn (OCP), one fp32 scale per group, scale = max(amax, 1e-10)/448, RNE, saturate",
            doc="docs/ops/fp8_group_quant.md",
        ),
        OpFamily(
            name="silu_mul_fp8_quant",
            params=("inter", "group"),
            short={"inter": "i", "group": "g"},
            args=("q", "scales", "x", "rows"),
            dtypes={"x": "bf16", "q": "fp8_e4m3fn", "scales": "f32", "compute": "f32"},
            layout="row-major contiguous [rows, 2*inter] as [gate | up]; q [rows, inter]",
            quant="fp8 e4m3fn (OCP), one fp32 scale per group, scale = max(amax, 1e-10)/448, RNE, saturate",
            doc="docs/ops/silu_mul_fp8_quant.md",
        ),
        OpFamily(
            name="fused_add_rmsnorm",
            params=("hidden", "weight_offset"),
            short={"hidden": "h", "weight_offset": "wo"},
            args=("residual_out", "y", "x", "residual", "w", "rows", "eps"),
            dtypes={
                "x": "bf16",
                "residual": "bf16",
                "w": "bf16",
                "residual_out": "bf16",
                "y": "bf16",
                "eps": "f32",
                "compute": "f32",
            },
            layout="row-major contiguous [rows, hidden]; residual_out may be residual (in place)",
            quant="none",
            doc="docs/ops/fused_add_rmsnorm.md",
        ),
        OpFamily(
            name="rmsnorm_fp8_group_quant",
            params=("hidden", "weight_offset", "group"),
            short={"hidden": "h", "weight_offset": "wo", "group": "g"},
            args=("q", "scales", "x", "w", "rows", "eps"),
            dtypes={
                "x": "bf16",
                "w": "bf16",
                "q": "fp8_e4m3fn",
                "scales": "f32",
                "eps": "f32",
                "compute": "f32",
            },
            layout="row-major contiguous [rows, hidden]; scales [rows, hidden/group]",
            quant="rmsnorm rounded to bf16, then fp8 e4m3fn (OCP) as fp8_group_quant",
            doc="docs/ops/rmsnorm_fp8_group_quant.md",
        ),
        OpFamily(
            name="fused_add_rmsnorm_fp8_group_quant",
            params=("hidden", "weight_offset", "group"),
            short={"hidden": "h", "weight_offset": "wo", "group": "g"},
            args=("residual_out", "q", "scales", "x", "residual", "w", "rows", "eps"),
            dtypes={
                "x": "bf16",
                "residual": "bf16",
                "w": "bf16",
                "residual_out": "bf16",
                "q": "fp8_e4m3fn",
                "scales": "f32",
                "eps": "f32",
                "compute": "f32",
            },
            layout="row-major contiguous [rows, hidden]; scales [rows, hidden/group]; residual_out may be residual",
            quant="rmsnorm of residual_out rounded to bf16, then fp8 e4m3fn (OCP) as fp8_group_quant",
            doc="docs/ops/fused_add_rmsnorm_fp8_group_quant.md",
        ),
        OpFamily(
            name="moe_topk_softmax",
            params=("experts", "topk"),
            short={"experts": "e", "topk": "k"},
            args=("ids", "weights", "logits", "rows"),
            dtypes={"logits": "bf16", "ids": "i32", "weights": "f32", "compute": "f32"},
            layout="row-major contiguous [rows, experts]; ids and weights [rows, topk]",
            quant="none",
            doc="docs/ops/moe_topk_softmax.md",
        ),
    )
}


def family(op: str, where: str) -> OpFamily:
    try:
        return FAMILIES[op]
    except KeyError:
        raise ManifestError(
            f"{where}: unknown op {op!r}",
            f"use one of {', '.join(sorted(FAMILIES))}, or list it under [[fallbacks]] with a reason",
        ) from None


def contract_params(op: str, raw: dict[str, Any], where: str) -> dict[str, int]:
    """Validate a contract's parameters: exactly the family's, all integers."""
    fam = family(op, where)
    extra = sorted(set(raw) - set(fam.params))
    missing = sorted(set(fam.params) - set(raw))
    if extra or missing:
        raise ManifestError(
            f"{where}: op {op} takes parameters {', '.join(fam.params)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(extra)}" if extra else ""),
            f"see {fam.doc}",
        )
    out: dict[str, int] = {}
    for k in fam.params:
        v = raw[k]
        if isinstance(v, bool) or not isinstance(v, int):
            raise ManifestError(f"{where}: {op}.{k} must be an integer, got {v!r}", f"see {fam.doc}")
        if not 0 <= v < 2**31:
            raise ManifestError(f"{where}: {op}.{k} = {v} is outside [0, 2**31)", f"see {fam.doc}")
        out[k] = v
    return out


def contract_key(op: str, params: dict[str, int]) -> str:
    """A stable, readable identity: 'rmsnorm(hidden=4096,weight_offset=0)'."""
    return f"{op}(" + ",".join(f"{k}={params[k]}" for k in FAMILIES[op].params) + ")"
