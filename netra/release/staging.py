"""What a wheel carries under netra/_data, built, gated and written to a folder for the packager.

The hatch hook force-includes exactly these files; the wheel gate then checks the finished archive
against the same lock, and the SBOM the lock generates goes to the wheel's dist-info. Every byte staged is a byte hashed here, so edits to the tree while a build
runs cannot slip into the wheel, and file modes come from here, never from the umask.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from netra import __version__
from netra.core import files
from netra.core.hashing import sha256_bytes
from netra.errors import IntegrityError
from netra.release import build, sbom
from netra.runtime import layout
from netra.runtime.lockfile import LOCK_PATH, Lock


@dataclass(frozen=True)
class Staged:
    lock: Lock
    lock_bytes: bytes
    report: build.Report
    files: dict[str, Path]  # data path under netra/_data -> staged file
    sbom: Path  # the SBOM generated from the lock (netra.release.sbom), for <name>.dist-info/sboms/


def stage(
    root: Path, work: Path, *, jobs: int | None = None, progress: build.Progress | None = None
) -> Staged:
    """Prove the lock against the tree and build every artifact, then stage layout.members(lock).

    Every code object is compiled now unless NETRA_COMPILE_CACHE=1 asks for the compile cache: the
    release's promise is a wheel built from the locked sources by this build (docs/build.md)."""
    from netra.release import compilecache

    root = Path(root).resolve()
    cache = compilecache.open_cache(default=False)
    report = build.build(root, work / "code", jobs=jobs, progress=progress, cache=cache)
    lock, lock_bytes = report.lock, report.lock_bytes
    wanted = layout.members(lock)
    code = {
        m.data_path: (work / "code" / m.data_path).read_bytes() for m in wanted if m.kind == "code_object"
    }
    built_with = {t: tools.identity for t, tools in report.tools.items()}
    record = layout.build_record(lock_bytes, lock, report.examined, built_with).encode()
    staged: dict[str, Path] = {}
    for m in wanted:
        if m.kind == "lock":
            blob = lock_bytes
        elif m.kind == "build_record":
            blob = record
        elif m.kind == "code_object":
            blob = code[m.data_path]
        else:
            blob = files.read_bytes(root, m.origin, limit=files.SOURCE_LIMIT, where=m.origin)
            if sha256_bytes(blob) != m.sha256:
                raise IntegrityError(f"{m.origin} changed during the build", "build again")
        dest = work / "data" / m.data_path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blob)
        os.chmod(dest, 0o644)
        staged[m.data_path] = dest
    if files.read_bytes(root, LOCK_PATH, limit=files.LOCK_LIMIT, where=LOCK_PATH) != lock_bytes:
        raise IntegrityError(f"{LOCK_PATH} changed during the build", "build again")
    bom = work / sbom.FOLDER / sbom.FILE
    bom.parent.mkdir(parents=True, exist_ok=True)
    bom.write_bytes(sbom.generate(lock, lock_bytes, __version__))
    os.chmod(bom, 0o644)
    return Staged(lock=lock, lock_bytes=lock_bytes, report=report, files=staged, sbom=bom)
