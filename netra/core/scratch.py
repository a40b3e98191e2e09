"""A temporary folder that is removed however this process ends, SIGKILL included.

`finally`, weakref.finalize and signal handlers clean up on everything but SIGKILL (a frontend
interrupted itself SIGKILLs its backend: subprocess.call does). A forked janitor covers that: outside
this process's session and signals, it waits on a pipe that only this process holds and, once the pipe
closes (this process has ended, however), removes the folder. A process that ended without calling
`finished()` was cut off: the janitor then also runs `abandoned` (the backend removes the frontend's
orphaned temporaries there). The build backend and the build hook, when hatchling runs it directly,
keep every temporary of a build in one of these.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

_DONE = b"k"


class Scratch:
    """One folder (tempfile.mkdtemp under the current TMPDIR) and the janitor that outlives us."""

    def __init__(self, prefix: str, *, abandoned: Callable[[], None] | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix=prefix))
        self._done: int | None = _janitor(self.path, abandoned)

    def finished(self) -> None:
        """This process ends as it should: the janitor only removes the folder, as `remove` has."""
        if self._done is not None:
            with contextlib.suppress(OSError):
                os.write(self._done, _DONE)
            self._close()

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def _close(self) -> None:
        fd, self._done = self._done, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _janitor(folder: Path, abandoned: Callable[[], None] | None) -> int | None:
    """Fork the janitor; the write end of its pipe, or None when no process can be forked (the
    in-process cleanup still runs on anything but SIGKILL)."""
    r, w = os.pipe()  # not inheritable: the tools this process runs do not hold it
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid:
        os.close(r)
        return w
    try:  # the janitor: out of the build's session and signals, holding nothing a frontend waits on
        os.setsid()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, r)
        os.closerange(r + 1, 1 << 16)
        said = b""
        while chunk := os.read(r, 16):
            said += chunk
        shutil.rmtree(folder, ignore_errors=True)
        if said != _DONE and abandoned is not None:
            abandoned()
    finally:
        os._exit(0)
