"""Reading tracked files without following links, blocking on FIFOs or reading without bound.

The gate hashes, assembles and ships files named by relative paths (the lock's `[[files]]`). Every
component of such a path is opened relative to the one before it with O_NOFOLLOW, so no symlink can
make the gate read one file and ship another, or read outside the tree; the file itself is opened
non-blocking so a FIFO is refused instead of hanging; only regular files are read, and never more than
a limit. Writes go through `atomic_write`, so a reader never sees half a file.

Paths given by the user on the command line (`read_path`) are the user's choice: symlinks in them are
followed, and the file they resolve to must be a regular file within the limit. An install's own
files (`read_below`) are read like the tree's: no link below the install's root is followed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from pathlib import Path

from netra.errors import FileTooLargeError, MissingFileError, NetraError, PathError, UnreadableFileError

# Limits on what is read whole into memory. Each is far above what a legitimate file of its kind is
# (in parentheses: the largest in this release), so it only trips when a path names the wrong thing
# (a disk image, a log, a generated file gone wrong) instead of letting it exhaust memory.
SOURCE_LIMIT = 4 << 20  # kernel sources, includes, manifests, tables (largest: 41 KiB)
LOCK_LIMIT = 16 << 20  # release/manifest.lock and build.json, which grow with the catalog (13 KiB)
CODE_OBJECT_LIMIT = 64 << 20  # one code object (.hsaco, .cubin) (under 16 KiB each)
WHEEL_LIMIT = 1 << 30  # a built wheel; PyPI refuses more than 100 MiB by default

MAX_DEPTH = 64  # folders nested deeper than this under a walked base are refused (walk recurses)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20

_LINK_HINT = "replace the link with the real file or folder: tracked files are read without following links"
_KIND_HINT = "remove it or replace it with a regular file"
_FOLDER_HINT = "remove the folder, or restore the file it replaced (git checkout)"


def relative(rel: str, where: str) -> str:
    """`rel` unchanged when it is a tracked path as the lock records it; PathError naming `where` if not."""
    problem = _path_problem(rel)
    if problem is not None:
        raise PathError(
            f"{where}: path {rel!r} {problem}",
            "record paths relative to the repository root, with '/' and no '.' or '..' "
            "(e.g. manifests/models/llama-3.1-8b.toml)",
        )
    return rel


def read_bytes(root: Path, rel: str, *, limit: int, where: str) -> bytes:
    """The bytes of the regular file root/rel, reached without following any symlink below root."""
    relative(rel, where)
    parts = rel.split("/")
    dfd = _open_root(root, where)
    try:
        for i, name in enumerate(parts[:-1]):
            fd = _open_dir_at(dfd, name, "/".join(parts[: i + 1]), rel, where)
            os.close(dfd)
            dfd = fd
        fd = _open_file_at(dfd, parts[-1], rel, where)
    finally:
        os.close(dfd)
    try:
        return _read_fd(fd, f"{rel} ({where})", limit)
    finally:
        os.close(fd)


def read_text(root: Path, rel: str, *, limit: int, where: str) -> str:
    """read_bytes decoded as strict UTF-8; a decode error names the file and the byte offset."""
    data = read_bytes(root, rel, limit=limit, where=where)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnreadableFileError(
            f"{rel} ({where}): not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
            "save the file as UTF-8",
        ) from None


def read_path(path: Path, *, limit: int, what: str) -> bytes:
    """The bytes of a file the user named (a --lock, a wheel, build.json).

    Symlinks in a user-given path are followed: the user chose the path, and links there (a `dist`
    link, a symlinked home) are ordinary. What it resolves to must be a regular file within `limit`,
    opened non-blocking (a FIFO is refused, never waited on) and without following a link swapped in
    after resolution.
    """
    try:
        real = os.path.realpath(path, strict=True)
    except FileNotFoundError:
        dangling = " (a symlink to nothing)" if os.path.islink(path) else ""
        raise MissingFileError(
            f"{path}: {what} not found{dangling}", f"check the path of the {what}"
        ) from None
    except OSError as e:
        raise _os_error(f"{path}: {what}", e, f"check the path of the {what}") from None
    shown = f"{path}: {what}" if real == os.path.abspath(path) else f"{path} (-> {real}): {what}"
    try:
        st = os.lstat(real)
        if not stat.S_ISREG(st.st_mode):
            raise PathError(
                f"{shown} is {kind(st.st_mode)}, not a regular file", f"pass the {what} file itself"
            )
        fd = os.open(real, _FILE_FLAGS)
    except OSError as e:
        raise _os_error(shown, e, f"check the path of the {what}") from None
    try:
        return _read_fd(fd, shown, limit)
    finally:
        os.close(fd)


def read_below(root: Path, path: Path, *, limit: int, what: str) -> bytes:
    """A file of an install (netra/_data, or a checkout): below `root` no link is followed, as in
    the tree the gate reads (pip never installs links, so one there was put by someone else), and
    only regular files within `limit` are read. `root` itself may be reached through links (a
    symlinked venv or home). A path outside `root` is read like a user-given one (read_path)."""
    try:
        rel = Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        return read_path(path, limit=limit, what=what)
    if not os.path.isdir(root):  # no root at all: read_path says what is missing, in its words
        return read_path(path, limit=limit, what=what)
    return read_bytes(root, rel, limit=limit, where=f"{what} in {root}" if what != rel else f"in {root}")


class Below:
    """read_below for many files of one install: the root is resolved and opened once, and each folder
    below it once (opened relative to its parent with O_NOFOLLOW, as read_bytes does), instead of once
    per file. Doctor reads every file of an install; per-file opens of the same folders were a third
    of its time. Safe to share between threads (openat on read-only folder descriptors)."""

    def __init__(self, root: Path, what: str) -> None:
        self.root = Path(root)
        self._base = os.path.abspath(root)
        self._what = what
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()
        self._is_folder: bool | None = None  # the root: looked at once

    def __enter__(self) -> Below:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def read(self, path: Path, *, limit: int, what: str) -> bytes:
        full = os.path.abspath(path)
        if not full.startswith(self._base + os.sep) or not self._root_is_folder():
            return read_below(self.root, path, limit=limit, what=what)  # its own words for these cases
        return self.read_rel(full[len(self._base) + 1 :].replace(os.sep, "/"), limit=limit, what=what)

    def _root_is_folder(self) -> bool:
        if self._is_folder is None:
            self._is_folder = os.path.isdir(self._base)
        return self._is_folder

    def read_rel(self, rel: str, *, limit: int, what: str) -> bytes:
        """The file at `rel` (posix, relative to the root): read() without resolving a path first."""
        if not self._root_is_folder():
            return read_below(self.root, self.root / rel, limit=limit, what=what)
        where = f"{what} in {self.root}" if what != rel else f"in {self.root}"
        relative(rel, where)
        folder, _, name = rel.rpartition("/")
        dfd = self._folder(folder, rel, where)
        fd = _open_file_at(dfd, name, rel, where)
        try:
            return _read_fd(fd, f"{rel} ({where})", limit)
        finally:
            os.close(fd)

    def _folder(self, folder: str, rel: str, where: str) -> int:
        with self._lock:
            return self._folder_unlocked(folder, rel, where)

    def _folder_unlocked(self, folder: str, rel: str, where: str) -> int:
        fd = self._fds.get(folder)
        if fd is None:
            if not folder:
                fd = _open_root(self.root, where)
            else:
                parent, _, name = folder.rpartition("/")
                fd = _open_dir_at(self._folder_unlocked(parent, rel, where), name, folder, rel, where)
            self._fds[folder] = fd
        return fd


def walk(root: Path, base: str, *, where: str) -> list[str]:
    """Every file under root/base as sorted root-relative posix paths; [] when base does not exist.

    Where tracked files live every file must be trackable, so anything the lock could not record is
    an error naming it: a symlink (to a file or a folder), FIFO, socket or device, a hidden entry
    (name starting with '.'), a name with a backslash or that is not UTF-8, and a folder named like a
    file (`x.toml/`: one put where a file was; skipping it would drop what it replaced).
    `__pycache__` folders are skipped. Nothing is followed: folders are opened with O_NOFOLLOW
    relative to their parent.
    """
    relative(base, where)
    parts = base.split("/")
    dfd = _open_root(root, where)
    try:
        for i, name in enumerate(parts):
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            except FileNotFoundError:
                return []
            except OSError as e:
                raise _component_error(dfd, name, "/".join(parts[: i + 1]), base, where, e) from None
            os.close(dfd)
            dfd = fd
        found: list[str] = []
        _scan(dfd, base, base, where, found, 0)
    finally:
        os.close(dfd)
    return sorted(found)


def _temporary(path: Path) -> tuple[int, str]:
    """A unique temporary file beside `path`; an error names `path` (the file the user asked for), not
    the temporary name nobody typed."""
    import tempfile  # writers only: readers (the runtime, doctor) never need it

    try:
        return tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as e:
        e.filename = str(path)
        raise


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write `path` whole or not at all: a unique temporary file in the same folder, fsync, rename.

    Readers see the old or the new content, never a part; concurrent writers each rename their own
    temporary file (the last one wins). The temporary file is removed on any exception, including
    KeyboardInterrupt and SystemExit.
    """
    path = Path(path)
    fd, tmp = _temporary(path)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def atomic_write_all(items: list[tuple[Path, bytes]], *, mode: int = 0o644) -> None:
    """Write every (path, data) whole, or none of them: each goes to a unique temporary file in its
    folder first (fsync'd); only once all are written are they renamed into place. On any failure (a
    full disk half way through) every temporary file is removed and no path has changed."""
    staged: list[tuple[str, Path]] = []
    try:
        for path, data in items:
            fd, tmp = _temporary(path)
            staged.append((tmp, path))
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, mode)
                os.fsync(fd)
            except OSError as e:
                if e.filename is None:
                    e.filename = str(path)
                raise
            finally:
                os.close(fd)
        for _, path in staged:  # a rename that would fail must fail before any other has happened
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        while staged:
            tmp, path = staged[0]
            os.replace(tmp, path)
            staged.pop(0)
    except BaseException:
        for tmp, _ in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    for folder in sorted({path.parent for path, _ in items}):
        _fsync_dir(folder)


# ---------------------------------------------------------------------------------------------------


def _path_problem(rel: object) -> str | None:
    if not isinstance(rel, str):
        return f"is not a string ({type(rel).__name__})"
    if not rel:
        return "is empty"
    if "\0" in rel:
        return "contains a NUL byte"
    if "\\" in rel:
        return "contains a backslash"
    if rel.startswith("/"):
        return "is absolute"
    if rel.endswith("/"):
        return "ends with a slash"
    for part in rel.split("/"):
        if part == "":
            return "has an empty component ('//')"
        if part in (".", ".."):
            return f"has a {part!r} component"
    return None


def kind(mode: int) -> str:
    """What a path is, in the words every message of netra uses ("a folder", never "a directory")."""
    if stat.S_ISLNK(mode):
        return "a symlink"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "of an unknown kind"


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


def _os_error(shown: str, e: OSError, hint: str) -> NetraError:
    if e.errno == errno.ENOENT:
        return MissingFileError(f"{shown} is missing", hint)
    if e.errno == errno.ELOOP:
        return PathError(f"{shown}: too many levels of symlinks, or a symlink where none is allowed", hint)
    if e.errno == errno.ENXIO:
        return PathError(f"{shown} is a socket or a device, not a regular file", hint)
    if e.errno in (errno.EACCES, errno.EPERM):
        return UnreadableFileError(f"{shown}: permission denied", "make it readable by this user (chmod u+r)")
    return UnreadableFileError(f"{shown}: {e.strerror or e}", "check the file and the disk it is on")


def _open_root(root: Path, where: str) -> int:
    """root resolved once (it may be reached through a symlink), opened as a folder."""
    real = os.path.realpath(root)
    try:
        return os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise PathError(
            f"{root} ({where}): the tree root cannot be opened as a folder ({e.strerror})",
            "run netra from the repository (or pass the folder that holds kernels/ and manifests/)",
        ) from None


def _component_error(dfd: int, name: str, shown: str, rel: str, where: str, e: OSError) -> NetraError:
    """Why opening folder `shown` (a prefix of rel) failed, from what is actually there."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        st = None
    label = f"{rel} ({where})" if shown == rel else f"{rel} ({where}): {shown}"
    if st is not None and stat.S_ISLNK(st.st_mode):
        return PathError(f"{label} is a symlink", _LINK_HINT)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        return PathError(
            f"{label} is {kind(st.st_mode)}, not a folder", f"{shown} must be a folder: move it away"
        )
    return _os_error(label, e, f"restore {shown}, or run `netra lock` if it was removed on purpose")


def _open_dir_at(dfd: int, name: str, shown: str, rel: str, where: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dfd)
    except OSError as e:
        raise _component_error(dfd, name, shown, rel, where, e) from None


def _open_file_at(dfd: int, name: str, rel: str, where: str) -> int:
    """Check what `name` is before opening it (no device is ever opened), then open without following."""
    label = f"{rel} ({where})"
    missing_hint = f"restore {rel}, or run `netra lock` if it was removed on purpose"
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError as e:
        raise _os_error(label, e, missing_hint) from None
    if stat.S_ISLNK(st.st_mode):
        raise PathError(f"{label} is a symlink", _LINK_HINT)
    if not stat.S_ISREG(st.st_mode):
        raise PathError(f"{label} is {kind(st.st_mode)}, not a regular file", _KIND_HINT)
    try:
        return os.open(name, _FILE_FLAGS, dir_fd=dfd)
    except OSError as e:  # replaced between the check and the open
        if e.errno == errno.ELOOP:
            raise PathError(f"{label} is a symlink", _LINK_HINT) from None
        raise _os_error(label, e, missing_hint) from None


def _read_fd(fd: int, shown: str, limit: int) -> bytes:
    """At most `limit` bytes of an open regular file; more (even grown while reading) is refused."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # swapped in after the check
        raise PathError(f"{shown} is {kind(st.st_mode)}, not a regular file", _KIND_HINT)
    too_large = f"netra reads at most {_size(limit)} here: check that this is the right file"
    if st.st_size > limit:
        raise FileTooLargeError(f"{shown} is {st.st_size} bytes, over the {_size(limit)} limit", too_large)
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        try:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - total))
        except OSError as e:
            raise _os_error(shown, e, "check the file and the disk it is on") from None
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise FileTooLargeError(f"{shown} grew past the {_size(limit)} limit while being read", too_large)
    return b"".join(chunks)


def _scan(dfd: int, prefix: str, base: str, where: str, found: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        raise PathError(f"{prefix} ({where}): folders nested more than {MAX_DEPTH} deep", f"flatten {base}/")
    with os.scandir(dfd) as it:
        entries = list(it)
    for entry in entries:
        shown = f"{prefix}/{entry.name}"
        is_dir = entry.is_dir(follow_symlinks=False)
        if is_dir and entry.name == "__pycache__":
            continue
        if entry.is_symlink():
            raise PathError(
                f"{shown} ({where}) is a symlink; every file under {base}/ must be tracked as is", _LINK_HINT
            )
        _check_name(entry.name, shown, base, where)
        if is_dir:
            # Tracked folders have plain names, and every tracked file a suffix: a folder named like a
            # file is one put where a file was (an empty one would otherwise be skipped silently).
            if "." in entry.name:
                raise PathError(
                    f"{shown} ({where}) is a folder, not a regular file (its name is a file's)", _FOLDER_HINT
                )
            fd = _open_dir_at(dfd, entry.name, shown, shown, where)
            try:
                _scan(fd, shown, base, where, found, depth + 1)
            finally:
                os.close(fd)
        elif entry.is_file(follow_symlinks=False):
            found.append(shown)
        else:
            mode = entry.stat(follow_symlinks=False).st_mode
            raise PathError(
                f"{shown} ({where}) is {kind(mode)}; every file under {base}/ must be a regular file",
                _KIND_HINT,
            )


def _check_name(name: str, shown: str, base: str, where: str) -> None:
    hint = f"remove it or move it out of {base}/: every file there must be one the lock can record"
    if name.startswith("."):
        raise PathError(f"{shown} ({where}) is hidden (its name starts with '.')", hint)
    if "\\" in name:
        raise PathError(f"{shown} ({where}): its name contains a backslash", hint)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(shown).decode("utf-8", "backslashreplace")
        raise PathError(f"{shown} ({where}): its name is not UTF-8", hint) from None


def _fsync_dir(folder: Path) -> None:
    """Make a rename durable; some filesystems cannot fsync a folder, which only costs durability."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
