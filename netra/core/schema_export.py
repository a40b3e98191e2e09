"""What a strict schema (netra.core.schema) says, written for others: its JSON Schema (draft 2020-12)
and its fields as Markdown tables.

A format is declared once, as the nodes its reader checks, each field with what it means; the JSON
Schema files that ship and the field tables of its documentation are made from that declaration
(never written beside it), so the three cannot drift. A table with a `name` is a record of the format:
a `$defs` entry and a section of its documentation. A `Registered` value (a GPU class, a vendor...) is
left open under its `ref` (netra.cli.schemas completes it from the registry), so no file made here
names a class or a vendor.
"""

from __future__ import annotations

from typing import Any

from netra.core import schema as s

DRAFT = "https://json-schema.org/draft/2020-12/schema"


def _pattern(p: Any) -> str:
    """A Python fullmatch pattern as a JSON Schema one (anchored; ECMA-262 reads these the same)."""
    text = p.pattern
    return f"^{text}$" if "|" not in text else f"^(?:{text})$"


class _Writer:
    """One JSON Schema: the records met on the way become `$defs`, referred to where they are used."""

    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}
        self.registered: dict[str, s.Registered] = {}

    def node(self, n: s.Node) -> dict[str, Any]:
        if isinstance(n, s.Table):
            if n.name:
                key = n.name.replace(" ", "_")
                if key not in self.defs:
                    self.defs[key] = {}  # placeholder: a record that contains itself stops here
                    self.defs[key] = self.table(n)
                return {"$ref": f"#/$defs/{key}"}
            return self.table(n)
        if isinstance(n, s.Registered):
            self.registered.setdefault(n.ref, n)
            return {"$ref": f"#/$defs/{n.ref}"}
        if isinstance(n, s.Str):
            return self.string(n)
        if isinstance(n, s.Int):
            return _bounded({"type": "integer"}, n.min, n.max)
        if isinstance(n, s.Num):
            return _bounded({"type": "number"}, n.min, n.max)
        if isinstance(n, s.Bool):
            return {"type": "boolean"}
        if isinstance(n, s.Const):
            return {"const": n.value}
        if isinstance(n, s.Nullable):
            return {"oneOf": [{"type": "null"}, self.node(n.inner)]}
        if isinstance(n, s.ListOf):
            out: dict[str, Any] = {"type": "array", "items": self.node(n.item)}
            if n.min_len:
                out["minItems"] = n.min_len
            out["maxItems"] = n.max_len
            return out
        if isinstance(n, s.MapOf):
            return {"type": "object", "propertyNames": self.string(n.key, typed=False),
                    "additionalProperties": self.node(n.value), "maxProperties": n.max_len}  # fmt: skip
        if isinstance(n, s.OneOf):
            return {"oneOf": [self.node(o) for o in n.options]}
        raise TypeError(f"no JSON Schema for {type(n).__name__}")  # pragma: no cover - a new node type

    def string(self, n: s.Str, typed: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"} if typed else {}
        if n.choices is not None:
            out["enum"] = list(n.choices)
            return out
        if not n.empty:
            out["minLength"] = 1
        out["maxLength"] = n.max_len
        if n.pattern is not None:
            out["pattern"] = _pattern(n.pattern)
        return out

    def table(self, t: s.Table) -> dict[str, Any]:
        props: dict[str, Any] = {}
        for key, f in t._fields:
            got = self.node(f.node)
            props[key] = {**got, "description": f.doc} if f.doc else got
        out: dict[str, Any] = {"type": "object", "additionalProperties": t.extra, "properties": props}
        required = [key for key, f in t._fields if f.required]
        if required:
            out["required"] = required
        if t.doc and t.name:
            out["description"] = t.doc
        out.update(dict(t.json_rules))
        return out


def _bounded(out: dict[str, Any], lo: float | None, hi: float | None) -> dict[str, Any]:
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def json_schema(root: s.Table, schema_id: str, title: str) -> dict[str, Any]:
    """The JSON Schema of files `root` reads: its records and registered values under `$defs`."""
    w = _Writer()
    body = w.table(root)
    for ref, r in sorted(w.registered.items()):
        w.defs[ref] = {**w.string(r.base), "description": r.doc}
    return {
        "$schema": DRAFT,
        "$id": schema_id,
        "title": title,
        "description": root.doc,
        **{k: v for k, v in body.items() if k != "description"},
        "$defs": dict(sorted(w.defs.items())),
    }


def kind(n: s.Node) -> str:
    """A node's type, as the documentation's field tables give it."""
    if isinstance(n, s.Table):
        return n.name or "`{" + ", ".join(key for key, _ in n._fields) + "}`"
    if isinstance(n, s.Registered):
        return f"{n.ref} name"  # the registry's, not listed: a new class or vendor changes no document
    if isinstance(n, s.Str):
        return " \\| ".join(f"`{c}`" for c in n.choices) if n.choices is not None else "string"
    if isinstance(n, s.Const):
        return f"`{n.value}`"
    if isinstance(n, s.Nullable):
        return f"{kind(n.inner)} or `null`"
    if isinstance(n, s.ListOf):
        return f"list of {kind(n.item)}"
    if isinstance(n, s.MapOf):
        return f"table of {kind(n.value)}"
    if isinstance(n, s.OneOf):
        return n.expected
    return {s.Int: "integer", s.Num: "number", s.Bool: "boolean"}.get(type(n), type(n).__name__)


def rows(t: s.Table, prefix: str = "") -> list[tuple[str, str, str]]:
    """(field, type, meaning) per field of the record `t`; a field holding an unnamed table and saying
    nothing itself is given field by field (`launch.block`, `launch.grid`...)."""
    out = []
    for key, f in t._fields:
        path = f"{prefix}{key}"
        inner = f.node.inner if isinstance(f.node, s.Nullable) else f.node
        if not f.doc and isinstance(inner, s.Table) and not inner.name:
            out += rows(inner, path + ".")
            continue
        meaning = f.doc + ("" if f.required else " (optional)")
        out.append((path, kind(f.node), meaning))
    return out


def markdown(t: s.Table) -> str:
    """The record's field table, in Markdown."""
    lines = ["| field | type | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{path}` | {typ} | {meaning} |" for path, typ, meaning in rows(t)]
    return "\n".join(lines) + "\n"
