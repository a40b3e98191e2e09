"""Where a class's table and evidence file live in the tree, and which class a tracked path is of."""

from __future__ import annotations

TABLES_DIR = "release/tables"
EVIDENCE_DIR = "release/evidence"


def table_path(gpu_class: str) -> str:
    return f"{TABLES_DIR}/{gpu_class}.json"


def evidence_path(gpu_class: str) -> str:
    return f"{EVIDENCE_DIR}/{gpu_class}.json"


def _class_in(folder: str, lock_path: str) -> str | None:
    if lock_path.startswith(folder + "/") and lock_path.endswith(".json"):
        name = lock_path[len(folder) + 1 : -len(".json")]
        return name if name and "/" not in name else None
    return None


def gpu_class_of(lock_path: str) -> str | None:
    """The GPU class a tracked path is the table of ('release/tables/gfx950.json' -> 'gfx950')."""
    return _class_in(TABLES_DIR, lock_path)


def evidence_class_of(lock_path: str) -> str | None:
    """The GPU class a tracked path is the evidence file of ('release/evidence/sm_90.json' -> 'sm_90')."""
    return _class_in(EVIDENCE_DIR, lock_path)
