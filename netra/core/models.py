"""A model manifest (manifests/models/<model>.toml): the exact contracts a model needs, and its gaps.

Read by the release (netra.release.manifests: which artifacts to build) and by an install describing
itself (netra.cli.inventory: which models use a contract), through this one schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netra.core import schema as s
from netra.core.ops import contract_key, contract_params
from netra.core.types import ModelFallback
from netra.errors import ManifestError

HINT = "see docs/authoring.md for the manifest formats"


def _contract_of(entry: dict[str, Any]) -> str:
    """What an [[ops]] entry asks for, as a contract is written (its `use` note is not part of it)."""
    params = ",".join(f"{k}={v!r}" for k, v in sorted(entry.items()) if k not in ("op", "use"))
    return f"{entry['op']}({params})"


def _fallback_of(entry: dict[str, Any]) -> str:
    """What a [[fallbacks]] entry documents: one contract not built for one class (its parameters),
    or, without gpu_class, the op everywhere (its `use`). Two entries alike in this are one slip; two
    contracts of one family that a model uses for the same purpose are two fallbacks."""
    if entry.get("gpu_class"):
        return f"{_contract_of({k: v for k, v in entry.items() if k not in _FIXED})} on {entry['gpu_class']}"
    return f"{entry['op']} on every class: {entry.get('use', '')!r}"


_FIXED = ("use", "reason", "gpu_class")  # a fallback's fields besides "op" and the contract's parameters
_OP = s.Table({"op": s.Str(max_len=64), "use": s.opt(s.Str(max_len=300), "")}, label="op", extra=True)
SCHEMA = s.Table(
    {
        "model": s.Str(max_len=128),
        # One entry per contract: a repeated one is a merge or copy slip, refused naming both entries.
        "ops": s.opt(s.ListOf(_OP, max_len=1000, unique=lambda o: _contract_of(o)), []),
        "fallbacks": s.opt(
            s.ListOf(
                s.Table(
                    {
                        "op": s.Str(max_len=64),
                        "use": s.opt(s.Str(max_len=300), ""),
                        "reason": s.Str(max_len=500),
                        "gpu_class": s.opt(s.Str(pattern=s.NAME, max_len=64), ""),
                    },
                    label="op",
                    extra=True,  # with gpu_class: the contract's parameters
                ),
                max_len=1000,
                unique=_fallback_of,
            ),
            [],
        ),
    }
)
READER = s.Reader(SCHEMA, ManifestError, HINT)


@dataclass(frozen=True)
class ModelManifest:
    model: str
    needs: tuple[tuple[str, dict[str, int]], ...]  # (op, contract parameters), in manifest order
    fallbacks: tuple[ModelFallback, ...]


def parse(data: Any, where: str) -> ModelManifest:
    """A parsed TOML document as a model manifest; ManifestError naming the file, entry and field."""
    raw = READER.read(data, where)
    needs = []
    for i, op in enumerate(raw["ops"]):
        at = f"{where}: ops[{i}] ({op['op']})"
        params = contract_params(op["op"], {k: v for k, v in op.items() if k not in ("op", "use")}, at)
        needs.append((op["op"], params))
    fallbacks = []
    for i, f in enumerate(raw["fallbacks"]):
        at = f"{where}: fallbacks[{i}] ({f['op']})"
        extra = {k: v for k, v in f.items() if k not in ("op", *_FIXED)}
        if not f["gpu_class"]:
            if extra:
                raise ManifestError(
                    f"{at}: unknown {', '.join(sorted(extra))}; contract parameters go with gpu_class only",
                    "add gpu_class = '<class>' for a contract not built for one class, or drop them",
                )
            fallbacks.append(ModelFallback(raw["model"], f["op"], f["use"], f["reason"]))
            continue
        params = contract_params(f["op"], extra, at)
        if (f["op"], params) not in needs:
            raise ManifestError(
                f"{at}: {contract_key(f['op'], params)} is not among the model's [[ops]]",
                "a per-class fallback documents a contract the model needs: fix its parameters or add the op",
            )
        key = contract_key(f["op"], params)
        fallbacks.append(ModelFallback(raw["model"], f["op"], f["use"], f["reason"], f["gpu_class"], key))
    return ModelManifest(raw["model"], tuple(needs), tuple(fallbacks))
