"""`netra doctor`: prove this install in one command, and say what this host can run.

Every file the lock implies is checked: tables and manifests by sha256 against the lock, each code
object twice (whole file against build.json, machine code .text against the lock), the lock against
build.json's binding and the wheel's RECORD. Every missing or altered file is listed; nothing stops at
the first problem. Then the host: GPUs and their classes, whether this install certifies them (with
counts per maturity), and which GPU runtime libraries exist (found by looking, not loading).
The report is plain data (schema: docs/doctor.md, netra/schemas/doctor.schema.json).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netra import __version__, gpus, installed, layout, libs, tables
from netra.errors import NetraError
from netra.installed import Install
from netra.lock import Lock, LockedArtifact

SCHEMA = 1
_PARALLEL_FILES = 64  # below these, threads cost more than they save
_PARALLEL_BYTES = 4 << 20


@dataclass(frozen=True)
class Item:
    """One file to check: where it is, what it is, and what the lock (or build.json) expects of it."""

    path: Path
    name: str  # as the report names it: relative to the install root
    kind: str  # lock, build_record, table, manifest, source, code_object
    sha256: str | None  # whole-file sha256 expected
    expected_from: str  # "lock", "build.json"
    artifact: LockedArtifact | None = None  # for code objects: what the lock says of it


def _check(item: Item) -> tuple[int, dict[str, Any] | None]:
    """(bytes read, None when intact or the problem as report data). Reads the file once."""
    from netra import files
    from netra.errors import MissingFileError

    try:
        data = files.read_path(item.path, limit=files.CODE_OBJECT_LIMIT, what=item.name)
    except MissingFileError:
        return 0, {"path": item.name, "kind": item.kind, "problem": "missing", "expected": _expected(item)}
    except NetraError as e:
        return 0, {"path": item.name, "kind": item.kind, "problem": "unreadable", "detail": e.message}
    out: dict[str, Any] = {}
    got = hashlib.sha256(data).hexdigest()
    if item.sha256 is not None and got != item.sha256:
        out["sha256"] = {"expected": item.sha256, "found": got, "from": item.expected_from}
    a = item.artifact
    if a is not None and got != a.code_sha256:
        # Not the exact bytes `netra lock` examined (another toolchain built it): hold its machine
        # code and launch data to the lock.
        from netra import targets

        tgt = targets.get(a.target)
        try:
            text = tgt.text_sha256(data, a.name, item.name)
            if text != a.text_sha256:
                out["text_sha256"] = {"expected": a.text_sha256, "found": text, "from": "lock"}
            else:
                launch = tgt.launch_digest(data, a.name, item.name)
                if launch != a.launch_sha256:
                    out["launch_sha256"] = {"expected": a.launch_sha256, "found": launch, "from": "lock"}
        except NetraError as e:
            out["parse"] = e.message
    if not out:
        return len(data), None
    return len(data), {"path": item.name, "kind": item.kind, "problem": "altered", "checks": out}


def _expected(item: Item) -> dict[str, str]:
    e = {}
    if item.sha256:
        e["sha256"] = item.sha256
    if item.artifact is not None:
        e["text_sha256"] = item.artifact.text_sha256
    return e


def _record_digest(inst: Install) -> dict[str, str] | None:
    """sha256 (hex) of netra/_data files per the wheel's RECORD, when this is a pip-installed wheel."""
    import base64

    site = inst.root.parent.parent
    for rec in sorted(site.glob("netra_kernel-*.dist-info/RECORD")):
        out: dict[str, str] = {}
        try:
            text = rec.read_text()
        except (OSError, UnicodeDecodeError):
            return {}
        for line in text.splitlines():
            path, _, rest = line.partition(",")
            digest = rest.partition(",")[0]
            if path.startswith(layout.PACKAGE_DATA + "/") and digest.startswith("sha256="):
                b64 = digest[len("sha256=") :]
                try:
                    raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
                except ValueError:
                    continue
                out[path[len(layout.PACKAGE_DATA) + 1 :]] = raw.hex()
        return out
    return None


class _Report:
    def __init__(self, inst: Install) -> None:
        self.inst = inst
        self.problems: list[str] = []
        self.files: dict[str, Any] = {
            "checked": 0,
            "bytes": 0,
            "missing": [],
            "altered": [],
            "unexpected": [],
        }

    def fail(self, entry: dict[str, Any]) -> None:
        bucket = "missing" if entry["problem"] == "missing" else "altered"
        self.files[bucket].append(entry)


def _items(inst: Install, lock: Lock, record: Any) -> list[Item]:
    """Every file the lock implies for this install: layout.members for a wheel, the tree for a checkout."""
    items: list[Item] = []
    if inst.kind == "wheel":
        code = record.code_objects if record is not None else {}
        for m in layout.members(lock):
            if m.kind in ("lock", "build_record"):
                continue  # checked by binding, before everything else
            if m.kind == "code_object":
                rec = code.get(m.data_path)
                items.append(Item(inst.root / m.data_path, m.data_path, m.kind, rec.sha256 if rec else None,
                                  "build.json", lock.artifact(m.origin)))  # fmt: skip
            else:
                items.append(Item(inst.root / m.data_path, m.data_path, m.kind, m.sha256, "lock"))
        return items
    for f in lock.files:
        items.append(Item(inst.root / f.path, f.path, f.role, f.sha256, "lock"))
    for a in lock.artifacts:
        rel = f"{installed.EDITABLE_BUILD}/{a.file}"
        items.append(Item(inst.root / rel, rel, "code_object", None, "lock", a))
    return sorted(items, key=lambda i: i.name)


def verify(inst: Install) -> dict[str, Any]:
    """Check every file of the install; the report's lock/files/problems parts. Never raises for damage."""
    from netra import files
    from netra import lock as lock_mod

    rep = _Report(inst)
    lock_info: dict[str, Any] = {"path": str(inst.lock_file), "sha256": None}
    lock_name = _name(inst, inst.lock_file)
    try:
        lock_raw = files.read_path(inst.lock_file, limit=files.LOCK_LIMIT, what=lock_name)
    except NetraError as e:
        rep.fail(
            {"path": lock_name, "kind": "lock", "problem": "missing", "expected": {}, "detail": e.message}
        )
        rep.problems.append(
            f"{inst.lock_file}: the release lock is missing or unreadable ({e.message}); fix: {inst.reinstall}"
        )
        return {"lock": lock_info, "files": rep.files, "problems": rep.problems, "lock_obj": None}
    lock_sha = hashlib.sha256(lock_raw).hexdigest()
    lock_info["sha256"] = lock_sha
    rep.files["checked"] += 1
    rep.files["bytes"] += len(lock_raw)
    lock: Lock | None = None
    try:  # the TOML itself, always: doctor holds build.json's copy to it
        lock = lock_mod.loads(lock_raw, lock_name)
    except NetraError as e:
        rep.fail({"path": lock_name, "kind": "lock", "problem": "altered", "checks": {"parse": e.message}})
    record = None
    if inst.build_record is not None:
        record = _check_build_record(inst, lock, lock_raw, rep, lock_info)
        if lock is None and record is not None:
            lock = record.lock  # the TOML is damaged: check the rest against build.json's copy
    if lock is None:
        _problems(inst, rep)
        return {"lock": lock_info, "files": rep.files, "problems": rep.problems, "lock_obj": None}
    lock_info.update(
        toolchain=lock.describe_toolchains(), artifacts=len(lock.artifacts), tracked_files=len(lock.files)
    )
    items = _items(inst, lock, record)
    if len(items) >= _PARALLEL_FILES and _total_size(items) >= _PARALLEL_BYTES:
        # hashlib releases the GIL on large buffers: a big install hashes on every core.
        from concurrent.futures import ThreadPoolExecutor  # imports logging: only when worth it

        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            results = list(pool.map(_check, items))
    else:
        results = [_check(it) for it in items]
    for size, problem in results:
        rep.files["checked"] += 1
        rep.files["bytes"] += size
        if problem is not None:
            rep.fail(problem)
    if inst.kind == "wheel":
        known = {it.name for it in items} | {"manifest.lock", layout.BUILD_RECORD}
        rep.files["unexpected"] = [rel for rel in _walk(str(inst.root)) if rel not in known]
    broken = {e["path"] for e in rep.files["missing"] + rep.files["altered"]}
    rep.files["invalid_tables"] = _table_problems(inst, lock, broken)
    _problems(inst, rep)
    return {"lock": lock_info, "files": rep.files, "problems": rep.problems, "lock_obj": lock}


def _table_problems(inst: Install, lock: Lock, broken: set[str]) -> list[dict[str, str]]:
    """Every intact table must parse and reference exactly the class's locked artifacts."""
    out = []
    for f in lock.files_with_role("table"):
        cls = tables.gpu_class_of(f.path)
        name = layout.data_path(f.path) if inst.kind == "wheel" else f.path
        path = inst.tracked(f.path)
        if cls is None or path is None or name in broken:
            continue
        try:
            t = tables.loads(path.read_bytes(), name, cls)
            wrong = tables.against_lock(t, lock)
        except (OSError, NetraError) as e:
            wrong = [getattr(e, "message", str(e))]
        if wrong:
            out.append({"path": str(name), "gpu_class": cls, "problem": wrong[0], "count": str(len(wrong))})
    return out


def _problems(inst: Install, rep: _Report) -> None:
    for m in rep.files["missing"]:
        fix = inst.rebuild if m["kind"] == "code_object" else inst.reinstall
        rep.problems.append(f"missing {m['kind']} {m['path']}; fix: {fix}")
    for a in rep.files["altered"]:
        what = ", ".join(
            f"{k} {v['found']} (expected {v['expected']} from {v['from']})"
            if isinstance(v, dict)
            else f"{k}: {v}"
            for k, v in a.get("checks", {}).items()
        ) or a.get("detail", "")
        fix = inst.rebuild if a["kind"] == "code_object" else inst.reinstall
        rep.problems.append(f"{a['problem']} {a['kind']} {a['path']}: {what}; fix: {fix}")
    for u in rep.files["unexpected"]:
        rep.problems.append(f"unexpected file {u} (not in the lock); fix: {inst.reinstall}")
    for t in rep.files.get("invalid_tables", []):
        rep.problems.append(
            f"invalid table {t['path']} ({t['gpu_class']}): {t['problem']}; fix: {inst.reinstall}"
        )


def _total_size(items: list[Item]) -> int:
    total = 0
    for it in items:
        with contextlib.suppress(OSError):
            total += os.stat(it.path).st_size
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


def _check_build_record(
    inst: Install, lock: Lock | None, lock_raw: bytes, rep: _Report, lock_info: dict[str, Any]
) -> Any:
    """build.json read whole (layout.read_record), held to the TOML lock and to the wheel's RECORD."""
    from netra import files
    from netra import lock as lock_mod

    path = inst.build_record
    assert path is not None
    try:
        raw = files.read_path(path, limit=files.LOCK_LIMIT, what=layout.BUILD_RECORD)
    except NetraError as e:
        rep.fail(
            {
                "path": layout.BUILD_RECORD,
                "kind": "build_record",
                "problem": "missing",
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
        record = layout.read_record(raw, lock_raw, layout.BUILD_RECORD, "manifest.lock", inst.reinstall)
        lock_info["bound_to_build_record"] = True
    except NetraError as e:
        bound = "disagree: the build record was made for lock" in e.message
        lock_info["bound_to_build_record"] = not bound and None
        who = "manifest.lock" if bound else layout.BUILD_RECORD
        rep.fail({"path": who, "kind": "lock" if bound else "build_record", "problem": "altered",
                  "checks": {"build_record": e.message}})  # fmt: skip
    if record is not None and lock is not None and lock_mod.to_dict(record.lock) != lock_mod.to_dict(lock):
        rep.fail({"path": "manifest.lock", "kind": "lock", "problem": "altered",
                  "checks": {"content": "differs from build.json's bound copy of the lock"}})  # fmt: skip
    digest = _record_digest(inst)
    lock_info["record"] = "absent" if digest is None else "match"
    if digest is not None:
        for name, have in (
            ("manifest.lock", lock_sha),
            (layout.BUILD_RECORD, hashlib.sha256(raw).hexdigest()),
        ):
            want = digest.get(name)
            if want != have:
                lock_info["record"] = "mismatch"
                rep.fail({"path": name, "kind": "lock" if name == "manifest.lock" else "build_record",
                          "problem": "altered", "checks": {"sha256": {"expected": want, "found": have, "from": "RECORD"}}})  # fmt: skip
    return record


def certification(inst: Install, lock: Lock | None, broken: set[str]) -> dict[str, Any]:
    """Per certified class: its certification kind, contracts and candidates per maturity (from its table)."""
    out: dict[str, Any] = {}
    if lock is None:
        return out
    for f in lock.files_with_role("table"):
        cls = tables.gpu_class_of(f.path)
        if cls is None:
            continue
        path = inst.tracked(f.path)
        name = layout.data_path(f.path) if inst.kind == "wheel" else f.path
        info: dict[str, Any] = {"table": name, "intact": name not in broken}
        if info["intact"] and path is not None:
            try:
                t = tables.loads(path.read_bytes(), str(path), cls)
                info.update(
                    certification=t.certification,
                    loader=t.loader,
                    contracts=len(t.entries),
                    maturity=t.maturity_counts(),
                )
            except (OSError, NetraError) as e:
                info.update(intact=False, error=str(e))
        out[cls] = info
    return out


def run(
    inst: Install | None = None, *, sysfs_nodes: str | None = None, require_gpu: bool = False
) -> dict[str, Any]:
    """The whole report (see docs/doctor.md). ok is False when anything is missing or altered, or when
    require_gpu is set and no GPU of a certified class was found."""
    t0 = time.perf_counter()
    inst = inst or installed.locate()
    v = verify(inst)
    verify_s = time.perf_counter() - t0
    broken = {e["path"] for e in v["files"]["missing"] + v["files"]["altered"]}
    certified = certification(inst, v["lock_obj"], broken)
    found = gpus.detect(sysfs_nodes) if sysfs_nodes is not None else gpus.detect()
    gpu_list = []
    for g in found.gpus:
        c = certified.get(g.gpu_class)
        maturity = c.get("maturity") if c else None
        gpu_list.append(
            {
                "vendor": g.vendor,
                "class": g.gpu_class,
                "name": g.name,
                "index": g.index,
                "source": g.source,
                "certified": c is not None,
                "maturity": maturity,
                # what the runtime's default policy serves on this GPU
                "serves_by_default": bool(maturity and maturity.get("accepted")),
            }
        )
    problems = list(v["problems"])
    intact = not problems
    if require_gpu and not any(g["serves_by_default"] for g in gpu_list):
        seen = ", ".join(f"{g['class']} ({g['name']})" for g in gpu_list) or "none"
        listed = (
            ", ".join(
                f"{cls} ({(c.get('maturity') or {}).get('accepted', 0)} accepted)"
                for cls, c in sorted(certified.items())
            )
            or "none"
        )
        problems.append(
            f"no GPU on this host has accepted kernels in this install: found {seen}; classes: {listed}"
        )
    return {
        "schema": SCHEMA,
        "netra_version": __version__,
        "install": {"kind": inst.kind, "root": str(inst.root), "package": str(installed.PACKAGE_DIR)},
        "lock": v["lock"],
        "files": v["files"],
        "intact": intact,
        "certified_classes": certified,
        "gpus": gpu_list,
        "gpu_detection": list(found.notes),
        "runtime_libraries": {
            kind: {"names": list(names), "path": (str(p) if (p := libs.find(names)) else None)}
            for kind, names in libs.LIBRARIES.items()
        },
        "require_gpu": require_gpu,
        "ok": not problems,
        "problems": problems,
        "seconds": {"verify": round(verify_s, 6), "total": round(time.perf_counter() - t0, 6)},
    }


def render(r: dict[str, Any]) -> str:
    """The human report: one fact per line, problems in full, the verdict last."""
    lines = [
        f"netra-kernel {r['netra_version']} ({r['install']['kind']} install, data in {r['install']['root']})"
    ]
    lk = r["lock"]
    if lk.get("sha256"):
        bind = {True: "bound to build.json", False: "NOT bound to build.json", None: "no build record"}[
            lk.get("bound_to_build_record")
        ]
        rec = {"match": ", matches the wheel RECORD", "mismatch": ", DIFFERS from the wheel RECORD"}.get(
            lk.get("record", ""), ""
        )
        what = f"{lk.get('toolchain', '?')}, {lk.get('artifacts', '?')} artifacts"
        lines.append(f"lock: sha256 {lk['sha256']} ({what}), {bind}{rec}")
    f = r["files"]
    bad = len(f["missing"]) + len(f["altered"]) + len(f["unexpected"]) + len(f.get("invalid_tables", []))
    lines.append(
        f"files: {f['checked']} checked ({f['bytes']} bytes) in {r['seconds']['verify'] * 1e3:.1f} ms: "
        + (
            "all intact"
            if not bad
            else f"{len(f['missing'])} missing, {len(f['altered'])} altered, "
            f"{len(f['unexpected'])} unexpected, {len(f.get('invalid_tables', []))} invalid tables"
        )
    )
    for cls, c in sorted(r["certified_classes"].items()):
        if c.get("maturity"):
            m = c["maturity"]
            per = ", ".join(f"{k} {m[k]}" for k in reversed(tables.MATURITIES))
            kind = f"{c['certification']}, loader {c['loader']}"
            lines.append(f"certified: {cls} ({kind}): {c['contracts']} contracts; candidates {per}")
        else:
            lines.append(f"certified: {cls}: table {c['table']} is not intact")
    if r["gpus"]:
        for g in r["gpus"]:
            if g["serves_by_default"]:
                state = f"certified by this install ({g['maturity']['accepted']} accepted kernels served by default)"
            elif g["certified"]:
                state = (
                    "its class is in this install but nothing is accepted: the default policy serves nothing"
                )
            else:
                state = "NOT certified by this install"
            lines.append(
                f"gpu: {g['class']} ({g['name']}, {g['vendor']} #{g['index']} via {g['source']}): {state}"
            )
    else:
        lines.append("gpu: none found (" + "; ".join(r["gpu_detection"]) + ")")
    for kind, lib in r["runtime_libraries"].items():
        lines.append(f"runtime library {kind}: {lib['path'] or 'not found'} ({lib['names'][0]})")
    for p in r["problems"]:
        lines.append(f"problem: {p}")
    lines.append("result: OK" if r["ok"] else f"result: FAILED ({len(r['problems'])} problem(s))")
    return "\n".join(lines)
