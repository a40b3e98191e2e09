"""SIGINT, SIGTERM and SIGHUP as exceptions, so every `finally` and `with TemporaryDirectory()` runs.

By default SIGTERM and SIGHUP end the process on the spot: temporary folders stay behind and the
tools it started keep running. Under `handled()` each of the three signals first kills every running
tool (the actions registered with `on_signal`: netra.core.proc's kill_all, so worker threads blocked
in proc.run return at once) and then raises
`Interrupted` in the main thread, which unwinds through the cleanup code as Ctrl-C does; the CLI
exits with `exit_code(exc)` (128 + the signal number).

Repeats: once a signal has been raised, further ones are ignored (they still kill tools) until
`handled()` exits, so a second Ctrl-C or a supervisor's repeated SIGTERM cannot abort a cleanup half
way. The cleanup waits for no tool, so it is short; SIGKILL remains for a hard stop.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from concurrent.futures import Executor, Future

_SLICE = 0.05  # seconds: how long a deferred wait holds off a signal at a time (pool_map, wait_first)
_T = TypeVar("_T")
_R = TypeVar("_R")

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_first: list[Callable[[], None]] = []  # run first on every handled signal, before anything is raised


def on_signal(action: Callable[[], None]) -> None:
    """Run `action` first whenever a handled signal arrives, repeats included (netra.core.proc registers
    its kill_all: a tool must die with the interruption, not outlive it). Registered once per action."""
    if action not in _first:
        _first.append(action)


class Interrupted(KeyboardInterrupt):
    """A signal turned into an exception; a KeyboardInterrupt, so `except KeyboardInterrupt` treats it alike."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)  # args stay (signum,), so it pickles
        self.signum = signum

    def __str__(self) -> str:
        return f"interrupted by {_name(self.signum)}"


def exit_code(exc: KeyboardInterrupt) -> int:
    """The shell's exit status for a death by this signal: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP."""
    return 128 + (exc.signum if isinstance(exc, Interrupted) else signal.SIGINT)


@dataclass
class _Session:
    arrived: int | None = None  # the first signal, set before anything else the handler does
    raised: int | None = None  # the signal already raised as Interrupted
    pending: int | None = None  # a signal that arrived inside deferred(), raised when it ends
    shield: int = 0  # depth of deferred()
    fatal: Callable[[int], None] | None = None  # fatal(): end the process instead of raising


_session: _Session | None = None  # the innermost handled() of the main thread


@contextmanager
def handled() -> Iterator[None]:
    """Turn SIGINT/SIGTERM/SIGHUP into Interrupted for the body; the previous handlers are restored.

    Only the main thread can receive Python signal handlers: elsewhere this is a no-op.
    """
    global _session
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    session = _Session()
    outer = _session
    owner = os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            # A forked child that has not exec'd yet (subprocess runs Python there: the after-fork hooks,
            # proc's preexec_fn) got the signal sent to the group: the parent handles it, and kills the tool.
            return
        if session.arrived is None:
            session.arrived = signum  # first: pool_map's workers start no item from here on
        for action in tuple(_first):
            action()
        if session.raised is not None or session.pending is not None:
            return  # a repeat: the first one is unwinding (or about to)
        if session.shield:
            session.pending = signum
            return
        session.raised = signum
        raise Interrupted(signum)

    previous: dict[int, object] = {}
    try:
        _session = session
        for sig in SIGNALS:
            previous[sig] = signal.signal(sig, handler)
        try:
            yield
        except Exception as e:
            # Interrupted is raised wherever the main thread is, inside the standard library too: raised
            # inside threading's Condition.wait (a pool's result) it leaves the lock half released, and
            # what escapes is that RuntimeError, raised while handling the Interrupted. It is the
            # interruption, and is reported as one (128 + the signal, one line), never as a traceback.
            if session.raised is not None and _while_interrupted(e):
                raise Interrupted(session.raised) from e
            raise
    finally:
        session.shield += 1  # a signal while restoring is held until every handler is back
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)  # type: ignore[arg-type]
        _session = outer
        session.shield -= 1
        if outer is not None and session.raised is not None:
            outer.raised = session.raised  # the outer cleanup is the same unwinding
        if session.pending is not None and session.raised is None:
            raise Interrupted(session.pending)


def _while_interrupted(exc: BaseException) -> bool:
    """Whether `exc` was raised while an Interrupted was being handled (its context chain holds one)."""
    seen: set[int] = set()
    ctx = exc.__context__
    while ctx is not None and id(ctx) not in seen:
        if isinstance(ctx, Interrupted):
            return True
        seen.add(id(ctx))
        ctx = ctx.__context__
    return False


def ending(exc: KeyboardInterrupt) -> int:
    """The process ends by this interruption: its exit status (exit_code), and from here on a finalizer
    that fails says nothing. The signal may have cut an object's constructor short (hatchling's ZipFile
    of the wheel being written), whose finalizer then fails as the process exits. Only where the process
    is about to end (the CLI, the build backend): sys.unraisablehook is process-wide."""
    sys.unraisablehook = _drop_unraisable
    return exit_code(exc)


def _drop_unraisable(unraisable: object) -> None:
    """sys.unraisablehook once the process is ending by a signal: finalizers of half-built objects say nothing."""


@contextmanager
def deferred() -> Iterator[None]:
    """Hold off Interrupted during a short step that must not be cut in two (spawn a tool and record it).

    A signal arriving inside still kills the tools at once; its Interrupted is raised when the step
    ends. A no-op outside handled() and outside the main thread.
    """
    session = _session
    if session is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    session.shield += 1
    try:
        yield
    finally:
        session.shield -= 1
        if not session.shield and session.pending is not None and session.raised is None:
            session.raised = session.pending
            if session.fatal is not None:
                session.fatal(session.pending)  # ends the process
            raise Interrupted(session.pending)


def pool_map(pool: Executor, fn: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """`list(pool.map(fn, items))` for the main thread under handled(), with the wait for the workers
    deferred(): a signal must not raise inside threading's locks while the main thread waits. It did
    (2026-12-07, SIGTERM to `netra lock`): a Future's condition was left held by the unwinding main
    thread, the worker completing that Future blocked on it, and the pool's shutdown waited on that
    worker for ever. Once a signal has arrived the items not yet started are cancelled, the running ones
    (their tools killed) are waited for, and its Interrupted is raised; else each result in order, or the
    first item's error, as pool.map gives them."""
    from concurrent.futures import CancelledError, wait  # only where a pool runs: it imports logging

    session = _session

    def item(x: _T) -> _R:
        if session is not None and session.arrived is not None:
            raise CancelledError  # a worker freed by the killed tool must not start the next one
        return fn(x)

    futures = [pool.submit(item, x) for x in items]
    with deferred():
        left = set(futures)
        while left:
            left = wait(left, timeout=_SLICE).not_done
            if session is not None and session.arrived is not None:
                for f in left:
                    f.cancel()
    return [f.result() for f in futures]


def wait_first(fs: Sequence[Future[Any]], timeout: float | None = None) -> None:
    """`concurrent.futures.wait(fs, timeout, FIRST_COMPLETED)` for the main thread under handled(): the
    wait is deferred() in slices of 0.05 s, as pool_map's, and ends as soon as a signal has arrived
    (deferred() then raises its Interrupted). Every other touch of a future or a pool from the main thread
    (done(), result(), submit()) belongs inside deferred() too: each takes a lock a worker also takes."""
    from concurrent.futures import FIRST_COMPLETED, wait  # only where a pool runs: it imports logging

    if not fs:
        return
    session = _session
    end = None if timeout is None else time.monotonic() + timeout
    with deferred():
        while True:
            step = _SLICE if end is None else max(0.0, min(_SLICE, end - time.monotonic()))
            if wait(fs, timeout=step, return_when=FIRST_COMPLETED).done:
                return
            if (session is not None and session.arrived is not None) or (
                end is not None and time.monotonic() >= end
            ):
                return


def fatal(cleanup: Callable[[int], None]) -> Callable[[], None]:
    """For code that runs inside another program's call stack (the build hook when hatchling runs it
    directly), where an exception would unwind through code that is not ours and end in its traceback:
    each of the three signals runs the `on_signal` actions (the tools die), then `cleanup(signum)`,
    then ends the process by that signal as its default action would (128 + n to the shell). A signal
    inside `deferred()` (a tool being spawned and registered) is acted on when that step ends, so the
    new tool is registered, and killed, first. Returns what restores the previous handlers. Only the
    main thread can do this: elsewhere a no-op."""
    global _session
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    owner = os.getpid()
    previous: dict[int, object] = {}

    def die(signum: int) -> None:
        for sig in SIGNALS:  # a repeat must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        try:
            for action in tuple(_first):
                action()
            cleanup(signum)
            for action in tuple(_first):  # a tool a worker thread started meanwhile
                action()
        finally:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    session = _Session(fatal=die)

    def handler(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            return  # a forked child that has not exec'd yet: the parent handles it (as in handled())
        for action in tuple(_first):
            action()
        if session.raised is not None or session.pending is not None:
            return
        if session.shield:
            session.pending = signum  # deferred() ends by calling die()
            return
        session.raised = signum
        die(signum)

    outer = _session

    def restore() -> None:
        global _session
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, old in previous.items():
            signal.signal(signum, old if old is not None else signal.SIG_DFL)  # type: ignore[arg-type]
        previous.clear()
        if _session is session:
            _session = outer

    _session = session
    for sig in SIGNALS:
        previous[sig] = signal.signal(sig, handler)
    return restore


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
