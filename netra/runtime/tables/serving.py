"""Serving a table a vouched lock records: the table-wide checks now, each entry's rules and locked
facts the first time it is read (`Entries`), so a first lookup builds the one entry it serves."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from netra.core import schema as s
from netra.errors import TableError
from netra.runtime.kernarg import KernargLayout
from netra.runtime.tables.lockcheck import (
    _facts_against,
    _locked,
    _unlisted,
    _unlocked,
    against_lock,
    lock_disagreement,
)
from netra.runtime.tables.model import Entry, Table
from netra.runtime.tables.reading import _json, _supported, parse
from netra.runtime.tables.rules import _entry, _header, _table, _unique

if TYPE_CHECKING:
    from netra.runtime.lockfile import Lock


class Entries(Mapping[str, "Entry"]):
    """A served table's entries, each held to the table's rules and to the lock the first time it is
    read, as each code object is hashed the first time it is selected: a first lookup builds the one
    entry it serves. Keys, their count and membership need no entry built."""

    def __init__(
        self, raw: dict[str, tuple[int, dict[str, Any]]], build: Callable[[int, dict[str, Any]], Entry]
    ):
        self._raw = raw
        self._build = build
        self._built: dict[str, Entry] = {}

    def __getitem__(self, key: str) -> Entry:
        got = self._built.get(key)
        if got is None:
            i, e = self._raw[key]
            got = self._built[key] = self._build(i, e)
        return got

    def __contains__(self, key: object) -> bool:
        return key in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


_SHAPE_ERRORS = (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError)


def serve(text: str | bytes, where: str, gpu_class: str, lock: Lock, hint: str) -> Table:
    """A table whose bytes a vouched lock records (hash first), read to serve kernels from: what holds
    for the whole table is checked now (its class, vendor, loader and certification, each contract
    and artifact once, exactly the class's locked artifacts), each entry's rules and locked facts when
    it is first read (Entries), never the format, which the gated build applied. Anything a gated
    build does not write is read strictly, which names what is wrong. Errors carry `hint`."""
    try:
        data = _json(text, where)
        _supported(data, where)
    except TableError as err:  # the caller's fix (on a serving host, a reinstall)
        raise TableError(err.message, hint, err.details) from None

    def strictly() -> TableError:
        try:
            table = parse(data, where, gpu_class)
        except TableError as e:
            return TableError(e.message, hint, e.details)
        problems = against_lock(table, lock)
        if problems:
            return lock_disagreement(where, gpu_class, problems, hint)
        return TableError(f"{where}: not a table a gated build wrote", hint)  # read whole, nothing found

    try:
        if not _unique(data):
            raise strictly()
        p = s.Problems(where)
        cls, kind, nruns = _header(data, gpu_class, p)
        locked = _locked(lock, cls)
        raw: dict[str, tuple[int, dict[str, Any]]] = {}
        seen: set[str] = set()
        stray: list[str] = []
        for i, e in enumerate(data["entries"]):
            raw[e["key"]] = (i, e)
            for j, r in enumerate(e["candidates"]):
                name = r["artifact"]
                if name in seen:
                    p.add(f"entries[{i}] ({e['key']}).candidates[{j}] ({name})",
                          f"artifact {name} appears in more than one entry")  # fmt: skip
                seen.add(name)
                if name not in locked:
                    stray.append(_unlocked(name, cls))
        table = _table(data, {})
    except TableError:
        raise
    except _SHAPE_ERRORS:
        raise strictly() from None
    p.raise_as(TableError, hint)
    problems = stray + _unlisted(locked.keys() - seen, cls)
    if problems:
        raise lock_disagreement(where, cls, problems, hint)
    layouts: dict[Any, KernargLayout] = {}

    def build(i: int, e: dict[str, Any]) -> Entry:
        try:
            p = s.Problems(where)
            entry = _entry(e, f"entries[{i}] ({e['key']})", cls, kind, nruns, p, layouts, False, None)
            p.raise_as(TableError, hint)  # this entry's own problems, in the strict read's words
            assert entry is not None  # None only with a problem
            wrong = [w for c in entry.candidates for w in _facts_against(c, entry.key, locked[c.artifact])]
        except TableError:
            raise
        except _SHAPE_ERRORS:
            raise strictly() from None
        if wrong:
            raise lock_disagreement(where, cls, wrong, hint)
        return entry

    return dataclasses.replace(table, entries=Entries(raw, build))
