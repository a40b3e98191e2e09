"""The JSON schemas of the --json reports and of the table format, completed from the registry.

The table and evidence schemas are generated from the table model (netra.runtime.tables.schema).

The files in netra/schemas/ are what ships; none of them names a GPU class, vendor or loader. Where a
value must be one of the registered ones, a file refers to one of its own `$defs` (`class`, `vendor`,
`loader`, `gpu_source`, `family`) and leaves it open there (a string, with a description). `load` returns the
schema with each of those made the registry's enum, and with every table keyed by loader (its
`propertyNames` refer to `loader`) required to list each loader: so a new class or vendor needs no
schema edit, and a report is still checked exactly (tests/ validate every --json output this way).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

FOLDER = Path(__file__).resolve().parents[1] / "schemas"
_LOADER_REF = {"$ref": "#/$defs/loader"}


def _choices() -> dict[str, Callable[[], tuple[str, ...]]]:
    from netra import targets
    from netra.core.ops import FAMILIES

    return {
        "family": lambda: tuple(sorted(FAMILIES)),
        "class": targets.names,
        "vendor": targets.vendor_names,
        "loader": targets.loader_names,
        "gpu_source": lambda: tuple(s for v in targets.vendors() for s in v.sources),
    }


def names() -> list[str]:
    """Every shipped schema's name: `netra <name> --json` follows <name>.schema.json (and `table`)."""
    return sorted(p.name.removesuffix(".schema.json") for p in FOLDER.glob("*.schema.json"))


def load(name: str) -> dict[str, Any]:
    """netra/schemas/<name>.schema.json with the registry's values filled in."""
    schema: dict[str, Any] = json.loads((FOLDER / f"{name}.schema.json").read_text())
    defs = schema.get("$defs", {})
    for key, values in _choices().items():
        if key in defs:
            defs[key] = {"enum": list(values()), "description": defs[key].get("description", "")}
    _require_loaders(schema)
    return schema


def _require_loaders(node: Any) -> None:
    """Objects keyed by loader list every registered loader."""
    if isinstance(node, dict):
        if node.get("propertyNames") == _LOADER_REF:
            from netra import targets

            node["required"] = list(targets.loader_names())
        for v in node.values():
            _require_loaders(v)
    elif isinstance(node, list):
        for v in node:
            _require_loaders(v)
