"""`netra lock`, `netra lock --check` and `netra build`: one derivation of the lock from the tree.

All three (and the wheel build hook, through netra.release.staging) start the same way: load the catalog
(manifests x tactics x templates, strictly), hash every tracked file, compile every artifact the
sources declare with each class's proven toolchain, examine each code object, and derive the lock and
the tables from that. `netra lock` writes the result; `--check` and `netra build` compare it with
release/manifest.lock and the tables on disk, and any difference is refused naming it: a lock that
lacks an artifact the sources declare is a refusal, never a smaller build.

Work happens in a temporary directory that is always removed (also on SIGINT/SIGTERM, via
netra.core.interrupts in the CLI and the hook); the output folder, the tables and the lock are only
touched once everything has passed, and each file lands whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from netra import targets
from netra.core import files, interrupts
from netra.core.hashing import sha256_bytes
from netra.core.types import ArtifactSpec, Toolchain
from netra.errors import LockError, NetraError, PathError, TableError, ValidationError
from netra.release import lock as locking
from netra.release import manifests, requirements, tablegen
from netra.release.compilecache import Cache
from netra.release.manifests import Manifests
from netra.runtime import lockfile, tables
from netra.runtime.layout import PACKAGE_DATA
from netra.runtime.lockfile import Lock, LockedArtifact, TrackedFile
from netra.targets.target import Examined, Tools

Progress = Callable[[str], None]
LOCK_HINT = "if the change is intended run `netra lock` and commit the result; otherwise restore the files"


@dataclass
class Derived:
    """Everything the tree declares, built and examined (the code objects live in `work`)."""

    manifests: Manifests
    tools: dict[str, Tools]
    examined: list[Examined]
    file_hashes: dict[str, tuple[str, str]]  # tracked path -> (sha256, role), tables and evidence excluded
    tree_tables: dict[str, bytes]  # tracked table and evidence path -> bytes as in the tree
    work: Path
    seconds: float = 0.0
    cache: Cache | None = None  # the compile cache it used, with its counts (None: everything compiled)
    # requirements/build.txt's entries, where a class's toolchain is pinned there (else none are read)
    build_requirements: tuple[requirements.Requirement, ...] = ()


@dataclass
class Fresh:
    """A lock and its tables as the sources make them now."""

    lock: Lock
    tables: dict[str, str]  # tracked path -> content (the tables and the evidence files)
    voided: list[str] = field(default_factory=list)  # hardware certifications the change voids
    derived: Derived | None = None


def _jobs(jobs: int | None) -> int:
    return max(1, jobs or os.cpu_count() or 1)


def discover_all(classes: list[str]) -> dict[str, Tools]:
    """Each class's proven toolchain. A class without one stops everything: nothing drops a class."""
    return {t: targets.get(t).discover() for t in classes}


def derive(
    root: Path,
    work: Path,
    *,
    tools: dict[str, Tools] | None = None,
    jobs: int | None = None,
    progress: Progress | None = None,
    cache: Cache | None = None,
) -> Derived:
    """Load, hash, compile and examine everything the tree declares. Refuses on any static problem.

    With a `cache`, a code object whose inputs were compiled before is taken from it; either way the
    file in `work` is what is examined and compared with the lock (netra.release.compilecache).

    `work` is scratch space (under TMPDIR). When it fills up, what fails first is whatever wrote next:
    a probe (then "no nvcc found"), a tool ("No space left on device" as its words), a copy with no
    file name. Every failure is therefore checked against the scratch space first, and a full one is
    the error, naming the folder.
    """
    try:
        return _derive(root, work, tools=tools, jobs=jobs, progress=progress, cache=cache)
    except (NetraError, OSError) as e:
        full = scratch_full(work)
        if full is not None:
            raise NetraError(full, SCRATCH_HINT) from None
        if isinstance(e, OSError):
            raise _unwritable(e, work) from None
        raise


SCRATCH_HINT = "free space there, or point TMPDIR at a filesystem with room (a build needs a few MiB)"
_SCRATCH_MIN = 1 << 20  # less free than this after a failure: the failure was the full disk


def scratch_full(work: Path) -> str | None:
    """Why the filesystem of `work` is full (no room or no inodes left), or None."""
    try:
        st = os.statvfs(work if work.exists() else tempfile.gettempdir())
    except OSError:
        return None
    free = st.f_bavail * st.f_frsize
    if free >= _SCRATCH_MIN and st.f_favail != 0:
        return None
    left = f"{free >> 10} KiB free" if free < _SCRATCH_MIN else "no inodes free"
    return f"{tempfile.gettempdir()} (TMPDIR, netra's scratch folder): its filesystem is full ({left})"


def _derive(
    root: Path,
    work: Path,
    *,
    tools: dict[str, Tools] | None,
    jobs: int | None,
    progress: Progress | None,
    cache: Cache | None,
) -> Derived:
    t0 = time.monotonic()
    root = Path(root).resolve()
    man = manifests.load(root)
    tracked = manifests.tracked_files(root)
    pinned = any(targets.get(t).provision[0] == "pip-pinned" for t in man.targets())
    reqs = requirements.read(root) if pinned else ()  # read before the work: a bad file stops it at once
    file_hashes: dict[str, tuple[str, str]] = {}
    tree_tables: dict[str, bytes] = {}
    for path, role in tracked:
        data = files.read_bytes(root, path, limit=files.SOURCE_LIMIT, where=path)
        if role == "table":
            cls = tables.gpu_class_of(path)
            if cls is None or cls not in man.certification:
                raise TableError(
                    f"{path}: no GPU class {cls or path} in the catalog has this table",
                    "remove it, or add the class's kernels/ and manifests/",
                )
            tree_tables[path] = data
        elif role == "evidence":
            cls = tables.evidence_class_of(path)
            if cls is None or man.certification.get(cls) != "hardware":
                raise TableError(
                    f"{path}: no GPU class {cls or path} of the catalog is certified on hardware: nothing "
                    "has evidence here",
                    "remove it (hardware evidence is written by `netra certify` for a class certified so)",
                )
            tree_tables[path] = data
        else:
            file_hashes[path] = (sha256_bytes(data), role)
    found = dict(tools) if tools else {}
    found.update(discover_all([t for t in man.targets() if t not in found]))
    n = _jobs(jobs)
    src, out = work / "src", work / "out"
    src.mkdir(parents=True, exist_ok=True)
    specs = list(man.artifacts)
    if progress:
        chains = ", ".join(f"{t}: {found[t].describe()}" for t in sorted(found))
        progress(f"building {len(specs)} artifacts with {chains}")
    done = [0]
    counting = threading.Lock()  # workers finish at once: one count each, one whole progress line each

    def one(spec: ArtifactSpec) -> Path:
        tgt = targets.get(spec.target)
        if cache is None:
            path = tgt.compile(spec, found[spec.target], root, src, out)
        else:
            path = cache.compile(tgt, spec, found[spec.target], root, src, out)
        with counting:
            done[0] += 1
            if progress:
                progress(f"[{done[0]}/{len(specs)}] {spec.name}")
        return path

    with ThreadPoolExecutor(max_workers=n) as pool:
        paths = interrupts.pool_map(pool, one, specs)
    if cache is not None:
        cache.trim()
        if progress:
            progress(cache.summary())
    examined: list[Examined] = []
    for t in man.targets():
        built = [(sp, p) for sp, p in zip(specs, paths, strict=True) if sp.target == t]
        examined += targets.get(t).examine(built, found[t], n)
    bad = [f"{e.spec.name}: {p.check}: {p.detail}" for e in examined for p in e.problems]
    if bad:
        raise ValidationError(
            f"{len(bad)} static check(s) failed, first: {bad[0]}",
            "fix the template or its manifest so the code object fits its contract and the GPU's limits",
            tuple(bad),
        )
    return Derived(man, found, examined, file_hashes, tree_tables, work, time.monotonic() - t0, cache, reqs)


def locked_artifact(e: Examined) -> LockedArtifact:
    sp = e.spec
    return LockedArtifact(
        name=sp.name, target=sp.target, template=sp.template.name, op=sp.op, tactic=sp.tactic.name,
        contract=dict(sp.contract), definitions=sp.definitions, symbols=e.symbols,
        text_sha256=e.text_sha256, launch_sha256=e.launch_sha256, code_sha256=e.code_sha256,
        kernarg_bytes=e.kernarg_bytes, lds_bytes=e.lds_bytes, max_threads=e.max_threads,
        facts=dict(sorted(e.facts.items())),
    )  # fmt: skip


def lock_of(d: Derived, table_toolchains: dict[str, Toolchain] | None = None) -> Fresh:
    """The lock and tables `d` gives. Tables name `table_toolchains` (default: the ones used), so a build
    with another toolchain whose machine code is identical regenerates the committed tables exactly."""
    artifacts = tuple(sorted((locked_artifact(e) for e in d.examined), key=lambda a: (a.target, a.name)))
    used = {t: d.tools[t].identity for t in d.manifests.targets()}
    naming = {**used, **{k: v for k, v in (table_toolchains or {}).items() if k in used}}
    for_tables = Lock(toolchains=naming, artifacts=artifacts)
    made = tablegen.tables_of(d.manifests, for_tables, d.tree_tables)
    files_ = [TrackedFile(p, sha, role) for p, (sha, role) in d.file_hashes.items()]
    files_ += [
        TrackedFile(p, sha256_bytes(text.encode()), "evidence" if tables.evidence_class_of(p) else "table")
        for p, text in made.files.items()
    ]
    lock = Lock(
        toolchains=used,
        files=tuple(sorted(files_, key=lambda f: f.path)),
        artifacts=artifacts,
        pins=requirements.toolchain_pins(d.build_requirements, used),
    )
    return Fresh(lock=lock, tables=made.files, voided=list(made.voided), derived=d)


def make_lock(
    root: Path,
    *,
    jobs: int | None = None,
    progress: Progress | None = None,
    tools: dict[str, Tools] | None = None,
    cache: Cache | None = None,
) -> Fresh:
    """What `netra lock` writes: the lock and tables the sources make now."""
    root = Path(root)
    made = [
        *sorted((root / tables.TABLES_DIR).glob("*.json")),
        *sorted((root / tables.EVIDENCE_DIR).glob("*.json")),
    ]
    for dest in [root / lockfile.LOCK_PATH, *made]:
        _replaceable(dest)  # refused before the work, not after it (write_lock checks again)
    with tempfile.TemporaryDirectory(prefix="netra-lock-") as tmp:
        d = derive(root, Path(tmp), tools=tools, jobs=jobs, progress=progress, cache=cache)
        return lock_of(d)


@contextmanager
def committing(what: str) -> Iterator[None]:
    """A step whose files must all land or none: a SIGINT/SIGTERM arriving inside it is held until the
    step has finished, then raised with `written` set to `what` (the CLI says what was completed).

    Everything before such a step works in temporary folders that the interruption removes; the step
    itself only renames or writes whole files, so it is short.
    """
    from netra.core import interrupts

    done = False
    try:
        with interrupts.deferred():
            yield
            done = True
    except interrupts.Interrupted as e:
        if done:
            e.written = what  # type: ignore[attr-defined]
        raise


def _replaceable(path: Path) -> None:
    """What is about to be replaced by a file must be one, or absent: checked before anything is written."""
    if path.is_dir():
        raise PathError(
            f"{path}: is a folder where netra writes a file", "move it away, then run the command again"
        )
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise PathError(
                    f"{parent}: exists and is not a folder", "remove it or pick another output folder"
                )
            break


def _unwritable(e: OSError, folder: Path) -> NetraError:
    """An OSError while writing into `folder`, naming the file when the OS says which, else the folder."""
    return NetraError(
        f"{e.filename or folder}: cannot be written ({e.strerror or e})",
        "check that the folder is writable by this user and the disk has room",
    )


def write_lock(root: Path, fresh: Fresh) -> None:
    """Tables first, then the lock: the lock is the commit point that names them."""
    dests = [Path(root) / rel for rel in sorted(fresh.tables)] + [Path(root) / lockfile.LOCK_PATH]
    for dest in dests:
        _replaceable(dest)
    try:
        for rel, text in sorted(fresh.tables.items()):
            (Path(root) / rel).parent.mkdir(parents=True, exist_ok=True)  # release/evidence/, the first time
            files.atomic_write(Path(root) / rel, text.encode())
        locking.write(fresh.lock, Path(root) / lockfile.LOCK_PATH)
    except OSError as e:
        raise _unwritable(e, Path(root) / "release") from None


def differences(root: Path, d: Derived, locked: Lock) -> tuple[Fresh, list[str]]:
    """Every way the lock on disk and its tables differ from what the tree gives now."""
    fresh = lock_of(d, locked.toolchains)
    out = locking.compare(locked, fresh.lock)
    # The pins of the toolchain the lock names, whatever toolchain built now: requirements/build.txt's.
    out += locking.compare_pins(locked, requirements.toolchain_pins(d.build_requirements, locked.toolchains))
    for rel, text in sorted(fresh.tables.items()):
        if d.tree_tables.get(rel) != text.encode():
            state = "missing" if rel not in d.tree_tables else "out of date with the lock and sources"
            what = "evidence" if tables.evidence_class_of(rel) else "table"
            out.append(f"{what} {rel}: {state} (`netra lock` regenerates it)")
    out += [f"certification void: {v}" for v in fresh.voided]
    return fresh, out


def verify_tracked(root: Path, locked: Lock) -> None:
    """The cheap half of the gate (the sdist's): every tracked file present with its locked sha256 and no
    file where tracked files live that the lock does not know. No compiler runs; the wheel build from
    the sdist proves the rest."""
    root = Path(root).resolve()
    now = {
        p: (sha256_bytes(files.read_bytes(root, p, limit=files.SOURCE_LIMIT, where=p)), role)
        for p, role in manifests.tracked_files(root)
    }
    fresh = Lock(toolchains=locked.toolchains, files=tuple(TrackedFile(p, h, r) for p, (h, r) in sorted(now.items())),
                 artifacts=locked.artifacts)  # fmt: skip
    diffs = locking.compare(locked, fresh)
    if diffs:
        raise LockError(
            f"{lockfile.LOCK_PATH} does not match the tree ({len(diffs)} difference(s)): {diffs[0]}",
            LOCK_HINT,
            tuple(diffs) if len(diffs) > 1 else (),
        )


def check_lock(
    root: Path,
    *,
    jobs: int | None = None,
    progress: Progress | None = None,
    tools: dict[str, Tools] | None = None,
    cache: Cache | None = None,
) -> list[str]:
    """`netra lock --check`: the differences, empty when the lock is up to date."""
    root = Path(root).resolve()
    _, locked = lockfile.read_with_bytes(root / lockfile.LOCK_PATH)
    with tempfile.TemporaryDirectory(prefix="netra-check-") as tmp:
        d = derive(root, Path(tmp), tools=tools, jobs=jobs, progress=progress, cache=cache)
        return differences(root, d, locked)[1]


@dataclass
class Report:
    tools: dict[str, Tools]
    examined: list[Examined]
    lock: Lock
    lock_bytes: bytes
    seconds: float
    cache: Cache | None = None


def build(
    root: Path,
    out_dir: Path | None,
    *,
    tools: dict[str, Tools] | None = None,
    jobs: int | None = None,
    reference: Path | None = None,
    keep: Path | None = None,
    progress: Progress | None = None,
    cache: Cache | None = None,
) -> Report:
    """Prove the lock is exactly what the sources declare, then publish the code objects into out_dir."""
    t0 = time.monotonic()
    root = Path(root).resolve()
    lock_bytes, locked = lockfile.read_with_bytes(root / lockfile.LOCK_PATH)
    if out_dir is not None:
        _check_out_dir(Path(out_dir))
        for a in locked.artifacts:  # where the code objects will land: refused before the work
            _replaceable(Path(out_dir) / a.file)
    if reference is not None:  # what a difference is shown against: it must be one, before the work
        _check_reference(Path(reference))
    if keep is not None:
        _check_out_dir(Path(keep))
    with tempfile.TemporaryDirectory(prefix="netra-build-") as tmp:
        d = derive(root, Path(tmp), tools=tools, jobs=jobs, progress=progress, cache=cache)
        if keep is not None:
            _keep(Path(tmp) / "src", Path(keep))
        _, diffs = differences(root, d, locked)
        if diffs:
            if reference is not None:
                diffs += _first_differences(d, locked, reference)
            raise LockError(
                f"{lockfile.LOCK_PATH} is not what the sources declare ({len(diffs)} difference(s)): {diffs[0]}",
                LOCK_HINT + _toolchain_hint(d, locked),
                tuple(diffs) if len(diffs) > 1 else (),
            )
        # Checked before anything is published: a refused build leaves no output.
        if lockfile.read_with_bytes(root / lockfile.LOCK_PATH)[0] != lock_bytes:
            raise LockError(f"{lockfile.LOCK_PATH} changed during the build", "build again")
        if out_dir is not None:
            names = [e.spec.file for e in d.examined]
            with committing(f"the {len(names)} code objects in {out_dir}"):
                publish(Path(tmp) / "out", Path(out_dir), names)
        return Report(d.tools, d.examined, locked, lock_bytes, time.monotonic() - t0, d.cache)


def _toolchain_hint(d: Derived, locked: Lock) -> str:
    other = [
        f"{t} with {tc}"
        for t, tc in sorted(locked.toolchains.items())
        if t in d.tools and d.tools[t].identity != tc
    ]
    return f"; if only the toolchain differs, build {', '.join(other)}" if other else ""


def _first_differences(d: Derived, locked: Lock, reference: Path) -> list[str]:
    out = []
    for e in d.examined:
        want = locked.artifact(e.spec.name)
        if want is None or want.text_sha256 == e.text_sha256:
            continue
        theirs = _reference_bytes(reference, e.spec.file)
        tgt = targets.get(e.spec.target)
        if theirs is None:
            out.append(f"{e.spec.name}: {reference} has no {e.spec.file}")
        else:
            out.append(
                f"{e.spec.name}: {tgt.first_difference(d.tools[e.spec.target], e.path, theirs, e.spec)}"
            )
    return out


def _reference_bytes(reference: Path, spec_file: str) -> bytes | None:
    if reference.is_dir():
        p = reference / spec_file
        return p.read_bytes() if p.is_file() else None
    if reference.suffix == ".whl" and reference.is_file():
        import zipfile

        try:
            with zipfile.ZipFile(reference) as z:
                return z.read(f"{PACKAGE_DATA}/{spec_file}")
        except KeyError:
            return None
        except (OSError, zipfile.BadZipFile) as e:
            raise NetraError(
                f"{reference}: not a readable wheel ({e})", "pass a wheel or a build folder"
            ) from None
    raise NetraError(
        f"{reference}: not a build folder or a .whl", "pass a previous `netra build` output or a wheel"
    )


def _check_reference(reference: Path) -> None:
    if reference.is_dir() or (reference.is_file() and reference.suffix == ".whl"):
        return
    state = "does not exist" if not reference.exists() else "is not a build folder or a .whl"
    raise NetraError(f"--reference {reference}: {state}", "pass a previous `netra build` output or a wheel")


def _keep(src: Path, keep: Path) -> None:
    """--keep: a copy of the instantiation sources; one that cannot be written is removed, not left half."""
    existed = keep.exists()
    try:
        shutil.copytree(src, keep, dirs_exist_ok=True)
    except (OSError, shutil.Error) as e:
        if not existed:
            shutil.rmtree(keep, ignore_errors=True)
        first = e.args[0][0] if isinstance(e, shutil.Error) and e.args and e.args[0] else None
        why = f"{first[2]}" if first else (e.strerror if isinstance(e, OSError) and e.strerror else str(e))
        raise NetraError(
            f"--keep {keep}: cannot be written ({why})",
            "pass a folder this user can write on a disk with room, or leave --keep out",
        ) from None


def _check_out_dir(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise NetraError(
            f"{out}: exists and is not a folder", "pass a folder (or a path that does not exist yet)"
        )


def publish(src: Path, dest: Path, names: list[str]) -> None:
    """Copy the gated code objects out, all or none: every file is written whole under a temporary
    name first; only when all are written are they renamed into place. A failure (a full disk, a
    folder that is not writable) removes every temporary file and every folder this call made."""
    _check_out_dir(dest)
    for rel in sorted(names):  # every destination first: a refusal must not come half way through
        _replaceable(dest / rel)
    made: list[Path] = []
    try:
        for folder in sorted({(dest / rel).parent for rel in names}):
            _make_folders(folder, made)
        files.atomic_write_all([(dest / rel, (src / rel).read_bytes()) for rel in sorted(names)])
    except OSError as e:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise _unwritable(e, dest) from None


def _make_folders(folder: Path, made: list[Path]) -> None:
    """mkdir -p, recording each folder it creates (so a failed publish can remove exactly those)."""
    missing = [p for p in [folder, *folder.parents] if not p.exists()]
    for p in reversed(missing):
        try:
            p.mkdir()
        except FileExistsError:
            if not p.is_dir():
                raise NetraError(
                    f"{p}: exists and is not a folder", "remove it or pick another output folder"
                ) from None
            continue
        except NotADirectoryError:
            raise NetraError(
                f"{p.parent}: exists and is not a folder", "remove it or pick another output folder"
            ) from None
        made.append(p)
