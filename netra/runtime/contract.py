"""An exact contract as a caller writes it: an op family and its integer parameters (netra.core.ops).

A key string ('rmsnorm(hidden=4096,weight_offset=0)', parameters in any order), Contract.of(op, ...),
or a mapping {'op': ..., name: value}; as_contract accepts any of them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netra.core.ops import FAMILIES, contract_key
from netra.errors import ContractError

_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$")


@dataclass(frozen=True)
class Contract:
    """An exact contract: an op family and its integer parameters (netra/core/ops.py)."""

    op: str
    params: Mapping[str, int]

    @classmethod
    def of(cls, op: str, **params: int) -> Contract:
        return cls(op, dict(params))

    @classmethod
    def parse(cls, text: str) -> Contract:
        """'rmsnorm(hidden=4096,weight_offset=0)' -> Contract; parameter order does not matter."""
        m = _KEY.match(text)
        if m is None:
            raise ContractError(
                f"{text!r} is not a contract",
                "write it as op(name=int,...), e.g. rmsnorm(hidden=4096,weight_offset=0)",
            )
        params: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in m.group(2).split(","))):
            name, eq, value = (s.strip() for s in part.partition("="))
            if not eq or not name.isidentifier() or not re.fullmatch(r"-?\d+", value) or name in params:
                raise ContractError(
                    f"{text!r}: parameter {part!r} is not name=integer",
                    "e.g. rmsnorm(hidden=4096,weight_offset=0)",
                )
            params[name] = int(value)
        return cls(m.group(1), params)

    def __hash__(self) -> int:  # params is a dict: hash by the canonical key instead
        return hash(self.key)

    @property
    def key(self) -> str:
        """The table key for a known op (family parameter order); a readable rendering otherwise."""
        fam = FAMILIES.get(self.op)
        if fam is not None and set(self.params) == set(fam.params):
            return contract_key(self.op, dict(self.params))
        return f"{self.op}(" + ",".join(f"{k}={self.params[k]}" for k in sorted(self.params)) + ")"


def as_contract(value: Contract | str | Mapping[str, Any]) -> Contract:
    if isinstance(value, Contract):
        return value
    if isinstance(value, str):
        return Contract.parse(value)
    if isinstance(value, Mapping) and isinstance(value.get("op"), str):
        params = {k: v for k, v in value.items() if k != "op"}
        bad = [k for k, v in params.items() if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise ContractError(
                f"contract {value!r}: parameters {', '.join(bad)} must be integers", "see netra/core/ops.py"
            )
        return Contract(value["op"], params)
    raise ContractError(
        f"{value!r} is not a contract", "pass Contract.of(op, **params), 'op(k=v,...)' or {'op': ..., k: v}"
    )
