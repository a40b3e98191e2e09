"""Writing release/manifest.lock, and how a lock made from the sources now differs from the locked one.

The model and the reader are netra.runtime.lockfile (installs read the lock too). Across toolchains
(ROCm's LLVM against Debian's, say) a code object's bytes may differ in packaging (section layout,
.comment); `.text` and the launch digest (descriptor and metadata) may not. So `code_sha256` is
compared only when the toolchain is the locked one (`compare`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from netra.core import files
from netra.errors import LockError
from netra.runtime.lockfile import Lock, ToolchainPins, to_dict

HEADER = (
    "# release/manifest.lock: written by `netra lock`; do not edit by hand.\n"
    "# `netra lock --check` fails when it is out of date with kernels/, manifests/, release/tables/,\n"
    "# release/evidence/ or the toolchain pins of requirements/build.txt.\n"
)


def dumps(lock: Lock) -> str:
    try:
        import tomli_w
    except ImportError:
        raise LockError(
            "writing release/manifest.lock needs tomli-w, which is not installed",
            "pip install 'netra-kernel[author]'",
        ) from None
    return HEADER + tomli_w.dumps(to_dict(lock))


def write(lock: Lock, path: str | Path) -> None:
    """Write atomically: a reader sees the old lock or the new one, never half of either."""
    files.atomic_write(Path(path), dumps(lock).encode())


_CROSS_TOOLCHAIN = ("code_sha256",)  # what may differ when the toolchain is not the locked one


def compare(locked: Lock, fresh: Lock) -> list[str]:
    """Every way `fresh` (made from the sources now) differs from `locked`, one line each.

    Where a class was built with another toolchain than the locked one, its whole-code-object hashes
    are not compared (they hold packaging); .text, the launch digest and every fact still are.
    """
    out: list[str] = []
    old_files = {f.path: f for f in locked.files}
    new_files = {f.path: f for f in fresh.files}
    for p in sorted(old_files.keys() | new_files.keys()):
        o, n = old_files.get(p), new_files.get(p)
        if o is None:
            out.append(f"file {p}: in the tree but not in the lock (new {n.role} file)" if n else p)
        elif n is None:
            out.append(f"file {p}: locked but no longer present")
        elif o != n:
            if o.sha256 != n.sha256:
                out.append(f"file {p}: sha256 locked {o.sha256[:16]}..., now {n.sha256[:16]}...")
            if o.role != n.role:
                out.append(f"file {p}: role locked {o.role}, now {n.role}")
    old_a = {a.name: a for a in locked.artifacts}
    new_a = {a.name: a for a in fresh.artifacts}
    for name in sorted(old_a.keys() | new_a.keys()):
        oa, na = old_a.get(name), new_a.get(name)
        if oa is None:
            out.append(f"artifact {name}: the sources declare it but the lock lacks it")
        elif na is None:
            out.append(f"artifact {name}: locked but the sources no longer declare it")
        else:
            same_tc = locked.toolchains.get(oa.target) == fresh.toolchains.get(na.target)
            od, nd = asdict(oa), asdict(na)
            for k in sorted(od):
                if od[k] != nd[k] and (same_tc or k not in _CROSS_TOOLCHAIN):
                    out.append(f"artifact {name}: {k} locked {_short(od[k])}, now {_short(nd[k])}")
    if out:
        for t in sorted(locked.toolchains.keys() | fresh.toolchains.keys()):
            a, b = locked.toolchains.get(t), fresh.toolchains.get(t)
            if a != b:
                out.append(f"toolchain {t}: locked with {a or 'none'}, now {b or 'none'}")
    return out


def compare_pins(locked: Lock, pinned: dict[str, ToolchainPins]) -> list[str]:
    """Every way the lock's toolchain pins differ from `pinned` (requirements/build.txt's, for the
    toolchains the lock names), one line each: a pin, a version or a file hash added or gone."""
    out: list[str] = []
    for t in sorted(locked.pins.keys() | pinned.keys()):
        a, b = locked.pins.get(t), pinned.get(t)
        if a == b:
            continue
        at = f"toolchain {t} ({locked.toolchains[t]})" if t in locked.toolchains else f"toolchain {t}"
        if b is None:
            out.append(f"{at}: the lock records its pins, requirements/build.txt pins none of it")
            continue
        if a is None:
            out.append(f"{at}: the lock records no pins, requirements/build.txt pins it ({b.package})")
            continue
        if a.package != b.package:
            out.append(f"{at}: the lock names package {a.package}, requirements/build.txt gives {b.package}")
        old = {p.name: p for p in a.packages}
        new = {p.name: p for p in b.packages}
        for name in sorted(old.keys() | new.keys()):
            o, n = old.get(name), new.get(name)
            if o is None:
                out.append(
                    f"{at}: requirements/build.txt pins {name} {n.version if n else ''}, the lock does not"
                )
            elif n is None:
                out.append(f"{at}: the lock pins {name} {o.version}, requirements/build.txt no longer does")
            elif o.version != n.version:
                out.append(f"{at}: {name} locked at {o.version}, requirements/build.txt pins {n.version}")
            elif o.sha256 != n.sha256:
                gone, added = sorted(set(o.sha256) - set(n.sha256)), sorted(set(n.sha256) - set(o.sha256))
                out.append(
                    f"{at}: {name} {o.version} file hashes differ (locked only: "
                    f"{', '.join(h[:16] + '...' for h in gone) or 'none'}; requirements/build.txt only: "
                    f"{', '.join(h[:16] + '...' for h in added) or 'none'})"
                )
    return out


def _short(v: Any) -> str:
    if isinstance(v, str) and len(v) == 64:
        return v[:16] + "..."
    return repr(v)
