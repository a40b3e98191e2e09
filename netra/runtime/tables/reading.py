"""Reading a table: its JSON, its schema version, the format and the rules in one call (`parse`,
`loads`), a certified table (`parse_certified`), and writing one deterministically (`dumps`)."""

from __future__ import annotations

import json
from typing import Any

from netra.errors import TableError
from netra.runtime.tables.model import HINT, SCHEMA, Table
from netra.runtime.tables.rules import _rules, _unique
from netra.runtime.tables.schema import reader


def parse(data: Any, where: str, gpu_class: str | None = None, *, vouched: bool = False) -> Table:
    """Check a table against the format and the rules; raise TableError listing every problem.

    `vouched`: the caller proved these are the bytes a gated build checked (their sha256 is the one the
    lock records, and the lock is the one build.json binds, whose sha256 the wheel's RECORD holds). The
    format, which that build applied, is then not checked again (it was most of the cost of doctor and
    of a first lookup); the rules and the cross-checks with the lock still are. Anything a gated build
    does not write falls back to the full read, which names what is wrong."""
    _supported(data, where)
    if vouched:
        try:
            if _unique(data):  # the format's one cross-entry rule; a duplicate is named by the full read
                return _rules(data, where, gpu_class, whole=False)
        except TableError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError):
            pass  # not what a gated build writes: the full read says what is wrong
    return _rules(reader().read(data, where), where, gpu_class, whole=False)


def parse_certified(data: Any, where: str, gpu_class: str | None = None) -> Table:
    """A certified table (the table with each hardware summary replaced by its whole evidence record,
    as `join` makes it and `netra certify` writes it) against its format and every rule, the rules of
    the evidence itself included. Its candidates' `evidence` are the whole records."""
    _supported(data, where)
    return _rules(reader("certified").read(data, where), where, gpu_class, whole=True)


def _supported(data: Any, where: str) -> None:
    if isinstance(data, dict) and isinstance(data.get("schema"), int) and data["schema"] != SCHEMA:
        raise TableError(
            f"{where}: table schema {data['schema']!r} is not the supported schema {SCHEMA}",
            "regenerate it with `netra lock` using this version of netra",
        )


def _json(text: str | bytes, where: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        raise TableError(f"{where}: not valid JSON ({str(e)[:200]})", HINT) from None


def older_schema(text: str | bytes) -> int | None:
    """The schema of a table written in an older format than this netra's (None: not such a table)."""
    try:
        v = json.loads(text).get("schema")
    except (ValueError, RecursionError, AttributeError):
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) and v < SCHEMA else None


def loads(text: str | bytes, where: str, gpu_class: str | None = None, *, vouched: bool = False) -> Table:
    return parse(_json(text, where), where, gpu_class, vouched=vouched)


def dumps(table: dict[str, Any]) -> str:
    """Deterministic: sorted keys, no timestamps, no paths beyond those relative to the package data."""
    return json.dumps(table, indent=1, sort_keys=True, allow_nan=False) + "\n"
