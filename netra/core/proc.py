"""Running external tools (llvm-mc, ld.lld, llvm-objdump, nvcc) with a time, memory and output bound.

A hung or runaway tool must fail the gate with a message, not hang it or exhaust the machine. Each
tool starts in its own session, so it is killed with every process it spawned: on timeout, on
interrupt (`kill_all`, which netra.core.interrupts runs on SIGINT/SIGTERM/SIGHUP) and after it exits (a
straggler it left behind does not outlive the call). run() is safe to call from many threads.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from netra.core import interrupts, text
from netra.errors import ToolCrashError, ToolError, ToolInterruptedError, ToolOutputError, ToolTimeoutError

# One assembly, link, disassembly or nvcc compile of one kernel takes well under a second here
# (llvm-mc + ld.lld: ~30 ms; nvcc -cubin of a small kernel: ~0.2 s). 120 s is two orders of magnitude
# above that, so a loaded CI machine never trips it, while a hung tool fails the gate in two minutes
# instead of at the CI job's timeout.
TOOL_TIMEOUT_S = 120.0
# Address-space limit per process (RLIMIT_AS; inherited, so nvcc's cicc and ptxas each get their own).
# llvm-mc-22 needs ~200 MiB of address space just to map libLLVM, nvcc 13 compiles a small sm_90a
# kernel under 256 MiB; 4 GiB leaves room for large kernels while a runaway tool fails fast instead
# of pushing a 16-worker build into swap or the OOM killer.
TOOL_MEMORY_BYTES = 4 << 30
# What is kept of each of stdout and stderr. The whole catalog's disassembly (one llvm-objdump
# process) is ~0.7 MiB today. Over the limit, stdout is refused (the tool is killed and ToolOutputError
# raised: callers parse it, and a truncated disassembly could pass a check it should fail); stderr,
# only ever shown to people, keeps its first 64 KiB and its last lines up to the limit.
OUTPUT_LIMIT = 8 << 20
_STDERR_HEAD = 64 << 10
_READ = 1 << 16
_POLL_S = 0.05  # how often exit is polled where pidfd_open is not available
_DRAIN_S = 2.0  # after the tool exits, how long its pipes are read for what is still buffered

_TOOL_HINT = (
    "check the toolchain installation, and the sources for an include cycle or a runaway macro "
    "(a tool that hangs or runs out of memory on them is stopped by these limits)"
)


@dataclass
class _Child:
    proc: subprocess.Popen[bytes]
    killed: bool = False  # by kill_all


_lock = threading.RLock()  # re-entrant: kill_all runs in a signal handler that may interrupt run()
_live: dict[int, _Child] = {}
_generation = 0  # bumped by kill_all; a child started across a kill_all is killed too


def run(
    argv: list[str],
    *,
    tool: str,
    what: str,
    timeout: float,
    memory_bytes: int | None = None,
    cwd: Path | None = None,
    input: str | None = None,
    env: dict[str, str] | None = None,
    output_limit: int = OUTPUT_LIMIT,
) -> subprocess.CompletedProcess[str]:
    """Run `argv` to completion and return its exit status and (bounded, UTF-8 decoded) output.

    A non-zero exit is returned, not raised: the caller turns the tool's own words into its message.
    Raised: ToolError (cannot start), ToolTimeoutError, ToolCrashError (killed by a signal),
    ToolOutputError (stdout over `output_limit`), ToolInterruptedError (killed by kill_all).
    `what` names the job ("rmsnorm_h4096: assembling"), `tool` the program ("llvm-mc").
    """
    if not argv:
        raise ValueError("run() needs a program to run")
    with _lock:
        generation = _generation
    data = input.encode("utf-8") if input is not None else None
    child: _Child | None = None
    try:
        # Spawn and register as one step: an interrupt in between would leave a child nobody kills.
        with interrupts.deferred():
            try:
                p = subprocess.Popen(
                    argv,
                    stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                    preexec_fn=_limits(memory_bytes),
                    close_fds=True,
                )
            except (OSError, subprocess.SubprocessError) as e:
                detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
                raise ToolError(
                    f"{what}: cannot run {tool} ({argv[0] if argv else '?'}: {detail})", _TOOL_HINT
                ) from None
            child = _Child(p)
            with _lock:
                _live[p.pid] = child
                if _generation != generation:
                    child.killed = True
                    _kill_group(p.pid)
        out, err, timed_out, overflow = _communicate(p, data, time.monotonic() + timeout, output_limit)
    finally:
        if child is not None:
            with interrupts.deferred():  # a signal now must not leave it registered or unreaped
                _end(child.proc)
    stderr = text.decode(err)
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    tail = f": {last}" if last else ""
    assert child is not None
    if child.killed:
        raise ToolInterruptedError(f"{what}: {tool} was stopped (netra is being interrupted)", "run it again")
    if timed_out:
        raise ToolTimeoutError(f"{what}: {tool} did not finish within {timeout:g}s (killed)", _TOOL_HINT)
    if overflow:
        raise ToolOutputError(
            f"{what}: {tool} printed more than {_size(output_limit)} on stdout (killed)",
            f"{_TOOL_HINT}; or pass fewer inputs per {tool} run",
        )
    if p.returncode < 0:
        hint = _TOOL_HINT
        if memory_bytes is not None:
            hint += f"; it ran under a {_size(memory_bytes)} address-space limit (running out of it aborts a tool)"
        raise ToolCrashError(f"{what}: {tool} crashed ({_signame(-p.returncode)}){tail}", hint)
    return subprocess.CompletedProcess(argv, p.returncode, text.decode(out), stderr)


def kill_all() -> None:
    """SIGKILL every running tool's process group, so threads blocked in run() return promptly."""
    global _generation
    with _lock:
        _generation += 1
        for pid, child in list(_live.items()):
            child.killed = True
            _kill_group(pid)


interrupts.on_signal(kill_all)


def live() -> list[int]:
    """The pids of the tools running now (their process group ids)."""
    with _lock:
        return list(_live)


# ---------------------------------------------------------------------------------------------------


def _limits(memory_bytes: int | None) -> Callable[[], None]:
    """The child's limits, set between fork and exec: no core files, and the address-space bound.

    preexec_fn runs Python in the forked child, which the subprocess docs warn can deadlock when
    other threads hold locks; this function only makes two setrlimit calls, takes no lock, imports
    nothing and allocates next to nothing, which is what keeps that safe.
    """
    core = (0, 0)
    space = (memory_bytes, memory_bytes) if memory_bytes is not None else None
    setrlimit = resource.setrlimit
    rlimit_core, rlimit_as = resource.RLIMIT_CORE, resource.RLIMIT_AS

    def apply() -> None:
        setrlimit(rlimit_core, core)
        if space is not None:
            setrlimit(rlimit_as, space)

    return apply


def _end(p: subprocess.Popen[bytes]) -> None:
    """Kill what is left of the group (the leader is unreaped, so its group id is still ours), reap."""
    _kill_group(p.pid)
    with _lock:
        del _live[p.pid]
    p.wait()
    for f in (p.stdin, p.stdout, p.stderr):
        if f is not None:
            with contextlib.suppress(OSError):
                f.close()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _Capture:
    """A stream's output: everything up to `limit`; beyond, the head and the most recent tail."""

    def __init__(self, limit: int, head: int) -> None:
        self.limit, self.head_size = limit, min(head, limit)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_size - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        excess = len(self.head) + len(self.tail) - self.limit
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def value(self) -> bytes:
        if not self.dropped:
            return bytes(self.head + self.tail)
        cut = self.tail.find(b"\n")  # resume at a line start
        tail = self.tail[cut + 1 :] if 0 <= cut < len(self.tail) - 1 else self.tail
        dropped = self.dropped + len(self.tail) - len(tail)
        return (
            bytes(self.head)
            + f"\n[... netra: {dropped} bytes of output dropped ...]\n".encode()
            + bytes(tail)
        )


def _communicate(
    p: subprocess.Popen[bytes], data: bytes | None, deadline: float, limit: int
) -> tuple[bytes, bytes, bool, bool]:
    """Feed stdin, drain stdout/stderr until both close and the leader exits, or the deadline passes.

    When the leader exits its group is killed at once, so a child it left behind holding the pipes
    cannot keep the call waiting; one that escaped the group (setsid) is waited for _DRAIN_S at most.
    Returns (stdout, stderr, timed_out, stdout_overflow); on timeout or overflow the group is killed.
    The leader is never reaped here (its exit is seen through a pidfd or waitid(WNOWAIT)), so its
    process group id stays valid for the caller's kill.
    """
    assert p.stdout is not None and p.stderr is not None
    out = _Capture(limit + 1, limit + 1)  # one byte over the limit tells overflow
    err = _Capture(limit, _STDERR_HEAD)
    sel = selectors.DefaultSelector()
    pidfd = _pidfd(p.pid)
    try:
        sel.register(p.stdout, selectors.EVENT_READ, out)
        sel.register(p.stderr, selectors.EVENT_READ, err)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        view = memoryview(data or b"")
        if p.stdin is not None:
            os.set_blocking(p.stdin.fileno(), False)
            if view:
                sel.register(p.stdin, selectors.EVENT_WRITE, "stdin")
            else:
                p.stdin.close()
        exited_at: float | None = None
        while True:
            now = time.monotonic()
            if exited_at is None and pidfd is None and _exited(p.pid):
                exited_at = now
                _kill_group(p.pid)  # what it left behind must not hold the pipes open
            streams = sum(1 for k in sel.get_map().values() if isinstance(k.data, _Capture))
            if exited_at is not None and (not streams or now >= min(deadline, exited_at + _DRAIN_S)):
                return out.value(), err.value(), False, False
            if exited_at is None and now >= deadline:
                _kill_group(p.pid)
                return out.value(), err.value(), True, False
            end = deadline if exited_at is None else min(deadline, exited_at + _DRAIN_S)
            wait = max(0.0, end - now) if pidfd is not None else min(max(0.0, end - now), _POLL_S)
            for key, _ in sel.select(wait):
                if key.data == "exit":
                    exited_at = time.monotonic()
                    sel.unregister(key.fileobj)
                    _kill_group(p.pid)  # what it left behind must not hold the pipes open
                elif key.data == "stdin":
                    try:
                        view = view[os.write(key.fd, view[:_READ]) :]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        view = view[:0]
                    if not view:
                        sel.unregister(key.fileobj)
                        p.stdin.close()  # type: ignore[union-attr]
                else:
                    chunk = os.read(key.fd, _READ)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    key.data.add(chunk)
                    if key.data is out and out.total > limit:
                        _kill_group(p.pid)
                        return b"", err.value(), False, True
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _exited(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _signame(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} bytes"
