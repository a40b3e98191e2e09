"""A temporary folder that is removed however this process ends, SIGKILL included.

`finally`, weakref.finalize and signal handlers clean up on everything but SIGKILL (a frontend
interrupted itself SIGKILLs its backend: subprocess.call does). A forked janitor covers that: outside
this process's session and signals, it waits on a pipe that only this process holds and, once the pipe
closes (this process has ended, however), removes the folder. A process that ended without calling
`finished()` was cut off: the janitor then also removes what `remove_if_cut_off` named (an archive
already in the output folder but not yet gated) and runs `abandoned` (the backend removes the
frontend's orphaned temporaries there). The build backend and the build hook, when hatchling runs it
directly, keep every temporary of a build in one of these.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

_DONE = b"k\n"  # the pipe carries lines: b"k" (finished), b"+PATH" / b"-PATH" (remove if cut off / keep)


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

    def remove_if_cut_off(self, path: Path) -> None:
        """Have the janitor delete `path` too should this process end before `keep(path)` or `finished()`."""
        self._say(b"+", path)

    def keep(self, path: Path) -> None:
        self._say(b"-", path)

    def _say(self, op: bytes, path: Path) -> None:
        name = os.fsencode(os.path.abspath(path))
        if self._done is not None and b"\n" not in name:  # one line per path (a newline in it: not covered)
            with contextlib.suppress(OSError):
                os.write(self._done, op + name + b"\n")

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
        while chunk := os.read(r, 4096):
            said += chunk
        shutil.rmtree(folder, ignore_errors=True)
        lines = said.split(b"\n")
        if _DONE.rstrip() not in lines:
            doomed: dict[bytes, None] = {}
            for line in lines:
                if line[:1] == b"+":
                    doomed[line[1:]] = None
                elif line[:1] == b"-":
                    doomed.pop(line[1:], None)
            for path in doomed:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            if abandoned is not None:
                abandoned()
    finally:
        os._exit(0)
