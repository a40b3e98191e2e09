"""Ranking: a contract's candidate order, maturities and row dispatch, from the measurements alone.

certify ranks what it measured; `rerank` recomputes the same from a certified table's recorded
evidence (typed, as tables.read_certified reads it), so a committed table can be held to its own measurements (tests/test_certification_gate.py). Maturity is
`netra.runtime.tables.maturity_of` (the rule the table reader enforces): conformance failed or a
memory-checker finding rejects; a passing candidate is `accepted` only when every memory checker ran and
was clean, and stays `verified` (never served by the default policy) when they were skipped or are not
available for its vendor. Only accepted candidates enter the dispatch.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from netra.runtime import tables

PREFILL_ROWS = 8192
HYSTERESIS = 0.03


@dataclass
class Result:
    candidate: tables.Candidate
    passed: bool  # every conformance case passed
    reason: str  # why it is rejected ("" when it is not): the first failing case, or the first finding
    max_rel_deviation: float | None
    tolerance: float
    cases: int
    counts: dict[str, int]
    timings: list[dict[str, Any]] = field(default_factory=list)
    sanitizer: dict[str, Any] | None = None  # evidence.hardware.sanitizer; None: nothing recorded (not clean)
    profile: dict[str, Any] | None = None  # evidence.hardware.profile

    @property
    def memory_checks(self) -> str:
        return self.sanitizer["result"] if self.sanitizer is not None else "skipped"

    @property
    def maturity(self) -> str:
        return tables.maturity_of(self.passed, self.memory_checks)


def _median(r: Result, rows: int) -> float:
    return next((t["median_us"] for t in r.timings if t["rows"] == rows), math.inf)


def rank(results: list[Result]) -> tuple[list[Result], tuple[tables.Dispatch, ...]]:
    """The entry's candidate order and row dispatch, from the measurements alone.

    Per measured row count the fastest accepted candidate wins, except that the previous row count's
    winner stays while it is within HYSTERESIS of the fastest (noise must not flip tactics); runs of
    one winner become row ranges. The candidate serving the prefill row count comes first (it is
    what select() serves when the caller gives no row count), then the other accepted candidates by
    their prefill median, then the verified ones (passed, memory checkers not run) by their prefill
    median, then the rejected ones; ties by tactic name.
    """
    ok = [r for r in results if r.maturity == "accepted"]
    # ranked at PREFILL_ROWS, or at the most rows measured where a family's calls stop below it (64 tokens)
    top = min(PREFILL_ROWS, max((t["rows"] for r in results for t in r.timings), default=PREFILL_ROWS))
    pending = sorted(
        (r for r in results if r.maturity == "verified"),
        key=lambda r: (_median(r, top), r.candidate.tactic),
    )
    bad = sorted((r for r in results if r.maturity == "rejected"), key=lambda r: r.candidate.tactic)
    ok.sort(key=lambda r: (_median(r, top), r.candidate.tactic))
    if len(ok) < 2:
        return ok + pending + bad, ()
    measured = sorted({t["rows"] for r in ok for t in r.timings})
    winners: list[tuple[int, str]] = []
    current: str | None = None
    for rows in measured:
        best = min(ok, key=lambda r: (_median(r, rows), r.candidate.tactic))
        keep = next((r for r in ok if r.candidate.tactic == current), None)
        if keep is not None and _median(keep, rows) <= _median(best, rows) * (1 + HYSTERESIS):
            best = keep
        current = best.candidate.tactic
        winners.append((rows, current))
    rules: list[tables.Dispatch] = []
    for i, (rows, tactic) in enumerate(winners):
        if i + 1 < len(winners) and winners[i + 1][1] == tactic:
            continue
        last = i + 1 == len(winners)
        rules.append(tables.Dispatch(None if last else rows, tactic))
    prefill = next((t for rows, t in winners if rows >= top), winners[-1][1])
    ok.sort(key=lambda r: r.candidate.tactic != prefill)  # stable: the others keep their prefill order
    return ok + pending + bad, (tuple(rules) if len(rules) > 1 else ())


def rerank(table: tables.Table) -> tables.Table:
    """The table's order, maturity and dispatch recomputed from the measurements it records (a certified
    table: each candidate's whole evidence record): the same table when it came from `certify` (ranking
    is a function of the measurements). A contract none of whose candidates was measured yet (added
    after the run) is left as `netra lock` wrote it; a tactic added since to a measured contract follows
    the measured ones in file order, as `netra lock` places it."""
    entries = {}
    for key, e in table.entries.items():
        if all(c.evidence["hardware"] is None for c in e.candidates):
            entries[key] = e  # a contract added since the class was certified: in file order until it is
            continue
        results, unmeasured = [], []
        for c in e.candidates:
            hw = c.evidence["hardware"]
            if hw is None:
                unmeasured.append(c)
                continue
            results.append(Result(c, hw["passed"], hw["reason"], hw["max_rel_deviation"], hw["tolerance"],
                                  hw["cases"], hw["counts"], hw["timings"], hw["sanitizer"], hw["profile"]))  # fmt: skip
        ranked, dispatch = rank(results)
        cands = tuple(dataclasses.replace(r.candidate, maturity=r.maturity) for r in ranked) + tuple(
            unmeasured
        )
        entries[key] = dataclasses.replace(e, candidates=cands, dispatch=dispatch)
    return dataclasses.replace(table, entries=entries)
