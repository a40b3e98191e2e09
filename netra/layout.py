"""Where each locked file lives: in the source tree, in a build folder, and inside the wheel.

One mapping, used by the build hook (what to put in the wheel), the wheel gate (what must be in it),
the runtime and doctor (where to find it after install). Kernel sources are locked but not shipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from netra.hashing import sha256_bytes
from netra.lock import LOCK_PATH, Lock, Toolchain, to_dict

PACKAGE_DATA = "netra/_data"  # inside the wheel / site-packages
BUILD_RECORD = "build.json"  # under netra/_data: whole-file sha256 of each code object as built
_PREFIXES = (("release/tables/", "tables/"), ("manifests/", "manifests/"))


def data_path(lock_path: str) -> str | None:
    """The path under netra/_data for a tracked file, or None when the file is not shipped (sources)."""
    if lock_path == LOCK_PATH:
        return "manifest.lock"
    for src, dst in _PREFIXES:
        if lock_path.startswith(src):
            return dst + lock_path[len(src) :]
    return None


@dataclass(frozen=True)
class Member:
    """One file the installed package must carry, and how to check it."""

    data_path: str  # relative to netra/_data
    kind: str  # "lock", "build_record", "table", "manifest" or "code_object"
    sha256: str | None  # whole-file sha256 (None for the lock itself and for code objects)
    text_sha256: str | None  # .text sha256 for code objects
    origin: str  # the lock's name for it: a tracked path or an artifact name


def members(lock: Lock) -> list[Member]:
    """Every file under netra/_data that the lock implies, sorted by path."""
    out = [
        Member("manifest.lock", "lock", None, None, LOCK_PATH),
        Member(BUILD_RECORD, "build_record", None, None, BUILD_RECORD),
    ]
    for f in lock.files:
        dp = data_path(f.path)
        if dp is not None:
            out.append(Member(dp, f.role, f.sha256, None, f.path))
    for a in lock.artifacts:
        out.append(Member(a.file, "code_object", None, a.text_sha256, a.name))
    return sorted(out, key=lambda m: m.data_path)


def build_record(lock_text: bytes, lock: Lock, code_objects: dict[str, bytes], built_with: Toolchain) -> str:
    """What this build produced, bound to the lock it was gated against.

    The lock pins .text (stable across toolchains); this record pins each whole code object as built,
    so the installed runtime can verify descriptors and metadata too with one sha256 per file and no
    ELF parsing. Keys: data paths under netra/_data. It also carries the lock's content as JSON, bound
    to the TOML's sha256: the runtime and doctor read that copy, because parsing the TOML in pure
    Python costs more than verifying every file of the install (docs/performance.md).
    """
    by_file = {a.file: a for a in lock.artifacts}
    entries = {
        path: {
            "sha256": sha256_bytes(data),
            "text_sha256": by_file[path].text_sha256,
            "artifact": by_file[path].name,
        }
        for path, data in sorted(code_objects.items())
    }
    record = {
        "schema": 1,
        "lock_sha256": sha256_bytes(lock_text),
        "toolchain": {"flavour": built_with.flavour, "version": built_with.version},
        "code_objects": entries,
        "lock": to_dict(lock),
    }
    return json.dumps(record, indent=1, sort_keys=True) + "\n"
