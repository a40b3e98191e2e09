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
import os
import tarfile
import zipfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from netra import targets
from netra.core.hashing import sha256_bytes
from netra.errors import NetraError, WheelGateError
from netra.release import manifests
from netra.runtime import layout, verifier
from netra.runtime import lockfile as lock_mod
from netra.runtime.layout import BUILD_RECORD, PACKAGE_DATA, members
from netra.runtime.lockfile import LOCK_PATH, Lock

KINDS = ("missing", "altered", "unexpected", "invalid")
MEMBER_LIMIT = 256 << 20  # no member of a Netra wheel is near this; a larger one is not read
# What the wheel build needs from an sdist besides the locked files (which the lock names itself).
SDIST_BUILD_INPUTS = ("pyproject.toml", "build_backend", "netra")
# Where manifests.tracked_files looks: in an sdist, every file there must be in the lock.
TRACKED_BASES = tuple(sorted(f + "/" for f in lock_mod.ROLE_FOLDERS.values()))
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
    from netra.core import files

    wheel = Path(wheel)
    try:
        raw = files.read_path(wheel, limit=files.WHEEL_LIMIT, what="the wheel")
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            return _wheel_problems(z, lock, lock_bytes)
    except NetraError as e:
        return [Problem("invalid", wheel.name, f"not a readable wheel: {e.message}")]
    except (OSError, zipfile.BadZipFile, csv.Error, UnicodeDecodeError, EOFError, ValueError) as e:
        return [Problem("invalid", wheel.name, f"not a readable wheel: {e}")]


def _wheel_problems(z: zipfile.ZipFile, lock: Lock, lock_bytes: bytes | None) -> list[Problem]:
    """The wheel checks proper, on an open archive (see check_wheel)."""
    infos = z.infolist()
    names = [i.filename for i in infos]
    out: list[Problem] = []
    counts = Counter(names)
    out += [Problem("invalid", n, "stored more than once") for n in sorted(counts) if counts[n] > 1]
    out += [
        Problem("invalid", i.filename, f"{i.file_size} bytes: too large")
        for i in infos
        if i.file_size > MEMBER_LIMIT
    ]
    if any(p.kind == "invalid" for p in out):
        return out
    prefix = PACKAGE_DATA + "/"
    expected = {prefix + m.data_path: m for m in members(lock)}
    present = {n for n in names if n.startswith(prefix) and not n.endswith("/")}
    for name in sorted(expected.keys() - present):
        out.append(Problem("missing", name))
    for name in sorted(present - expected.keys()):
        out.append(Problem("unexpected", name, "not implied by the lock"))
    suffixes = tuple(sorted({t.suffix for t in targets.every()}))  # every registered class's code objects
    for name in sorted(n for n in names if not n.startswith(prefix) and n.endswith(suffixes)):
        out.append(Problem("unexpected", name, f"code object outside {PACKAGE_DATA}"))

    def data(m_path: str) -> bytes | None:
        return z.read(prefix + m_path) if prefix + m_path in present else None

    packaged_lock = data("manifest.lock")
    if packaged_lock is not None:
        out += _lock_problems(prefix + "manifest.lock", packaged_lock, lock, lock_bytes)
    record_raw = data(BUILD_RECORD)
    record = None
    if record_raw is not None and packaged_lock is not None:
        try:
            record = layout.read_record(
                record_raw, packaged_lock, prefix + BUILD_RECORD, prefix + "manifest.lock", ""
            )
            if lock_mod.to_dict(record.lock) != lock_mod.to_dict(lock):
                out.append(
                    Problem("altered", prefix + BUILD_RECORD, "its copy of the lock differs from the lock")
                )
        except NetraError as e:
            out.append(
                Problem(
                    "altered", prefix + BUILD_RECORD, e.message.removeprefix(prefix + BUILD_RECORD + ": ")
                )
            )
    intact: dict[str, bytes] = {}  # tracked files whose bytes are the locked ones, by lock path
    for name, m in sorted(expected.items()):
        if name not in present or m.kind in ("lock", "build_record"):
            continue
        blob = z.read(name)
        if m.kind == "code_object":
            a = lock.artifact(m.origin)
            assert a is not None
            rec = record.code_objects.get(m.data_path) if record else None
            same = record is not None and record.toolchains.get(a.target) == lock.toolchains.get(a.target)
            found = verifier.code_object(
                name, blob, a, recorded=rec.sha256 if rec else None, same_toolchain=same
            )
        else:
            found = verifier.locked_file(name, m.kind, blob, m.sha256)
            if not found:
                intact[m.origin] = blob
        if found:
            out.append(_altered(verifier.first(found)))
    # What the intact files say to each other, as doctor asks it: tables with their evidence, to
    # their rules and the lock; every documented gap against the lock.
    said = verifier.agreement(lock, intact, lambda path: prefix + (layout.data_path(path) or path))
    for name, found in said.invalid.items():
        out.append(_invalid_table(name, found))
    out += [Problem("invalid", f.member, f.detail.removeprefix(f.member + ": ")) for f in said.disagreements]
    out += _sbom_problems(z, names, lock, packaged_lock)
    reported = {p.member for p in out}
    out += [p for p in _record_problems(z, names) if p.member not in reported]  # one line per member
    return out


def _sbom_problems(
    z: zipfile.ZipFile, names: list[str], lock: Lock, packaged_lock: bytes | None
) -> list[Problem]:
    """The SBOM at PEP 770's place, a CycloneDX document, byte for byte what the packaged lock generates
    (netra.release.sbom: a pure function of the lock's bytes and the version the dist-info names)."""
    import json

    from netra.release import sbom

    dist_infos = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
    if len(dist_infos) != 1:
        return []  # _record_problems names it
    name = sbom.member(dist_infos[0])
    if name not in names:
        return [Problem("missing", name, "the SBOM the lock generates (PEP 770)")]
    blob = z.read(name)
    try:
        doc = json.loads(blob)
        if not isinstance(doc, dict) or (doc.get("bomFormat"), doc.get("specVersion")) != (
            "CycloneDX",
            sbom.SPEC_VERSION,
        ):
            raise ValueError(f"not bomFormat CycloneDX, specVersion {sbom.SPEC_VERSION}")
    except ValueError as e:  # json's errors included
        return [Problem("altered", name, f"not a CycloneDX {sbom.SPEC_VERSION} JSON document ({e})")]
    if packaged_lock is None:
        return []  # the lock is reported missing: nothing to generate it from
    version = dist_infos[0].removesuffix(".dist-info").rpartition("-")[2]
    if blob != sbom.generate(lock, packaged_lock, version):
        return [Problem("altered", name, f"differs from the SBOM its lock generates for version {version}")]
    return []


def _altered(f: verifier.Finding | None) -> Problem:
    """A member whose bytes are not the bound ones, in the gate's words (the verifier's most specific
    finding on it: one problem per member)."""
    assert f is not None
    short = f"{_short(f.found or '')}, locked {_short(f.expected or '')}"
    detail = {
        "text_sha256": f".text sha256 {short}",
        "parse": f.detail.removeprefix(f.member + ": "),
        "launch_sha256": f"launch digest (descriptor and metadata) {short}",
        "sha256": f"sha256 {short}" if f.source == "lock" else f"sha256 differs from {BUILD_RECORD}",
        "code_sha256": f"sha256 {short} for the same toolchain",
    }[f.check]
    return Problem("altered", f.member, detail)


def _invalid_table(name: str, found: list[verifier.Finding]) -> Problem:
    """A shipped table that breaks its rules (or its evidence file does), or disagrees with the lock."""
    if found[0].check == "rules":
        f = found[0]
        return Problem("invalid", f.member, f.detail.removeprefix(f.member + ": "))
    wrong = [f.detail for f in found]
    more = f" and {len(wrong) - 2} more" if len(wrong) > 2 else ""
    return Problem("invalid", name, "disagrees with the lock: " + "; ".join(wrong[:2]) + more)


def _lock_problems(name: str, packaged: bytes, lock: Lock, lock_bytes: bytes | None) -> list[Problem]:
    if lock_bytes is not None:
        if packaged != lock_bytes:
            got, want = _short(sha256_bytes(packaged)), _short(sha256_bytes(lock_bytes))
            return [Problem("altered", name, f"sha256 {got}, the tree's {LOCK_PATH} {want}")]
        return []
    try:
        says = lock_mod.loads(packaged, name)
    except NetraError as e:
        return [Problem("altered", name, f"not a valid lock: {e.message}")]
    if lock_mod.to_dict(says) != lock_mod.to_dict(lock):
        return [Problem("altered", name, "differs from the lock it is checked against")]
    return []


def parse_lock(raw: bytes, where: str) -> Lock:
    """A lock from the exact bytes that will ship, so what is checked and what is packaged agree."""
    return lock_mod.loads(raw, where)


def read_lock(path: str | Path) -> tuple[bytes, Lock]:
    """One bounded read of a lock file: its bytes and their parse."""
    return lock_mod.read_with_bytes(path)


def packaged_lock(wheel: str | Path) -> bytes:
    """The lock a wheel carries, for checking a wheel on its own."""
    try:
        with zipfile.ZipFile(wheel) as z:
            info = z.getinfo(f"{PACKAGE_DATA}/manifest.lock")
            if info.file_size > MEMBER_LIMIT:
                raise KeyError("too large")
            return z.read(info)
    except (OSError, KeyError, zipfile.BadZipFile, ValueError) as e:
        raise WheelGateError(
            f"{Path(wheel).name}: carries no readable {PACKAGE_DATA}/manifest.lock ({e})",
            "pass the lock to check it against with --lock",
        ) from e


# -- sdists --------------------------------------------------------------------------------------


def sdist_required(root: str | Path, lock: Lock) -> dict[str, str | None]:
    """Every file a wheel build from the sdist needs -> its locked sha256 (None: compare with the tree)."""
    root = Path(root)
    need: dict[str, str | None] = {LOCK_PATH: None}
    for path, _role in manifests.tracked_files(root):
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
            member = files.get(rel)
            if member is None:
                out.append(Problem("missing", rel))
                continue
            fh = tar.extractfile(member)
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
