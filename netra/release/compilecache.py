"""The compile cache: each code object compiled once per exact set of inputs, shared by every build.

A code object is a function of its inputs: the instantiation text (the contract, the tactic's constants,
the template manifest's budget), the template source and every file it includes, the toolchain (flavour,
version and the sha256 of the binaries the class names) and the exact flags. The key is the sha256 of a
canonical JSON description of all of them (`describe`), so a changed include, flag or compiler is a
different key, never a stale hit. An entry is only ever a speed-up: what a hit gives goes through the
same gate as a fresh compile (.text against the lock, every static check), because the build examines
the file in its output folder either way.

An entry names its own key and carries the sha256 of its bytes; a damaged entry (a flipped byte, a
truncated write) or a foreign one (another key's file copied in) is rejected, removed and compiled
again, never served. Entries are written to a temporary name and renamed, so concurrent builds share
the folder safely (two writers of one key write the same bytes). The folder is held to a size bound by
removing the least recently used entries (a hit refreshes its mtime); `netra cache --clear` empties it.

Where and when: $NETRA_CACHE_DIR, else $XDG_CACHE_HOME/netra/compile, else ~/.cache/netra/compile.
`netra build` and `netra lock` use it unless --no-cache; the wheel build hook (tools/release,
`python -m build`) compiles everything afresh unless NETRA_COMPILE_CACHE=1; NETRA_COMPILE_CACHE=0
turns it off everywhere (docs/build.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netra.core.text import decode, integer
from netra.errors import UsageError

if TYPE_CHECKING:
    from netra.core.types import ArtifactSpec
    from netra.targets.target import Recipe, Target, Tools

ENV_DIR = "NETRA_CACHE_DIR"
ENV_SWITCH = "NETRA_COMPILE_CACHE"  # "1": on (also for the wheel hook), "0": off everywhere
ENV_MAX_MB = "NETRA_CACHE_MAX_MB"
DEFAULT_MAX_BYTES = 512 << 20  # about 40,000 code objects of today's size
# The entries' format and the build's acceptance rules: 2 since the sm_90 build refuses a cubin whose wgmma
# ptxas serialized (C7514, 2026-12-07), which no entry written before was checked for.
FORMAT = 2
_MAGIC = b"netra compile cache entry 1\n"
_ENTRIES = f"v{FORMAT}"
_KEY = re.compile(r"^[0-9a-f]{64}$")
# What a template may include: C preprocessor includes, assembler includes and binary includes.
_INCLUDE = re.compile(
    r'^[ \t]*(?:#[ \t]*include|\.include|\.incbin)[ \t]*(?:"([^"\n]*)"|<([^>\n]*)>|([^\n]*))', re.M
)
_SOURCE_LIMIT = 16 << 20


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def location(env: Mapping[str, str] | None = None) -> Path:
    """The cache folder: $NETRA_CACHE_DIR, else the XDG cache folder's netra/compile."""
    e = _env(env)
    if e.get(ENV_DIR):
        return Path(e[ENV_DIR]).expanduser()
    base = Path(e["XDG_CACHE_HOME"]) if e.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "netra" / "compile"


def enabled(default: bool, env: Mapping[str, str] | None = None) -> bool:
    """NETRA_COMPILE_CACHE decides when set ("1" on, "0" off); otherwise the caller's default."""
    value = _env(env).get(ENV_SWITCH, "")
    if value == "":
        return default
    if value not in ("0", "1"):
        raise UsageError(
            f"{ENV_SWITCH}={value!r} is neither 0 nor 1",
            f"set {ENV_SWITCH}=1 to use the compile cache, {ENV_SWITCH}=0 to build without it, or unset it",
        )
    return value == "1"


def max_bytes(env: Mapping[str, str] | None = None) -> int:
    value = _env(env).get(ENV_MAX_MB, "")
    if value == "":
        return DEFAULT_MAX_BYTES
    mb = integer(value, digits=9)
    if mb is None or mb < 1:
        raise UsageError(
            f"{ENV_MAX_MB}={value!r} is not a whole number of MiB >= 1",
            f"set {ENV_MAX_MB} to the most the compile cache may hold, e.g. 512, or unset it",
        )
    return mb << 20


def open_cache(default: bool, env: Mapping[str, str] | None = None) -> Cache | None:
    """The cache the environment asks for (None: compile everything)."""
    if not enabled(default, env):
        return None
    return Cache(location(env), max_bytes(env))


@dataclass
class Stats:
    hits: int = 0
    compiled: int = 0
    rejected: int = 0  # damaged or foreign entries removed and compiled again
    unwritable: str = ""  # why entries could not be stored (the build goes on without them)


@dataclass
class Cache:
    folder: Path
    bound: int = DEFAULT_MAX_BYTES
    stats: Stats = field(default_factory=Stats)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def entries(self) -> Path:
        return self.folder / _ENTRIES

    def path(self, key: str) -> Path:
        return self.entries / key[:2] / key

    def get(self, key: str) -> bytes | None:
        """The bytes stored under `key`, or None; a damaged or foreign entry is removed, never served."""
        p = self.path(key)
        try:
            blob = p.read_bytes()
        except OSError:
            return None
        data = _unpack(blob, key)
        if data is None:
            with self._lock:
                self.stats.rejected += 1
            with contextlib.suppress(OSError):
                p.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(p)  # recently used: the size bound removes the oldest first
        return data

    def put(self, key: str, data: bytes) -> None:
        """Store whole or not at all (temporary name, then rename). A cache that cannot be written is
        noted in the stats; the build does not depend on it."""
        p = self.path(key)
        tmp = p.parent / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            try:
                tmp.write_bytes(_pack(key, data))
                os.replace(tmp, p)
            finally:
                with contextlib.suppress(OSError):
                    tmp.unlink()
        except OSError as e:
            with self._lock:
                self.stats.unwritable = self.stats.unwritable or f"{e.filename or p}: {e.strerror or e}"

    def usage(self) -> tuple[int, int]:
        """(entries, bytes) held now."""
        found = _listing(self.entries)
        return len(found), sum(size for _, size, _ in found)

    def trim(self) -> int:
        """Remove the least recently used entries until the folder holds at most `bound` bytes (and the
        temporary files of builds killed while writing, once they are an hour old)."""
        _stale_temporaries(self.entries)
        found = sorted(_listing(self.entries), key=lambda e: e[2])
        total = sum(size for _, size, _ in found)
        removed = 0
        for p, size, _ in found:
            if total <= self.bound:
                break
            with contextlib.suppress(OSError):
                p.unlink()
                removed += 1
            total -= size
        return removed

    def clear(self) -> tuple[int, int]:
        """Remove every entry (and any temporary file a killed build left); (entries, bytes) removed."""
        n, size = self.usage()
        with contextlib.suppress(OSError):  # what cannot be listed or removed stays (usage() shows it)
            for sub in self.entries.iterdir():
                if sub.is_dir() and not sub.is_symlink():
                    for f in sub.iterdir():
                        with contextlib.suppress(OSError):
                            f.unlink()
                    with contextlib.suppress(OSError):
                        sub.rmdir()
        left = self.usage()
        return n - left[0], size - left[1]

    # -- the build's use -------------------------------------------------------------------------------

    def compile(
        self, target: Target, spec: ArtifactSpec, tools: Tools, root: Path, work: Path, out: Path
    ) -> Path:
        """`target.compile`, or the stored bytes of the same inputs written where it would write them."""
        recipe = target.recipe(spec, tools)
        desc = describe(target, spec, tools, root, recipe)
        key = key_of(desc)
        data = self.get(key)
        dest = out / spec.file
        if data is not None:
            (work / recipe.source).write_text(desc["instantiation"])  # as the compile leaves it (--keep)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
            with self._lock:
                self.stats.hits += 1
            return dest
        path = target.compile(spec, tools, root, work, out)
        with self._lock:
            self.stats.compiled += 1
        # Stored only if no input changed while it compiled: an entry is always what its key describes.
        if describe(target, spec, tools, root, recipe) == desc:
            self.put(key, path.read_bytes())
        return path

    def summary(self) -> str:
        s = self.stats
        line = f"compile cache {self.folder}: {s.hits} reused, {s.compiled} compiled"
        if s.rejected:
            line += f", {s.rejected} damaged or foreign entries removed and compiled again"
        if s.unwritable:
            line += f"; not stored ({s.unwritable})"
        return line


def _pack(key: str, data: bytes) -> bytes:
    return _MAGIC + key.encode() + b"\n" + hashlib.sha256(data).hexdigest().encode() + b"\n" + data


def _unpack(blob: bytes, key: str) -> bytes | None:
    """The payload of an entry that is whole and is this key's, else None."""
    head = len(_MAGIC) + 65 + 65
    if len(blob) < head or not blob.startswith(_MAGIC):
        return None
    own, digest = blob[len(_MAGIC) : len(_MAGIC) + 64], blob[len(_MAGIC) + 65 : len(_MAGIC) + 129]
    data = blob[head:]
    if own != key.encode() or digest != hashlib.sha256(data).hexdigest().encode():
        return None
    return data


def _listing(entries: Path) -> list[tuple[Path, int, int]]:
    """(path, size, mtime_ns) of every entry under `entries`; unreadable ones are skipped."""
    out = []
    try:
        subs = list(entries.iterdir())
    except OSError:
        return []
    for sub in subs:
        try:
            names = list(sub.iterdir())
        except OSError:
            continue
        for p in names:
            if not _KEY.match(p.name):
                continue
            with contextlib.suppress(OSError):
                st = p.stat()
                out.append((p, st.st_size, st.st_mtime_ns))
    return out


def _stale_temporaries(entries: Path, age_s: float = 3600.0) -> None:
    import time

    with contextlib.suppress(OSError):
        for sub in entries.iterdir():
            for p in sub.glob(".*.tmp"):
                with contextlib.suppress(OSError):
                    if time.time() - p.stat().st_mtime > age_s:
                        p.unlink()


# -- the key ---------------------------------------------------------------------------------------------


def key_of(description: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(description, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def describe(
    target: Target, spec: ArtifactSpec, tools: Tools, root: Path, recipe: Recipe | None = None
) -> dict[str, Any]:
    """Everything that decides the code object, canonically: no machine path, no time."""
    recipe = recipe or target.recipe(spec, tools)
    return {
        "format": FORMAT,
        "target": spec.target,
        "file": spec.file,
        "instantiation": target.instantiation(spec),
        "sources": sources(Path(root), spec.template.source),
        "toolchain": {"flavour": tools.identity.flavour, "version": tools.identity.version},
        "binaries": {name: binary_sha256(p) for name, p in sorted(recipe.binaries.items())},
        "flags": list(recipe.flags),
    }


def sources(root: Path, source: str) -> dict[str, str]:
    """The template and every file it reaches by an include, by sha256 (tracked paths as keys).

    Includes resolve as the compilers resolve quoted names: against the including file's folder, then
    the template's folder (the -I folder). A name that resolves to no file in the tree is a toolchain
    header, covered by the toolchain's identity (recorded by name). An include whose file name is not a
    literal (a macro) cannot be followed: then every file under the template's folder counts.
    """
    base = posixpath.dirname(source)
    seen: dict[str, str] = {}
    todo = [source]
    while todo:
        rel = todo.pop()
        if rel in seen:
            continue
        data = _read(root, rel)
        seen[rel] = hashlib.sha256(data).hexdigest() if data is not None else "absent"
        if data is None:
            continue
        for quoted, angled, other in _INCLUDE.findall(decode(data)):
            name = quoted or angled
            if not name:
                if other.strip() and not other.lstrip().startswith(("//", "/*", ";")):
                    return _folder(root, base, seen)
                continue
            # Every folder a compiler may look in (C and llvm-mc search them in different orders).
            folders = {posixpath.dirname(rel), base} if quoted else {base}
            found = [
                cand
                for cand in sorted({posixpath.normpath(posixpath.join(f, name)) for f in folders})
                if not cand.startswith("../") and (root / cand).is_file()
            ]
            todo += found
            if not found:
                seen.setdefault(f"<toolchain>/{name}", "unresolved")
    return dict(sorted(seen.items()))


def _folder(root: Path, base: str, seen: dict[str, str]) -> dict[str, str]:
    out = dict(seen)
    for p in sorted((root / base).rglob("*")):
        if p.is_file():
            rel = p.relative_to(root).as_posix()
            data = _read(root, rel)
            out[rel] = hashlib.sha256(data).hexdigest() if data is not None else "absent"
    return dict(sorted(out.items()))


def _read(root: Path, rel: str) -> bytes | None:
    try:
        with open(root / rel, "rb") as f:
            return f.read(_SOURCE_LIMIT + 1)
    except OSError:
        return None


_BINARIES: dict[tuple[str, int, int, int], str] = {}
_BINARIES_LOCK = threading.Lock()


def binary_sha256(path: str | Path) -> str:
    """sha256 of a compiler binary (symlinks followed), computed once per process per file version."""
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return "absent"
    memo = (real, st.st_ino, st.st_size, st.st_mtime_ns)
    from netra.core.hashing import sha256_file

    with _BINARIES_LOCK:  # the build's workers ask at once: one of them hashes, the others wait
        if memo not in _BINARIES:
            try:
                _BINARIES[memo] = sha256_file(real)
            except OSError:
                return "unreadable"
        return _BINARIES[memo]
