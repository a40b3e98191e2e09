"""The release gate's last word: a built wheel (or sdist) carries exactly the locked files, bit for bit.

Used three times with the same code: by the build hook's finalize (before the wheel leaves the build),
by the in-tree backend wrapper (which re-checks any wheel the hook did not vouch for, so
HATCH_BUILD_NO_HOOKS cannot produce a kernel-less wheel), and by `netra verify-wheel` (for a wheel
someone hands you). Checks return a list of problems instead of raising on the first one, so the
one error message can name every missing, altered and unexpected member at once.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import tarfile
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from netra import catalog as catalog_mod
from netra import lock as lock_mod
from netra.codeobject import text_sha256
from netra.errors import LockError, NetraError, WheelGateError
from netra.hashing import sha256_bytes
from netra.layout import BUILD_RECORD, PACKAGE_DATA, members
from netra.lock import LOCK_PATH, Lock, to_dict

KINDS = ("missing", "altered", "unexpected", "invalid")
CODE_OBJECT_SUFFIXES = (".hsaco", ".co")
# What the wheel build needs from an sdist besides the locked files (which the lock names itself).
SDIST_BUILD_INPUTS = ("pyproject.toml", "build_backend", "netra")
# Where catalog.tracked_files looks: in an sdist, every file there must be in the lock.
TRACKED_BASES = ("kernels/", "manifests/", "release/tables/")
WHEEL_HINT = (
    "rebuild with `python -m build` (or tools/release) from a tree where `netra lock --check` passes; "
    "never edit a built wheel"
)
STRAY_HINT = (
    "remove the unexpected files from the source tree (or from [tool.hatch.build] in pyproject.toml) "
    "and rebuild: only what the lock implies may ship"
)
SDIST_HINT = (
    "include every locked and build file in [tool.hatch.build.targets.sdist] (only-include/exclude), "
    "and keep netra/_data out of it"
)


@dataclass(frozen=True)
class Problem:
    """One way an archive differs from what the lock implies."""

    kind: str  # one of KINDS
    member: str  # the path inside the archive (or the archive itself for "invalid")
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.member} ({self.detail})" if self.detail else self.member


def _short(digest: str) -> str:
    return digest[:12] + "..."


# -- wheels --------------------------------------------------------------------------------------


def _record_problems(z: zipfile.ZipFile, names: list[str]) -> list[Problem]:
    """RECORD lists every other file with its sha256 and size, and nothing else (PEP 376/427)."""
    dist_infos = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(dist_infos) != 1:
        return [Problem("invalid", "*.dist-info", f"expected one .dist-info folder, found {len(dist_infos)}")]
    record_name = f"{dist_infos[0]}/RECORD"
    if record_name not in names:
        return [Problem("missing", record_name)]
    out: list[Problem] = []
    listed: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(z.read(record_name).decode("utf-8"))):
        if row:
            listed[row[0]] = (row[1] if len(row) > 1 else "", row[2] if len(row) > 2 else "")
    signatures = {f"{dist_infos[0]}/RECORD.jws", f"{dist_infos[0]}/RECORD.p7s"}
    for name in names:
        if name == record_name or name in signatures or name.endswith("/"):
            continue
        if name not in listed:
            out.append(Problem("unexpected", name, "not listed in RECORD"))
            continue
        want_hash, want_size = listed[name]
        data = z.read(name)
        digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")
        if want_hash != digest or want_size != str(len(data)):
            out.append(Problem("altered", name, "hash or size differs from RECORD"))
    for name in sorted(set(listed) - set(names) - {record_name}):
        out.append(Problem("missing", name, "listed in RECORD"))
    return out


def check_wheel(wheel: str | Path, lock: Lock, lock_bytes: bytes | None = None) -> list[Problem]:
    """Every way `wheel` differs from what `lock` implies; empty when it may be released.

    lock_bytes: the tree's lock file as read; the packaged lock must equal it byte for byte. Without
    it (a wheel checked on its own), the packaged lock must at least say the same as `lock`.
    """
    wheel = Path(wheel)
    try:
        with zipfile.ZipFile(wheel) as z:
            return _wheel_problems(z, lock, lock_bytes)
    except (OSError, zipfile.BadZipFile, csv.Error, UnicodeDecodeError) as e:
        return [Problem("invalid", wheel.name, f"not a readable wheel: {e}")]


def _wheel_problems(z: zipfile.ZipFile, lock: Lock, lock_bytes: bytes | None) -> list[Problem]:
    """The wheel checks proper, on an open archive (see check_wheel)."""
    names = [i.filename for i in z.infolist()]
    out: list[Problem] = []
    counts = Counter(names)
    out += [Problem("invalid", n, "stored more than once") for n in sorted(counts) if counts[n] > 1]
    prefix = PACKAGE_DATA + "/"
    expected = {prefix + m.data_path: m for m in members(lock)}
    present = {n for n in names if n.startswith(prefix) and not n.endswith("/")}
    for name in sorted(expected.keys() - present):
        out.append(Problem("missing", name))
    for name in sorted(present - expected.keys()):
        out.append(Problem("unexpected", name, "not implied by the lock"))
    for name in sorted(n for n in names if not n.startswith(prefix) and n.endswith(CODE_OBJECT_SUFFIXES)):
        out.append(Problem("unexpected", name, f"code object outside {PACKAGE_DATA}"))

    def data(m_path: str) -> bytes | None:
        return z.read(prefix + m_path) if prefix + m_path in present else None

    packaged_lock = data("manifest.lock")
    if packaged_lock is not None:
        out += _lock_problems(prefix + "manifest.lock", packaged_lock, lock, lock_bytes)
    record_raw = data(BUILD_RECORD)
    record = _build_record(prefix + BUILD_RECORD, record_raw, packaged_lock, lock, out)
    for name, m in sorted(expected.items()):
        if name not in present or m.kind in ("lock", "build_record"):
            continue
        blob = z.read(name)
        if m.kind == "code_object":
            out += _code_object_problems(name, blob, m.text_sha256 or "", record.get(m.data_path))
        elif m.sha256 is not None and sha256_bytes(blob) != m.sha256:
            got = sha256_bytes(blob)
            out.append(Problem("altered", name, f"sha256 {_short(got)}, locked {_short(m.sha256)}"))
    reported = {p.member for p in out}
    out += [p for p in _record_problems(z, names) if p.member not in reported]  # one line per member
    return out


def _lock_problems(name: str, packaged: bytes, lock: Lock, lock_bytes: bytes | None) -> list[Problem]:
    if lock_bytes is not None:
        if packaged != lock_bytes:
            got, want = _short(sha256_bytes(packaged)), _short(sha256_bytes(lock_bytes))
            return [Problem("altered", name, f"sha256 {got}, the tree's {LOCK_PATH} {want}")]
        return []
    try:
        says = lock_mod.from_dict(_loads_toml(packaged), name)
    except NetraError as e:
        return [Problem("altered", name, f"not a valid lock: {e.message}")]
    if lock_mod.to_dict(says) != lock_mod.to_dict(lock):
        return [Problem("altered", name, "differs from the lock it is checked against")]
    return []


def _loads_toml(data: bytes) -> dict:
    from netra import _toml

    try:
        return _toml.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as e:
        raise LockError(f"not valid TOML ({e})", "regenerate it with `netra lock`") from e


def parse_lock(raw: bytes, where: str) -> Lock:
    """A lock from the exact bytes that will ship, so what is checked and what is packaged agree."""
    try:
        return lock_mod.from_dict(_loads_toml(raw), where)
    except LockError as e:
        message = e.message if e.message.startswith(where) else f"{where}: {e.message}"
        raise LockError(message, e.hint) from e


def read_lock(path: str | Path) -> tuple[bytes, Lock]:
    """One read of a lock file: its bytes and their parse."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError as e:
        raise LockError(f"{path}: lock file not found", "create it with `netra lock`") from e
    return raw, parse_lock(raw, str(path))


def _build_record(
    name: str, raw: bytes | None, packaged_lock: bytes | None, lock: Lock, out: list[Problem]
) -> dict[str, dict]:
    """build.json's code_objects, after checking it describes exactly the locked code objects."""
    if raw is None:
        return {}
    try:
        rec = json.loads(raw)
        entries = rec["code_objects"]
        if rec.get("schema") != 1 or not isinstance(entries, dict):
            raise ValueError(f"schema {rec.get('schema')!r}")
    except (ValueError, KeyError, TypeError) as e:
        out.append(Problem("altered", name, f"not a valid build record ({e})"))
        return {}
    wrong: list[str] = []
    if packaged_lock is not None and rec.get("lock_sha256") != sha256_bytes(packaged_lock):
        wrong.append("lock_sha256 does not match the packaged lock")
    if rec.get("lock") != to_dict(lock):
        wrong.append("its copy of the lock differs from the lock")
    by_file = {a.file: a for a in lock.artifacts}
    wrong += [f"records {path} (not locked)" for path in sorted(entries.keys() - by_file.keys())]
    wrong += [f"does not record {path}" for path in sorted(by_file.keys() - entries.keys())]
    for path in sorted(entries.keys() & by_file.keys()):
        e, a = entries[path], by_file[path]
        if not isinstance(e, dict) or e.get("text_sha256") != a.text_sha256 or e.get("artifact") != a.name:
            wrong.append(f"entry for {path} disagrees with the lock")
    if wrong:  # one problem for the file, however many entries are off
        more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
        out.append(Problem("altered", name, ", ".join(wrong[:3]) + more))
    return {k: v for k, v in entries.items() if isinstance(v, dict)}


def _code_object_problems(name: str, blob: bytes, locked_text: str, recorded: dict | None) -> list[Problem]:
    try:
        got = text_sha256(blob, name)
    except NetraError as e:
        return [Problem("altered", name, e.message)]
    except Exception as e:  # a doctored file can break the ELF parser in many ways; all mean "altered"
        return [Problem("altered", name, f"not a readable code object ({type(e).__name__}: {e})")]
    if got != locked_text:
        return [Problem("altered", name, f".text sha256 {_short(got)}, locked {_short(locked_text)}")]
    if recorded is not None and recorded.get("sha256") != sha256_bytes(blob):
        return [Problem("altered", name, f"sha256 differs from {BUILD_RECORD}")]
    return []


def packaged_lock(wheel: str | Path) -> bytes:
    """The lock a wheel carries, for checking a wheel on its own."""
    try:
        with zipfile.ZipFile(wheel) as z:
            return z.read(f"{PACKAGE_DATA}/manifest.lock")
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        raise WheelGateError(
            f"{Path(wheel).name}: carries no readable {PACKAGE_DATA}/manifest.lock ({e})",
            "pass the lock to check it against with --lock",
        ) from e


# -- sdists --------------------------------------------------------------------------------------


def sdist_required(root: str | Path, lock: Lock) -> dict[str, str | None]:
    """Every file a wheel build from the sdist needs -> its locked sha256 (None: compare with the tree)."""
    root = Path(root)
    need: dict[str, str | None] = {LOCK_PATH: None}
    for path, _role in catalog_mod.tracked_files(root):
        need[path] = None
    for f in lock.files:
        need[f.path] = f.sha256
    for base in SDIST_BUILD_INPUTS:
        p = root / base
        if p.is_file():
            need[base] = None
        elif p.is_dir():
            for q in _walk(p):
                rel = q.relative_to(root).as_posix()
                if not rel.startswith(PACKAGE_DATA + "/"):
                    need.setdefault(rel, None)
    return dict(sorted(need.items()))


def _walk(d: Path) -> Iterable[Path]:
    for dirpath, dirnames, filenames in os.walk(d):
        dirnames[:] = sorted(n for n in dirnames if n != "__pycache__" and not n.startswith("."))
        for n in sorted(filenames):
            if not n.endswith((".pyc", ".pyo")) and not n.startswith("."):
                yield Path(dirpath) / n


def check_sdist(sdist: str | Path, root: str | Path, lock: Lock) -> list[Problem]:
    """Every locked and build file in the sdist with the tree's bytes; no unlocked file where locked live."""
    sdist, root = Path(sdist), Path(root)
    try:
        tar = tarfile.open(sdist, "r:gz")  # noqa: SIM115 - closed by the with below; open errors reported
    except (OSError, tarfile.TarError) as e:
        return [Problem("invalid", sdist.name, f"not a readable sdist: {e}")]
    with tar:
        files = {}
        for ti in tar.getmembers():
            if ti.isfile():
                files[ti.name.partition("/")[2]] = ti  # drop the {name}-{version}/ folder
        out: list[Problem] = []
        locked = {f.path for f in lock.files} | {LOCK_PATH}
        for rel, locked_sha in sdist_required(root, lock).items():
            ti = files.get(rel)
            if ti is None:
                out.append(Problem("missing", rel))
                continue
            fh = tar.extractfile(ti)
            got = sha256_bytes(fh.read() if fh else b"")
            want = locked_sha if locked_sha is not None else _file_sha(root / rel)
            if got != want:
                against = "locked" if locked_sha else "tree"
                out.append(Problem("altered", rel, f"sha256 {_short(got)}, {against} {_short(want or '')}"))
        for rel in sorted(files):
            tracked_dir = rel.startswith(TRACKED_BASES)
            if tracked_dir and rel not in locked and not Path(rel).name.startswith("."):
                out.append(Problem("unexpected", rel, "not in the lock"))
            elif rel.startswith(PACKAGE_DATA + "/"):
                out.append(Problem("unexpected", rel, "built data does not belong in an sdist"))
    return out


def _file_sha(p: Path) -> str | None:
    try:
        return sha256_bytes(p.read_bytes())
    except OSError:
        return None


# -- reporting -----------------------------------------------------------------------------------


def error(
    archive: str | Path, problems: list[Problem], *, why: str = "", hint: str | None = None
) -> WheelGateError:
    """One line naming every problem, grouped: missing, altered, unexpected, invalid.

    Without a hint: a wheel whose only problems are stray files gets "remove them"; anything else
    gets "rebuild from a tree that matches its lock".
    """
    if hint is None:
        hint = STRAY_HINT if all(p.kind == "unexpected" for p in problems) else WHEEL_HINT
    groups = []
    for kind in KINDS:
        these = [str(p) for p in problems if p.kind == kind]
        if these:
            groups.append(f"{kind} {len(these)}: " + ", ".join(these))
    because = f" ({why})" if why else ""
    lead = f"{Path(archive).name} refused{because}: it does not carry exactly the locked files"
    return WheelGateError(f"{lead}: " + "; ".join(groups), hint)


# -- the mark: which archives this process's build hook has already checked ------------------------

_VOUCHED: dict[str, str] = {}


def vouch(path: str | Path) -> None:
    """Record that the build hook checked this exact file (by content), so the backend wrapper need not."""
    p = Path(path).resolve()
    _VOUCHED[str(p)] = sha256_bytes(p.read_bytes())


def vouched(path: str | Path) -> bool:
    """True only if the hook checked this path and its bytes have not changed since."""
    p = Path(path).resolve()
    want = _VOUCHED.get(str(p))
    return want is not None and p.is_file() and sha256_bytes(p.read_bytes()) == want
