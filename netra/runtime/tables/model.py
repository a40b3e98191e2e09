"""The typed table model: the format of a table, a certified table and an evidence file, declared once
(each record's fields with their types, bounds and meaning: `table_format`, `evidence_format`), and
what the readers make of it (a table, its entries, their candidates and what their maturity rests
on); with the format's schema version and the certification notes a table carries.

The declaration is the single source of the format: the readers check through it (netra.runtime.tables
.schema), and the shipped JSON Schema files and the field tables of docs/tables.md are generated from
it (`python -m netra.runtime.tables.schema --write`; a test fails when a committed one differs)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netra.core.types import MATURITIES, ModelFallback
from netra.runtime.kernarg import KernargLayout

SCHEMA = 5
STATIC_NOTE = (
    "Statically verified only: assembled, .text locked and the code object validated against its "
    "contract and the GPU class's limits. No {target} hardware has run these kernels."
)
HARDWARE_NOTE = (
    "Certified on {target} hardware by `netra certify`: every accepted candidate ran on the device, "
    "matched the float64 reference within its stated tolerance, was timed and was found clean by every "
    "memory checker of its vendor; its evidence names the machine code (.text sha256) it was certified "
    "with."
)
UNCERTIFIED_NOTE = (
    "Awaiting hardware certification: no {target} candidate has been certified by `netra certify` for "
    "the machine code locked now, so none is accepted."
)
# What certify's memory checkers (sanitizer) and profiler can say of a candidate: "skipped" and
# "unavailable" are never "clean" (netra.runtime.tables.format says why).
SANITIZER_RESULTS = ("clean", "findings", "skipped", "unavailable")
PROFILE_RESULTS = ("measured", "skipped", "unavailable")
# The table's summary of a candidate's hardware evidence record: what its maturity rests on (the
# record's fields of these names, and its memory checkers' and profiler's result).
SUMMARY_FIELDS = ("run", "text_sha256", "passed", "reason", "max_rel_deviation", "tolerance")
HINT = "regenerate the table with `netra lock` (hardware evidence comes from `netra certify`)"
# A candidate's accumulator_bits where its entry names none: its tensor core keeps an fp32 partial sum
FP32_ACCUMULATOR_BITS = 24


@dataclass(frozen=True)
class Launch:
    """Launch geometry: a fixed block, and a grid whose axes are constants, ceil(rows / rows_per_block),
    or an expression of rows (netra.core.expr: "min(128, rows * 8)" for a routed MoE's hit experts)."""

    block: tuple[int, int, int]
    # each: a constant, ("rows", rows_per_block), or ("expr", an expression of rows)
    grid_axes: tuple[int | tuple[str, int] | tuple[str, str], ...]
    dynamic_lds_bytes: int

    def grid(self, rows: int) -> tuple[int, int, int]:
        """Blocks per axis for `rows` rows (the token dimension). Zero rows give a zero-size grid."""
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            raise ValueError(f"rows must be a non-negative integer, got {rows!r}")
        from netra.core import expr

        out = [
            a
            if isinstance(a, int)
            else -(-rows // a[1])
            if isinstance(a[1], int)
            else expr.evaluate(a[1], {"rows": rows})
            for a in self.grid_axes
        ]
        if rows == 0 and 0 not in out:  # zero rows: nothing to launch, whatever the axes say
            out[0] = 0
        return (out[0], out[1], out[2])

    @property
    def expressions(self) -> tuple[str, ...]:
        """The grid in the terms of the family's launch model (netra.core.launch): each axis a constant
        or cdiv(<runtime value>, <per block>). The table's JSON keeps its format; this is its reading."""
        return tuple(
            str(a) if isinstance(a, int) else f"cdiv({a[0]}, {a[1]})" if isinstance(a[1], int) else a[1]
            for a in self.grid_axes
        )

    def grid_for(self, values: Mapping[str, int]) -> tuple[int, int, int]:
        """Blocks per axis for the named runtime values (what grid(rows) is for {"rows": rows})."""
        from netra.core import expr

        x, y, z = (expr.evaluate(e, values) for e in self.expressions)
        return (x, y, z)

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    @property
    def rows_per_block(self) -> int:
        return next((a[1] for a in self.grid_axes if not isinstance(a, int) and isinstance(a[1], int)), 0)

    @property
    def per_block(self) -> bool:
        """Whether the grid is the row-wise one, (cdiv(rows, rows_per_block), constant, constant)."""
        return (
            not isinstance(self.grid_axes[0], int)
            and isinstance(self.grid_axes[0][1], int)
            and all(isinstance(a, int) for a in self.grid_axes[1:])
        )


@dataclass(frozen=True)
class HardwareEvidence:
    """What a candidate's maturity rests on: the table's summary of its evidence record."""

    run: int
    text_sha256: str  # the machine code this evidence was measured on
    passed: bool
    reason: str
    max_rel_deviation: float | None  # None: not finite (a NaN or inf where the reference had none)
    tolerance: float
    sanitizer: str = "skipped"  # memory checkers, SANITIZER_RESULTS: only "clean" may be served by default
    profile: str = "skipped"  # PROFILE_RESULTS

    @classmethod
    def of(cls, record: Mapping[str, Any]) -> HardwareEvidence:
        """The summary of a whole hardware evidence record (its memory checkers' and profiler's result)."""
        return cls(
            run=record["run"], text_sha256=record["text_sha256"], passed=record["passed"],
            reason=record["reason"], max_rel_deviation=record["max_rel_deviation"],
            tolerance=record["tolerance"], sanitizer=record["sanitizer"]["result"],
            profile=record["profile"]["result"],
        )  # fmt: skip


@dataclass(frozen=True)
class Candidate:
    tactic: str
    artifact: str
    file: str
    symbol: str
    text_sha256: str
    maturity: str
    launch: Launch
    lds_bytes: int
    workspace_bytes: int
    kernarg: KernargLayout
    evidence: dict[str, Any]  # static, and hardware: its summary (a certified table: the whole record)
    hardware: HardwareEvidence | None
    # significant bits its tensor core keeps of each partial sum: what its judge models (the format's
    # optional accumulator_bits; fp32 where absent)
    accumulator_bits: int = FP32_ACCUMULATOR_BITS

    @property
    def rank(self) -> int:
        return MATURITIES.index(self.maturity)


@dataclass(frozen=True)
class Dispatch:
    """Which tactic serves which row counts, decided by certification (None: every larger count)."""

    max_rows: int | None
    tactic: str


@dataclass(frozen=True)
class NotAdmitted:
    """A tactic of the class for the entry's op that is no candidate: its template does not admit the
    contract (the first of the template manifest's [[requires]] the pair fails, and why)."""

    tactic: str
    requires: str
    why: str


@dataclass(frozen=True)
class Entry:
    key: str
    op: str
    params: dict[str, int]
    candidates: tuple[Candidate, ...]
    dispatch: tuple[Dispatch, ...] = ()
    not_admitted: tuple[NotAdmitted, ...] = ()  # the class's tactics of the op its template does not build

    def tactic_for(self, rows: int) -> str | None:
        for d in self.dispatch:
            if d.max_rows is None or rows <= d.max_rows:
                return d.tactic
        return None


@dataclass(frozen=True)
class Table:
    gpu_class: str
    vendor: str
    loader: str
    certification: str
    note: str
    runs: tuple[dict[str, Any], ...]
    entries: Mapping[str, Entry]  # a dict; served from a vouched table: Entries
    fallbacks: tuple[ModelFallback, ...]

    def maturity_counts(self) -> dict[str, int]:
        """Candidates per maturity, every maturity present (zeros included)."""
        counts = dict.fromkeys(MATURITIES, 0)
        for e in self.entries.values():
            for c in e.candidates:
                counts[c.maturity] += 1
        return counts

    def candidates(self) -> list[Candidate]:
        return [c for e in self.entries.values() for c in e.candidates]
