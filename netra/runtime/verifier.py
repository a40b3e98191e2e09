"""The install binding, verified once: what a file of a release must be, given its bytes, as typed findings.

A release binds its files to each other: the lock names every tracked file by sha256 and every code
object by the sha256 of its machine code and launch data; build.json names each code object's whole
file; a table references exactly its class's locked artifacts and agrees with its evidence file; no
fallback says a class does not build what the lock has artifacts for. Three readers hold an install
to that binding: `netra doctor` (an installed tree, every file), `netra verify-wheel` and the build
hook's gate (a wheel archive, every member), and the runtime's catalog (one table when opened, one
code object when first selected). Each reads bytes its own way; what the bytes must be is decided
here, once, so the three cannot disagree on a file (issue 29 found a resealed install accepted by
one and refused by another). Each caller renders the findings in its own format (doctor's report,
the gate's one line, the catalog's exception).

Pure functions of bytes and the lock: no file access, no import beyond the runtime's readers (the
ELF readers of a class are imported only when a code object is not the exact bytes the lock
examined), so serving pays for nothing it does not check.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from netra.errors import NetraError
from netra.runtime import tables
from netra.runtime.lockfile import Lock, LockedArtifact
from netra.runtime.tables import Table

# What a finding is about, most specific first: a renderer that names one problem per file names the
# first of these that a file has (the machine code before the whole file's hash).
CHECKS = (
    "text_sha256",  # the machine code against the lock
    "parse",  # not a readable code object (or table, manifest)
    "launch_sha256",  # what it launches with (descriptor, metadata) against the lock
    "sha256",  # the whole file against the lock or build.json
    "code_sha256",  # the whole code object against the lock, built with the locked toolchain
    "rules",  # a table (with its evidence) breaks its format or rules
    "lock",  # a table disagrees with the lock
    "fallback",  # a documented gap the lock contradicts
)


@dataclass(frozen=True)
class Finding:
    """One way a file breaks the binding. `member` is the file as the caller names it (a path below
    the install's root, an archive member); `expected` comes from `source` (lock, build.json)."""

    kind: str  # "altered" (bytes not the bound ones), "invalid" (bytes right, content wrong), "disagrees"
    member: str
    role: str  # "table", "evidence", "manifest", "source", "code_object"
    check: str  # one of CHECKS
    expected: str | None = None
    found: str | None = None
    source: str = ""
    detail: str = ""  # the reader's own message, for parse, rules, lock and fallback

    @property
    def rank(self) -> int:
        return CHECKS.index(self.check)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def first(findings: list[Finding]) -> Finding | None:
    """The most specific finding, for a renderer that names one problem per file."""
    return min(findings, key=lambda f: f.rank) if findings else None


def locked_file(name: str, role: str, data: bytes, sha256: str | None, source: str = "lock") -> list[Finding]:
    """A tracked file (table, evidence, manifest, source): its sha256 as the lock (or build.json) records."""
    got = _sha256(data)
    if sha256 is None or got == sha256:
        return []
    return [Finding("altered", name, role, "sha256", sha256, got, source)]


def code_object(
    name: str,
    data: bytes,
    artifact: LockedArtifact,
    *,
    recorded: str | None = None,
    same_toolchain: bool = False,
    whole: str | None = None,
) -> list[Finding]:
    """A code object: its whole file against build.json (`recorded`, when the install has one), and,
    unless it is byte for byte what `netra lock` examined, its machine code and launch data against
    the lock; built with the locked toolchain (`same_toolchain`, from build.json), it must be those
    very bytes. `whole`: its sha256 when the caller has it already."""
    got = whole or _sha256(data)
    out: list[Finding] = []
    if recorded is not None and got != recorded:
        out.append(Finding("altered", name, "code_object", "sha256", recorded, got, "build.json"))
    if got == artifact.code_sha256:
        return out
    from netra import targets

    tgt = targets.get(artifact.target)
    try:
        text = tgt.text_sha256(data, artifact.name, name)
        if text != artifact.text_sha256:
            out.append(
                Finding("altered", name, "code_object", "text_sha256", artifact.text_sha256, text, "lock")
            )
        else:
            launch = tgt.launch_digest(data, artifact.name, name)
            if launch != artifact.launch_sha256:
                out.append(
                    Finding(
                        "altered",
                        name,
                        "code_object",
                        "launch_sha256",
                        artifact.launch_sha256,
                        launch,
                        "lock",
                    )
                )
    except NetraError as e:
        out.append(Finding("altered", name, "code_object", "parse", detail=e.message))
    except Exception as e:  # a reader's own failure on bytes no gated build writes
        out.append(
            Finding(
                "altered",
                name,
                "code_object",
                "parse",
                detail=f"not a readable code object ({type(e).__name__}: {e})",
            )
        )
    if same_toolchain and not out:
        out.append(Finding("altered", name, "code_object", "code_sha256", artifact.code_sha256, got, "lock"))
    return out


def table(
    name: str,
    data: bytes,
    gpu_class: str,
    lock: Lock,
    evidence: tuple[str, bytes | None],
    *,
    tracked_evidence: bool,
    vouched: bool = False,
) -> tuple[Table | None, list[Finding]]:
    """A table whose bytes are the locked ones: its format and rules, read with its evidence file as one
    certified table (`evidence`: its name and intact bytes; bytes None when the class has none, or, with
    `tracked_evidence`, when the lock tracks one that is missing or altered: reported on its own, so
    the table is read alone), and its agreement with the lock. `vouched`: the bytes are those a gated
    build read through the format (a vouched lock records them), so the format is not read again;
    the rules, the evidence and the lock still are, whatever the hashes vouch for (a resealed install
    recomputes them all). The table when it holds, else None."""
    ev_name, ev_data = evidence
    try:
        if tracked_evidence and ev_data is None:
            t = tables.loads(data, name, gpu_class, vouched=vouched)
        elif vouched:
            t = tables.loads(data, name, gpu_class, vouched=True)
            tables.evidence_agrees(data, ev_data, name, ev_name, gpu_class)
        else:
            t = tables.read_certified(data, ev_data, name, ev_name, gpu_class)
    except NetraError as e:
        at = ev_name if e.message.startswith(ev_name + ": ") else name
        role = "evidence" if at == ev_name else "table"
        return None, [Finding("invalid", at, role, "rules", detail=e.message)]
    wrong = tables.against_lock(t, lock)
    if wrong:
        return None, [Finding("invalid", name, "table", "lock", detail=w) for w in wrong]
    return t, []


def fallbacks_of_table(name: str, t: Table, lock: Lock) -> list[Finding]:
    """A table's documented gaps that the lock contradicts."""
    return [
        Finding("disagrees", name, "table", "fallback", detail=p)
        for p in tables.gaps_against_lock(t.fallbacks, lock, name)
    ]


def model_manifest(name: str, data: bytes, lock: Lock) -> list[Finding]:
    """A model manifest whose bytes are the locked ones: readable, and no fallback of it saying a class
    does not build a contract the lock has that class's artifacts for."""
    from netra.core import models
    from netra.core import toml as _toml

    try:
        m = models.parse(_toml.loads(data.decode("utf-8")), name)
    except (NetraError, UnicodeDecodeError, _toml.TOMLDecodeError) as e:
        why = f"not a readable model manifest ({getattr(e, 'message', e)})"
        return [Finding("disagrees", name, "manifest", "parse", detail=why)]
    return [
        Finding("disagrees", name, "manifest", "fallback", detail=p)
        for p in tables.gaps_against_lock(m.fallbacks, lock, name)
    ]


MODELS = "manifests/models/"  # where the lock tracks model manifests


@dataclass(frozen=True)
class Agreement:
    """What the intact files of a release say to each other: the tables that hold (by class), the
    tables that do not (their findings, by table), and the disagreements between files."""

    tables: dict[str, Table]  # by class: the table and its evidence file hold (checked against each other)
    invalid: dict[
        str, list[Finding]
    ]  # table name -> its findings (rules, or each disagreement with the lock)
    disagreements: list[Finding]


def agreement(
    lock: Lock, intact: Mapping[str, bytes], name_of: Callable[[str], str], *, vouched: bool = False
) -> Agreement:
    """Every intact table (with its evidence) and model manifest held to the lock and to each other.

    `intact`: the bytes of each tracked file that hashes to what the lock records, by lock path (a file
    missing or altered is reported on its own and left out); `name_of`: a lock path as the caller names
    the file. Model manifests first, then each valid table's fallbacks, as doctor has always listed them."""
    valid: dict[str, Table] = {}
    invalid: dict[str, list[Finding]] = {}
    for f in lock.files_with_role("table"):
        cls = tables.gpu_class_of(f.path)
        if cls is None or f.path not in intact:
            continue
        ev_path = tables.evidence_path(cls)
        tracked = lock.file(ev_path) is not None
        t, found = table(
            name_of(f.path),
            intact[f.path],
            cls,
            lock,
            (name_of(ev_path), intact.get(ev_path)),
            tracked_evidence=tracked,
            vouched=vouched,
        )
        if t is None:
            invalid[name_of(f.path)] = found
        elif not tracked or ev_path in intact:  # its certification rests on an evidence file that holds
            valid[cls] = t
    out: list[Finding] = []
    for f in lock.files_with_role("manifest"):
        if f.path.startswith(MODELS) and f.path in intact:
            out += model_manifest(name_of(f.path), intact[f.path], lock)
    for cls, t in sorted(valid.items()):
        out += fallbacks_of_table(name_of(tables.table_path(cls)), t, lock)
    return Agreement(valid, invalid, out)
