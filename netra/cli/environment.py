"""`netra env`, and the host part of doctor's report: what a bug report needs about this machine.

In the spirit of `python -m torch.utils.collect_env`: Python, the platform, the versions of the
packages netra works with, and per vendor its driver and GPU runtime (netra.targets: each vendor
reads its own, from files where the system has them). Then what each class's code objects need:
the oldest driver or runtime, which the class derives from the toolchain the lock records
(Target.driver_need), held to this host's version. torch is described from its installed files
(torch/version.py, read, not imported), so this costs milliseconds, not the seconds of `import torch`.
Nothing here raises for a missing part: it is reported as null.
"""

from __future__ import annotations

import platform
import sys
from typing import Any

from netra import __version__, targets
from netra.runtime import installed
from netra.runtime.lockfile import Lock

SCHEMA = 1
PACKAGES = ("netra-kernel", "torch", "numpy", "pyelftools", "msgpack")


def _dist(name: str) -> installed.DistInfo | None:
    """The installed distribution `name` that Python imports (the first on sys.path), by its records."""
    found = installed.dist_infos(name)
    return found[0] if found else None


def _version(name: str) -> str | None:
    d = _dist(name)
    return (d.version or None) if d is not None else None


def torch_build() -> dict[str, Any] | None:
    """torch's version and the CUDA / HIP it was built for, from torch/version.py (None: not installed).
    Read as every host file here is (files.read_path: a regular file, non-blocking, bounded), never
    imported: a FIFO or a device in its place is "not known", not a hang."""
    import ast

    from netra.core import files, text
    from netra.errors import NetraError

    d = _dist("torch")
    if d is None:
        return None
    out: dict[str, Any] = {"version": d.version or "unknown", "cuda": None, "hip": None}
    try:
        raw = files.read_path(
            d.folder.parent / "torch" / "version.py", limit=1 << 20, what="torch/version.py"
        )
    except NetraError as e:
        out["unread"] = e.message
        return out
    try:
        source = text.decode(raw)
        for node in ast.parse(source).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
            value = getattr(node, "value", None)
            if (
                isinstance(target, ast.Name)
                and target.id in ("cuda", "hip")
                and isinstance(value, ast.Constant)
            ):
                out[target.id] = value.value if isinstance(value.value, str) else None
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        out["unread"] = f"torch/version.py is not Python this can read ({type(e).__name__})"
    return out


def host() -> dict[str, Any]:
    """Python, platform, packages, torch and each vendor's driver and runtime."""
    libc = " ".join(x for x in platform.libc_ver() if x)
    vendors = {}
    for v in targets.vendors():
        found = v.versions()
        vendors[v.name] = {"driver": found.driver, "runtime": found.runtime, "notes": list(found.notes)}
    return {
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "description": platform.platform(),
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "libc": libc or None,
        },
        "packages": {name: _version(name) for name in PACKAGES},
        "torch": torch_build(),
        "vendors": vendors,
    }


def needs(lock: Lock | None, hosts: dict[str, Any]) -> dict[str, Any]:
    """Per class the lock records a toolchain for: what its code objects need, and whether this host has it."""
    from netra.targets.host import Versions

    out: dict[str, Any] = {}
    for cls, tc in sorted((lock.toolchains if lock is not None else {}).items()):
        if not targets.known(cls):
            continue
        t = targets.get(cls)
        need = t.driver_need(tc)
        h = hosts["vendors"].get(t.vendor.name) or {}
        found = Versions(h.get("driver"), h.get("runtime"))
        out[cls] = {
            "vendor": t.vendor.name,
            "needs": need.what,
            "minimum": need.minimum,
            "compared_with": need.of,
            "why": need.why,
            "found": getattr(found, need.of),
            "met": need.met(found),
        }
    return out


def need_line(cls: str, n: dict[str, Any]) -> str:
    """'sm_90 code objects need NVIDIA driver >= 580: this host has 580.159.04 (met); <why>'."""
    want = f"{n['needs']} >= {n['minimum']}" if n["minimum"] else f"{n['needs']} (minimum unknown)"
    state = {True: "met", False: "TOO OLD: upgrade it", None: "cannot tell"}[n["met"]]
    have = f"this host has {n['found']} ({state})" if n["found"] else "this host has none"
    return f"{cls} code objects need {want}: {have}; {n['why']}"


def gpu_need(n: dict[str, Any] | None) -> str:
    """'; needs NVIDIA driver >= 580 (met)' for a GPU line, '' when its class is not in the lock."""
    if n is None:
        return ""
    want = f"{n['needs']} >= {n['minimum']}" if n["minimum"] else f"{n['needs']} (minimum unknown)"
    state = {True: "met", False: "NOT met", None: "cannot tell"}[n["met"]]
    return f"; needs {want} ({state})"


def host_lines(h: dict[str, Any]) -> list[str]:
    """The host, one fact per line, as doctor and `netra env` print it."""
    py, pf = h["python"], h["platform"]
    lines = [
        f"python: {py['version']} ({py['implementation']}, {py['executable']})",
        f"platform: {pf['description']}" + (f" ({pf['libc']})" if pf["libc"] else ""),
    ]
    t = h["torch"]
    if t:
        built = ", ".join(f"{k.upper()} {t[k]}" for k in ("cuda", "hip") if t[k]) or "CPU only"
        if t.get("unread"):
            built = f"unknown: {t['unread']}"
        lines.append(f"torch: {t['version']} (built for {built})")
    else:
        lines.append("torch: not installed")
    pk = h["packages"]
    lines.append(
        "packages: " + ", ".join(f"{n} {pk[n] or 'not installed'}" for n in PACKAGES if n != "torch")
    )
    for name, v in h["vendors"].items():
        parts = []
        for part in ("driver", "runtime"):
            why = "; ".join(n.partition(": ")[2] for n in v["notes"] if n.startswith(part + ":"))
            parts.append(f"{part} {v[part]}" if v[part] else f"{part} not found ({why or 'not looked for'})")
        lines.append(f"{name}: " + "; ".join(parts))
    return lines


def report() -> dict[str, Any]:
    """`netra env --json` (netra/schemas/env.schema.json): the host and what each class's code needs."""
    from netra.core import files
    from netra.errors import NetraError
    from netra.runtime import gpus
    from netra.runtime import lockfile as lock_mod

    h = host()
    lock = None
    where = None
    try:
        inst = installed.locate()
        where = {"kind": inst.kind, "root": str(inst.root), "version": __version__}
        raw = files.read_below(inst.root, inst.lock_file, limit=files.LOCK_LIMIT, what="manifest.lock")
        lock = lock_mod.loads(raw, str(inst.lock_file))
        lock_note = None
    except NetraError as e:
        lock_note = f"the install's lock cannot be read ({e.message}): run `netra doctor`"
    found = gpus.detect()
    return {
        "schema": SCHEMA,
        "command": "env",
        "netra_version": __version__,
        "install": where,
        "host": h,
        "needs": needs(lock, h),
        "needs_note": lock_note,
        "gpus": [
            {"vendor": g.vendor, "class": g.gpu_class, "name": g.name, "index": g.index, "source": g.source}
            for g in found.gpus
        ],
        "gpu_detection": list(found.notes),
    }


def render(r: dict[str, Any]) -> str:
    i = r["install"]
    lines = [
        f"netra-kernel {r['netra_version']}" + (f" ({i['kind']} install, data in {i['root']})" if i else "")
    ]
    lines += host_lines(r["host"])
    for g in r["gpus"]:
        lines.append(f"gpu: {g['class']} ({g['name']}, {g['vendor']} #{g['index']} via {g['source']})"
                     + gpu_need(r["needs"].get(g["class"])))  # fmt: skip
    if not r["gpus"]:
        lines.append("gpu: none found (" + "; ".join(r["gpu_detection"]) + ")")
    lines += [f"needs: {need_line(cls, n)}" for cls, n in r["needs"].items()]
    if r["needs_note"]:
        lines.append(f"needs: {r['needs_note']}")
    return "\n".join(lines)
