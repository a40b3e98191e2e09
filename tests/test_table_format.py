"""The table format is declared once (netra/runtime/tables/format.py): the readers check through that
declaration, and the shipped JSON Schema files and docs/tables.md's field tables are generated from it.
A committed file that differs from what the declaration gives fails here (fix: `python -m
netra.runtime.tables.generated --write`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from netra.core import schema as s
from netra.core.ops import FAMILIES
from netra.runtime import tables
from netra.runtime.tables import format as fmt
from netra.runtime.tables import generated

FILES = ("netra/schemas/table.schema.json", "netra/schemas/evidence.schema.json", "docs/tables.md")


def _copy(tmp_path: Path) -> Path:
    for rel in FILES:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / rel, tmp_path / rel)
    return tmp_path


def test_the_committed_schemas_and_field_tables_are_the_declarations() -> None:
    assert sorted(generated.generated(REPO)) == sorted(FILES)
    assert generated.stale(REPO) == [], "run `python -m netra.runtime.tables.generated --write`"


def test_a_hand_edit_of_a_generated_file_is_found(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    assert generated.stale(root) == []
    schema = root / "netra/schemas/table.schema.json"
    doc = json.loads(schema.read_text())
    doc["$defs"]["candidate"]["properties"]["tactic"]["maxLength"] = 17  # the reader says 16
    schema.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    docs = root / "docs/tables.md"
    docs.write_text(docs.read_text().replace("tactic name, unique within the entry", "tactic name"))
    assert generated.stale(root) == ["netra/schemas/table.schema.json", "docs/tables.md"]
    docs.write_text(docs.read_text().replace("<!-- end of generated run -->\n", ""))
    with pytest.raises(tables.TableError, match="no generated block 'run'"):
        generated.stale(root)


def test_the_check_command_passes_on_the_tree_and_refuses_other_arguments() -> None:
    assert generated.main(["--nonsense"]) == 2
    run = [sys.executable, "-m", "netra.runtime.tables.generated", "--check"]
    got = subprocess.run(run, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert (got.returncode, got.stderr) == (0, "")


def test_every_field_of_the_format_says_what_it_means() -> None:
    """The documented records leave no field unexplained (the generated tables have no empty meaning)."""
    for name in ("table", "entry", "candidate", "run", "evidence", "record"):
        from netra.core.schema_export import rows

        empty = [path for path, _, meaning in rows(fmt.records()[name]) if not meaning.strip()]
        assert not empty, f"{name}: {empty} say nothing"


def test_the_registry_fills_what_the_generated_schema_leaves_open() -> None:
    from netra import targets
    from netra.cli import schemas

    raw = json.loads((REPO / "netra/schemas/table.schema.json").read_text())
    assert "enum" not in raw["$defs"]["family"] and "enum" not in raw["$defs"]["vendor"]
    table = schemas.load("table")
    assert table["$defs"]["family"]["enum"] == sorted(FAMILIES)
    assert table["$defs"]["loader"]["enum"] == list(targets.loader_names())


def test_the_summary_is_the_records_fields_of_its_names() -> None:
    """The table's summary declares the record's own fields (same node), and the typed summary has them."""
    summary = dict(fmt.records()["candidate"]._fields)["evidence"].node
    assert isinstance(summary, s.Table)
    hw = dict(summary._fields)["hardware"].node
    assert isinstance(hw, s.Nullable) and isinstance(hw.inner, s.Table)
    record = dict(fmt.records()["record"]._fields)
    for key, f in hw.inner._fields:
        if key in tables.SUMMARY_FIELDS:
            assert f == record[key], key
    fields = set(tables.HardwareEvidence.__dataclass_fields__)
    assert fields == {k for k, _ in hw.inner._fields}


@pytest.mark.parametrize("gpu_class", sorted(p.stem for p in (REPO / "release/tables").glob("*.json")))
def test_the_typed_table_writes_back_what_it_read(gpu_class: str) -> None:
    """The typed model holds everything the format says: every committed table, read (as a table file
    and as a certified table) and written back, is the same data (what certify and lock write through)."""
    path = REPO / tables.table_path(gpu_class)
    ev = REPO / tables.evidence_path(gpu_class)
    evidence = ev.read_bytes() if ev.exists() else None
    whole = tables.join(path.read_bytes(), evidence, str(path), str(ev), gpu_class)
    assert tables.to_json(tables.parse_certified(whole, str(path), gpu_class)) == whole
    assert tables.to_json(tables.loads(path.read_bytes(), str(path), gpu_class)) == json.loads(
        path.read_bytes()
    )
    split = tables.split(whole)
    assert tables.dumps(split[0]).encode() == path.read_bytes()
    assert (split[1] is None) == (evidence is None)
