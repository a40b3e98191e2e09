"""Which netra this is, where its release data lives, and how to restore it: from the distribution's records.

The kind of install is read from what the installer recorded (the dist-info's RECORD, and PEP 610's
direct_url.json, read directly as importlib.metadata would), never guessed from the folder layout:

- "wheel": an installed netra-kernel distribution whose RECORD lists this very package (pip, uv or
  installer put it there, from an index, a wheel file, a URL, a directory or a VCS). Its data is
  netra/_data beside the code (netra/runtime/layout.py says what is in it).
- "editable": a netra-kernel distribution installed in editable mode (`pip install -e`; direct_url.json
  says `dir_info.editable`) from the source tree this package sits in. Nothing is packaged: the lock
  and tables are the tree's release/, and the code objects come from `netra build build/kernels`.
  A package with netra/_data that no distribution records (copied without its .dist-info) is a wheel
  install too, with no `distribution`: its data is checked as any wheel's, its Python files cannot be.
- "source": no installed distribution records this package: a source checkout on sys.path (PYTHONPATH,
  or `python -m netra` run in the checkout, whose cwd comes first on sys.path). Data as for editable. If
  a netra-kernel distribution is installed as well, this checkout hides it: `shadowed` names it.

How to restore a damaged install is derived from the same records: reinstall from where it was
installed (direct_url.json: the wheel file, URL, directory or commit), else the same version from the
index; always `--no-deps`, with the interpreter of this environment. Locating reads metadata files
only (no release data: the runtime and doctor check that).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from netra import __version__
from netra.runtime.layout import BUILD_RECORD, PACKAGE_DATA, data_path
from netra.runtime.lockfile import LOCK_PATH

PACKAGE_DIR = (
    Path(__file__).resolve().parents[1]
)  # the netra package (this file is netra/runtime/installed.py)
EDITABLE_BUILD = "build/kernels"  # `netra build build/kernels` output, relative to the source root
DISTRIBUTION = "netra-kernel"
KINDS = ("wheel", "editable", "source")
ISSUES = "https://github.com/netra-kernel/netra/issues"


@dataclass(frozen=True)
class Distribution:
    """An installed netra-kernel distribution, as its dist-info records it."""

    version: str
    dist_info: str  # the .dist-info folder
    installer: str  # INSTALLER's first line ("pip", "uv", ...), "" when absent
    origin: str  # "index", "file", "url", "directory", "editable" or "vcs" (PEP 610)
    url: str | None = None  # direct_url.json's url; None when installed from an index
    commit: str | None = None  # vcs_info.commit_id
    vcs: str | None = None
    subdirectory: str | None = None

    @property
    def site(self) -> str:
        """The folder the distribution is installed into (site-packages)."""
        return str(Path(self.dist_info).parent)

    @property
    def local_path(self) -> str | None:
        """The file or folder of a file:// url."""
        if self.url is None or not self.url.startswith("file:"):
            return None
        return unquote(urlsplit(self.url).path)

    def describe(self) -> str:
        """Where it was installed from, in words."""
        by = f" by {self.installer}" if self.installer else ""
        if self.origin == "index":
            return f"installed{by} from a package index"
        if self.origin == "vcs":
            return f"installed{by} from {self.vcs}+{self.url} at {self.commit}"
        return f"installed{by} from {self.local_path or self.url}"

    def spec(self) -> tuple[str, str]:
        """(what to reinstall from, why not the recorded source when it is not): the recorded source
        while it is still there, else this version from the index."""
        fallback = f"{DISTRIBUTION}=={self.version}"
        if self.origin == "index":
            return fallback, ""
        if self.origin == "vcs" and self.url and self.commit:
            sub = f"#subdirectory={self.subdirectory}" if self.subdirectory else ""
            return f"{DISTRIBUTION} @ {self.vcs}+{self.url}@{self.commit}{sub}", ""
        local = self.local_path
        if local is not None:
            if Path(local).exists():
                return local, ""
            return fallback, f"it was installed from {local}, which no longer exists"
        if self.url:
            return f"{DISTRIBUTION} @ {self.url}", ""
        return fallback, ""

    def reinstall(self, spec: str | None = None, python: str | None = None) -> str:
        """The command that puts every file of the distribution back (dependencies untouched)."""
        what = shlex.quote(spec if spec is not None else self.spec()[0])
        py = shlex.quote(python or sys.executable)
        if self.installer == "uv":
            # uv hard-links installed files to its cache: a damaged file is damaged in the cache too, and
            # a reinstall from it would link the same bytes back. Drop netra-kernel's cache entries first.
            return (
                f"uv cache clean {DISTRIBUTION} && uv pip install --python {py} --reinstall --no-deps {what}"
            )
        return f"{py} -m pip install --force-reinstall --no-deps {what}"


@dataclass(frozen=True)
class Install:
    """One install's layout: kind (KINDS), where its data is, and the records it was found by."""

    kind: str
    root: Path  # wheel: netra/_data; editable and source: the source tree
    version: str = __version__
    distribution: Distribution | None = None  # the record of this install (wheel, editable)
    shadowed: Distribution | None = None  # source: the installed distribution this checkout hides
    package: Path = PACKAGE_DIR  # the netra package this install is

    @property
    def lock_file(self) -> Path:
        return self.root / ("manifest.lock" if self.kind == "wheel" else LOCK_PATH)

    @property
    def build_record(self) -> Path | None:
        """build.json: the whole-file sha256 of each code object as built (wheel installs only)."""
        return self.root / BUILD_RECORD if self.kind == "wheel" else None

    @property
    def code_dir(self) -> Path:
        return self.root if self.kind == "wheel" else self.root / EDITABLE_BUILD

    def tracked(self, lock_path: str) -> Path | None:
        """Where a file the lock tracks lives in this install; None when it is not shipped (sources)."""
        if self.kind != "wheel":
            return self.root / lock_path
        dp = data_path(lock_path)
        return None if dp is None else self.root / dp

    def code_object(self, artifact_file: str) -> Path:
        return self.code_dir / artifact_file

    def describe(self) -> str:
        """What this install is, in words (doctor's first line)."""
        if self.kind == "wheel":
            return "wheel install" if self.distribution else "wheel package without its .dist-info records"
        if self.kind == "editable":
            return "editable install"
        return "source checkout on sys.path"

    @property
    def reinstall(self) -> str:
        """The one command that restores a damaged install (the runtime's hint)."""
        if self.kind == "wheel":
            return _reinstall(self)
        return self.restore("release")

    def restore(self, rel: str) -> str:
        """How to restore one tracked file of this install (path relative to root): a command, and for a
        source tree the alternative."""
        cmd, note = self.restore_command(rel)
        return f"{cmd} ({note})" if note else cmd

    def restore_command(self, rel: str) -> tuple[str, str]:
        """(the command that restores one tracked file, what else would do): a reinstall for a wheel; for
        a source tree, version control when it is a git checkout, else regenerating lock and tables."""
        if self.kind == "wheel":
            return _reinstall(self), ""
        if (self.root / ".git").exists():
            return (
                f"{_git(self.root)} checkout -- {shlex.quote(rel)}",
                f"or, if the change is intended, run `netra lock` in {self.root}",
            )
        py = shlex.quote(sys.executable)
        return (
            f"cd {shlex.quote(str(self.root))} && {py} -m netra lock",
            "regenerates the lock and tables from the sources",
        )

    @property
    def rebuild(self) -> str:
        """The fix for a missing or altered code object."""
        if self.kind == "wheel":
            return _reinstall(self)
        return f"cd {shlex.quote(str(self.root))} && {shlex.quote(sys.executable)} -m netra build {EDITABLE_BUILD}"


def _git(root: Path) -> str:
    return f"git -C {shlex.quote(str(root))}"


def _reinstall(inst: Install) -> str:
    if inst.distribution is None:
        return f"{shlex.quote(sys.executable)} -m pip install --force-reinstall --no-deps {DISTRIBUTION}=={inst.version}"
    return inst.distribution.reinstall()


def recorded_sha256(inst: Install, data_path: str) -> str | None:
    """The sha256 (hex) the wheel's RECORD holds for netra/_data/`data_path`: the bytes the gated build
    wrote (None without a RECORD, or when it lists no hash for that file)."""
    if inst.kind != "wheel" or inst.distribution is None:
        return None
    row = DistInfo(Path(inst.distribution.dist_info)).row(f"{PACKAGE_DATA}/{data_path}")
    return one_record_sha256(row[1]) if row is not None else None


def wheel(data_dir: str | Path, distribution: Distribution | None = None) -> Install:
    data = Path(data_dir)
    return Install("wheel", data, distribution=distribution, package=data.parent)


def editable(source_root: str | Path, distribution: Distribution | None = None) -> Install:
    root = Path(source_root)
    return Install("editable", root, distribution=distribution, package=root / "netra")


def source(source_root: str | Path, shadowed: Distribution | None = None) -> Install:
    root = Path(source_root)
    return Install("source", root, shadowed=shadowed, package=root / "netra")


class DistInfo:
    """One installed distribution's .dist-info folder, read directly: the few files locating an install
    needs (METADATA's version, INSTALLER, direct_url.json, RECORD). importlib.metadata would do the
    same, at the cost of importing it (email, zipfile, csv...: more than the rest of a first lookup)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def read_text(self, name: str) -> str | None:
        """A metadata file as text; None when it is not a readable regular file within the limit (a
        FIFO there is refused, never waited on: files.read_path)."""
        from netra.core import files, text
        from netra.errors import NetraError

        try:
            data = files.read_path(self.folder / name, limit=files.LOCK_LIMIT, what=name)
        except NetraError:
            return None
        return text.decode(data)  # as Path.read_text(errors="replace") read it: universal newlines

    def record_text(self) -> str | None:
        """RECORD's text, read once while the file stays the same (locating the install and a first
        lookup both need rows of it; a reinstall changes its inode, size or mtime and is read again)."""
        import os

        path = self.folder / "RECORD"
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
        cached = _RECORD_TEXT.get(key[0])
        if cached is not None and cached[0] == key:
            return cached[1]
        text = self.read_text("RECORD")
        if text is not None:
            _RECORD_TEXT[key[0]] = (key, text)
        return text

    @property
    def version(self) -> str:
        for line in (self.read_text("METADATA") or "").splitlines():
            if not line.strip():
                break  # the headers end at the first blank line
            key, _, value = line.partition(":")
            if key.strip().lower() == "version":
                return value.strip()
        return ""

    def record(self) -> list[tuple[str, str, str]]:
        """RECORD's rows (path, hash, size), as the installer wrote them (CSV: a row with a quote is
        read by the csv module; the others, every row of a netra wheel, are split at their commas)."""
        text = self.record_text()
        if text is None:
            return []
        lines = text.splitlines()
        if any('"' in ln for ln in lines):
            import csv

            rows = [[*r, "", ""] for r in csv.reader(lines) if r]
        else:
            rows = [[*ln.split(","), "", ""] for ln in lines if ln]
        return [(r[0], r[1], r[2]) for r in rows]

    def row(self, path: str) -> tuple[str, str, str] | None:
        """RECORD's row for one path (a first lookup needs two rows of a few hundred): found in the text
        when no row is quoted, else through record()."""
        text = self.record_text()
        if text is None:
            return None
        if '"' in text:
            return next((r for r in self.record() if r[0] == path), None)
        if text.startswith(path + ","):
            at = 0
        else:
            at = text.find("\n" + path + ",") + 1
            if at == 0:
                return None
        end = text.find("\n", at)
        line = text[at : end if end >= 0 else len(text)].rstrip("\r")
        r = [*line.split(","), "", ""]
        return (r[0], r[1], r[2])


def record_sha256(value: str) -> str | None:
    """A RECORD hash field's sha256 as hex ("sha256=<urlsafe base64, unpadded>"); None for another
    algorithm, no hash, or a value that is not one. For many rows (doctor reads every one)."""
    import binascii

    mode, _, b64 = value.partition("=")
    b64 = b64.rstrip("=")
    if mode != "sha256" or len(b64) != 43 or "+" in b64 or "/" in b64:
        return None
    try:  # a digit outside the alphabet is dropped (no strict_mode before Python 3.11): 32 bytes, or not one
        raw = binascii.a2b_base64((b64 + "=").translate(_URLSAFE))
    except (binascii.Error, ValueError):
        return None
    if (
        len(raw) != 32 or _B64.get(b64[-1], 1) & 3
    ):  # the 2 bits past the digest are 0, as in one_record_sha256
        return None
    return raw.hex()


def one_record_sha256(value: str) -> str | None:
    """record_sha256 of one row, decoded here: a first lookup needs one row, and binascii is an
    extension module whose load costs more than the rest of that row's work."""
    mode, _, b64 = value.partition("=")
    b64 = b64.rstrip("=")
    if mode != "sha256" or len(b64) != 43:
        return None
    n = 0
    try:
        for digit in b64:
            n = (n << 6) | _B64[digit]
    except KeyError:
        return None
    if n & 3:  # 43 digits carry 258 bits: the last two are padding, zero in a canonical encoding
        return None
    return format(n >> 2, "064x")


_B64 = {d: i for i, d in enumerate("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")}
_URLSAFE = str.maketrans("-_", "+/")
_RECORD_TEXT: dict[str, tuple[tuple[str, int, int, int], str]] = {}


def _named(entry: str, distribution: str = DISTRIBUTION) -> bool:
    """A .dist-info folder of `distribution` (names normalized as packaging does: -, _ and . alike)."""
    if not entry.endswith(".dist-info"):
        return False
    name = entry[: -len(".dist-info")].rpartition("-")[0] or entry[: -len(".dist-info")]
    return _normal(name) == _normal(distribution)


def _normal(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


def dist_infos(distribution: str) -> list[DistInfo]:
    """Every installed `distribution`'s .dist-info on sys.path, in sys.path order (one folder once),
    found by listing folders: nothing is read until a file of one is asked for (DistInfo.read_text)."""
    import os

    out: list[DistInfo] = []
    seen: set[str] = set()
    for entry in sys.path:
        try:
            names = sorted(n for n in os.listdir(entry or ".") if _named(n, distribution))
        except (OSError, ValueError):
            continue
        for n in names:
            folder = Path(entry or ".", n)
            if not folder.is_dir():
                continue
            info = str(folder.resolve())
            if info not in seen:
                seen.add(info)
                out.append(DistInfo(Path(info)))
    return out


def distributions() -> list[tuple[Distribution, DistInfo]]:
    """Every installed netra-kernel distribution on sys.path, in sys.path order, with its dist-info
    (duplicates of one dist-info folder once)."""
    return [(_record(dist, str(dist.folder)), dist) for dist in dist_infos(DISTRIBUTION)]


def _record(dist: DistInfo, info: str) -> Distribution:
    read = dist.read_text
    installer = ((read("INSTALLER") or "").strip().splitlines() or [""])[0]
    try:
        direct = json.loads(read("direct_url.json") or "null")
    except (ValueError, RecursionError):  # not JSON, or nested thousands deep: not pip's record of a URL
        direct = None
    version = dist.version
    if not isinstance(direct, dict) or not isinstance(direct.get("url"), str):
        return Distribution(version, info, installer, "index")
    url = direct["url"]
    sub = direct.get("subdirectory") if isinstance(direct.get("subdirectory"), str) else None
    if isinstance(direct.get("vcs_info"), dict):
        vcs = direct["vcs_info"]
        return Distribution(version, info, installer, "vcs", url, vcs.get("commit_id"), vcs.get("vcs"), sub)
    if isinstance(direct.get("dir_info"), dict):
        kind = "editable" if direct["dir_info"].get("editable") else "directory"
        return Distribution(version, info, installer, kind, url, subdirectory=sub)
    return Distribution(
        version, info, installer, "file" if url.startswith("file:") else "url", url, subdirectory=sub
    )


def _owns(dist: DistInfo, pkg: Path) -> bool:
    """The distribution's RECORD lists this package's __init__.py at this very place."""
    init = f"{pkg.name}/__init__.py"
    if dist.row(init) is None:
        return False
    try:
        return (dist.folder.parent / init).resolve() == (pkg / "__init__.py").resolve()
    except OSError:
        return False


def _wheel_beside(pkg: Path) -> Install | None:
    """The wheel install whose .dist-info an installer put beside the package, under the name it gives
    this version (pip and uv alike): found without listing every folder on sys.path, as a first
    lookup on a host with hundreds of installed packages otherwise does. None: look everywhere."""
    from netra import __version__

    folder = pkg.parent / f"{DISTRIBUTION.replace('-', '_')}-{__version__}.dist-info"
    if not folder.is_dir():
        return None
    info = str(folder.resolve())
    dist = DistInfo(Path(info))
    rec = _record(dist, info)
    if rec.origin == "editable" or not _owns(dist, pkg):
        return None
    return Install("wheel", pkg.parent / PACKAGE_DATA, distribution=rec, package=pkg)


def locate(package_dir: str | Path | None = None) -> Install:
    """The install this netra package belongs to, from the installed distributions' records."""
    pkg = Path(package_dir).resolve() if package_dir is not None else PACKAGE_DIR
    beside = _wheel_beside(pkg)
    if beside is not None:
        return beside
    found = distributions()
    for rec, dist in found:
        if rec.origin != "editable" and _owns(dist, pkg):
            return Install("wheel", pkg.parent / PACKAGE_DATA, distribution=rec, package=pkg)
    for rec, _ in found:
        local = rec.local_path
        if rec.origin == "editable" and local is not None and Path(local).resolve() == pkg.parent:
            return Install("editable", pkg.parent, distribution=rec, package=pkg)
    data = pkg.parent / PACKAGE_DATA
    if (data / "manifest.lock").is_file() and not (pkg.parent / LOCK_PATH).exists():
        # A wheel's package without its .dist-info (copied into an image, or the dist-info removed):
        # its data is beside it, but no RECORD vouches for its Python files.
        return Install("wheel", data, package=pkg)
    return Install("source", pkg.parent, shadowed=found[0][0] if found else None, package=pkg)
