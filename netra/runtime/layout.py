"""Where each locked file lives (source tree, build folder, wheel) and build.json, the wheel's record.

One mapping, used by the build hook (what to put in the wheel), the wheel gate (what must be in it),
the runtime and doctor (where to find it after install). Kernel sources are locked but not shipped.

build.json pins each shipped code object as built (whole-file sha256, plus the .text and launch
digests the lock holds) and carries the lock's content as JSON, bound to the TOML's sha256: the runtime
and doctor read that copy, because parsing TOML in pure Python costs more than verifying every file of
the install (docs/performance.md). The record hashes itself (`record_sha256`), so a flipped byte
anywhere in it (an artifact name, the lock copy) is seen by every reader, not only by RECORD.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from netra.core import frozen
from netra.core import schema as s
from netra.errors import AlteredFileError
from netra.runtime.lockfile import LOCK_PATH, Lock, from_dict, from_vouched, to_dict

if TYPE_CHECKING:
    from netra.core.types import Toolchain
    from netra.targets.target import Examined

PACKAGE_DATA = "netra/_data"  # inside the wheel / site-packages
BUILD_RECORD = "build.json"  # under netra/_data
RECORD_SCHEMA = 2
_PREFIXES = (("release/tables/", "tables/"), ("release/evidence/", "evidence/"), ("manifests/", "manifests/"))


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
    kind: str  # "lock", "build_record", "table", "evidence", "manifest" or "code_object"
    sha256: str | None  # whole-file sha256 (None for the lock itself and for code objects)
    text_sha256: str | None  # .text sha256 for code objects
    origin: str  # the lock's name for it: a tracked path or an artifact name
    target: str = ""  # GPU class of a code object


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
        out.append(Member(a.file, "code_object", None, a.text_sha256, a.name, a.target))
    return sorted(out, key=lambda m: m.data_path)


def canonical(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def build_record(
    lock_bytes: bytes, lock: Lock, examined: list[Examined], built_with: dict[str, Toolchain]
) -> str:
    """build.json for a wheel whose code objects are `examined`, gated against `lock`."""
    entries = {
        e.spec.file: {
            "artifact": e.spec.name,
            "sha256": e.code_sha256,
            "text_sha256": e.text_sha256,
            "launch_sha256": e.launch_sha256,
        }
        for e in sorted(examined, key=lambda e: e.spec.file)
    }
    record: dict[str, Any] = {
        "schema": RECORD_SCHEMA,
        "lock_sha256": hashlib.sha256(lock_bytes).hexdigest(),
        "toolchains": {
            t: {"flavour": tc.flavour, "version": tc.version} for t, tc in sorted(built_with.items())
        },
        "code_objects": entries,
        "lock": to_dict(lock),
    }
    record["record_sha256"] = hashlib.sha256(canonical(record)).hexdigest()
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


@dataclass(frozen=True)
class CodeRecord:
    artifact: str
    sha256: str
    text_sha256: str
    launch_sha256: str


@dataclass(frozen=True)
class Record:
    lock: Lock  # the bound copy
    code_objects: dict[str, CodeRecord]  # data path -> record
    toolchains: dict[str, Toolchain]


_SHA = s.sha256()
_RECORD = s.Table(
    {
        "schema": s.Const(RECORD_SCHEMA),
        "lock_sha256": _SHA,
        "record_sha256": _SHA,
        "toolchains": s.MapOf(
            s.Str(pattern=re.compile(r"[a-z][a-z0-9_]*"), max_len=32),
            s.Table({"flavour": s.Str(max_len=32), "version": s.Str(max_len=64)}),
            max_len=32,
        ),
        "code_objects": s.MapOf(
            s.Str(pattern=re.compile(r"[a-z0-9_]+/netra_[a-z0-9_]+\.[a-z]+"), max_len=160),
            s.Table(
                {"artifact": s.Str(max_len=128), "sha256": _SHA, "text_sha256": _SHA, "launch_sha256": _SHA}
            ),
            max_len=100_000,
        ),
        "lock": s.Table({}, extra=True),  # read by the lock's own schema below
    }
)


def read_record(
    raw: bytes,
    lock_bytes: bytes,
    where: str,
    lock_where: str,
    hint: str,
    *,
    vouched: bool = False,
    files_of_every_class: bool = True,
) -> Record:
    """build.json, checked whole: its own hash, its schema, its binding to these lock bytes, its lock
    copy (through the lock schema) and every code-object entry against that copy. AlteredFileError
    names the file that is wrong: build.json, or the lock when the binding does not hold.

    `vouched`: the caller proved these bytes are those the gated build wrote (their sha256 is the one
    the wheel's RECORD holds). Its own hash and the schemas, which that build applied, are then not
    computed again (they were most of a first lookup's cost); the binding to the lock bytes and the
    cross-checks still are, and anything a gated build does not write falls back to the full read,
    which names what is wrong. `files_of_every_class` False (a first lookup, which serves one class):
    vouched entries are matched to the lock by artifact name, and the caller holds its own class's
    entries to the files the class names (so no other class's module is imported)."""

    def bad(what: str) -> AlteredFileError:
        return AlteredFileError(f"{where}: {what}", hint)

    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise bad(f"not a readable build record ({str(e)[:200]})") from None
    if not isinstance(data, dict) or not isinstance(data.get("record_sha256"), str):
        raise bad("not a build record (no record_sha256)")

    def self_hash() -> None:
        body = {k: v for k, v in data.items() if k != "record_sha256"}
        try:
            digest = hashlib.sha256(canonical(body)).hexdigest()
        except (TypeError, ValueError) as e:
            raise bad(f"not a readable build record ({e})") from None
        if digest != data["record_sha256"]:
            raise bad(f"altered: its content hashes to {digest}, it records {data['record_sha256']}")

    if not vouched:  # vouched bytes are the gated build's, whose record_sha256 was right
        self_hash()
    d: dict[str, Any] | None = None
    if vouched:
        try:
            lock = from_vouched(data["lock"])
            d = {k: data[k] for k in ("lock_sha256", "code_objects", "toolchains")}
            code = {p: frozen.build(CodeRecord, v) for p, v in d["code_objects"].items()}
            chains = _chains(d["toolchains"])
            if not isinstance(d["lock_sha256"], str) or not all(isinstance(p, str) for p in code):
                raise ValueError("not a record a gated build wrote")
        except (KeyError, TypeError, ValueError, AttributeError):
            d = None  # not what a gated build writes: the full read below says what is wrong
    if d is None:
        if vouched:
            self_hash()
        try:
            d = s.Reader(_RECORD, AlteredFileError, hint).read(data, where)
            lock = from_dict(data["lock"], f"{where}: lock copy")
        except AlteredFileError:
            raise
        except Exception as e:
            raise bad(str(e)) from None
        code = {p: CodeRecord(**v) for p, v in d["code_objects"].items()}
        chains = _chains(d["toolchains"])
    have = hashlib.sha256(lock_bytes).hexdigest()
    if d["lock_sha256"] != have:
        raise AlteredFileError(
            f"{lock_where} and {where} disagree: the build record was made for lock sha256 "
            f"{d['lock_sha256']}, the installed lock has sha256 {have}",
            hint,
        )
    wrong = _against_lock(code, lock, by_name=vouched and not files_of_every_class)
    if wrong:
        raise bad(", ".join(wrong[:3]) + (f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""))
    return Record(lock, code, chains)


def _against_lock(code: dict[str, CodeRecord], lock: Lock, *, by_name: bool) -> list[str]:
    """Every way the code-object entries disagree with the lock: one entry per locked artifact, at its
    file, with its hashes. `by_name`: matched by artifact name, each path held only to the class and
    name it starts with (the file suffix is the class module's, not imported for this)."""
    if by_name:
        locked = {a.name: a for a in lock.artifacts}
        named: dict[str, str] = {}
        for p, c in code.items():
            a = locked.get(c.artifact) if isinstance(c.artifact, str) else None
            if a is not None and c.artifact not in named and p.startswith(f"{a.target}/{a.name}."):
                named[c.artifact] = p
        if len(named) == len(code) == len(locked):
            return [
                f"its entry for {p} disagrees with the lock"
                for p in sorted(named.values())
                if (code[p].text_sha256, code[p].launch_sha256)
                != (locked[code[p].artifact].text_sha256, locked[code[p].artifact].launch_sha256)
            ]
        # not what a gated build writes: the full comparison below names what is wrong
    by_file = {a.file: a for a in lock.artifacts}
    wrong = [f"records {p}, which is not locked" for p in sorted(code.keys() - by_file.keys())]
    wrong += [f"does not record {p}" for p in sorted(by_file.keys() - code.keys())]
    for p in sorted(code.keys() & by_file.keys()):
        c, a = code[p], by_file[p]
        if (c.artifact, c.text_sha256, c.launch_sha256) != (a.name, a.text_sha256, a.launch_sha256):
            wrong.append(f"its entry for {p} disagrees with the lock")
    return wrong


def _chains(toolchains: dict[str, Any]) -> dict[str, Toolchain]:
    from netra import targets

    return {t: targets.toolchain(t, tc["flavour"], tc["version"]) for t, tc in toolchains.items()}
