"""release/manifest.lock: what a release must contain, bit for bit; its model and its one reader.

The lock records every tracked file (sha256 and role), every artifact (its recipe; the sha256 of its
machine code, of what it launches with and of the whole code object; the static facts read from it)
and, per GPU class, the toolchain the hashes were made with: flavour and version and, where the
project pins that toolchain as hash-pinned wheels (requirements/build.txt), the package that is the
toolchain and every pinned package of it with the sha256 of each of its files. Only `netra lock` writes it
(netra.release.lock); everything downstream (build gate, wheel gate, runtime, doctor) reads it
through `from_dict`, one strict schema whose classes and flavours are the registry's, and never
changes it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from netra.core import frozen
from netra.core import schema as s
from netra.core.types import Toolchain, artifact_file
from netra.errors import LockError

SCHEMA = 3  # 3: [toolchains.<class>] may carry `package` and `pins`
LOCK_PATH = "release/manifest.lock"
# Each role's folder: every tracked file lies in its role's.
ROLE_FOLDERS = {
    "evidence": "release/evidence",
    "manifest": "manifests",
    "source": "kernels",
    "table": "release/tables",
}
ROLES = tuple(ROLE_FOLDERS)
_TRACKED_FOLDERS = tuple(sorted(f + "/" for f in ROLE_FOLDERS.values()))
HINT = "regenerate it with `netra lock` (or restore it from version control: git checkout -- release/manifest.lock)"
_CLASS = re.compile(r"[a-z][a-z0-9_]*")
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+_-]*")
_UPPER = re.compile(r"[A-Z][A-Z0-9_]*")
_FACT = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class TrackedFile:
    path: str  # relative to the project root, forward slashes
    sha256: str
    role: str


@dataclass(frozen=True)
class PinnedPackage:
    """One hash-pinned package of a toolchain, as requirements/build.txt pins it: every file (one per
    platform wheel) that `pip install --require-hashes` accepts for it."""

    name: str  # normalized (PEP 503)
    version: str
    sha256: tuple[str, ...]  # sorted


@dataclass(frozen=True)
class ToolchainPins:
    """A class's toolchain as the project pins it: `package` is the toolchain itself (its version is the
    toolchain's), `packages` everything installed with it (`package` included), sorted by name."""

    package: str
    packages: tuple[PinnedPackage, ...]

    def pinned(self, name: str) -> PinnedPackage | None:
        return next((p for p in self.packages if p.name == name), None)


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
    text_sha256: str  # the machine code
    launch_sha256: str  # what the kernel launches with: descriptor and metadata (the class defines it)
    code_sha256: str  # the whole code object, as built with the locked toolchain
    kernarg_bytes: int
    lds_bytes: int  # static LDS / shared memory
    max_threads: int  # the most threads per block the code object allows
    facts: dict[str, int]  # the class's own static facts (registers...)

    @cached_property
    def file(self) -> str:
        """Where the code object lives, relative to a build output folder or the packaged data."""
        from netra import targets

        return artifact_file(self.target, self.name, targets.get(self.target).suffix)


@dataclass(frozen=True)
class Lock:
    toolchains: dict[str, Toolchain]  # GPU class -> the toolchain its artifacts were locked with
    files: tuple[TrackedFile, ...] = ()
    artifacts: tuple[LockedArtifact, ...] = ()
    schema: int = SCHEMA
    pins: dict[str, ToolchainPins] = field(default_factory=dict)  # GPU class -> its toolchain's pins, if any
    _by_name: dict[str, LockedArtifact] = field(default_factory=dict, compare=False, repr=False)
    _by_path: dict[str, TrackedFile] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_name.update({a.name: a for a in self.artifacts})
        self._by_path.update({f.path: f for f in self.files})

    def artifact(self, name: str) -> LockedArtifact | None:
        return self._by_name.get(name)

    def file(self, path: str) -> TrackedFile | None:
        return self._by_path.get(path)

    def files_with_role(self, role: str) -> list[TrackedFile]:
        return [f for f in self.files if f.role == role]

    def describe_toolchains(self) -> str:
        """Each class's toolchain as messages name it ("gfx950: llvm LLVM 22.1.8, sm_90: nvcc 13.0.88")."""
        return ", ".join(f"{t}: {tc}" for t, tc in sorted(self.toolchains.items())) or "none"


_SHA = s.sha256()
_PACKAGE = s.Str(pattern=re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?"), max_len=100)  # PEP 503 normalized
_SYMBOL = s.Str(pattern=re.compile(r"[A-Za-z_][A-Za-z0-9_.]*"), max_len=128)
_INTS = s.MapOf(
    s.Str(pattern=re.compile(r"[a-z_][a-z0-9_]*"), max_len=64), s.Int(min=0, max=2**31 - 1), max_len=16
)


def _schema() -> s.Table:
    from netra import targets

    return s.Table(
        {
            "schema": s.Const(SCHEMA),
            "toolchains": s.MapOf(
                s.Str(pattern=_CLASS, max_len=32),
                s.Table(
                    {
                        "flavour": s.Str(choices=targets.flavour_names()),
                        "version": s.Str(pattern=_VERSION, max_len=64),
                        "package": s.maybe(_PACKAGE),
                        "pins": s.maybe(
                            s.ListOf(
                                s.Table(
                                    {
                                        "name": _PACKAGE,
                                        "version": s.Str(pattern=_VERSION, max_len=64),
                                        "sha256": s.ListOf(_SHA, min_len=1, max_len=64, unique=lambda v: v),
                                    },
                                    label="name",
                                ),
                                min_len=1,
                                max_len=64,
                                unique="name",
                            )
                        ),
                    }
                ),
                max_len=32,
            ),
            "files": s.ListOf(
                s.Table(
                    {"path": s.Str(max_len=400), "sha256": _SHA, "role": s.Str(choices=ROLES)}, label="path"
                ),
                max_len=100_000,
                unique="path",
            ),
            "artifacts": s.ListOf(
                s.Table(
                    {
                        "name": s.Str(pattern=re.compile(r"netra_[a-z0-9_]+"), max_len=128),
                        "target": s.Str(pattern=_CLASS, max_len=32),
                        "template": s.Str(pattern=s.NAME, max_len=64),
                        "op": s.Str(pattern=s.NAME, max_len=64),
                        "tactic": s.Str(pattern=re.compile(r"[a-z0-9]+"), max_len=16),
                        "contract": _INTS,
                        "definitions": s.MapOf(
                            s.Str(pattern=_UPPER, max_len=64), s.Int(min=0, max=2**31 - 1), max_len=32
                        ),
                        "symbols": s.ListOf(_SYMBOL, min_len=1, max_len=64, unique=lambda v: v),
                        "text_sha256": _SHA,
                        "launch_sha256": _SHA,
                        "code_sha256": _SHA,
                        "kernarg_bytes": s.Int(min=0, max=4096),
                        "lds_bytes": s.Int(min=0, max=1 << 20),
                        "max_threads": s.Int(min=1, max=1024),
                        "facts": s.MapOf(
                            s.Str(pattern=_FACT, max_len=64), s.Int(min=0, max=2**31 - 1), max_len=16
                        ),
                    },
                    label="name",
                ),
                max_len=100_000,
                unique="name",
            ),
        }
    )


def _cross_checks(d: dict[str, Any], p: s.Problems) -> None:
    """Rules across fields: paths, classes, toolchains, contracts and unique code-object files."""
    from netra import targets
    from netra.core import files
    from netra.core.ops import FAMILIES
    from netra.errors import NetraError

    for i, f in enumerate(d["files"]):
        at = f"files[{i}] ({f['path']})"
        try:
            files.relative(f["path"], at)
        except NetraError as e:
            p.add(f"{at}.path", e.message.removeprefix(f"{at}: path "))
            continue
        if not f["path"].startswith(_TRACKED_FOLDERS):  # which role a file has is the tree's to say
            p.add(
                f"{at}.path",
                f"only {', '.join(_TRACKED_FOLDERS[:-1])} and {_TRACKED_FOLDERS[-1]} files are tracked",
            )
    used = set()
    wrong_flavour: set[str] = set()
    for i, a in enumerate(d["artifacts"]):
        at = f"artifacts[{i}] ({a['name']})"
        t = a["target"]
        if not targets.known(t):
            p.add(at, f"target: {t!r} is not a GPU class this netra knows ({', '.join(targets.names())})")
            continue
        used.add(t)
        tc = d["toolchains"].get(t)
        if tc is None:
            p.add(at, f"target: no [toolchains.{t}] entry records what built it")
        elif tc["flavour"] not in targets.get(t).flavours and t not in wrong_flavour:
            wrong_flavour.add(t)  # once per class, not once per artifact
            p.add(f"toolchains.{t}", f"flavour {tc['flavour']!r} cannot build {t} code objects")
        fam = FAMILIES.get(a["op"])
        if fam is None:
            p.add(at, f"op: {a['op']!r} is not an op family of this netra")
        elif set(a["contract"]) != set(fam.params):
            p.add(at, f"contract: must have exactly {', '.join(fam.params)}")
        if a["name"] not in a["symbols"]:
            p.add(at, f"symbols: must include the kernel {a['name']}")
    for t in sorted(set(d["toolchains"]) - used):
        p.add(f"toolchains.{t}", "no locked artifact of this class")
    _check_pins(d["toolchains"], p)


def _check_pins(toolchains: dict[str, Any], p: s.Problems) -> None:
    """A toolchain's pins name the package that is it, at its version; one toolchain, one set of pins."""
    seen: dict[tuple[str, str], tuple[str, Any]] = {}
    for t, tc in sorted(toolchains.items()):
        at = f"toolchains.{t}"
        if ("package" in tc) != ("pins" in tc):
            p.add(at, "package and pins go together: the pinned package that is the toolchain, and its pins")
            continue
        if "pins" in tc:
            own = next((x for x in tc["pins"] if x["name"] == tc["package"]), None)
            if own is None:
                p.add(f"{at}.package", f"{tc['package']!r} is not one of its pins")
            elif own["version"] != tc["version"]:
                p.add(
                    f"{at}.package",
                    f"{tc['package']} is pinned at {own['version']}, the toolchain is {tc['version']}",
                )
        key = (tc["flavour"], tc["version"])
        mine = (tc.get("package"), tc.get("pins"))
        if key in seen and seen[key][1] != mine:
            p.add(at, f"the same toolchain as toolchains.{seen[key][0]} with other pins")
        seen.setdefault(key, (t, mine))


_readers: list[s.Reader] = []


def reader() -> s.Reader:
    """The lock's schema reader, made on first use (its flavours come from the registered classes)."""
    if not _readers:
        _readers.append(s.Reader(_schema(), LockError, HINT, [_cross_checks]))
    return _readers[0]


def from_dict(data: Any, where: str = LOCK_PATH) -> Lock:
    """A lock from parsed TOML or JSON, through the one schema; LockError names file, entry and field."""
    if isinstance(data, dict) and data.get("schema") != SCHEMA and isinstance(data.get("schema"), int):
        raise LockError(
            f"{where}: lock schema {data.get('schema')!r} is not the supported schema {SCHEMA}",
            "regenerate it with `netra lock` using this version of netra",
        )
    from netra import targets

    d = reader().read(data, where)
    return Lock(
        toolchains={k: targets.toolchain(k, v["flavour"], v["version"]) for k, v in d["toolchains"].items()},
        files=tuple(TrackedFile(**f) for f in d["files"]),
        artifacts=tuple(LockedArtifact(**{**a, "symbols": tuple(a["symbols"])}) for a in d["artifacts"]),
        pins=_pins_of(d["toolchains"]),
    )


def _pins_of(toolchains: dict[str, Any]) -> dict[str, ToolchainPins]:
    return {
        t: ToolchainPins(
            package=str(v["package"]),
            packages=tuple(
                sorted(
                    (
                        PinnedPackage(str(x["name"]), str(x["version"]), tuple(sorted(map(str, x["sha256"]))))
                        for x in v["pins"]
                    ),
                    key=lambda x: x.name,
                )
            ),
        )
        for t, v in toolchains.items()
        if "pins" in v
    }


def from_vouched(data: dict[str, Any]) -> Lock:
    """A lock from a copy whose bytes a gated build vouched for (build.json, its sha256 in the wheel's
    RECORD): built directly, without the schema, which that build already applied. Raises KeyError,
    TypeError or ValueError on anything a gated build does not write; the caller then reads it
    through from_dict, which names what is wrong."""
    from netra import targets

    if (
        data["schema"] != SCHEMA
        or not isinstance(data["artifacts"], list)
        or not isinstance(data["files"], list)
        or not all(targets.known(a["target"]) for a in data["artifacts"])
        # What no hash vouches for: the copy agrees with itself. A class's artifacts without its
        # toolchain (or a toolchain without artifacts) would drop the class from what its code needs.
        or {a["target"] for a in data["artifacts"]} != set(data["toolchains"])
    ):
        raise ValueError("not a lock a gated build wrote")
    return Lock(
        toolchains={
            str(k): targets.toolchain(k, v["flavour"], v["version"]) for k, v in data["toolchains"].items()
        },
        files=tuple(TrackedFile(f["path"], f["sha256"], f["role"]) for f in data["files"]),
        artifacts=tuple(
            frozen.build(LockedArtifact, a, symbols=tuple(a["symbols"])) for a in data["artifacts"]
        ),
        pins=_pins_of(data["toolchains"]),
    )


def loads(raw: bytes, where: str) -> Lock:
    """The lock file's exact bytes -> Lock. Bytes first, so what is checked is what ships."""
    from netra.core import toml as _toml

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LockError(f"{where}: not UTF-8 text (byte {e.start})", HINT) from None
    try:
        data = _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        raise LockError(f"{where}: not valid TOML ({e})", HINT) from None
    return from_dict(data, where)


def read(path: str | Path) -> Lock:
    return read_with_bytes(path)[1]


def read_with_bytes(path: str | Path) -> tuple[bytes, Lock]:
    """One bounded read of a lock file (never following it into a FIFO): its bytes and their parse."""
    from netra.core import files
    from netra.errors import MissingFileError, NetraError

    path = Path(path)
    try:
        raw = files.read_path(path, limit=files.LOCK_LIMIT, what="lock file")
    except MissingFileError:
        raise LockError(f"{path}: lock file not found", "create it with `netra lock`") from None
    except NetraError as e:  # a folder, FIFO, device, unreadable or oversized file where the lock should be
        raise LockError(e.message, f"replace it with the lock file: {HINT}") from None
    return raw, loads(raw, str(path))


def to_dict(lock: Lock) -> dict[str, Any]:
    """Plain data, every list sorted, so the serialized lock depends only on content."""
    artifacts = []
    for a in sorted(lock.artifacts, key=lambda a: (a.target, a.name)):
        d = asdict(a)
        d["symbols"] = sorted(a.symbols)
        for k in ("contract", "definitions", "facts"):
            d[k] = dict(sorted(d[k].items()))
        artifacts.append(dict(sorted(d.items())))
    return {
        "schema": lock.schema,
        "toolchains": {t: _toolchain_dict(lock, t) for t in sorted(lock.toolchains)},
        "files": [asdict(f) for f in sorted(lock.files, key=lambda f: f.path)],
        "artifacts": artifacts,
    }


def _toolchain_dict(lock: Lock, cls: str) -> dict[str, Any]:
    tc = lock.toolchains[cls]
    out: dict[str, Any] = {"flavour": tc.flavour, "version": tc.version}
    pins = lock.pins.get(cls)
    if pins is not None:
        out["package"] = pins.package
        out["pins"] = [
            {"name": x.name, "version": x.version, "sha256": sorted(x.sha256)}
            for x in sorted(pins.packages, key=lambda x: x.name)
        ]
    return out
