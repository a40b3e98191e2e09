"""Making the tables of a lock at `netra lock` (`tables_of`: one call, the typed tables and the files
they are written to): per class the skeleton from the manifests and the lock, and the hardware
evidence carried over from the table in the tree where it still applies.

- static classes (gfx950 today): the table is the skeleton; no candidate may claim more than `verified`;
- hardware classes (sm_90): everything derived (entries, launch data, kernarg layouts, hashes) is
  regenerated, and each candidate's hardware evidence is kept only while the machine code it was
  certified with is the machine code locked now; a changed instruction voids that candidate's
  certification (`merge`).

Every table is read back by the runtime's own reader before it is returned (never write a table the
runtime would refuse); the format, its reader and its writer are netra.runtime.tables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from netra import targets
from netra.runtime import tables
from netra.runtime.tables import HARDWARE_NOTE, SCHEMA, STATIC_NOTE, UNCERTIFIED_NOTE, Table
from netra.runtime.tables.model import NotAdmitted as TableNotAdmitted
from netra.runtime.tables.writing import accumulator_json, contract_json, fallback_json, not_admitted_json

if TYPE_CHECKING:
    from netra.core.types import ArtifactSpec, NotAdmitted
    from netra.release.manifests import Manifests
    from netra.runtime.lockfile import Lock, LockedArtifact


@dataclass(frozen=True)
class Made:
    """The tables of a lock: each class's certified table (typed, as the runtime reads it) and the
    text of every file they are written to (each class's table, and its evidence file if certified on
    hardware), by tree path; and one line per certification that no longer applies."""

    tables: dict[str, Table]
    files: dict[str, str]
    voided: tuple[str, ...]


def tables_of(manifests: Manifests, lock: Lock, tree: Mapping[str, bytes]) -> Made:
    """Every class's table as the manifests and `lock` make it, carrying the hardware evidence of the
    tables in the tree (`tree`: their bytes by path) where it still applies."""
    made: dict[str, Table] = {}
    files: dict[str, str] = {}
    voided: list[str] = []
    for t in manifests.targets():
        path, ev_path = tables.table_path(t), tables.evidence_path(t)
        existing = None
        if path in tree and manifests.certification[t] == "hardware":
            older = tables.older_schema(tree[path])
            if older is None:
                existing = tables.read_certified(tree[path], tree.get(ev_path), path, ev_path, t)
            else:  # evidence in a format this netra no longer reads is not carried: certify again
                voided.append(
                    f"{path}: written in table schema {older} (this netra reads {tables.SCHEMA}): not carried"
                )
        table, void = merge(skeleton(manifests, t, lock), existing)
        made[t] = tables.parse_certified(table, path, t)  # never write a table the runtime would refuse
        serving, evidence = tables.split(table)
        files[path] = tables.dumps(serving)
        if evidence is not None:
            files[ev_path] = tables.dumps(evidence)
        voided += void
    return Made(made, files, tuple(voided))


def _kernarg(spec: ArtifactSpec) -> dict[str, Any]:
    return {
        "size": spec.template.kernarg_bytes,
        "args": [
            {"name": a.name, "offset": a.offset, "size": a.size, "kind": a.value_kind, "type": a.type}
            for a in spec.template.args
        ],
    }


def grid(spec: ArtifactSpec) -> list[Any]:
    """The grid of the family's launch (its record's expressions) with the contract and the tactic
    bound: each axis a constant, {"rows_per_block": n} for cdiv(rows, n), or {"rows": "<expression>"}
    of the dispatch value, which a table calls rows whatever the family calls it (tokens)."""
    from netra.core import expr
    from netra.core.ops import FAMILIES

    fam = FAMILIES[spec.op]
    env = spec.launch_env
    out: list[Any] = []
    for axis in fam.launch.steps[0].grid:
        v = expr.bind(axis, env, {fam.dispatch: "rows"})
        m = re.fullmatch(r"cdiv\(rows, (\d+)\)", v) if isinstance(v, str) else None
        out.append(v if isinstance(v, int) else {"rows_per_block": int(m[1])} if m else {"rows": v})
    return out


def candidate(spec: ArtifactSpec, locked: LockedArtifact, checks: list[str], lock: Lock) -> dict[str, Any]:
    tc = lock.toolchains[spec.target]
    maturity = spec.tactic.maturity
    return accumulator_json(spec.accumulator_bits) | {
        "tactic": spec.tactic.name,
        "artifact": spec.name,
        "file": spec.file,
        "symbol": spec.symbol,
        "text_sha256": locked.text_sha256,
        "launch": {
            "block": [spec.tactic.block, 1, 1],
            "grid": grid(spec),
            "dynamic_lds_bytes": spec.dynamic_shared,
        },
        "lds_bytes": locked.lds_bytes,
        "workspace_bytes": 0,
        "kernarg": _kernarg(spec),
        "maturity": maturity,
        "evidence": {
            "static": {"checks": sorted(checks), "toolchain": {"flavour": tc.flavour, "version": tc.version}},
            "hardware": None,
        },
    }


def skeleton(manifests: Manifests, target: str, lock: Lock) -> dict[str, Any]:
    """The table as the manifests and the lock make it, before any hardware evidence."""
    tgt = targets.get(target)
    checks = list(tgt.checks)
    order = {(t.op, t.name): i for i, t in enumerate(manifests.tactics)}
    by_contract: dict[str, list[ArtifactSpec]] = {}
    for spec in manifests.artifacts:
        if spec.target == target:
            by_contract.setdefault(spec.key, []).append(spec)
    absent: dict[str, list[NotAdmitted]] = {}
    for n in manifests.not_admitted:
        if n.target == target:
            absent.setdefault(n.key, []).append(n)
    entries = []
    for key in sorted(by_contract):
        specs = sorted(by_contract[key], key=lambda sp: order[(sp.op, sp.tactic.name)])
        first = specs[0]
        entry = {
            "contract": contract_json(first.op, dict(first.contract)),
            "key": key,
            "candidates": [candidate(sp, _locked(lock, sp.name), checks, lock) for sp in specs],
            "dispatch": None,
        }
        if key in absent:  # why a tactic of the op is no candidate here (the template's [[requires]])
            refused = sorted(absent[key], key=lambda n: order[(first.op, n.tactic)])
            entry["not_admitted"] = not_admitted_json(
                tuple(TableNotAdmitted(n.tactic, n.requirement.holds, n.requirement.why) for n in refused)
            )
        entries.append(entry)
    kind = manifests.certification[target]
    return {
        "schema": SCHEMA,
        "gpu_class": target,
        "vendor": tgt.vendor.name,
        "loader": tgt.vendor.loader,
        "certification": {
            "kind": kind,
            "note": (STATIC_NOTE if kind == "static" else UNCERTIFIED_NOTE).format(target=target),
            "runs": [],
        },
        "entries": entries,
        "fallbacks": sorted(
            (fallback_json(f) for f in manifests.fallbacks if f.gpu_class in ("", target)),
            key=lambda f: (f["op"], f.get("contract", ""), f["model"]),
        ),
    }


def _locked(lock: Lock, name: str) -> LockedArtifact:
    a = lock.artifact(name)
    assert a is not None, name  # the lock was derived from this catalog
    return a


def merge(fresh: dict[str, Any], existing: Table | None) -> tuple[dict[str, Any], list[str]]:
    """Carry hardware evidence from the existing table into a fresh skeleton where it still applies.

    A candidate keeps its certified maturity and evidence only if the existing table certified the
    same artifact with the same machine code (.text sha256) as the fresh lock; certified candidates
    keep their certified order, uncertified ones follow in tactic order; the runs their evidence refers
    to keep theirs. Returns the table and one line per voided certification (so `netra lock` can say
    what needs `netra certify` again).
    """
    if existing is None or fresh["certification"]["kind"] != "hardware":
        return fresh, []
    voided: list[str] = []
    used: set[int] = set()
    for entry in fresh["entries"]:
        old = existing.entries.get(entry["key"])
        old_by_tactic = {c.tactic: c for c in old.candidates} if old else {}
        carried, fresh_only = [], []
        for cand in entry["candidates"]:
            o = old_by_tactic.get(cand["tactic"])
            if o is None or o.hardware is None:
                fresh_only.append(cand)
                continue
            if o.artifact != cand["artifact"] or o.hardware.text_sha256 != cand["text_sha256"]:
                voided.append(
                    f"{cand['artifact']}: certified with .text {o.hardware.text_sha256[:16]}..., locked now "
                    f"{cand['text_sha256'][:16]}...: its {o.maturity} certification is void"
                )
                fresh_only.append(cand)
                continue
            hw = dict(o.evidence["hardware"])
            used.add(hw["run"])
            cand = {**cand, "maturity": o.maturity, "evidence": {**cand["evidence"], "hardware": hw}}
            assert old is not None  # o is one of its candidates
            carried.append((old.candidates.index(o), cand))
        entry["candidates"] = [c for _, c in sorted(carried, key=lambda x: x[0])] + fresh_only
        accepted = {c["tactic"] for c in entry["candidates"] if c["maturity"] == "accepted"}
        if old is not None and old.dispatch:
            if all(d.tactic in accepted for d in old.dispatch):
                entry["dispatch"] = [{"max_rows": d.max_rows, "tactic": d.tactic} for d in old.dispatch]
            else:
                voided.append(f"{entry['key']}: its row-count dispatch named a voided tactic and is dropped")
    # The runs still referred to, in their order (a run certify made stays run 0 before those it carried
    # from a reused table), renumbered past the ones no evidence refers to any more.
    number = {r: i for i, r in enumerate(sorted(used))}
    for entry in fresh["entries"]:
        for cand in entry["candidates"]:
            hw = cand["evidence"]["hardware"]
            if hw is not None:
                hw["run"] = number[hw["run"]]
    runs = [existing.runs[r] for r in sorted(used)]
    fresh["certification"]["runs"] = runs
    if runs:
        fresh["certification"]["note"] = HARDWARE_NOTE.format(target=fresh["gpu_class"])
    return fresh, voided
