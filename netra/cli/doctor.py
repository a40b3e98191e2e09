"""`netra doctor`: prove this install in one command, and say what this host can run.

Every file the lock implies is checked (netra.cli.proof: every missing or altered file listed, nothing
stopping at the first problem). Then the host: GPUs and their classes, whether this install certifies
them (with counts per maturity), and which GPU runtime libraries exist (found by looking, not loading).
The report is plain data (schema: docs/doctor.md, netra/schemas/doctor.schema.json).
"""

from __future__ import annotations

import time
from typing import Any

from netra import __version__, targets
from netra.cli import environment
from netra.cli.proof import (
    _KEPT,
    _MODELS,
    _PACKAGE,
    _PARALLEL_BYTES,
    _PARALLEL_FILES,
    Item,
    RecordEntry,
    _absent,
    _agreement,
    _check,
    _check_build_record,
    _data_paths,
    _expected,
    _items,
    _name,
    _not_gated,
    _package_files,
    _problems,
    _record_digest,
    _Report,
    _total_size,
    _verified,
    _walk,
    causes,
    verify,
    wheel_record,
)
from netra.core.types import MATURITIES
from netra.runtime import gpus, installed, layout, tables
from netra.runtime.installed import Install
from netra.runtime.lockfile import Lock

# The checks live in netra.cli.proof; every name stays importable from here, as before the split
# (bench/bench_doctor.py and tools/reliability-probe use verify, wheel_record, _items, _check).
__all__ = ["LOCK_CODES", "SCHEMA", "SHOWN", "_KEPT", "_MODELS", "_PACKAGE", "_PARALLEL_BYTES", "_PARALLEL_FILES", "Item", "RecordEntry", "_Report", "_absent", "_agreement", "_cause_lines", "_check", "_check_build_record", "_data_paths", "_distribution", "_expected", "_install_lines", "_items", "_name", "_no_gpu_served", "_not_gated", "_package_files", "_problems", "_record_digest", "_total_size", "_verified", "_walk", "causes", "certification", "expected_digest", "install_info", "render", "run", "verify", "wheel_record"]  # fmt: skip

SCHEMA = 1


def certification(lock: Lock | None, read: dict[str, tables.Table], inst: Install) -> dict[str, Any]:
    """Per certified class: its certification kind, contracts and candidates per maturity, from the
    tables verify read (`read`: the intact ones that follow the rules); any other is not intact."""
    out: dict[str, Any] = {}
    if lock is None:
        return out
    for f in lock.files_with_role("table"):
        cls = tables.gpu_class_of(f.path)
        if cls is None:
            continue
        name = layout.data_path(f.path) if inst.kind == "wheel" else f.path
        t = read.get(cls)
        info: dict[str, Any] = {"table": name, "intact": t is not None}
        if t is not None:
            info.update(
                certification=t.certification,
                loader=t.loader,
                contracts=len(t.entries),
                maturity=t.maturity_counts(),
            )
        out[cls] = info
    return out


LOCK_CODES = ("lock_match", "lock_differs", "lock_unreadable")  # expect_lock.code: stable, for scripts


def expected_digest(typed: str) -> str:
    """--expect-lock's value: a sha256 in hex (any case, an optional `sha256:` prefix), else a usage error."""
    import re

    from netra.errors import UsageError

    digest = typed.strip().lower().removeprefix("sha256:")
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        raise UsageError(
            f"netra doctor --expect-lock {typed!r}: not a sha256 (64 hexadecimal digits)",
            "pass the release's published lock digest, e.g. `sha256sum release/manifest.lock` at its commit",
        )
    return digest


def _expect_lock(expected: str, found: str | None) -> tuple[dict[str, Any], str | None]:
    """The anchor outside the install: the lock digest a host was told to expect. Everything else in the
    install is held to the lock (tables and manifests by sha256, code objects by .text), so a lock with
    the expected bytes makes the data the release meant; a resealed install has its own lock digest."""
    if found is None:
        code = "lock_unreadable"
        why = f"this install's lock is missing or unreadable, so it cannot be the expected {expected}"
    elif found != expected:
        code = "lock_differs"
        why = (
            f"this install's lock sha256 {found} is not the expected {expected}: it is not the release you "
            "meant, whatever its files say to each other"
        )
    else:
        return {"expected": expected, "found": found, "code": "lock_match"}, None
    return {"expected": expected, "found": found, "code": code}, f"{code} (--expect-lock): {why}"


def run(
    inst: Install | None = None,
    *,
    sysfs_nodes: str | None = None,
    require_gpu: bool = False,
    expect_lock: str | None = None,
) -> dict[str, Any]:
    """The whole report (see docs/doctor.md). ok is False when anything is missing or altered, when
    require_gpu is set and no GPU of a certified class was found, or when expect_lock (a lock digest)
    is not the installed lock's sha256."""
    t0 = time.perf_counter()
    inst = inst or installed.locate()
    v = verify(inst)
    verify_s = time.perf_counter() - t0
    certified = certification(v["lock_obj"], v["tables"], inst)
    found = gpus.detect(sysfs_nodes)
    host = environment.host()
    needs = environment.needs(v["lock_obj"], host)
    gpu_list = []
    for g in found.gpus:
        c = certified.get(g.gpu_class)
        maturity = c.get("maturity") if c else None
        need = needs.get(g.gpu_class)
        gpu_list.append(
            {
                "vendor": g.vendor,
                "class": g.gpu_class,
                "name": g.name,
                "index": g.index,
                "source": g.source,
                "certified": c is not None,
                "maturity": maturity,
                # what the runtime's default policy serves on this GPU (a driver known to be too old: nothing)
                "serves_by_default": bool(maturity and maturity.get("accepted"))
                and (need or {}).get("met") is not False,
                "driver_met": need["met"] if need else None,
            }
        )
    problems = list(v["problems"])
    intact = not problems
    expected = None
    if expect_lock is not None:
        expected, refusal = _expect_lock(expect_lock, v["lock"]["sha256"])
        if refusal is not None:
            problems.append(refusal)
            v["causes"].append({"fix": None, "note": _ANCHOR_NOTE, "problems": [refusal]})
    if require_gpu and not any(g["serves_by_default"] for g in gpu_list):
        problems.append(_no_gpu_served(gpu_list, certified, needs))
        v["causes"].append({"fix": None, "note": "", "problems": [problems[-1]]})
    return {
        "schema": SCHEMA,
        "command": "doctor",
        "netra_version": __version__,
        "install": install_info(inst),
        "lock": v["lock"],
        "files": v["files"],
        "package_files": v["package_files"],
        "fixes": v["fixes"],
        "causes": v["causes"],
        "intact": intact,
        "certified_classes": certified,
        "gpus": gpu_list,
        "gpu_detection": list(found.notes),
        "runtime_libraries": {
            v.loader: {"names": list(v.libraries), "path": (str(p) if (p := v.find_library()) else None)}
            for v in targets.vendors()
        },
        "host": host,
        "needs": needs,
        "require_gpu": require_gpu,
        "expect_lock": expected,
        "ok": not problems,
        "problems": problems,
        "seconds": {"verify": round(verify_s, 6), "total": round(time.perf_counter() - t0, 6)},
    }


_ANCHOR_NOTE = (
    "install the release you meant from a wheel whose sha256 is the one published for it (docs/release.md, "
    "verifying a release), then run this again"
)


def _no_gpu_served(gpu_list: list[dict[str, Any]], certified: dict[str, Any], needs: dict[str, Any]) -> str:
    """Why --require-gpu fails, in one line. A GPU whose class has accepted kernels but whose driver is
    older than they need is named with its driver, the minimum and the upgrade (as `netra env` says
    it), not as a class with nothing accepted."""
    old = [g for g in gpu_list if g["driver_met"] is False and (g["maturity"] or {}).get("accepted")]
    if old:
        said = []
        for cls in sorted({g["class"] for g in old}):
            n = needs[cls]
            names = ", ".join(sorted({g["name"] for g in old if g["class"] == cls}))
            said.append(
                f"{cls} ({names}): this host's {n['needs']} {n['found']} is older than the {n['minimum']} its "
                f"code objects need ({n['why']}), so none of its {certified[cls]['maturity']['accepted']} "
                f"accepted kernels is served; fix: upgrade the {n['needs']} to {n['minimum']} or newer"
            )
        return "no GPU on this host is served by this install: " + "; ".join(said)
    seen = ", ".join(f"{g['class']} ({g['name']})" for g in gpu_list) or "none"
    listed = (
        ", ".join(
            f"{cls} ({(c.get('maturity') or {}).get('accepted', 0)} accepted)"
            for cls, c in sorted(certified.items())
        )
        or "none"
    )
    return f"no GPU on this host has accepted kernels in this install: found {seen}; classes: {listed}"


def _distribution(d: installed.Distribution | None) -> dict[str, Any] | None:
    if d is None:
        return None
    spec, why = d.spec()
    return {
        "name": installed.DISTRIBUTION,
        "version": d.version,
        "dist_info": d.dist_info,
        "installer": d.installer,
        "origin": d.origin,
        "url": d.url,
        "commit": d.commit,
        "description": d.describe(),
        "reinstall": d.reinstall(spec),
        "reinstall_note": why,
    }


def install_info(inst: Install) -> dict[str, Any]:
    """What is installed and from where, from the distribution's records (docs/doctor.md)."""
    return {
        "kind": inst.kind,
        "description": inst.describe(),
        "root": str(inst.root),
        "package": str(inst.package),
        "distribution": _distribution(inst.distribution),
        "shadowed": _distribution(inst.shadowed),
    }


def _install_lines(r: dict[str, Any]) -> list[str]:
    i = r["install"]
    d, hidden = i.get("distribution"), i.get("shadowed")
    lines = [f"netra-kernel {r['netra_version']} ({i.get('description', i['kind'])}, data in {i['root']})"]
    if d:
        note = (
            f"; reinstalling takes this version from the index: {d['reinstall_note']}"
            if d["reinstall_note"]
            else ""
        )
        lines.append(
            f"distribution: {d['name']} {d['version']} at {d['dist_info']}, {d['description']}{note}"
        )
    if i["kind"] == "wheel" and not d:
        lines.append(
            f"note: no installed {installed.DISTRIBUTION} distribution records this package ({i['package']}): its "
            "data is checked against its lock, its Python files against nothing (no RECORD); install it with "
            "pip to have them checked"
        )
    if i["kind"] == "source":
        root = i["root"]
        if hidden:
            lines.append(
                f"note: this netra ({i['package']}) is a source checkout on sys.path and hides the installed "
                f"{hidden['name']} {hidden['version']} ({hidden['dist_info']}); to check that install run its "
                f"`netra doctor` from outside {root}, without {root} on PYTHONPATH"
            )
        else:
            lines.append(
                f"note: no installed {installed.DISTRIBUTION} distribution records this package ({i['package']})"
            )
    if i["kind"] != "wheel" and any(m["kind"] == "code_object" for m in r["files"]["missing"]):
        lines.append(
            f"note: a source checkout serves the code objects of `netra build {installed.EDITABLE_BUILD}` "
            "(run it after every `netra lock`)"
        )
    return lines


SHOWN = 5  # problems of one cause listed in the human report before "... and N more"


def _cause_lines(r: dict[str, Any]) -> list[str]:
    """Each problem once, grouped by its cause, then each fix once: a fix named by its step when there
    are several. A cause with many problems (an editable install before `netra build`) shows a few and
    counts the rest (--json lists every one)."""
    lines: list[str] = []
    fixes = r.get("fixes") or []
    for c in r.get("causes") or [{"fix": None, "note": "", "problems": r["problems"]}]:
        step = f"; fix {fixes.index(c['fix']) + 1}" if c["fix"] is not None and len(fixes) > 1 else ""
        probs = c["problems"]
        shown = probs if len(probs) <= SHOWN else probs[: SHOWN - 2]
        lines += [f"problem: {p}{step}" for p in shown]
        if len(shown) < len(probs):
            lines.append(f"problem: ... and {len(probs) - len(shown)} more of the same cause{step} "
                         "(`netra doctor --json` lists every one)")  # fmt: skip
        if c["note"]:
            lines.append(f"  note{step.replace(';', ',')}: {c['note']}")
    if fixes:
        lines.append("to fix, run:" if len(fixes) == 1 else "to fix, run in this order:")
        lines += [f"  {fix}" if len(fixes) == 1 else f"  {i}. {fix}" for i, fix in enumerate(fixes, 1)]
    return lines


def render(r: dict[str, Any]) -> str:
    """The human report: one fact per line, problems in full, the verdict last."""
    lines = _install_lines(r)
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
    ex = r.get("expect_lock")
    if ex and ex["code"] == "lock_match":
        lines.append("lock: the expected digest (--expect-lock): this install's data is the release it names")
    f = r["files"]
    bad = (
        len(f["missing"])
        + len(f["altered"])
        + len(f["unexpected"])
        + len(f.get("invalid_tables", []))
        + len(f.get("disagreements", []))
    )
    lines.append(
        f"files: {f['checked']} checked ({f['bytes']} bytes) in {r['seconds']['verify'] * 1e3:.1f} ms: "
        + (
            "all intact"
            if not bad
            else f"{len(f['missing'])} missing, {len(f['altered'])} altered, "
            f"{len(f['unexpected'])} unexpected, {len(f.get('invalid_tables', []))} invalid tables"
            + (f", {len(f['disagreements'])} disagreeing" if f.get("disagreements") else "")
        )
    )
    for cls, c in sorted(r["certified_classes"].items()):
        if c.get("maturity"):
            m = c["maturity"]
            per = ", ".join(f"{k} {m[k]}" for k in reversed(MATURITIES))
            kind = f"{c['certification']}, loader {c['loader']}"
            lines.append(f"certified: {cls} ({kind}): {c['contracts']} contracts; candidates {per}")
            if c["certification"] == "hardware" and m.get("verified"):
                lines.append(f"  {m['verified']} {cls} candidates passed on the GPU but their memory checkers were "
                             "skipped or are unavailable: verified only, not served by default")  # fmt: skip
        else:
            lines.append(f"certified: {cls}: table {c['table']} is not intact")
    if r["gpus"]:
        for g in r["gpus"]:
            accepted = (g["maturity"] or {}).get("accepted")
            if g["serves_by_default"]:
                state = f"certified by this install ({accepted} accepted kernels served by default)"
            elif accepted and g.get("driver_met") is False:
                state = f"certified by this install ({accepted} accepted kernels)"
            elif g["certified"]:
                state = (
                    "its class is in this install but nothing is accepted: the default policy serves nothing"
                )
            else:
                state = "NOT certified by this install"
            if g.get("driver_met") is False:
                state += "; its driver is older than its code objects need (below): nothing is served"
            lines.append(
                f"gpu: {g['class']} ({g['name']}, {g['vendor']} #{g['index']} via {g['source']}): {state}"
                + environment.gpu_need((r.get("needs") or {}).get(g["class"]))
            )
    else:
        lines.append("gpu: none found (" + "; ".join(r["gpu_detection"]) + ")")
    for kind, lib in r["runtime_libraries"].items():
        lines.append(f"runtime library {kind}: {lib['path'] or 'not found'} ({lib['names'][0]})")
    pf = r.get("package_files") or {}
    if pf.get("checked"):
        bad = len(pf["missing"]) + len(pf["altered"])
        lines.append(
            f"package: {pf['checked']} files held to the wheel RECORD: "
            + (
                "all as installed"
                if not bad
                else f"{len(pf['missing'])} missing, {len(pf['altered'])} altered"
            )
        )
    if r.get("host"):
        lines += environment.host_lines(r["host"])
        lines += [f"needs: {environment.need_line(cls, n)}" for cls, n in r["needs"].items()]
    lines += _cause_lines(r)
    lines.append("result: OK" if r["ok"] else f"result: FAILED ({len(r['problems'])} problem(s))")
    return "\n".join(lines)
