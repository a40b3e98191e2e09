"""A table against the lock: it references exactly its class's locked artifacts with their locked
hashes and facts (`against_lock`), and no documented gap contradicts what the lock builds."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from netra.core.ops import contract_key
from netra.core.types import ModelFallback
from netra.errors import TableError
from netra.runtime.tables.model import Candidate, Table

if TYPE_CHECKING:
    from netra.runtime.lockfile import Lock, LockedArtifact


def against_lock(table: Table, lock: Lock) -> list[str]:
    """Every way a parsed table disagrees with the lock: it must reference exactly the class's locked
    artifacts, each once, with the locked file, hashes, symbol, tactic, contract and facts."""
    out: list[str] = []
    locked = _locked(lock, table.gpu_class)
    seen: set[str] = set()
    for e in table.entries.values():
        for c in e.candidates:
            a: LockedArtifact | None = locked.get(c.artifact)
            if a is None:
                out.append(_unlocked(c.artifact, table.gpu_class))
                continue
            seen.add(c.artifact)
            out += _facts_against(c, e.key, a)
    return out + _unlisted(locked.keys() - seen, table.gpu_class)


def gaps_against_lock(fallbacks: Iterable[ModelFallback], lock: Lock, where: str) -> list[str]:
    """Every documented gap (`where`'s fallbacks: a model manifest's, a table's) that the lock
    contradicts: a fallback saying a class does not build a contract while the lock has that class's
    artifacts for it. The release refuses this when it is made (netra.release.manifests); an install
    is held to it whatever its hashes vouch for, so a catalog never lists both."""
    built: dict[tuple[str, str], int] = {}
    for a in lock.artifacts:
        key = (a.target, contract_key(a.op, a.contract))
        built[key] = built.get(key, 0) + 1
    return [
        f"{where}: the {f.model} fallback says {f.gpu_class} does not build {f.contract}, but the lock has "
        f"{built[(f.gpu_class, f.contract)]} {f.gpu_class} artifact(s) for it"
        for f in fallbacks
        if f.gpu_class and (f.gpu_class, f.contract) in built
    ]


def _unlocked(name: str, gpu_class: str) -> str:
    return f"{name}: in the table but not a locked {gpu_class} artifact"


def _unlisted(names: Iterable[str], gpu_class: str) -> list[str]:
    """The locked artifacts a table leaves out, by name."""
    return [f"{n}: locked but missing from the {gpu_class} table" for n in sorted(names)]


def _locked(lock: Lock, gpu_class: str) -> dict[str, LockedArtifact]:
    return {a.name: a for a in lock.artifacts if a.target == gpu_class}


def _facts_against(c: Candidate, key: str, a: LockedArtifact) -> list[str]:
    """How one candidate of the entry `key` differs from its locked artifact."""
    facts = {
        "file": (a.file, c.file),
        "text_sha256": (a.text_sha256, c.text_sha256),
        "lds_bytes": (a.lds_bytes, c.lds_bytes),
        "kernarg size": (a.kernarg_bytes, c.kernarg.size),
        "tactic": (a.tactic, c.tactic),
        "contract": (contract_key(a.op, a.contract), key),
    }
    out = [f"{c.artifact}: {k} locked {x!r}, table {y!r}" for k, (x, y) in facts.items() if x != y]
    if c.symbol not in a.symbols:
        out.append(f"{c.artifact}: symbol {c.symbol} is not among the locked symbols {list(a.symbols)}")
    if c.launch.threads_per_block > a.max_threads:
        out.append(f"{c.artifact}: block {c.launch.block} exceeds the locked max threads {a.max_threads}")
    return out


def lock_disagreement(where: str, gpu_class: str, problems: list[str], hint: str) -> TableError:
    """The one error for a table that disagrees with the lock (the first six ways, and how many more)."""
    return TableError(
        f"{where}: the {gpu_class} table disagrees with the lock ({'; '.join(problems[:6])}"
        + (f"; and {len(problems) - 6} more)" if len(problems) > 6 else ")"),
        hint,
    )
