"""Evidence carried from a certified table (`netra certify --reuse TABLE`, docs/certify.md): a contract of
this install's table whose candidates the reused table certified as they are now (the same artifacts,
the same machine code launched the same way, every one with hardware evidence) is not run again; its
entry (evidence, maturity, order, dispatch) is taken as it is, its runs renumbered after this run's.

`read` reads the two files through the runtime's strict readers; `carry` decides from the typed tables
and this host's device name, and touches nothing (netra.certify.certified.table joins what it carries to
what this run measured). A table of another class, or certified on another device, carries nothing: it
is refused, so that a session that meant to certify a few contracts never spends its device time
certifying all of them unasked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netra.errors import CertificationError, NetraError
from netra.runtime import tables

HINT = (
    "pass a certified table with its evidence file, as `netra certify` writes them (<stem>.json and "
    "<stem>.evidence.json) or as a source tree commits them (release/tables/<class>.json and "
    "release/evidence/<class>.json), or certify without --reuse"
)


@dataclass(frozen=True)
class Reused:
    """A certified table read for reuse, and where its two files are."""

    path: Path
    evidence: Path
    table: tables.Table


@dataclass(frozen=True)
class Carried:
    """What a run takes from a reused table: the carried entries (their evidence's `run` already points
    past this run's, at `runs`), the reused runs they refer to in the reused table's order, the
    contracts this run certifies, and those it holds (`held`: not named by --only, taken as the reused
    table has them, some candidates without evidence)."""

    source: str
    entries: dict[str, tables.Entry]
    runs: tuple[dict[str, Any], ...]
    rerun: tuple[str, ...]
    held: dict[str, tables.Entry] = dataclasses.field(default_factory=dict)

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices that measured what is carried and held (another one than this host's only with
        --across-devices)."""
        return tuple(sorted({r["device"] for r in self.runs}))


def evidence_of(path: Path) -> Path:
    """Where the evidence of the table at `path` is: beside it as `netra certify` writes it
    (<stem>.evidence.json), else, for a table in a tree's release/tables/, in release/evidence/."""
    beside = path.with_name(f"{path.stem}.evidence.json")
    tree = path.parent.parent / Path(tables.EVIDENCE_DIR).name / path.name
    if beside.exists() or path.parent.name != Path(tables.TABLES_DIR).name:
        return beside
    return tree


def read(path: Path, gpu_class: str) -> Reused:
    """The certified table at `path` and its evidence file, read and held to each other by the runtime's
    strict readers; a table of another class than `gpu_class` is refused."""
    from netra.core import files

    ev = evidence_of(path)
    try:
        raw = files.read_path(path, limit=files.SOURCE_LIMIT, what="table to reuse")
        ev_raw = (  # absent: the reader says whether the table needs one (a static table has none)
            files.read_path(ev, limit=files.SOURCE_LIMIT, what="evidence of the table to reuse")
            if ev.exists() or ev.is_symlink()
            else None
        )
        table = tables.read_certified(raw, ev_raw, str(path), str(ev))
    except NetraError as e:  # each names the file: missing, not a file, too large, not the format
        raise CertificationError(f"--reuse {e.message}", HINT, e.details) from None
    if table.gpu_class != gpu_class:
        raise CertificationError(
            f"--reuse {path}: the {table.gpu_class} table, not the {gpu_class} table this run certifies",
            f"pass the {gpu_class} table (release/tables/{gpu_class}.json), or certify without --reuse",
        )
    return Reused(path, ev, table)


def _launched(c: tables.Candidate) -> tuple[Any, ...]:
    """What a candidate's evidence was measured on: its machine code and how it is launched."""
    return (c.tactic, c.artifact, c.file, c.symbol, c.text_sha256, c.launch, c.lds_bytes,
            c.workspace_bytes, c.kernarg)  # fmt: skip


def _alike(now: tables.Entry, then: tables.Entry) -> bool:
    """Whether `then` has exactly the candidates `now` has, each it certified as it is now."""
    was = {c.artifact: c for c in then.candidates}
    return len(was) == len(now.candidates) and all(
        c.artifact in was and (was[c.artifact].hardware is None or _launched(was[c.artifact]) == _launched(c))
        for c in now.candidates
    )


def _same(now: tables.Entry, then: tables.Entry) -> bool:
    """Whether `then` certified on hardware exactly the candidates `now` has."""
    return _alike(now, then) and all(c.hardware is not None for c in then.candidates)


def carry(
    installed: tables.Table,
    reused: Reused,
    device: str,
    only: set[str] | None = None,
    *,
    across_devices: bool = False,
) -> Carried:
    """Which contracts of `installed` take their entry from the reused table (renumbered: this run is
    run 0, the reused runs follow in their order) and which this run certifies: with `only` (--only's
    contracts), those of them the reused table does not carry; every other one it does not carry is
    held as that table has it, and refused where that table does not have it as it is now. Refused
    when the reused table was certified on another device name than `device` (this host's), unless
    `across_devices`: a table serves every device of its class, and a contract's order and dispatch
    come from its own candidates, which one run measures together, so each contract keeps the device
    it was certified on (its runs say which) and this run's contracts are this device's."""
    other = sorted({r["device"] for r in reused.table.runs} - {device})
    if other and not across_devices:
        raise CertificationError(
            f"--reuse {reused.path}: certified on {other[0]}, not on this host's {device}: its timings, "
            "order and dispatch do not hold here",
            f"reuse a table certified on this host's device ({device}), add --across-devices to keep each "
            "contract as the device it was certified on measured it, or certify without --reuse",
        )
    then = reused.table.entries
    keep = {k: then[k] for k, e in sorted(installed.entries.items()) if k in then and _same(e, then[k])}
    hold = sorted(k for k in installed.entries if k not in keep and only is not None and k not in only)
    for k in hold:
        if k not in then or not _alike(installed.entries[k], then[k]):
            raise CertificationError(
                f"--only: {k} is not in {reused.path} as this install has it (new, or its candidates "
                "changed): it cannot be left as that table has it",
                "name it with --only too, or certify without --only",
            )
    everything = {**keep, **{k: then[k] for k in hold}}
    used = sorted(
        {c.hardware.run for e in everything.values() for c in e.candidates if c.hardware is not None}
    )
    number = {r: 1 + i for i, r in enumerate(used)}
    entries = {}
    for key, e in everything.items():
        now = {c.artifact: c for c in installed.entries[key].candidates}
        cands = []
        for c in e.candidates:
            if c.hardware is None:  # a held contract's candidate that no run measured
                n = now[c.artifact]
                cands.append(dataclasses.replace(
                    n, maturity=c.maturity, hardware=None, evidence={**n.evidence, "hardware": None}
                ))  # fmt: skip
                continue
            record = {**c.evidence["hardware"], "run": number[c.evidence["hardware"]["run"]]}
            cands.append(dataclasses.replace(
                now[c.artifact], maturity=c.maturity,
                evidence={**now[c.artifact].evidence, "hardware": record},
                hardware=tables.HardwareEvidence.of(record),
            ))  # fmt: skip
        entries[key] = dataclasses.replace(
            installed.entries[key], candidates=tuple(cands), dispatch=e.dispatch
        )
    return Carried(
        source=str(reused.path),
        entries={k: entries[k] for k in keep},
        runs=tuple(reused.table.runs[r] for r in used),
        rerun=tuple(k for k in sorted(installed.entries) if k not in everything),
        held={k: entries[k] for k in hold},
    )
