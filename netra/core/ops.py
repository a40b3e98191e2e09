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

__all__ = [
    "CHAINS",
    "FAMILIES",
    "STAGES",
    "Chain",
    "OpFamily",
    "chain_family",
    "contract_key",
    "contract_params",
    "family",
    "max_dispatch",
]

# Each family's record is its own module (netra/core/families/), in the order listings show them.
FAMILIES: dict[str, OpFamily] = {m.RECORD.name: m.RECORD for m in FAMILY_MODULES}
# Operations served as a chain of families (netra/core/families/fp8_moe.py), and the families that are
# a chain's stages: a stage is certified like any family and called through its chain.
CHAINS: dict[str, Chain] = {m.CHAIN.name: m.CHAIN for m in CHAIN_MODULES}
STAGES: frozenset[str] = frozenset(s for c in CHAINS.values() for s in c.stages)


def max_dispatch(op: str) -> int | None:
    """The most of the dispatch value one call of `op` may carry (a chain's or its stage's: the routed
    MoE's 64 tokens); None where the family has no such limit."""
    return next((c.max_dispatch for c in CHAINS.values() if op == c.name or op in c.stages), None)


def chain_family(name: str) -> OpFamily:
    """A chain seen as one family, for what is derived from a record (torch schemas, shapes, bytes
    moved): its call's inputs (every stage's, the links excepted), its last stage's outputs, its first
    stage's parameters and dispatch value. It has no kernel arguments of its own: its stages launch."""
    c = CHAINS[name]
    stages = [FAMILIES[s] for s in c.stages]
    given = {o.name: o for f in stages for o in f.inputs if o.name not in c.links}
    if sorted(given) != sorted(c.inputs):
        raise ManifestError(
            f"chain {name}: inputs {', '.join(c.inputs)} are not its stages' ({', '.join(sorted(given))})",
            f"list every stage input but the links in {c.doc}'s record",
        )
    first = stages[0]
    return OpFamily(
        name=name,
        params=first.params,
        short=first.short,
        inputs=tuple(given[n] for n in c.inputs),
        outputs=stages[-1].outputs,
        scalars=(),
        args=(),
        launch=first.launch,
        layout=" then ".join(f.layout for f in stages),
        quant=first.quant,
        doc=c.doc,
        reads={k: v for f in stages for k, v in f.reads.items() if k in given},
        derived=first.derived,
    )


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
    names = (
        FAMILIES[op].params if op in FAMILIES else FAMILIES[CHAINS[op].stages[0]].params
    )  # a chain's: its stages'
    return f"{op}(" + ",".join(f"{k}={params[k]}" for k in names) + ")"
