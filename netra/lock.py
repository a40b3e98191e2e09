"""release/manifest.lock: what a release must contain, bit for bit.

The lock records every tracked file (sha256 and role), every artifact (its recipe and the sha256 of its
machine code, .text, plus the static facts read from the code object) and the toolchain the hashes were
made with. Only `netra lock` writes it; everything downstream (build gate, wheel gate, runtime, doctor)
reads it and never changes it.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from netra.errors import LockError

SCHEMA = 1
LOCK_PATH = "release/manifest.lock"
ROLES = ("manifest", "source", "table")
HEADER = (
    "# release/manifest.lock: written by `netra lock`; do not edit by hand.\n"
    "# `netra lock --check` fails when it is out of date with kernels/, manifests/ or release/tables/.\n"
)


@dataclass(frozen=True)
class Toolchain:
    flavour: str  # "rocm" or "llvm"
    version: str  # e.g. "22.1.8"

    def __str__(self) -> str:
        return f"{self.flavour} LLVM {self.version}"


@dataclass(frozen=True)
class TrackedFile:
    path: str  # relative to the project root, forward slashes
    sha256: str
    role: str


@dataclass(frozen=True)
class LockedArtifact:
    name: str
    target: str
    template: str
    op: str
    tactic: str
    contract: dict[str, int]
    definitions: dict[str, int]
    symbols: tuple[str, ...]
    text_sha256: str
    lds_bytes: int
    vgprs: int
    agprs: int
    sgprs: int
    kernarg_bytes: int
    wave_size: int
    max_workgroup_size: int

    @property
    def file(self) -> str:
        """Where the code object lives, relative to a build output folder or the packaged data."""
        return f"{self.target}/{self.name}.hsaco"


@dataclass(frozen=True)
class Lock:
    toolchain: Toolchain
    files: tuple[TrackedFile, ...] = ()
    artifacts: tuple[LockedArtifact, ...] = ()
    schema: int = SCHEMA
    _by_name: dict[str, LockedArtifact] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({a.name: a for a in self.artifacts})

    def artifact(self, name: str) -> LockedArtifact | None:
        return self._by_name.get(name)

    def file(self, path: str) -> TrackedFile | None:
        for f in self.files:
            if f.path == path:
                return f
        return None

    def files_with_role(self, role: str) -> list[TrackedFile]:
        return [f for f in self.files if f.role == role]


def _artifact_from(raw: dict[str, Any], where: str) -> LockedArtifact:
    try:
        return LockedArtifact(
            name=raw["name"],
            target=raw["target"],
            template=raw["template"],
            op=raw["op"],
            tactic=raw["tactic"],
            contract=dict(raw["contract"]),
            definitions=dict(raw["definitions"]),
            symbols=tuple(raw["symbols"]),
            text_sha256=raw["text_sha256"],
            lds_bytes=int(raw["lds_bytes"]),
            vgprs=int(raw["vgprs"]),
            agprs=int(raw["agprs"]),
            sgprs=int(raw["sgprs"]),
            kernarg_bytes=int(raw["kernarg_bytes"]),
            wave_size=int(raw["wave_size"]),
            max_workgroup_size=int(raw["max_workgroup_size"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise LockError(
            f"{where}: artifact entry {raw.get('name', '?')!r} is malformed ({e!r})",
            "regenerate it with `netra lock`",
        ) from e


def from_dict(data: dict[str, Any], where: str = LOCK_PATH) -> Lock:
    if data.get("schema") != SCHEMA:
        raise LockError(
            f"{where}: lock schema {data.get('schema')!r} is not the supported schema {SCHEMA}",
            "regenerate it with `netra lock` using this version of netra",
        )
    try:
        tc = Toolchain(flavour=data["toolchain"]["flavour"], version=data["toolchain"]["version"])
        files = tuple(
            TrackedFile(path=f["path"], sha256=f["sha256"], role=f["role"]) for f in data.get("files", [])
        )
    except (KeyError, TypeError) as e:
        raise LockError(f"{where}: malformed lock ({e!r})", "regenerate it with `netra lock`") from e
    for f in files:
        if f.role not in ROLES:
            raise LockError(
                f"{where}: file {f.path} has unknown role {f.role!r}", "regenerate it with `netra lock`"
            )
    artifacts = tuple(_artifact_from(a, where) for a in data.get("artifacts", []))
    return Lock(toolchain=tc, files=files, artifacts=artifacts)


def read(path: str | Path) -> Lock:
    from netra import _toml

    path = Path(path)
    try:
        data = _toml.load(path)
    except FileNotFoundError as e:
        raise LockError(f"{path}: lock file not found", "create it with `netra lock`") from e
    except _toml.TOMLDecodeError as e:
        raise LockError(f"{path}: not valid TOML ({e})", "regenerate it with `netra lock`") from e
    return from_dict(data, str(path))


def parse_installed(raw: bytes, record: dict[str, Any] | None, where: str) -> Lock:
    """The installed lock: build.json's JSON copy when it is bound to these exact bytes, else the TOML.

    Hashing the TOML costs microseconds; parsing it in pure Python costs milliseconds.
    """
    import hashlib

    from netra import _toml

    if (
        isinstance(record, dict)
        and isinstance(record.get("lock"), dict)
        and record.get("lock_sha256") == hashlib.sha256(raw).hexdigest()
    ):
        return from_dict(record["lock"], where)
    try:
        return from_dict(_toml.loads(raw.decode()), where)
    except (UnicodeDecodeError, _toml.TOMLDecodeError) as e:
        raise LockError(f"{where}: not a readable lock ({e})", "reinstall netra-kernel") from e


def to_dict(lock: Lock) -> dict[str, Any]:
    """Plain data, every list sorted, so the serialized lock depends only on content."""
    artifacts = []
    for a in sorted(lock.artifacts, key=lambda a: (a.target, a.name)):
        d = asdict(a)
        d["symbols"] = sorted(a.symbols)
        d["contract"] = dict(sorted(a.contract.items()))
        d["definitions"] = dict(sorted(a.definitions.items()))
        artifacts.append(dict(sorted(d.items())))
    return {
        "schema": lock.schema,
        "toolchain": {"flavour": lock.toolchain.flavour, "version": lock.toolchain.version},
        "files": [asdict(f) for f in sorted(lock.files, key=lambda f: f.path)],
        "artifacts": artifacts,
    }


def dumps(lock: Lock) -> str:
    try:
        import tomli_w
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise LockError(
            "writing release/manifest.lock needs tomli-w", "pip install 'netra-kernel[author]'"
        ) from e
    return HEADER + tomli_w.dumps(to_dict(lock))


def write(lock: Lock, path: str | Path) -> None:
    """Write atomically: a reader sees the old lock or the new one, never half of either."""
    import tempfile

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(lock).encode()
    fd, tmp = tempfile.mkstemp(prefix=".manifest.lock.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def diff(old: Lock, new: Lock) -> list[str]:
    """Every way `new` (made from the sources now) differs from `old` (the lock on disk), one line each."""
    out: list[str] = []
    if old.schema != new.schema:
        out.append(f"schema: locked {old.schema}, now {new.schema}")
    old_files = {f.path: f for f in old.files}
    new_files = {f.path: f for f in new.files}
    for p in sorted(old_files.keys() | new_files.keys()):
        o, n = old_files.get(p), new_files.get(p)
        if o is None:
            out.append(f"file {p}: not in the lock (new {n.role} file)")
        elif n is None:
            out.append(f"file {p}: locked but no longer present")
        elif o != n:
            if o.sha256 != n.sha256:
                out.append(f"file {p}: sha256 locked {o.sha256[:16]}..., now {n.sha256[:16]}...")
            if o.role != n.role:
                out.append(f"file {p}: role locked {o.role}, now {n.role}")
    old_a = {a.name: a for a in old.artifacts}
    new_a = {a.name: a for a in new.artifacts}
    for name in sorted(old_a.keys() | new_a.keys()):
        o, n = old_a.get(name), new_a.get(name)
        if o is None:
            out.append(f"artifact {name}: not in the lock (new artifact)")
        elif n is None:
            out.append(f"artifact {name}: locked but no longer in the catalog")
        elif o != n:
            od, nd = asdict(o), asdict(n)
            for k in sorted(od):
                if od[k] != nd[k]:
                    out.append(f"artifact {name}: {k} locked {od[k]!r}, now {nd[k]!r}")
    if old.toolchain != new.toolchain and out:
        out.append(f"toolchain: locked with {old.toolchain}, now {new.toolchain}")
    return out
