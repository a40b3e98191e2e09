"""A certified table and the two files it is written to: the table (each evidence record summarized)
and the class's evidence file (`split`), joined back and held to each other (`join`, `read_certified`,
`evidence_agrees`)."""

from __future__ import annotations

import json
from typing import Any

from netra.core import schema as s
from netra.errors import TableError
from netra.runtime.tables.model import SCHEMA, SUMMARY_FIELDS, Table
from netra.runtime.tables.paths import evidence_path, table_path
from netra.runtime.tables.reading import _json, parse
from netra.runtime.tables.rules import _rules
from netra.runtime.tables.schema import reader


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """The table's summary of a whole hardware evidence record."""
    out = {k: record[k] for k in SUMMARY_FIELDS}
    out.update(sanitizer=record["sanitizer"]["result"], profile=record["profile"]["result"])
    return out


def split(certified: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A certified table as the two files it is written to: the table (each record replaced by its
    summary) and, for a hardware-certified class, its evidence file (every record, by artifact)."""
    table = json.loads(json.dumps(certified))
    records: dict[str, Any] = {}
    for e in table["entries"]:
        for c in e["candidates"]:
            hw = c["evidence"]["hardware"]
            if hw is not None:
                records[c["artifact"]] = hw
                c["evidence"]["hardware"] = summary(hw)
    if table["certification"]["kind"] != "hardware":
        return table, None
    return table, {
        "schema": SCHEMA,
        "gpu_class": table["gpu_class"],
        "hardware": dict(sorted(records.items())),
    }


def read_certified(
    table_bytes: str | bytes,
    evidence_bytes: str | bytes | None,
    where: str,
    evidence_where: str,
    gpu_class: str | None = None,
) -> Table:
    """A table and its evidence file read as one certified table (what parse_certified gives), for
    whoever judges or writes evidence. `join` has read each file through its own format, which
    together are the certified table's: only the rules are left to apply (the evidence's own included)."""
    joined = join(table_bytes, evidence_bytes, where, evidence_where, gpu_class)
    return _rules(joined, where, gpu_class, whole=True)


def join(
    table_bytes: str | bytes,
    evidence_bytes: str | bytes | None,
    where: str,
    evidence_where: str,
    gpu_class: str | None = None,
) -> dict[str, Any]:
    """The certified table (as JSON data) a table and its evidence file make. Each file is read through
    its own format first; the evidence file must hold one record per summary the table has, each
    exactly what its summary says, and nothing else; a class certified on hardware has one, a
    statically certified class none."""
    raw = _json(table_bytes, where)
    table = parse(raw, where, gpu_class)  # read, not changed: its records are put in place below
    hint = (
        f"restore both from version control (git checkout -- {table_path(table.gpu_class)} "
        f"{evidence_path(table.gpu_class)}), or copy in both files of one `netra certify` run"
    )
    if table.certification != "hardware":
        if evidence_bytes is not None:
            raise TableError(
                f"{evidence_where}: evidence for the {table.gpu_class} table, certified "
                f"{table.certification!r}, which has none",
                "remove it",
            )
        return dict(raw)
    if evidence_bytes is None:
        raise TableError(
            f"{evidence_where}: missing: the {table.gpu_class} table is certified on hardware and its "
            "evidence lives here",
            hint,
        )
    ev = reader("evidence").read(_json(evidence_bytes, evidence_where), evidence_where)
    p = s.Problems(evidence_where)
    if ev["gpu_class"] != table.gpu_class:
        p.add("gpu_class", f"{ev['gpu_class']!r} but it is the evidence of the {table.gpu_class} table")
    records = ev["hardware"]
    summarized: set[str] = set()
    for e in raw["entries"]:
        for c in e["candidates"]:
            want = c["evidence"]["hardware"]
            if want is None:
                continue
            name = c["artifact"]
            summarized.add(name)
            got = records.get(name)
            if got is None:
                p.add(f"hardware.{name}", f"no record, but {where} summarizes one")
            elif summary(got) != want:
                wrong = sorted(k for k, v in summary(got).items() if want.get(k) != v)
                p.add(f"hardware.{name}", f"differs from its summary in {where} ({', '.join(wrong)})")
            else:
                c["evidence"]["hardware"] = got
    for name in sorted(records.keys() - summarized):
        p.add(
            f"hardware.{name}", f"a record {where} does not summarize (no such candidate, or none certified)"
        )
    p.raise_as(TableError, hint)
    return dict(raw)


def evidence_agrees(
    table_bytes: str | bytes,
    evidence_bytes: str | bytes | None,
    where: str,
    evidence_where: str,
    gpu_class: str | None = None,
) -> None:
    """The table and its evidence file say the same, as `join` holds them, whatever their hashes vouch
    for (a resealed install recomputes those). Checked on the JSON first (a millisecond, where the
    full read of both formats takes tens); on any disagreement `join` reads both and raises TableError
    naming it."""
    try:
        ev = None if evidence_bytes is None else json.loads(evidence_bytes)
        if _agree(json.loads(table_bytes), ev):
            return
    except (KeyError, TypeError, ValueError, AttributeError, RecursionError):
        pass  # not what a gated build writes: join says what is wrong
    join(table_bytes, evidence_bytes, where, evidence_where, gpu_class)


def _agree(raw: Any, ev: Any) -> bool:
    """join's agreement on parsed JSON, without its schemas; False where join would refuse."""
    if raw["certification"]["kind"] != "hardware":
        return ev is None
    if ev is None or ev["gpu_class"] != raw["gpu_class"]:
        return False
    records = ev["hardware"]
    summarized: set[str] = set()
    for e in raw["entries"]:
        for c in e["candidates"]:
            want = c["evidence"]["hardware"]
            if want is None:
                continue
            got = records.get(c["artifact"])
            if got is None or summary(got) != want:
                return False
            summarized.add(c["artifact"])
    return summarized == set(records)
