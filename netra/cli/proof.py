"""An install proven file by file: the checks behind `netra doctor` (netra.cli.doctor reports them).

Every file the lock implies is checked: tables and manifests by sha256 against the lock, each code
object twice (whole file against build.json, machine code .text against the lock), the lock against
build.json's binding and the wheel's RECORD. Every missing or altered file is listed; nothing stops at
the first problem. What verify returns is the install half of doctor's report.

What each file must be is netra.runtime.verifier's to say (its findings, rendered here as the report's
`checks`, `invalid_tables` and `disagreements`): the wheel gate and the catalog ask the same functions,
so the three cannot disagree on a file. This module reads the installed tree and renders.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netra.core import interrupts
from netra.core.text import integer
from netra.errors import NetraError
from netra.runtime import installed, layout, tables, verifier
from netra.runtime.installed import Install
from netra.runtime.lockfile import Lock, LockedArtifact

_PARALLEL_FILES = 64  # below these, threads cost more than they save
_PARALLEL_BYTES = 4 << 20


@dataclass(frozen=True)
class Item:
    """One file to check: where it is, what it is, and what the lock (or build.json) expects of it."""

    root: str  # the install root
    name: str  # as the report names it: relative to the install root, posix
    kind: str  # lock, build_record, table, manifest, source, code_object
    sha256: str | None  # whole-file sha256 expected
    expected_from: str  # "lock", "build.json"
    artifact: LockedArtifact | None = None  # for code objects: what the lock says of it
    same_toolchain: bool = False  # a code object built (build.json says) with the toolchain the lock records

    @property
    def path(self) -> str:
        return f"{self.root}/{self.name}"


def _check(item: Item, below: Any) -> tuple[int, dict[str, Any] | None, bytes | None]:
    """(bytes read, None when intact or the problem as report data, a table's bytes when intact).
    Reads the file once, following no link below the install's root (files.Below: files.read_below,
    each folder opened once); a table is read again by nobody."""
    from netra.core import files
    from netra.errors import MissingFileError

    try:
        data = below.read_rel(item.name, limit=files.CODE_OBJECT_LIMIT, what=item.name)
    except MissingFileError:
        return (
            0,
            {"path": item.name, "kind": item.kind, "problem": "missing", "expected": _expected(item)},
            None,
        )
    except NetraError as e:
        return 0, {"path": item.name, "kind": item.kind, "problem": "unreadable", "detail": e.message}, None
    a = item.artifact
    if a is not None:
        found = verifier.code_object(
            item.name, data, a, recorded=item.sha256, same_toolchain=item.same_toolchain
        )
    else:
        found = verifier.locked_file(item.name, item.kind, data, item.sha256, item.expected_from)
    out = _checks(found)
    if not out:
        return len(data), None, data if item.kind in _KEPT else None
    return len(data), {"path": item.name, "kind": item.kind, "problem": "altered", "checks": out}, None


_KEPT = ("table", "evidence", "manifest")  # intact files read again, for what they say to each other


def _checks(found: list[verifier.Finding]) -> dict[str, Any]:
    """The verifier's findings on one file as the report's `checks`: {check: {expected, found, from}}, or
    the reader's message for a file that could not be read as what it is."""
    return {
        f.check: f.detail
        if f.check == "parse"
        else {"expected": f.expected, "found": f.found, "from": f.source}
        for f in found
    }


def _absent(e: NetraError) -> str:
    """A file that could not be read: missing, or there but unreadable (a link, a FIFO, a folder...)."""
    from netra.errors import MissingFileError

    return "missing" if isinstance(e, MissingFileError) else "unreadable"


def _expected(item: Item) -> dict[str, str]:
    e = {}
    if item.sha256:
        e["sha256"] = item.sha256
    if item.artifact is not None:
        e["text_sha256"] = item.artifact.text_sha256
    return e


@dataclass(frozen=True)
class RecordEntry:
    """One RECORD line of the installed wheel."""

    path: str  # as RECORD names it, relative to site-packages
    sha256: str | None  # hex; None when RECORD carries no hash (bytecode, INSTALLER, ...)
    size: int | None
    site: str  # the folder RECORD's paths are relative to

    @property
    def file(self) -> Path:
        """Where it is on disk."""
        return Path(self.site, self.path)


def wheel_record(inst: Install) -> list[RecordEntry] | None:
    """The installed distribution's RECORD, None when this is not a recorded wheel install; [] when the
    dist-info has no RECORD. Read directly (installed.DistInfo), as importlib.metadata would."""
    if inst.kind != "wheel" or inst.distribution is None:
        return None
    info = installed.DistInfo(Path(inst.distribution.dist_info))
    site = str(info.folder.parent)
    return [
        RecordEntry(path, installed.record_sha256(h), integer(size), site) for path, h, size in info.record()
    ]


def _record_digest(inst: Install, record: list[RecordEntry] | None) -> dict[str, str] | None:
    """sha256 (hex) of netra/_data files per the wheel's RECORD, when this is a recorded wheel install."""
    if not record:
        return None
    prefix = layout.PACKAGE_DATA + "/"
    return {e.path[len(prefix) :]: e.sha256 for e in record if e.path.startswith(prefix) and e.sha256}


_PACKAGE = layout.PACKAGE_DATA.split("/")[0]  # the Python package, "netra"


def _package_files(record: list[RecordEntry] | None) -> dict[str, Any]:
    """Every other file RECORD lists with a hash (the Python package, its metadata, the console script),
    held to RECORD: the code that reads the release data is as installed too."""
    from netra.core import files

    out: dict[str, Any] = {"checked": 0, "bytes": 0, "missing": [], "altered": []}
    below: files.Below | None = None
    data_prefix = layout.PACKAGE_DATA + "/"
    try:
        for e in record or ():
            if e.sha256 is None or e.path.startswith(data_prefix):
                continue
            out["checked"] += 1
            parts = e.path.split("/")
            try:
                if len(parts) > 1 and parts[0] == _PACKAGE and ".." not in parts:  # no link below netra/
                    if below is None:
                        below = files.Below(e.file.parents[len(parts) - 2], "package")
                    data = below.read_rel(
                        e.path[len(_PACKAGE) + 1 :], limit=files.CODE_OBJECT_LIMIT, what=e.path
                    )
                else:  # the metadata and the console script, as they lie
                    data = files.read_path(e.file, limit=files.CODE_OBJECT_LIMIT, what=e.path)
            except NetraError:
                out["missing" if not os.path.lexists(e.file) else "altered"].append(e.path)
                continue
            out["bytes"] += len(data)
            if hashlib.sha256(data).hexdigest() != e.sha256:
                out["altered"].append(e.path)
    finally:
        if below is not None:
            below.__exit__()
    return out


class _Report:
    def __init__(self, inst: Install) -> None:
        self.inst = inst
        self.problems: list[str] = []
        self.fixes: list[str] = []  # the commands to run, once each, in the order to run them
        self.by_fix: dict[str | None, tuple[str, list[str]]] = {}  # fix -> (its note, its problems, no fix)
        self._rank: dict[str, int] = {}
        self.vouched = False  # build.json is as RECORD holds it and binds the installed lock's bytes
        self.tables: dict[str, tables.Table] = {}  # intact tables that follow the rules, by class
        self.record = wheel_record(inst)
        self.digest = _record_digest(inst, self.record)
        self.files: dict[str, Any] = {
            "checked": 0,
            "bytes": 0,
            "missing": [],
            "altered": [],
            "unexpected": [],
        }

    def fail(self, entry: dict[str, Any]) -> None:
        """One file's problem; a file found altered by several checks (a flipped byte in the lock fails its
        RECORD hash, its binding to build.json and its parse) is one altered file with every check."""
        bucket = "missing" if entry["problem"] == "missing" else "altered"
        if bucket == "altered" and "checks" in entry:
            for seen in self.files["altered"]:
                if (seen["path"], seen["kind"], seen["problem"]) == (
                    entry["path"],
                    entry["kind"],
                    entry["problem"],
                ):
                    seen.setdefault("checks", {}).update(entry["checks"])
                    return
        self.files[bucket].append(entry)

    def problem(self, text: str, fix: tuple[str, str] | str | None) -> None:
        """One problem line with its fix: a command (collected, once, into `fixes`) and a note."""
        if fix is None:
            self.problems.append(text)
            self.by_fix.setdefault(None, ("", []))[1].append(text)
            return
        cmd, note = (fix, "") if isinstance(fix, str) else fix
        self.problems.append(f"{text}; fix: {cmd}" + (f" ({note})" if note else ""))
        self.by_fix.setdefault(cmd, (note, []))[1].append(text)
        if cmd in self.fixes:
            return
        # Stray files first; sources restored before the code objects built from them (sort is stable).
        built = self.inst.kind != "wheel" and cmd == self.inst.rebuild
        self._rank[cmd] = 0 if cmd.startswith("rm -- ") else 2 if built else 1
        self.fixes.append(cmd)
        self.fixes.sort(key=self._rank.__getitem__)

    def fix_for(self, rel: str, kind: str) -> tuple[str, str]:
        """How to restore one missing or altered file (relative to the install root), from the records."""
        inst = self.inst
        if inst.kind != "wheel":
            return (inst.rebuild, "") if kind == "code_object" else inst.restore_command(rel)
        if self._as_installed(rel):
            return _not_gated(inst)
        return inst.reinstall, ""

    def _as_installed(self, rel: str) -> bool:
        """The file is exactly what the wheel installed (its RECORD hash), or the wheel never carried it:
        then the wheel itself is wrong, and reinstalling it would change nothing."""
        if not self.record or self.digest is None:
            return False  # no RECORD to tell: a reinstall is the fix
        want = self.digest.get(rel)
        if want is None:  # RECORD has no line for it: the wheel never carried it, unless the file is there
            return not (self.inst.root / rel).exists()
        from netra.core import files

        try:  # a link in its place is not what the wheel installed, whatever it points to
            data = files.read_below(
                self.inst.root, self.inst.root / rel, limit=files.CODE_OBJECT_LIMIT, what=rel
            )
        except NetraError:
            return False
        return hashlib.sha256(data).hexdigest() == want


def _not_gated(inst: Install) -> tuple[str, str]:
    """The fix when the installed wheel itself does not match its lock: install one that passed the gate."""
    import shlex
    import sys

    spec = f"{installed.DISTRIBUTION}=={inst.version}"
    d = inst.distribution
    cmd = (
        d.reinstall(spec)
        if d is not None
        else (f"{shlex.quote(sys.executable)} -m pip install --force-reinstall --no-deps {spec}")
    )
    where = f" ({d.describe()})" if d is not None else ""
    return cmd, (
        f"this file is as the installed wheel{where} carries it, so that wheel did not pass the release "
        f"gate and reinstalling it changes nothing: install a release built by `python -m build` or "
        f"tools/release; if the index's {spec} is this same wheel, report it at {installed.ISSUES}"
    )


def _items(inst: Install, lock: Lock, record: Any) -> list[Item]:
    """Every file the lock implies for this install: layout.members for a wheel, the tree for a checkout."""
    items: list[Item] = []
    root = str(inst.root)
    if inst.kind == "wheel":
        code = record.code_objects if record is not None else {}
        built = record.toolchains if record is not None else {}
        for m in layout.members(lock):
            if m.kind in ("lock", "build_record"):
                continue  # checked by binding, before everything else
            if m.kind == "code_object":
                rec = code.get(m.data_path)
                a = lock.artifact(m.origin)
                same = a is not None and built.get(a.target) == lock.toolchains.get(a.target)
                items.append(Item(root, m.data_path, m.kind, rec.sha256 if rec else None,
                                  "build.json", a, same))  # fmt: skip
            else:
                items.append(Item(root, m.data_path, m.kind, m.sha256, "lock"))
        return items
    for f in lock.files:
        items.append(Item(root, f.path, f.role, f.sha256, "lock"))
    for a in lock.artifacts:
        rel = f"{installed.EDITABLE_BUILD}/{a.file}"
        items.append(Item(root, rel, "code_object", None, "lock", a))
    return sorted(items, key=lambda i: i.name)


def verify(inst: Install) -> dict[str, Any]:
    """Check every file of the install; the report's lock/files/problems parts. Never raises for damage."""
    from netra.core import files
    from netra.runtime import lockfile as lock_mod

    rep = _Report(inst)
    lock_info: dict[str, Any] = {"path": str(inst.lock_file), "sha256": None}
    lock_name = _name(inst, inst.lock_file)
    try:
        lock_raw = files.read_below(inst.root, inst.lock_file, limit=files.LOCK_LIMIT, what=lock_name)
    except NetraError as e:
        rep.fail(
            {"path": lock_name, "kind": "lock", "problem": _absent(e), "expected": {}, "detail": e.message}
        )
        rep.problem(
            f"{inst.lock_file}: the release lock is missing or unreadable ({e.message})",
            rep.fix_for(lock_name, "lock"),
        )
        return _verified(rep, lock_info, None)
    lock_sha = hashlib.sha256(lock_raw).hexdigest()
    lock_info["sha256"] = lock_sha
    rep.files["checked"] += 1
    rep.files["bytes"] += len(lock_raw)
    lock: Lock | None = None
    record = None
    if inst.build_record is not None:
        # Hash first: build.json binds the lock's sha256 and carries its content, read through the
        # lock's schema. Lock bytes that hash to what the gated build recorded are those bytes: the
        # TOML need not be parsed again to be trusted (tomllib is pure Python, the slowest step here).
        record = _check_build_record(inst, lock_raw, rep, lock_info)
        if record is not None:
            lock = record.lock
    if lock is None:  # no build record (a checkout), or one that does not bind these bytes: parse them
        try:
            lock = lock_mod.loads(lock_raw, lock_name)
        except NetraError as e:
            rep.fail(
                {"path": lock_name, "kind": "lock", "problem": "altered", "checks": {"parse": e.message}}
            )
    if lock is None:
        _problems(inst, rep)
        return _verified(rep, lock_info, None)
    lock_info.update(
        toolchain=lock.describe_toolchains(), artifacts=len(lock.artifacts), tracked_files=len(lock.files)
    )
    items = _items(inst, lock, record)
    with files.Below(inst.root, "install") as below:
        if len(items) >= _PARALLEL_FILES and _total_size(items, rep.record) >= _PARALLEL_BYTES:
            # hashlib releases the GIL on large buffers: a big install hashes on every core.
            from concurrent.futures import ThreadPoolExecutor  # imports logging: only when worth it

            with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
                results = interrupts.pool_map(pool, lambda it: _check(it, below), items)
        else:
            results = [_check(it, below) for it in items]
    intact: dict[str, bytes] = {}  # table or evidence name -> its bytes, which hash to what the lock records
    for it, (size, problem, data) in zip(items, results, strict=True):
        rep.files["checked"] += 1
        rep.files["bytes"] += size
        if problem is not None:
            rep.fail(problem)
        elif data is not None:
            intact[it.name] = data
    if inst.kind == "wheel":
        known = {it.name for it in items} | {"manifest.lock", layout.BUILD_RECORD}
        rep.files["unexpected"] = [rel for rel in _walk(str(inst.root)) if rel not in known]
    rep.files["invalid_tables"], rep.files["disagreements"] = _agreement(inst, lock, intact, rep)
    _problems(inst, rep)
    return _verified(rep, lock_info, lock)


def _verified(rep: _Report, lock_info: dict[str, Any], lock: Lock | None) -> dict[str, Any]:
    """verify()'s result; the package files are held to RECORD whatever happened to the data."""
    pkg = _package_files(rep.record)
    for path in pkg["missing"]:
        rep.problem(f"missing package file {path} (listed in RECORD)", rep.inst.reinstall)
    for path in pkg["altered"]:
        rep.problem(f"altered package file {path}: sha256 differs from RECORD", rep.inst.reinstall)
    return {"lock": lock_info, "files": rep.files, "package_files": pkg, "problems": rep.problems,
            "fixes": rep.fixes, "causes": causes(rep.fixes, rep.by_fix), "lock_obj": lock,
            "tables": rep.tables}  # fmt: skip


def causes(fixes: list[str], by_fix: dict[str | None, tuple[str, list[str]]]) -> list[dict[str, Any]]:
    """The problems grouped by the fix that clears them (one cause, one fix line), in the fixes' order."""
    order: list[str | None] = [*fixes, None]
    return [{"fix": f, "note": by_fix[f][0], "problems": list(by_fix[f][1])} for f in order if f in by_fix]


def _agreement(
    inst: Install, lock: Lock, intact: dict[str, bytes], rep: _Report
) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """What the intact files say to each other (netra.runtime.verifier.agreement, as the wheel gate
    asks it): every table with its evidence file to its rules and to the lock, and every documented gap
    against the lock, whatever the hashes vouch for (a resealed install recomputes them all). When RECORD
    vouches for build.json (and so for the lock), a table is not read through its format again."""
    where = _data_paths(inst, lock)
    by_name = {name: path for path, name in where.items() if name is not None}
    said = verifier.agreement(
        lock,
        {by_name[n]: data for n, data in intact.items() if n in by_name},
        lambda path: where.get(path) or _data_path(inst, path),
        vouched=rep.vouched,
    )
    rep.tables.update(said.tables)
    invalid = [
        {"path": name, "gpu_class": tables.gpu_class_of(by_name[name]) or "", "problem": found[0].detail,
         "count": str(len(found))}
        for name, found in said.invalid.items()
    ]  # fmt: skip
    return invalid, [{"path": f.member, "problem": f.detail} for f in said.disagreements]


def _data_paths(inst: Install, lock: Lock) -> dict[str, str | None]:
    """Each locked file's name in this install's report (its data path in a wheel)."""
    return {f.path: layout.data_path(f.path) if inst.kind == "wheel" else f.path for f in lock.files}


def _data_path(inst: Install, path: str) -> str:
    return (layout.data_path(path) or path) if inst.kind == "wheel" else path


_MODELS = verifier.MODELS


def _problems(inst: Install, rep: _Report) -> None:
    import shlex

    for m in rep.files["missing"]:
        rep.problem(f"missing {m['kind']} {m['path']}", rep.fix_for(m["path"], m["kind"]))
    for a in rep.files["altered"]:
        what = ", ".join(
            f"{k} {v['found']} (expected {v['expected']} from {v['from']})"
            if isinstance(v, dict)
            else f"{k}: {v}"
            for k, v in a.get("checks", {}).items()
        ) or a.get("detail", "")
        rep.problem(f"{a['problem']} {a['kind']} {a['path']}: {what}", rep.fix_for(a["path"], a["kind"]))
    for u in rep.files["unexpected"]:
        # pip removes only what RECORD lists: a reinstall leaves a stray file where it is.
        rep.problem(f"unexpected file {u} (not in the lock)", f"rm -- {shlex.quote(str(inst.root / u))}")
    for t in rep.files.get("invalid_tables", []):
        # Its bytes are the locked ones: the release itself is inconsistent (a source tree: regenerate).
        fix = _not_gated(inst) if inst.kind == "wheel" else inst.restore_command(t["path"])
        rep.problem(f"invalid table {t['path']} ({t['gpu_class']}): {t['problem']}", fix)
    for d in rep.files.get("disagreements", []):
        fix = _not_gated(inst) if inst.kind == "wheel" else inst.restore_command(d["path"])
        rep.problem(f"the install's files disagree: {d['problem']}", fix)


def _total_size(items: list[Item], record: list[RecordEntry] | None) -> int:
    """About how many bytes the items are (only to choose whether to hash on threads): RECORD's sizes
    where it has them, else what the files are now."""
    prefix = layout.PACKAGE_DATA + "/"
    sizes = {
        e.path[len(prefix) :]: e.size
        for e in record or ()
        if e.size is not None and e.path.startswith(prefix)
    }
    total = 0
    for it in items:
        size = sizes.get(it.name)
        if size is None:
            with contextlib.suppress(OSError):
                size = os.stat(it.path).st_size
        total += size or 0
    return total


def _walk(root: str) -> list[str]:
    """Every file under root, relative with forward slashes, bytecode caches skipped."""
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        rel = os.path.relpath(d, root).replace(os.sep, "/")
        out += [f if rel == "." else f"{rel}/{f}" for f in sorted(names)]
    return out


def _name(inst: Install, p: Path) -> str:
    try:
        return p.relative_to(inst.root).as_posix()
    except ValueError:
        return str(p)


def _check_build_record(inst: Install, lock_raw: bytes, rep: _Report, lock_info: dict[str, Any]) -> Any:
    """build.json read whole (layout.read_record: its own hash, its schema, its lock copy, its binding to
    these lock bytes by sha256) and held to the wheel's RECORD. None when it cannot be trusted."""
    from netra.core import files

    path = inst.build_record
    assert path is not None
    try:
        raw = files.read_below(inst.root, path, limit=files.LOCK_LIMIT, what=layout.BUILD_RECORD)
    except NetraError as e:
        rep.fail(
            {
                "path": layout.BUILD_RECORD,
                "kind": "build_record",
                "problem": _absent(e),
                "expected": {},
                "detail": e.message,
            }
        )
        return None
    rep.files["checked"] += 1
    rep.files["bytes"] += len(raw)
    record = None
    lock_sha = hashlib.sha256(lock_raw).hexdigest()
    try:
        # hash first: bytes the wheel's RECORD vouches for need not go through the schemas again
        vouched = (
            rep.digest is not None and rep.digest.get(layout.BUILD_RECORD) == hashlib.sha256(raw).hexdigest()
        )
        record = layout.read_record(
            raw, lock_raw, layout.BUILD_RECORD, "manifest.lock", inst.reinstall, vouched=vouched
        )
        rep.vouched = vouched
        lock_info["bound_to_build_record"] = True
    except NetraError as e:
        bound = "disagree: the build record was made for lock" in e.message
        lock_info["bound_to_build_record"] = not bound and None
        who = "manifest.lock" if bound else layout.BUILD_RECORD
        rep.fail({"path": who, "kind": "lock" if bound else "build_record", "problem": "altered",
                  "checks": {"build_record": e.message}})  # fmt: skip
    digest = rep.digest
    lock_info["record"] = "absent" if digest is None else "match"
    if digest is not None:
        for name, have in (
            ("manifest.lock", lock_sha),
            (layout.BUILD_RECORD, hashlib.sha256(raw).hexdigest()),
        ):
            want = digest.get(name)
            if want is None:  # the file is there (its bytes were read): RECORD itself lost its line
                lock_info["record"] = "mismatch"
                rep.problem(f"RECORD lists no sha256 for {name}: the install's RECORD is damaged, not the file",
                            rep.inst.reinstall)  # fmt: skip
            elif want != have:
                lock_info["record"] = "mismatch"
                rep.fail({"path": name, "kind": "lock" if name == "manifest.lock" else "build_record",
                          "problem": "altered", "checks": {"sha256": {"expected": want, "found": have, "from": "RECORD"}}})  # fmt: skip
    return record
