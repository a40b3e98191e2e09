"""The files generated from the typed model's declaration of the table format
(netra.runtime.tables.format): netra/schemas/table.schema.json, netra/schemas/evidence.schema.json and
the field tables of docs/tables.md (each between its two marker lines).

`python -m netra.runtime.tables.generated --write` rewrites them from the declaration; `--check` exits
1 naming each one that differs (tests/test_table_format.py runs the same comparison). An author's step:
serving never imports this module, and nothing here imports jsonschema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from netra.core import schema as s
from netra.errors import TableError
from netra.runtime.tables.format import evidence_format, records, table_format
from netra.runtime.tables.model import SCHEMA

SCHEMAS = "netra/schemas"
DOCS = "docs/tables.md"
_BEGIN = "<!-- generated from netra/runtime/tables/format.py (python -m netra.runtime.tables.generated --write): {} -->"
_END = "<!-- end of generated {} -->"


def _schema_file(root: s.Table, name: str, title: str) -> str:
    from netra.core.schema_export import json_schema

    doc = json_schema(root, f"https://netra-kernel/schemas/{name}.schema.json", f"{title} (schema {SCHEMA})")
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"


def _docs(current: str) -> str:
    """docs/tables.md with each generated block made again from the declaration."""
    from netra.core.schema_export import markdown

    out = current
    for name, record in records().items():
        begin, end = _BEGIN.format(name), _END.format(name)
        head, sep, rest = out.partition(begin + "\n")
        _, sep2, tail = rest.partition(end)
        if not sep or not sep2:
            raise TableError(f"{DOCS}: no generated block {name!r} ({begin} ... {end})",
                             "put the two marker lines back where the field table goes")  # fmt: skip
        out = head + begin + "\n" + markdown(record) + end + tail
    return out


def _root() -> Path:
    """The source tree this module is in (generating is an author's step)."""
    return Path(__file__).resolve().parents[3]


def generated(root: Path | None = None) -> dict[str, str]:
    """Each generated file (a path relative to the source tree) and the text the declaration gives it."""
    docs = (root or _root()) / DOCS
    return {
        f"{SCHEMAS}/table.schema.json": _schema_file(table_format(), "table", "Netra certified table"),
        f"{SCHEMAS}/evidence.schema.json": _schema_file(evidence_format(), "evidence", "Netra evidence file"),
        DOCS: _docs(docs.read_text(encoding="utf-8")),
    }


def stale(root: Path | None = None) -> list[str]:
    """The generated files whose committed text is not what the declaration gives."""
    root = root or _root()
    out = []
    for rel, text in generated(root).items():
        p = root / rel
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            out.append(rel)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["--write"], ["--check"]):
        print("usage: python -m netra.runtime.tables.generated --write | --check", file=sys.stderr)
        return 2
    try:
        if args == ["--check"]:
            wrong = stale()
            for rel in wrong:
                print(f"{rel}: not what netra/runtime/tables/format.py declares; run "
                      "`python -m netra.runtime.tables.generated --write`", file=sys.stderr)  # fmt: skip
            return 1 if wrong else 0
        from netra.core import files

        for rel, text in generated().items():
            files.atomic_write(_root() / rel, text.encode())
    except (TableError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
