"""The certified table a run makes: the installed table (typed) with this run's evidence, order, maturity
and dispatch, and the entries carried from a reused table (netra.certify.reuse) (`table`), checked by
the runtime's own reader and against the install's lock before it is returned; and the two files it
is written to (`write`: the table, and its evidence file beside it).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netra import __version__, targets
from netra.certify import measure
from netra.certify.ranking import PREFILL_ROWS, Result, rank
from netra.errors import CertificationError, NetraError
from netra.runtime import tables

if TYPE_CHECKING:
    from netra.certify.reuse import Carried
    from netra.runtime.catalog import Catalog
    from netra.runtime.lockfile import Lock


def run_info(
    dev: Any, table: tables.Table, lock: Lock, rows: tuple[int, ...], replays: int, seed: int
) -> dict[str, Any]:
    """The certification run the evidence refers to: the machine, its software and the protocol."""
    tc = lock.toolchains[table.gpu_class]
    vendor = targets.get(table.gpu_class).vendor
    return {
        "device": dev.device_name(),
        "driver": vendor.driver(),
        "runtime": f"{vendor.runtime} {dev.driver_version()}",
        "toolchain": {"flavour": tc.flavour, "version": tc.version},
        "clocks": vendor.clocks(),
        "netra": __version__,
        "seed": seed,
        "protocol": {
            "rows": list(rows), "warmup": measure.WARMUP, "replays": replays, "prefill_rows": PREFILL_ROWS,
        },
    }  # fmt: skip


def _record(r: Result) -> dict[str, Any]:
    """A candidate's whole hardware evidence record (run 0: this run) from what was measured."""
    return {
        "run": 0,
        "text_sha256": r.candidate.text_sha256,
        "passed": r.passed,
        "reason": r.reason,
        "reference": "float64",
        "max_rel_deviation": r.max_rel_deviation,
        "tolerance": r.tolerance,
        "cases": r.cases,
        "counts": dict(sorted(r.counts.items())),
        "timings": r.timings,
        "sanitizer": r.sanitizer,
        "profile": r.profile,
    }


def _candidate(r: Result) -> tables.Candidate:
    record = _record(r)
    return dataclasses.replace(
        r.candidate,
        maturity=r.maturity,
        evidence={**r.candidate.evidence, "hardware": record},
        hardware=tables.HardwareEvidence.of(record),
    )


def table(
    cat: Catalog,
    run: dict[str, Any],
    results: dict[str, list[Result]],
    logs: Path | None = None,
    carried: Carried | None = None,
) -> tables.Table:
    """The installed table with this run's evidence, order, maturity and dispatch (each entry's `results`
    by its key) and, for the contracts `carried` takes from a reused table, that table's entries (their
    runs after this one) and those it holds (not named by --only: as that table has them), as the
    runtime reads it back; when that check fails, the unchecked table is kept in `logs` beside the
    tools' logs."""
    installed = cat.table
    taken = {**carried.entries, **carried.held} if carried is not None else {}
    entries = {}
    for key, e in installed.entries.items():
        if key in taken:
            entries[key] = taken[key]
            continue
        ranked, dispatch = rank(results[key])
        entries[key] = dataclasses.replace(
            e, candidates=tuple(_candidate(r) for r in ranked), dispatch=dispatch
        )
    made = dataclasses.replace(
        installed,
        certification="hardware",
        note=tables.HARDWARE_NOTE.format(target=installed.gpu_class),
        runs=(run, *(carried.runs if carried is not None else ())),
        entries=entries,
    )
    raw = tables.to_json(made)
    where = f"certified {installed.gpu_class} table"
    try:
        checked = tables.parse_certified(raw, where, installed.gpu_class)
        wrong = tables.against_lock(checked, cat.lock)
        if wrong:
            raise CertificationError(
                f"{where}: disagrees with the install's lock ({wrong[0]})", "reinstall and certify again"
            )
    except NetraError:
        if logs is not None:
            (logs / f"{installed.gpu_class}.unchecked.json").write_text(
                tables.dumps(raw)
            )  # the certified form
        raise
    return checked


def held(table: tables.Table) -> list[str]:
    """The contracts of a table certify made that it neither measured nor carried whole: held as the
    reused table had them (not named by --only), some or all of their candidates without evidence."""
    return sorted(
        k for k, e in table.entries.items()
        if not any(c.hardware is not None and c.hardware.run == 0 for c in e.candidates)
        and not all(c.hardware is not None for c in e.candidates)
    )  # fmt: skip


def carried(table: tables.Table) -> list[str]:
    """The contracts of a table certify made that it carried from a reused table: those none of whose
    evidence is this run's (run 0)."""
    return sorted(
        k for k, e in table.entries.items() if all(c.hardware and c.hardware.run for c in e.candidates)
    )


def evidence_out(out: Path) -> Path:
    """Where certify writes the evidence file of the table it writes to `out` (beside it)."""
    return out.with_name(f"{out.stem}.evidence.json")


def write(table: tables.Table, out: Path) -> None:
    """The certified table as its two files: the table at `out`, its evidence beside it (committed as
    release/tables/<class>.json and release/evidence/<class>.json). Both or neither."""
    from netra.core import files

    serving, evidence = tables.split(tables.to_json(table))
    assert evidence is not None  # certify writes hardware evidence
    files.atomic_write_all(
        [(evidence_out(out), tables.dumps(evidence).encode()), (out, tables.dumps(serving).encode())]
    )
