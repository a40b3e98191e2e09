"""The operation families Netra serves and what makes two contracts the same.

A contract is an op family plus its integer parameters. Everything else that makes up a kernel's
identity (dtypes, layout, quantization, rounding) is fixed per family, in its record
(netra/core/families/<op>.py) and docs/ops/, so two models whose parameters match share one
artifact. A model name never enters it.
"""

from __future__ import annotations

from typing import Any

from netra.core.families import CHAIN_MODULES, FAMILY_MODULES
from netra.core.family import Chain, OpFamily
from netra.errors import ManifestError

__all__ = ["CHAINS", "FAMILIES", "STAGES", "Chain", "OpFamily", "contract_key", "contract_params", "family"]

# Each family's record is its own module (netra/core/families/), in the order listings show them.
FAMILIES: dict[str, OpFamily] = {m.RECORD.name: m.RECORD for m in FAMILY_MODULES}
# Operations served as a chain of families (netra/core/families/fp8_moe.py), and the families that are
# a chain's stages: a stage is certified like any family and called through its chain.
CHAINS: dict[str, Chain] = {m.CHAIN.name: m.CHAIN for m in CHAIN_MODULES}
STAGES: frozenset[str] = frozenset(s for c in CHAINS.values() for s in c.stages)


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
