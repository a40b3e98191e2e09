"""One writer at a time: an flock on a lock file, so two netra processes never write the same outputs.

This protects against concurrent netra processes (two `netra lock` runs, a build hook racing a
`netra build` into the same folder), which all take the lock. It does not stop an editor or any
other program that writes the files without asking: flock is advisory.

The lock file is created if needed and never deleted: deleting it would let a third process lock a
new file while a second still waits on the old one. It holds the holder's pid, for the message a
waiting process shows; the lock itself, not the pid, is what excludes (a holder that dies releases it).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from netra.core import files, text
from netra.errors import BusyError, PathError, UnreadableFileError

_POLL_S = 0.05  # how often a bounded wait retries


@contextlib.contextmanager
def exclusive(
    path: Path,
    *,
    what: str,
    wait: float | None = None,
    notify: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold an exclusive flock on `path` for the body.

    When another process holds it, `notify` is called once with "waiting for <what> held by pid N",
    then this blocks until it is released, or raises BusyError after `wait` seconds (wait=0: try once).
    """
    fd = _open(Path(path), what)
    try:
        if not _try_lock(fd):
            patience = 1.0 if wait is None else min(1.0, wait)
            acquired, holder = _await_holder(fd, patience)
            if not acquired:
                _wait(fd, path, what, wait, notify, holder or "another process")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # no stale pid for the next waiter to name
    finally:
        os.close(fd)  # releases the lock


def _open(path: Path, what: str) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathError(f"{path}: the lock file for {what} is a symlink", "remove the link") from None
        raise UnreadableFileError(
            f"{path}: cannot open the lock file for {what} ({e.strerror})",
            "make its folder writable by this user",
        ) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise PathError(
            f"{path}: the lock file for {what} is {files.kind(mode)}, not a regular file", "remove it"
        )
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _await_holder(fd: int, patience: float) -> tuple[bool, str | None]:
    """(acquired, holder): give the holder a moment to write its pid, since it locks before it writes.

    Acquired is True when the holder let go meanwhile and this process now holds the lock.
    """
    deadline = time.monotonic() + patience
    while (holder := _holder(fd)) is None and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        if _try_lock(fd):
            return True, None
    return False, holder


def _wait(
    fd: int, path: Path, what: str, wait: float | None, notify: Callable[[str], None] | None, holder: str
) -> None:
    if notify is not None and (wait is None or wait > 0):
        notify(f"waiting for {what} held by {holder}")
    if wait is None:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    deadline = time.monotonic() + wait
    while not _try_lock(fd):
        if time.monotonic() >= deadline:
            raise BusyError(
                f"{path}: {what} is held by {_holder(fd) or holder}",  # the holder now, if known
                "wait for the other netra process to finish (or stop it), then run this again",
            )
        time.sleep(_POLL_S)


def _holder(fd: int) -> str | None:
    """The holder as "pid N", from the lock file; None while the holder has not written it yet."""
    try:
        pid = text.decode(os.pread(fd, 32, 0)).strip()
    except OSError:
        return None
    return f"pid {pid}" if pid.isascii() and pid.isdigit() else None
