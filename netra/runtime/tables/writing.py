"""The typed table written back as the format's JSON data (`to_json`): what `netra certify` and
`netra lock` make as typed tables is written through here, then split into the two files and dumped
(netra.runtime.tables.evidence, reading.dumps).

The model holds everything the format says, so reading then writing gives the same data, key for key
(tests/test_table_format.py holds every committed table to it): a certified table (parse_certified,
read_certified) gives the certified form, a table file (parse) the table form.
"""

from __future__ import annotations

from typing import Any

from netra.core.types import ModelFallback
from netra.runtime.kernarg import KernargLayout
from netra.runtime.tables.model import (
    FP32_ACCUMULATOR_BITS,
    SCHEMA,
    Candidate,
    Dispatch,
    Entry,
    Launch,
    NotAdmitted,
    Table,
)


def launch_json(launch: Launch) -> dict[str, Any]:
    """A candidate's launch as the format writes it (each grid axis a constant, {"rows_per_block": n} or
    {"rows": "<expression>"})."""
    return {
        "block": list(launch.block),
        "grid": [
            a if isinstance(a, int) else {"rows_per_block": a[1]} if isinstance(a[1], int) else {"rows": a[1]}
            for a in launch.grid_axes
        ],
        "dynamic_lds_bytes": launch.dynamic_lds_bytes,
    }


def kernarg_json(layout: KernargLayout) -> dict[str, Any]:
    return {
        "size": layout.size,
        "args": [
            {"name": a.name, "offset": a.offset, "size": a.size, "kind": a.kind, "type": a.type}
            for a in layout.args
        ],
    }


def accumulator_json(bits: int) -> dict[str, Any]:
    """A candidate's accumulator_bits as the format writes it: only where it is not fp32's (the field is
    optional, so a table of fp32 kernels reads and writes back unchanged)."""
    return {"accumulator_bits": bits} if bits != FP32_ACCUMULATOR_BITS else {}


def candidate_json(c: Candidate) -> dict[str, Any]:
    return accumulator_json(c.accumulator_bits) | {
        "tactic": c.tactic,
        "artifact": c.artifact,
        "file": c.file,
        "symbol": c.symbol,
        "text_sha256": c.text_sha256,
        "launch": launch_json(c.launch),
        "lds_bytes": c.lds_bytes,
        "workspace_bytes": c.workspace_bytes,
        "kernarg": kernarg_json(c.kernarg),
        "maturity": c.maturity,
        "evidence": c.evidence,
    }


def contract_json(op: str, params: dict[str, int]) -> dict[str, Any]:
    """An entry's contract: its parameters and the family's fixed semantics (netra.core.ops)."""
    from netra.core.ops import FAMILIES

    fam = FAMILIES[op]
    return {
        "op": op,
        "params": dict(params),
        "dtypes": dict(sorted(fam.dtypes.items())),
        "layout": fam.layout,
        "quant": fam.quant,
    }


def dispatch_json(dispatch: tuple[Dispatch, ...]) -> list[dict[str, Any]] | None:
    """An entry's row-count rules (None: no certified dispatch)."""
    return [{"max_rows": d.max_rows, "tactic": d.tactic} for d in dispatch] or None


def not_admitted_json(absent: tuple[NotAdmitted, ...]) -> list[dict[str, str]]:
    """The tactics an entry's template does not admit, as the table records them."""
    return [{"tactic": n.tactic, "requires": n.requires, "why": n.why} for n in absent]


def entry_json(e: Entry) -> dict[str, Any]:
    out = {
        "contract": contract_json(e.op, e.params),
        "key": e.key,
        "candidates": [candidate_json(c) for c in e.candidates],
        "dispatch": dispatch_json(e.dispatch),
    }
    if e.not_admitted:  # absent when every tactic of the op is a candidate (the field is optional)
        out["not_admitted"] = not_admitted_json(e.not_admitted)
    return out


def fallback_json(f: ModelFallback) -> dict[str, str]:
    """A model's documented gap as the table records it; a class's own gap names the class and contract."""
    out = {"model": f.model, "op": f.op, "use": f.use, "reason": f.reason}
    if f.gpu_class:
        out.update(gpu_class=f.gpu_class, contract=f.contract)
    return out


def to_json(t: Table) -> dict[str, Any]:
    """The table as the format's JSON data (sorted and dumped by reading.dumps)."""
    return {
        "schema": SCHEMA,
        "gpu_class": t.gpu_class,
        "vendor": t.vendor,
        "loader": t.loader,
        "certification": {"kind": t.certification, "note": t.note, "runs": list(t.runs)},
        "entries": [entry_json(e) for e in t.entries.values()],
        "fallbacks": [fallback_json(f) for f in t.fallbacks],
    }
