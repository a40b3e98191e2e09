"""What an install ships, for `netra catalog` and `netra explain`: read from the install's release data.

A wheel install has no sources: everything here comes from netra/_data (a source checkout: its
release/ and manifests/), through the runtime's own opening path (the lock bound to build.json, each
class's table checked against the lock) plus the model manifests, each checked against its locked
sha256 before it is read. So what is listed is what the runtime would serve, and a damaged install is
refused here as the runtime refuses it, naming the file and the fix. What the files say to each other
is held too, whatever their hashes vouch for: a fallback saying a class does not build a contract that
the lock has artifacts of that class for is refused, never listed beside them. No code object is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netra.core import files
from netra.core.types import ModelFallback
from netra.errors import AlteredFileError, ContractError, MissingFileError, NetraError, UsageError
from netra.runtime import tables
from netra.runtime.installed import Install
from netra.runtime.lockfile import Lock, LockedArtifact
from netra.runtime.tables.model import Table
from netra.runtime.tables.writing import (
    contract_json,
    dispatch_json,
    kernarg_json,
    launch_json,
    not_admitted_json,
)

SCHEMA = 1
MODELS = "manifests/models/"


@dataclass(frozen=True)
class Inventory:
    install: Install
    lock: Lock
    built: dict[str, Any] | None  # build.json's code-object records (wheel installs), by file
    tables: dict[str, tables.Table]  # GPU class -> its checked table
    certified: dict[str, Table]  # GPU class -> the same table with its whole evidence records
    users: dict[str, tuple[str, ...]]  # contract key -> the models whose manifests need it
    fallbacks: tuple[dict[str, str], ...]  # every model's documented fallbacks
    models: tuple[str, ...]  # every model manifest's model name, sorted

    def artifact(self, name: str) -> LockedArtifact | None:
        return self.lock.artifact(name)


def load(inst: Install) -> Inventory:
    """Open every certified class of the install and read its model manifests; refuses damage."""
    from netra import runtime

    lock, built = runtime.installed_lock(inst)
    tabs, certified = {}, {}
    for cls in runtime.certified_classes(lock):
        tabs[cls] = runtime.open_catalog(cls, install=inst).table  # sha256 and lock cross-check
        ev_path = tables.evidence_path(cls)
        evidence = _locked_bytes(inst, lock, ev_path, f"the {cls} evidence") if lock.file(ev_path) else None
        table_path = tables.table_path(cls)
        where = str(inst.tracked(table_path))
        try:  # the table with its evidence records, as netra explain shows them
            certified[cls] = tables.read_certified(
                _locked_bytes(inst, lock, table_path, f"the {cls} table"), evidence, where,
                str(inst.tracked(ev_path)), cls,
            )  # fmt: skip
        except tables.TableError as e:
            raise tables.TableError(
                e.message, "the release is inconsistent; " + inst.reinstall, e.details
            ) from None
    users: dict[str, set[str]] = {}
    fallbacks: list[dict[str, str]] = []
    models: set[str] = set()
    contradicted: list[str] = []  # gaps the lock contradicts: the catalog would list both
    for f in sorted(lock.files_with_role("manifest"), key=lambda f: f.path):
        if f.path.startswith(MODELS) and f.path.endswith(".toml"):
            model, needs, fb, gaps = _model(inst, lock, f.path)
            models.add(model)
            for key in needs:
                users.setdefault(key, set()).add(model)
            fallbacks += fb
            contradicted += tables.gaps_against_lock(gaps, lock, str(inst.tracked(f.path)))
    for cls, t in sorted(tabs.items()):
        contradicted += tables.gaps_against_lock(t.fallbacks, lock, str(inst.tracked(tables.table_path(cls))))
    if contradicted:
        raise tables.TableError(
            f"the install's files disagree: {contradicted[0]}"
            + (f" (and {len(contradicted) - 1} more)" if len(contradicted) > 1 else ""),
            "the release is inconsistent; " + inst.reinstall,
            tuple(contradicted[1:]),
        )
    return Inventory(
        install=inst,
        lock=lock,
        built={k: v.sha256 for k, v in built.items()} if built is not None else None,
        tables=tabs,
        certified=certified,
        users={k: tuple(sorted(v)) for k, v in sorted(users.items())},
        fallbacks=tuple(sorted(fallbacks, key=lambda x: (x["model"], x["op"], x.get("contract", "")))),
        models=tuple(sorted(models)),
    )


def _locked_bytes(inst: Install, lock: Lock, lock_path: str, what: str) -> bytes:
    """A tracked file of the install, refused unless its sha256 is the locked one."""
    from netra.core.hashing import sha256_bytes

    locked = lock.file(lock_path)
    path = inst.tracked(lock_path)
    assert locked is not None and path is not None
    fix = inst.restore(lock_path)
    try:
        data = files.read_path(path, limit=files.SOURCE_LIMIT, what=what)
    except MissingFileError:
        raise MissingFileError(f"{path}: {what} of this install is missing", fix) from None
    except NetraError as e:
        raise AlteredFileError(e.message, fix) from None
    got = sha256_bytes(data)
    if got != locked.sha256:
        raise AlteredFileError(f"{path}: {what} is altered: sha256 {got}, locked {locked.sha256}", fix)
    return data


def _model(
    inst: Install, lock: Lock, lock_path: str
) -> tuple[str, list[str], list[dict[str, str]], tuple[ModelFallback, ...]]:
    """A model manifest's name, the contract keys it needs, its documented fallbacks (as reported, and
    as read)."""
    from netra.core import models
    from netra.core import toml as _toml
    from netra.core.ops import contract_key
    from netra.errors import ManifestError

    where = str(inst.tracked(lock_path))
    data = _locked_bytes(inst, lock, lock_path, "the model manifest")
    try:
        m = models.parse(_toml.loads(data.decode()), where)
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as e:
        raise ManifestError(f"{where}: not a readable model manifest ({e})", inst.reinstall) from None
    needs = [contract_key(op, params) for op, params in m.needs]
    fb = []
    for f in m.fallbacks:
        d = {"model": f.model, "op": f.op, "use": f.use, "reason": f.reason}
        if f.gpu_class:
            d.update(gpu_class=f.gpu_class, contract=f.contract)
        fb.append(d)
    return m.model, needs, fb, m.fallbacks


# -- the catalog ---------------------------------------------------------------------------------------


def catalog(inv: Inventory, *, gpu_class: str | None = None, model: str | None = None) -> dict[str, Any]:
    """`netra catalog --json`: every artifact of every certified class (netra/schemas/catalog.schema.json)."""
    classes = {}
    rows = []
    for cls, t in sorted(inv.tables.items()):
        if gpu_class is not None and cls != gpu_class:
            continue
        classes[cls] = {
            "vendor": t.vendor,
            "loader": t.loader,
            "certification": t.certification,
            "contracts": len(t.entries),
            "artifacts": len(t.candidates()),
            "maturity": t.maturity_counts(),
            "toolchain": str(inv.lock.toolchains[cls]) if cls in inv.lock.toolchains else None,
        }
        for key, e in sorted(t.entries.items()):
            users = list(inv.users.get(key, ()))
            if model is not None and model not in users:
                continue
            for rank, c in enumerate(e.candidates, 1):
                rows.append({
                    "artifact": c.artifact, "gpu_class": cls, "contract": key, "op": e.op,
                    "params": dict(e.params), "tactic": c.tactic, "maturity": c.maturity, "rank": rank,
                    "users": users, "file": c.file,
                })  # fmt: skip
    rows.sort(key=lambda r: (r["gpu_class"], r["artifact"]))
    fallbacks = [  # a gap of one class is that class's; a model-wide one (no class) is every class's
        f
        for f in inv.fallbacks
        if (model is None or f["model"] == model) and gpu_class in (None, f.get("gpu_class", gpu_class))
    ]
    return {
        "schema": SCHEMA,
        "command": "catalog",
        "install": _install(inv.install),
        "classes": classes,
        "artifacts": rows,
        "fallbacks": fallbacks,
    }


def _install(inst: Install) -> dict[str, Any]:
    return {"kind": inst.kind, "root": str(inst.root), "version": inst.version}


# -- explain -------------------------------------------------------------------------------------------


def explain(inv: Inventory, query: str, *, gpu_class: str | None = None) -> dict[str, Any]:
    """`netra explain --json`: everything the install records about an artifact or a contract."""
    from netra.runtime import Contract

    query = query.strip()
    art = inv.artifact(query)
    matches = []
    if art is not None:
        kind = "artifact"
        if gpu_class is not None and art.target != gpu_class:
            raise ContractError(
                f"artifact {query} is of GPU class {art.target}, not {gpu_class}",
                f"drop --gpu-class {gpu_class}",
            )
        for key, e in inv.tables[art.target].entries.items():
            if any(c.artifact == query for c in e.candidates):
                matches.append(_entry(inv, art.target, key, only=query))
    else:
        kind = "contract"
        try:
            key = Contract.parse(query).key
        except NetraError:
            key = None
        for cls, t in sorted(inv.tables.items()):
            if key is not None and key in t.entries and gpu_class in (None, cls):
                matches.append(_entry(inv, cls, key))
    not_built = []
    if kind == "contract":
        not_built = [
            {"gpu_class": f["gpu_class"], "model": f["model"], "reason": f["reason"]}
            for f in inv.fallbacks
            if key is not None and f.get("contract") == key and gpu_class in (None, f["gpu_class"])
        ]
    if not matches and not_built:
        gap = not_built[0]
        raise ContractError(
            f"{key} is not built for {gap['gpu_class']}: {gap['reason']} (the {gap['model']} manifest)",
            "the caller's own implementation serves it there; `netra catalog` lists what is built",
        )
    if not matches:
        raise _unknown(inv, query, gpu_class)
    out: dict[str, Any] = {
        "schema": SCHEMA,
        "command": "explain",
        "install": _install(inv.install),
        "query": query,
        "kind": kind,
        "matches": matches,
    }
    if not_built:
        out["not_built"] = not_built
    return out


def _unknown(inv: Inventory, query: str, gpu_class: str | None) -> NetraError:
    """Why nothing matched, in one line: the name's other class, its family's contracts, a misspelt
    family (a usage error), or the closest names this install serves (never the name typed)."""
    from netra.cli import choices
    from netra.core.ops import FAMILIES
    from netra.runtime import Contract

    op = query.partition("(")[0].strip()
    # Quoted for an op that is no family only: a family's fallbacks are of shapes (a class's gap of one
    # contract, a model-wide one of a shape its tactics cannot build), none of them the one typed here.
    documented = sorted(
        {f"{f['model']}: {f['reason']}" for f in inv.fallbacks if f["op"] == op and op not in FAMILIES}
    )
    served = {cls: set(t.entries) for cls, t in inv.tables.items()}
    try:
        parsed: Contract | None = Contract.parse(query)
    except NetraError as e:
        if "(" in query:  # a contract, typed malformed: the parser's own reason, as a usage error (exit 2)
            return UsageError(e.message, e.hint)
        parsed = None
    key = parsed.key if parsed is not None else query
    elsewhere = sorted(cls for cls, keys in served.items() if key in keys and cls != gpu_class)
    if gpu_class is not None and elsewhere:
        return ContractError(
            f"contract {key} is served on GPU class {', '.join(elsewhere)}, not on {gpu_class}",
            f"drop --gpu-class {gpu_class}, or pass --gpu-class {elsewhere[0]}",
        )
    # A family's contract typed wrong is a usage error whatever the manifests document for the op (exit 2,
    # one line).
    if op in FAMILIES and "(" not in query:
        keys = sorted({k for cls, keys in served.items() if gpu_class in (None, cls) for k in keys
                       if k.startswith(op + "(")})  # fmt: skip
        return UsageError(
            f"{query!r} is an op family, not a contract: name one of its contracts ({', '.join(FAMILIES[op].params)})",
            ("its contracts here: " + ", ".join(keys))
            if keys
            else "this install serves none of its contracts",
        )
    if parsed is not None and parsed.op not in FAMILIES:
        if not documented:  # an op no netra has that a manifest documents is a refusal quoting it, below
            return choices.unknown("op family", parsed.op, FAMILIES, where=f" in {query!r}")
    elif parsed is not None and set(parsed.params) != set(FAMILIES[parsed.op].params):
        got = ", ".join(sorted(parsed.params)) or "none"
        return UsageError(
            f"{query!r}: op {parsed.op} takes parameters {', '.join(FAMILIES[parsed.op].params)}, got {got}",
            "e.g. " + next((k for keys in served.values() for k in sorted(keys) if k.startswith(parsed.op + "(")),
                           f"{parsed.op}(" + ",".join(f"{p}=..." for p in FAMILIES[parsed.op].params) + ")"),
        )  # fmt: skip
    names = {a.name for a in inv.lock.artifacts if gpu_class in (None, a.target)}
    names |= {k for cls, keys in served.items() if gpu_class in (None, cls) for k in keys}
    where = (
        f"GPU class {gpu_class}"
        if gpu_class
        else "any certified class (" + ", ".join(sorted(inv.tables)) + ")"
    )
    msg = f"{query!r} is neither an artifact nor a contract that this install serves on {where}"
    if documented:
        msg += f"; the model manifests document op {op} as a fallback"
    # a family typed in another case ('RMSNORM') is offered too: explain then lists its contracts
    hint = (
        choices.did_you_mean(key, names | set(FAMILIES)) + "`netra catalog` lists every artifact and contract"
    )
    return ContractError(msg, hint, tuple(f"fallback {d}" for d in documented))


def _entry(inv: Inventory, cls: str, key: str, only: str | None = None) -> dict[str, Any]:
    from netra.runtime import DEFAULT_POLICY, choose

    t = inv.tables[cls]
    e = t.entries[key]
    whole = inv.certified[cls].entries[key]
    by_artifact = {c.artifact: c for c in whole.candidates}
    default = choose(e.candidates, DEFAULT_POLICY)
    cands = []
    for rank, c in enumerate(e.candidates, 1):
        if only is not None and c.artifact != only:
            continue
        a = inv.lock.artifact(c.artifact)
        assert a is not None  # the runtime cross-checked the table with the lock
        wc = by_artifact[c.artifact]
        cands.append({
            "artifact": c.artifact, "tactic": c.tactic, "maturity": c.maturity, "rank": rank,
            "served_by_default": default is not None and default.artifact == c.artifact,
            "symbol": c.symbol, "file": c.file, "template": a.template,
            "launch": launch_json(c.launch), "lds_bytes": c.lds_bytes, "workspace_bytes": c.workspace_bytes,
            "max_threads": a.max_threads, "kernarg": kernarg_json(c.kernarg), "definitions": dict(a.definitions),
            "facts": dict(a.facts), "accumulator_bits": c.accumulator_bits, "evidence": wc.evidence,
            "hashes": {
                "text_sha256": a.text_sha256, "launch_sha256": a.launch_sha256, "code_sha256": a.code_sha256,
                "file_sha256": inv.built.get(c.file) if inv.built is not None else None,
            },
        })  # fmt: skip
    return {
        "gpu_class": cls,
        "vendor": t.vendor,
        "loader": t.loader,
        "certification": t.certification,
        "toolchain": str(inv.lock.toolchains[cls]) if cls in inv.lock.toolchains else None,
        "key": key,
        "contract": contract_json(e.op, e.params),
        "users": list(inv.users.get(key, ())),
        "default_policy": DEFAULT_POLICY,
        "served_by_default": default.artifact if default is not None else None,
        "dispatch": dispatch_json(e.dispatch),
        "candidates": cands,
        "not_admitted": not_admitted_json(e.not_admitted),
    }
