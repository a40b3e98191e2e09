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
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netra import __version__, gpus, installed, layout, libs, tables
from netra.errors import NetraError
from netra.installed import Install
from netra.lock import Lock

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
    text_sha256: str | None  # .text sha256 expected (code objects)
    expected_from: str  # "lock", "build.json"


def _text_sha256(data: bytes, name: str) -> str:
    from netra.codeobject import text_sha256

    try:
        return text_sha256(data, name)
    except NetraError as e:
        return f"unreadable ({e.message})"


def _check(item: Item) -> tuple[int, dict[str, Any] | None]:
    """(bytes read, None when intact or the problem as report data). Reads the file once."""
    try:
        with open(item.path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0, {"path": item.name, "kind": item.kind, "problem": "missing", "expected": _expected(item)}
    except OSError as e:
        return 0, {"path": item.name, "kind": item.kind, "problem": "unreadable", "detail": str(e)}
    out: dict[str, Any] = {}
    if item.sha256 is not None:
        got = hashlib.sha256(data).hexdigest()
        if got != item.sha256:
            out["sha256"] = {"expected": item.sha256, "found": got, "from": item.expected_from}
    if item.text_sha256 is not None:
        got = _text_sha256(data, item.name)
        if got != item.text_sha256:
            out["text_sha256"] = {"expected": item.text_sha256, "found": got, "from": "lock"}
    if not out:
        return len(data), None
    return len(data), {"path": item.name, "kind": item.kind, "problem": "altered", "checks": out}


def _expected(item: Item) -> dict[str, str]:
    e = {}
    if item.sha256:
        e["sha256"] = item.sha256
    if item.text_sha256:
        e["text_sha256"] = item.text_sha256
    return e


def _record_digest(inst: Install) -> dict[str, str] | None:
    """sha256 (hex) of netra/_data files per the wheel's RECORD, when this is a pip-installed wheel."""
    import base64

    site = inst.root.parent.parent
    for rec in sorted(site.glob("netra_kernel-*.dist-info/RECORD")):
        out: dict[str, str] = {}
        for line in rec.read_text().splitlines():
            path, _, rest = line.partition(",")
            digest = rest.partition(",")[0]
            if path.startswith(layout.PACKAGE_DATA + "/") and digest.startswith("sha256="):
                b64 = digest[len("sha256=") :]
                raw = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4))
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


def _items(inst: Install, lock: Lock, built: dict[str, Any] | None) -> list[Item]:
    """Every file the lock implies for this install: layout.members for a wheel, the tree for a checkout."""
    items: list[Item] = []
    if inst.kind == "wheel":
        code = (built or {}).get("code_objects", {}) if isinstance(built, dict) else {}
        for m in layout.members(lock):
            if m.kind in ("lock", "build_record"):
                continue  # checked by binding, before everything else
            sha = m.sha256
            src = "lock"
            if m.kind == "code_object":
                rec = code.get(m.data_path) if isinstance(code, dict) else None
                sha = rec.get("sha256") if isinstance(rec, dict) else None
                src = "build.json"
            items.append(Item(inst.root / m.data_path, m.data_path, m.kind, sha, m.text_sha256, src))
        return items
    for f in lock.files:
        items.append(Item(inst.root / f.path, f.path, f.role, f.sha256, None, "lock"))
    for a in lock.artifacts:
        rel = f"{installed.EDITABLE_BUILD}/{a.file}"
        items.append(Item(inst.root / rel, rel, "code_object", None, a.text_sha256, "lock"))
    return sorted(items, key=lambda i: i.name)


def verify(inst: Install) -> dict[str, Any]:
    """Check every file of the install; the report's lock/files/problems parts. Never raises for damage."""
    from netra import lock as lock_mod

    rep = _Report(inst)
    lock_info: dict[str, Any] = {"path": str(inst.lock_file), "sha256": None}
    try:
        lock_raw = inst.lock_file.read_bytes()
    except OSError:
        rep.fail({"path": _name(inst, inst.lock_file), "kind": "lock", "problem": "missing", "expected": {}})
        rep.problems.append(f"{inst.lock_file}: the release lock is missing; fix: {inst.reinstall}")
        return {"lock": lock_info, "files": rep.files, "problems": rep.problems, "lock_obj": None}
    lock_sha = hashlib.sha256(lock_raw).hexdigest()
    lock_info["sha256"] = lock_sha
    rep.files["checked"] += 1
    rep.files["bytes"] += len(lock_raw)
    try:
        lock = lock_mod.parse_installed(lock_raw, _peek_record(inst), str(inst.lock_file))
    except NetraError as e:
        rep.fail(
            {
                "path": _name(inst, inst.lock_file),
                "kind": "lock",
                "problem": "altered",
                "checks": {"parse": str(e)},
            }
        )
        rep.problems.append(f"{inst.lock_file}: not a readable lock ({e}); fix: {inst.reinstall}")
        return {"lock": lock_info, "files": rep.files, "problems": rep.problems, "lock_obj": None}
    lock_info.update(
        toolchain=str(lock.toolchain), artifacts=len(lock.artifacts), tracked_files=len(lock.files)
    )

    built: dict[str, Any] | None = None
    if inst.build_record is not None:
        built = _check_build_record(inst, lock, lock_sha, lock_raw, rep, lock_info)

    items = _items(inst, lock, built)
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
        rep.problems.append(f"altered {a['kind']} {a['path']}: {what}; fix: {inst.reinstall}")
    for u in rep.files["unexpected"]:
        rep.problems.append(f"unexpected file {u} (not in the lock); fix: {inst.reinstall}")
    return {"lock": lock_info, "files": rep.files, "problems": rep.problems, "lock_obj": lock}


def _total_size(items: list[Item]) -> int:
    total = 0
    for it in items:
        with contextlib.suppress(OSError):
            total += os.stat(it.path).st_size
    return total


def _walk(root: str) -> list[str]:
    """Every file under root, relative with forward slashes, bytecode caches skipped."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        rel = os.path.relpath(d, root).replace(os.sep, "/")
        out += [f if rel == "." else f"{rel}/{f}" for f in sorted(files)]
    return out


def _name(inst: Install, p: Path) -> str:
    try:
        return p.relative_to(inst.root).as_posix()
    except ValueError:
        return str(p)


def _peek_record(inst: Install) -> dict[str, Any] | None:
    """build.json as JSON, or None: only to reach its bound copy of the lock (checked in full below)."""
    if inst.build_record is None:
        return None
    try:
        record = json.loads(inst.build_record.read_bytes())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def _check_build_record(
    inst: Install, lock: Lock, lock_sha: str, lock_raw: bytes, rep: _Report, lock_info: dict[str, Any]
) -> dict[str, Any] | None:
    path = inst.build_record
    assert path is not None
    try:
        raw = path.read_bytes()
    except OSError:
        rep.fail({"path": layout.BUILD_RECORD, "kind": "build_record", "problem": "missing", "expected": {}})
        return None
    rep.files["checked"] += 1
    rep.files["bytes"] += len(raw)
    try:
        built = json.loads(raw)
        if not isinstance(built, dict) or not isinstance(built.get("code_objects"), dict):
            raise ValueError("no code_objects")
    except ValueError as e:
        rep.fail(
            {
                "path": layout.BUILD_RECORD,
                "kind": "build_record",
                "problem": "altered",
                "checks": {"parse": str(e)},
            }
        )
        return None
    checks: dict[str, Any] = {}
    bound = built.get("lock_sha256")
    lock_info["bound_to_build_record"] = bound == lock_sha
    if bound != lock_sha:
        checks["lock_sha256"] = {"expected": lock_sha, "found": bound, "from": "manifest.lock"}
    for a in lock.artifacts:
        rec = built["code_objects"].get(a.file)
        if not isinstance(rec, dict) or rec.get("text_sha256") != a.text_sha256:
            checks[f"code_objects[{a.file}]"] = {
                "expected": a.text_sha256,
                "found": rec.get("text_sha256") if isinstance(rec, dict) else None,
                "from": "lock",
            }
    extra = sorted(set(built["code_objects"]) - {a.file for a in lock.artifacts})
    if extra:
        checks["code_objects"] = f"entries not in the lock: {', '.join(extra)}"
    record = _record_digest(inst)
    lock_info["record"] = "absent" if record is None else "match"
    if record is not None:
        for name, have in (
            ("manifest.lock", lock_sha),
            (layout.BUILD_RECORD, hashlib.sha256(raw).hexdigest()),
        ):
            want = record.get(name)
            if want != have:
                lock_info["record"] = "mismatch"
                rep.fail(
                    {
                        "path": name,
                        "kind": "lock" if name == "manifest.lock" else "build_record",
                        "problem": "altered",
                        "checks": {"sha256": {"expected": want, "found": have, "from": "RECORD"}},
                    }
                )
    if checks:
        rep.fail(
            {"path": layout.BUILD_RECORD, "kind": "build_record", "problem": "altered", "checks": checks}
        )
    return built


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
        gpu_list.append(
            {
                "vendor": g.vendor,
                "class": g.gpu_class,
                "name": g.name,
                "index": g.index,
                "source": g.source,
                "certified": c is not None,
                "maturity": c.get("maturity") if c else None,
            }
        )
    problems = list(v["problems"])
    intact = not problems
    if require_gpu and not any(g["certified"] for g in gpu_list):
        seen = ", ".join(f"{g['class']} ({g['name']})" for g in gpu_list) or "none"
        listed = ", ".join(sorted(certified)) or "none"
        problems.append(f"no GPU of a certified class on this host: found {seen}; certified: {listed}")
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
    bad = len(f["missing"]) + len(f["altered"]) + len(f["unexpected"])
    lines.append(
        f"files: {f['checked']} checked ({f['bytes']} bytes) in {r['seconds']['verify'] * 1e3:.1f} ms: "
        + (
            "all intact"
            if not bad
            else f"{len(f['missing'])} missing, {len(f['altered'])} altered, "
            f"{len(f['unexpected'])} unexpected"
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
            lines.append(
                f"gpu: {g['class']} ({g['name']}, {g['vendor']} #{g['index']} via {g['source']}): "
                + ("certified by this install" if g["certified"] else "NOT certified by this install")
            )
    else:
        lines.append("gpu: none found (" + "; ".join(r["gpu_detection"]) + ")")
    for kind, lib in r["runtime_libraries"].items():
        lines.append(f"runtime library {kind}: {lib['path'] or 'not found'} ({lib['names'][0]})")
    for p in r["problems"]:
        lines.append(f"problem: {p}")
    lines.append("result: OK" if r["ok"] else f"result: FAILED ({len(r['problems'])} problem(s))")
    return "\n".join(lines)
