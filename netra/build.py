"""`netra build` and `netra lock`: assemble the catalog, gate it, and either check or write the lock.

Both commands and the wheel build hook run this one pipeline. Work happens in a temporary
directory that is always removed; the output folder, the tables and the lock are only touched
once everything has passed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from netra import catalog as catalog_mod
from netra import lock as lock_mod
from netra.assemble import Built, assemble, disassemble
from netra.catalog import ArtifactSpec, Catalog
from netra.codeobject import CodeObject, inspect
from netra.errors import IntegrityError, LockError, NetraError, TextMismatchError, ValidationError
from netra.hashing import sha256_bytes, sha256_file
from netra.lock import Lock, LockedArtifact, TrackedFile
from netra.toolchain import Tools, discover
from netra.validate import CHECKS, Problem, check

WHEEL_DATA = "netra/_data"
Progress = Callable[[str], None]


@dataclass
class Result:
    spec: ArtifactSpec
    built: Built
    facts: CodeObject
    problems: list[Problem]


@dataclass
class Report:
    tools: Tools
    results: list[Result]
    seconds: float


def _jobs(jobs: int | None) -> int:
    return max(1, jobs or os.cpu_count() or 1)


def assemble_all(
    cat: Catalog,
    specs: list[ArtifactSpec],
    tools: Tools,
    work: Path,
    jobs: int | None = None,
) -> list[Result]:
    """Assemble, link, inspect and statically check every spec, in parallel across the cores."""
    scratch = work / "src"
    out = work / "out"
    scratch.mkdir(parents=True, exist_ok=True)

    def one(spec: ArtifactSpec) -> tuple[Built, CodeObject]:
        built = assemble(spec, tools, cat.root, scratch, out)
        return built, inspect(built.path.read_bytes(), spec.file)

    n = _jobs(jobs)
    with ThreadPoolExecutor(max_workers=n) as pool:
        made = list(pool.map(one, specs))
        # One llvm-objdump per worker rather than per artifact: its start-up costs more than the work.
        chunks = [[b.path for b, _ in made[i::n]] for i in range(n)]
        listings: dict[Path, str] = {}
        for part in pool.map(lambda c: disassemble(tools, c), [c for c in chunks if c]):
            listings.update(part)
    return [Result(s, b, f, check(f, s, listings[b.path])) for s, (b, f) in zip(specs, made, strict=True)]


def locked_artifact(r: Result) -> LockedArtifact:
    k = r.facts.kernels[r.spec.symbol]
    m = k.metadata
    d = k.descriptor
    assert d is not None  # check() reported a missing descriptor already
    return LockedArtifact(
        name=r.spec.name,
        target=r.spec.target,
        template=r.spec.template.name,
        op=r.spec.op,
        tactic=r.spec.tactic.name,
        contract=dict(r.spec.contract),
        definitions=r.spec.definitions,
        symbols=tuple(sorted(r.facts.kernels)),
        text_sha256=r.facts.text_sha256,
        lds_bytes=d.group_segment_bytes,
        vgprs=int(m.get(".vgpr_count", d.vgpr_alloc)),
        agprs=int(m.get(".agpr_count", 0)),
        sgprs=int(m.get(".sgpr_count", 0)),
        kernarg_bytes=d.kernarg_bytes,
        wave_size=int(m.get(".wavefront_size", 64)),
        max_workgroup_size=int(m.get(".max_flat_workgroup_size", 0)),
    )


def _refuse_problems(results: list[Result]) -> None:
    bad = [(r.spec.name, p) for r in results for p in r.problems]
    if bad:
        listed = "; ".join(f"{name}: {p.check}: {p.detail}" for name, p in bad)
        raise ValidationError(
            f"{len(bad)} static check(s) failed: {listed}",
            "fix the template or its manifest so the code object fits its contract and the GPU's limits",
        )


@dataclass
class Fresh:
    """A lock (and the static tables) as the sources make them now, with the build behind it."""

    lock: Lock
    tables: dict[str, str]  # path -> content
    report: Report


def make_lock(
    root: Path, tools: Tools | None = None, jobs: int | None = None, progress: Progress | None = None
) -> Fresh:
    """Build everything the catalog declares and derive the lock and static tables from it."""
    t0 = time.monotonic()
    cat = catalog_mod.load(root)
    tools = tools or discover()
    with tempfile.TemporaryDirectory(prefix="netra-lock-") as tmp:
        if progress:
            progress(f"assembling {len(cat.artifacts)} artifacts with {tools.describe()}")
        results = assemble_all(cat, list(cat.artifacts), tools, Path(tmp), jobs)
        _refuse_problems(results)
    locked = {r.spec.name: locked_artifact(r) for r in results}
    new_tables: dict[str, str] = {}
    for target in cat.targets():
        if cat.certification.get(target) == "static":
            from netra import tables  # only `netra lock` writes tables: keep `netra build` start-up light

            table = tables.static_table(cat, target, locked, list(CHECKS), tools.identity)
            new_tables[tables.table_path(target)] = tables.dumps(table)
    files = []
    for path, role in sorted(set(catalog_mod.tracked_files(root)) | {(p, "table") for p in new_tables}):
        digest = sha256_bytes(new_tables[path].encode()) if path in new_tables else sha256_file(root / path)
        files.append(TrackedFile(path=path, sha256=digest, role=role))
    lock = Lock(
        toolchain=tools.identity, files=tuple(files), artifacts=tuple(locked[n] for n in sorted(locked))
    )
    return Fresh(lock=lock, tables=new_tables, report=Report(tools, results, time.monotonic() - t0))


def write_lock(root: Path, fresh: Fresh) -> None:
    """Tables first, then the lock: the lock is the commit point that names them."""
    for rel, text in fresh.tables.items():
        dest = root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, dest)
    lock_mod.write(fresh.lock, root / lock_mod.LOCK_PATH)


def check_lock(root: Path, fresh: Fresh) -> list[str]:
    """Every difference between the lock on disk (and its static tables) and what the sources give now."""
    old = lock_mod.read(root / lock_mod.LOCK_PATH)
    out = lock_mod.diff(old, fresh.lock)
    for rel, text in sorted(fresh.tables.items()):
        p = root / rel
        if not p.is_file() or p.read_text() != text:
            out.append(f"table {rel}: out of date with the build (regenerated by `netra lock`)")
    return out


def tree_differences(root: Path, lock: Lock) -> list[str]:
    """Tracked files missing, altered, or present but unknown to the lock; empty when the tree matches."""
    missing, altered = [], []
    for f in lock.files:
        p = root / f.path
        if not p.is_file():
            missing.append(f.path)
        elif sha256_file(p) != f.sha256:
            altered.append(f.path)
    locked_paths = {f.path for f in lock.files}
    extra = [p for p, _ in catalog_mod.tracked_files(root) if p not in locked_paths]
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    if altered:
        parts.append("altered " + ", ".join(altered))
    if extra:
        parts.append("not in the lock " + ", ".join(extra))
    return parts


TREE_HINT = "restore the files (git checkout -- <file>), or if the change is intended run `netra lock`"


def verify_tracked(root: Path, lock: Lock) -> None:
    """Every tracked file present with its locked sha256, and nothing untracked where tracked files live."""
    parts = tree_differences(root, lock)
    if parts:
        raise IntegrityError(f"{lock_mod.LOCK_PATH} does not match the tree ({'; '.join(parts)})", TREE_HINT)


def _reference_bytes(reference: Path, spec_file: str) -> bytes | None:
    if reference.is_dir():
        p = reference / spec_file
        return p.read_bytes() if p.is_file() else None
    if reference.suffix == ".whl" and reference.is_file():
        import zipfile

        with zipfile.ZipFile(reference) as z:
            try:
                return z.read(f"{WHEEL_DATA}/{spec_file}")
            except KeyError:
                return None
    raise NetraError(
        f"{reference}: not a build folder or a .whl", "pass a previous `netra build` output or a wheel"
    )


def first_difference(tools: Tools, ours: Path, theirs: bytes, mcpu: str) -> str:
    """The first instruction where two code objects' disassemblies differ, for the mismatch message."""
    with tempfile.TemporaryDirectory(prefix="netra-ref-") as tmp:
        ref = Path(tmp) / ours.name
        ref.write_bytes(theirs)
        listing = disassemble(tools, [ours, ref], mcpu)
        a, b = _instructions(listing[ours]), _instructions(listing[ref])
    for i, ((x, at), (y, _)) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"first differing instruction #{i} (at {at}): built `{x}`, reference `{y}`"
    if len(a) != len(b):
        return f"instruction counts differ: built {len(a)}, reference {len(b)}"
    return "disassembly identical (difference is in encoding only)"


def _instructions(listing: str) -> list[tuple[str, str]]:
    """(instruction, address) pairs from an llvm-objdump listing, whose comments carry the address."""
    out = []
    for ln in listing.splitlines():
        if not ln.startswith(("\t", " ")):
            continue
        text, _, comment = ln.partition("//")
        out.append((" ".join(text.split()), comment.strip().split(":")[0] or "?"))
    return out


def build(
    root: Path,
    out_dir: Path | None,
    *,
    tools: Tools | None = None,
    jobs: int | None = None,
    reference: Path | None = None,
    keep: Path | None = None,
    progress: Progress | None = None,
) -> Report:
    """Build every locked artifact, gate it against the lock, and only then publish into out_dir."""
    t0 = time.monotonic()
    root = Path(root).resolve()
    lock = lock_mod.read(root / lock_mod.LOCK_PATH)
    tree = tree_differences(root, lock)
    if any(not p.startswith("altered") for p in tree):
        raise IntegrityError(f"{lock_mod.LOCK_PATH} does not match the tree ({'; '.join(tree)})", TREE_HINT)
    cat = catalog_mod.load(root)
    specs = []
    for a in lock.artifacts:
        spec = cat.artifact(a.name)
        if spec is None or spec.definitions != a.definitions or spec.template.name != a.template:
            raise LockError(
                f"{lock_mod.LOCK_PATH}: artifact {a.name} has no matching recipe in the catalog",
                "run `netra lock` after changing manifests or templates",
            )
        specs.append(spec)
    tools = tools or discover()
    with tempfile.TemporaryDirectory(prefix="netra-build-") as tmp:
        work = Path(tmp)
        if progress:
            progress(f"assembling {len(specs)} locked artifacts with {tools.describe()}")
        results = assemble_all(cat, specs, tools, work, jobs)
        mismatches = []
        for r in results:
            want = lock.artifact(r.spec.name)
            assert want is not None
            if r.facts.text_sha256 != want.text_sha256:
                line = (
                    f"{r.spec.name}: .text sha256 {r.facts.text_sha256} built with {tools.identity}, "
                    f"locked {want.text_sha256} with {lock.toolchain}"
                )
                if reference is not None:
                    theirs = _reference_bytes(reference, r.spec.file)
                    line += "; " + (
                        first_difference(tools, r.built.path, theirs, r.spec.target)
                        if theirs is not None
                        else f"{reference} has no {r.spec.file}"
                    )
                mismatches.append(line)
        # Altered sources are reported after assembly, so the message can name what they changed.
        where = f" (tree: {'; '.join(tree)})" if tree else ""
        if mismatches:
            raise TextMismatchError(
                f"{len(mismatches)} artifact(s) differ from {lock_mod.LOCK_PATH}{where}: "
                + " | ".join(mismatches),
                "if the change is intended run `netra lock`; if only the toolchain differs, "
                f"build with {lock.toolchain} (set NETRA_LLVM_BINDIR or ROCM_PATH)",
            )
        if tree:
            raise IntegrityError(
                f"{lock_mod.LOCK_PATH} does not match the tree ({'; '.join(tree)})", TREE_HINT
            )
        _refuse_problems(results)
        if keep is not None:
            shutil.copytree(work / "src", keep, dirs_exist_ok=True)
        if out_dir is not None:
            _publish(work / "out", Path(out_dir), [r.spec.file for r in results])
    return Report(tools, results, time.monotonic() - t0)


def _publish(src: Path, dest: Path, files: list[str]) -> None:
    """Copy the gated code objects out; each file lands whole (temp name + rename)."""
    for rel in sorted(files):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(src / rel, tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
