"""Strict readers for parsed TOML and JSON: one schema per input file, every error naming where.

The lock, the manifests, the tables and build.json are data a user (or a bad merge) can damage. Each
is read through a schema built from these few node types: types are exact (a bool is not an int, an
int is not a float unless asked), required and unknown keys are refused, lists can require a unique
key per entry, integers and lengths have ranges, strings have patterns. A failure raises the caller's
own error class (LockError, ManifestError, TableError...) with a message naming the file, the entry
(`artifacts[20] (netra_rmsnorm_h4096_wo0_b256)`) and the field, and every further problem as a
detail line, so one run shows everything that is wrong.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from netra.errors import NetraError

MAX_PROBLEMS = 50  # beyond this a file is not worth listing line by line
SHA256 = re.compile(r"[0-9a-f]{64}")
NAME = re.compile(r"[a-z0-9][a-z0-9_]*")


class _Invalid(Exception):
    """Internal: one problem at one place."""

    def __init__(self, at: str, what: str) -> None:
        super().__init__(f"{at}: {what}" if at else what)


class Problems:
    """Problems found in one file; raise() turns them into the caller's error class."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.items: list[str] = []

    def add(self, at: str, what: str) -> None:
        if len(self.items) < MAX_PROBLEMS:
            self.items.append(f"{at}: {what}" if at else what)

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_as(self, error: type[NetraError], hint: str) -> None:
        if not self.items:
            return
        first = self.items[0]
        more = len(self.items) - 1
        tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
        raise error(f"{self.where}: {first}{tail}", hint, tuple(self.items) if more else ())


def _kind(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list",
            dict: "a table", type(None): "null"}.get(type(v), type(v).__name__)  # fmt: skip


class Node:
    """A schema node: `check(value, at, problems)` returns the value (possibly normalized) or None."""

    def check(self, v: Any, at: str, p: Problems) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class Str(Node):
    pattern: re.Pattern[str] | None = None
    choices: tuple[str, ...] | None = None
    max_len: int = 4096
    empty: bool = False

    def check(self, v: Any, at: str, p: Problems) -> Any:
        if not isinstance(v, str):
            p.add(at, f"must be a string, got {_kind(v)}")
            return None
        if not v and not self.empty:
            p.add(at, "must not be empty")
        elif len(v) > self.max_len:
            p.add(at, f"is {len(v)} characters long, more than {self.max_len}")
        elif "\0" in v:
            p.add(at, "contains a NUL character")
        elif self.choices is not None and v not in self.choices:
            p.add(at, f"{v!r} is not one of {', '.join(self.choices)}")
        elif self.pattern is not None and not self.pattern.fullmatch(v):
            p.add(at, f"{v!r} does not match {self.pattern.pattern}")
        else:
            return v
        return None


def sha256() -> Str:
    return Str(pattern=SHA256)


@dataclass(frozen=True)
class Int(Node):
    min: int | None = None
    max: int | None = None

    def check(self, v: Any, at: str, p: Problems) -> Any:
        if isinstance(v, bool) or not isinstance(v, int):
            p.add(at, f"must be an integer, got {_kind(v)}")
            return None
        if (self.min is not None and v < self.min) or (self.max is not None and v > self.max):
            lo = "-inf" if self.min is None else self.min
            hi = "inf" if self.max is None else self.max
            p.add(at, f"{v} is outside [{lo}, {hi}]")
            return None
        return v


@dataclass(frozen=True)
class Const(Node):
    value: Any

    def check(self, v: Any, at: str, p: Problems) -> Any:
        if type(v) is not type(self.value) or v != self.value:
            p.add(at, f"must be {self.value!r}, got {v!r}")
            return None
        return v


@dataclass(frozen=True)
class Num(Node):
    """A finite float (integers accepted, JSON writes 0.0 as 0 in some producers)."""

    min: float | None = None
    max: float | None = None

    def check(self, v: Any, at: str, p: Problems) -> Any:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            p.add(at, f"must be a number, got {_kind(v)}")
            return None
        f = float(v)
        if not math.isfinite(f):
            p.add(at, f"must be finite, got {v!r}")
            return None
        if (self.min is not None and f < self.min) or (self.max is not None and f > self.max):
            p.add(at, f"{v!r} is outside [{self.min}, {self.max}]")
            return None
        return v  # as written: data read and written back stays byte-identical


@dataclass(frozen=True)
class Bool(Node):
    def check(self, v: Any, at: str, p: Problems) -> Any:
        if not isinstance(v, bool):
            p.add(at, f"must be true or false, got {_kind(v)}")
            return None
        return v


@dataclass(frozen=True)
class Nullable(Node):
    inner: Node

    def check(self, v: Any, at: str, p: Problems) -> Any:
        return None if v is None else self.inner.check(v, at, p)


@dataclass(frozen=True)
class Field:
    node: Node
    required: bool = True
    default: Any = None
    doc: str = ""  # what the field means: the format's documentation and JSON Schema are made from it


ABSENT = object()  # Field default: leave the key out of the checked data when the input lacks it


def req(node: Node, doc: str) -> Field:
    """A required key, with what it means."""
    return Field(node, doc=doc)


def opt(node: Node, default: Any = None, doc: str = "") -> Field:
    return Field(node, required=False, default=default, doc=doc)


def maybe(node: Node, doc: str = "") -> Field:
    """An optional key that stays absent when absent, so data read and written back is unchanged."""
    return Field(node, required=False, default=ABSENT, doc=doc)


@dataclass(frozen=True)
class Table(Node):
    """A table with exactly these keys (required ones must be present, no others allowed)."""

    fields: dict[str, Field | Node]
    label: str | None = None  # a key whose value names the entry in messages (e.g. "name")
    extra: bool = False  # allow keys not listed (used only for documented free-form notes)
    name: str = ""  # a record of the format (its documentation section, its JSON Schema definition)
    doc: str = ""
    # what JSON Schema can say of rules that compare fields (allOf, dependentRequired...), merged into
    # this table's JSON Schema; the reader's rules enforce them (and more) in Python
    json_rules: tuple[tuple[str, Any], ...] = ()
    # fields as Field objects, made once (check runs once per entry of every file read)
    _fields: tuple[tuple[str, Field], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        norm = tuple((k, f if isinstance(f, Field) else Field(f)) for k, f in self.fields.items())
        object.__setattr__(self, "_fields", norm)

    def check(self, v: Any, at: str, p: Problems) -> Any:
        if not isinstance(v, dict):
            p.add(at, f"must be a table, got {_kind(v)}")
            return None
        before = len(p.items)
        out: dict[str, Any] = {}
        present = 0
        for key, f in self._fields:
            if key not in v:
                if f.required:
                    p.add(at or "top level", f"missing required field {key!r}")
                elif f.default is not ABSENT:
                    out[key] = f.default
                continue
            present += 1
            out[key] = f.node.check(v[key], f"{at}.{key}" if at else key, p)
        if present != len(v):  # keys the schema does not list
            for key in sorted(v.keys() - self.fields.keys(), key=str):
                if self.extra:
                    out[key] = v[key]  # free-form: the caller checks these (e.g. a contract's parameters)
                else:
                    p.add(at or "top level", f"unknown field {key!r}")
        return out if len(p.items) == before else None


@dataclass(frozen=True)
class ListOf(Node):
    item: Node
    min_len: int = 0
    max_len: int = 100_000
    unique: str | Callable[[Any], Any] | None = None  # a field name of table items, or a key function

    def check(self, v: Any, at: str, p: Problems) -> Any:
        if not isinstance(v, list):
            p.add(at, f"must be a list, got {_kind(v)}")
            return None
        if not self.min_len <= len(v) <= self.max_len:
            p.add(at, f"has {len(v)} entries, expected {self.min_len} to {self.max_len}")
            return None
        before = len(p.items)
        out = []
        seen: dict[Any, int] = {}
        label = self.item.label if isinstance(self.item, Table) else None
        for i, item in enumerate(v):
            name = item.get(label) if label and isinstance(item, dict) else None
            sub = f"{at}[{i}]" + (f" ({name})" if isinstance(name, str) and name else "")
            got = self.item.check(item, sub, p)
            out.append(got)
            if got is not None and self.unique is not None:
                key = got.get(self.unique) if isinstance(self.unique, str) else self.unique(got)
                key = _hashable(key)
                if key in seen:
                    p.add(sub, f"duplicate of entry {seen[key]} ({_show(key)})")
                else:
                    seen[key] = i
        return out if len(p.items) == before else None


@dataclass(frozen=True)
class MapOf(Node):
    """A table with free keys (checked by `key`) and uniform values."""

    key: Str
    value: Node
    max_len: int = 10_000

    def check(self, v: Any, at: str, p: Problems) -> Any:
        if not isinstance(v, dict):
            p.add(at, f"must be a table, got {_kind(v)}")
            return None
        if len(v) > self.max_len:
            p.add(at, f"has {len(v)} keys, more than {self.max_len}")
            return None
        before = len(p.items)
        out = {}
        for k in sorted(v, key=str):
            sub = f"{at}.{k}" if at else str(k)
            if self.key.check(k, f"{at} key {k!r}" if at else f"key {k!r}", p) is not None:
                out[k] = self.value.check(v[k], sub, p)
        return out if len(p.items) == before else None


@dataclass(frozen=True)
class OneOf(Node):
    """The first alternative that accepts the value; otherwise one message listing what was expected."""

    options: tuple[Node, ...]
    expected: str

    def check(self, v: Any, at: str, p: Problems) -> Any:
        for opt_node in self.options:
            trial = Problems(p.where)
            got = opt_node.check(v, at, trial)
            if not trial:
                return got
        p.add(at, f"must be {self.expected}, got {v!r}"[:300])
        return None


@dataclass(frozen=True)
class Registered(Node):
    """A string checked as `base`, and one of `choices()` when given: the registry's values (GPU classes,
    vendors, loaders, op families), looked up when first checked. A format naming them leaves them open
    under `ref` (netra.core.schema_export; netra.cli.schemas fills them from the registry)."""

    ref: str
    base: Str
    choices: Callable[[], tuple[str, ...]] | None = None
    doc: str = ""  # what a value is (the JSON Schema definition's description)
    _checked: list[Str] = field(default_factory=list, init=False, repr=False, compare=False)

    def check(self, v: Any, at: str, p: Problems) -> Any:
        if not self._checked:
            choices = None if self.choices is None else tuple(self.choices())
            self._checked.append(Str(self.base.pattern, choices, self.base.max_len, self.base.empty))
        return self._checked[0].check(v, at, p)


def _hashable(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    return v


def _show(key: Any) -> str:
    return key if isinstance(key, str) else repr(key)


@dataclass
class Reader:
    """One file's schema and the error class and hint its failures are reported with."""

    root: Node
    error: type[NetraError]
    hint: str
    checks: list[Callable[[Any, Problems], None]] = field(default_factory=list)

    def read(self, data: Any, where: str) -> Any:
        """Validated data, or the reader's error listing every problem (file, entry, field)."""
        p = Problems(where)
        out = self.root.check(data, "", p)
        if not p:
            for extra in self.checks:  # cross-field rules, only on data that passed the shapes
                extra(out, p)
        p.raise_as(self.error, self.hint)
        return out
