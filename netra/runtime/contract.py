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
from netra.core.text import integer
from netra.errors import ContractError
from netra.runtime import arguments

_KEY = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\((.*)\)\s*$")


@dataclass(frozen=True)
class Contract:
    """An exact contract: an op family and its integer parameters (netra/core/ops.py)."""

    op: str
    params: Mapping[str, int]

    def __post_init__(self) -> None:
        """A contract is an op name and integer parameters, or it is refused here, not carried along."""
        arguments.text(self.op, call="Contract", arg="op", hint="pass the op family's name, e.g. 'rmsnorm'")
        if not isinstance(self.params, Mapping):
            raise arguments.wrong_type("Contract", "params", self.params, "a mapping of name to int")
        for k, v in self.params.items():
            if not isinstance(k, str):
                raise arguments.wrong_type("Contract", "a parameter name", k, "a str")
            if isinstance(v, bool) or not isinstance(v, int):
                raise arguments.wrong_type(
                    "Contract",
                    f"parameter {k}",
                    v,
                    "an int",
                    "e.g. Contract.of('rmsnorm', hidden=4096, weight_offset=0)",
                )

    @classmethod
    def of(cls, op: str, **params: int) -> Contract:
        return cls(op, dict(params))

    @classmethod
    def parse(cls, text: str) -> Contract:
        """'rmsnorm(hidden=4096,weight_offset=0)' -> Contract; parameter order does not matter."""
        arguments.text(text, call="Contract.parse", arg="text")
        m = _KEY.match(text)
        if m is None:
            raise ContractError(
                f"{text!r} is not a contract",
                "write it as op(name=int,...), e.g. rmsnorm(hidden=4096,weight_offset=0)",
            )
        params: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in m.group(2).split(","))):
            name, eq, value = (s.strip() for s in part.partition("="))
            number = integer(value)
            if name in params:
                raise ContractError(
                    f"{arguments.shown(text)}: parameter {arguments.shown(name)} is given twice",
                    "give each parameter once, e.g. rmsnorm(hidden=4096,weight_offset=0)",
                )
            if not eq or not name.isidentifier() or number is None:
                raise ContractError(
                    f"{arguments.shown(text)}: parameter {arguments.shown(part)} is not name=integer "
                    "(at most 18 digits)",
                    "e.g. rmsnorm(hidden=4096,weight_offset=0)",
                )
            params[name] = number
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


def as_contract(value: Contract | str | Mapping[str, Any], *, call: str = "as_contract") -> Contract:
    """Any of the three ways to write a contract as a Contract; `call` is the API call named in errors."""
    if isinstance(value, Contract):
        return value
    if isinstance(value, str):
        return Contract.parse(value)
    hint = "pass Contract.of(op, **params), 'op(k=v,...)' or {'op': ..., k: v}"
    if isinstance(value, Mapping) and isinstance(value.get("op"), str):
        params = {k: v for k, v in value.items() if k != "op"}
        bad = [str(k) for k, v in params.items() if isinstance(v, bool) or not isinstance(v, int)]
        if bad:
            raise arguments.wrong_type(
                call, f"contract parameters {', '.join(bad)}", value, "integers", "see netra/core/ops.py"
            )
        return Contract(value["op"], params)
    if isinstance(value, Mapping):
        raise ContractError(f"{call}: {arguments.shown(value)} is not a contract: its 'op' is no str", hint)
    raise arguments.wrong_type(call, "contract", value, "a Contract, a str or a mapping", hint)
