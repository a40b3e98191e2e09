"""netra.release.writelock across real processes (and threads): one holder at a time, waiters told who holds it."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from netra.errors import BusyError, PathError
from netra.release import writelock

REPO = Path(__file__).resolve().parents[1]

# Takes the lock, records what happened in files under `state`, holds it until `<name>.release` exists.
HOLDER = r"""
import os, sys, time
from pathlib import Path
from netra.release import writelock
from netra.errors import BusyError

lock, state, wait, name = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]

def put(path, text):  # whole or not at all: the test reads a file as soon as it exists
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

def note(message):
    path = state / f"{name}.notified"
    put(path, (path.read_text() if path.exists() else "") + message + "\n")

try:
    with writelock.exclusive(lock, what="release/manifest.lock", wait=None if wait == "none" else float(wait), notify=note):
        put(state / f"{name}.acquired", lock.read_text())
        while not (state / f"{name}.release").exists():
            time.sleep(0.02)
except BusyError as e:
    put(state / f"{name}.busy", str(e))
    sys.exit(3)
"""


def wait_for(path: Path, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def holder(lock: Path, state: Path, name: str, wait: float | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock), str(state), "none" if wait is None else str(wait), name],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(*children: subprocess.Popen[str]) -> list[int]:
    codes = []
    for c in children:
        try:
            _, err = c.communicate(timeout=30)
        finally:
            if c.poll() is None:
                c.kill()
                c.wait()
        assert c.returncode in (0, 3), err
        codes.append(c.returncode)
    return codes


def test_a_second_process_waits_is_told_the_pid_and_proceeds_after_release(tmp_path: Path) -> None:
    lock = tmp_path / ".netra-write.lock"
    first = holder(lock, tmp_path, "first")
    second = None
    try:
        wait_for(tmp_path / "first.acquired")
        second = holder(lock, tmp_path, "second")
        wait_for(tmp_path / "second.notified")
        assert (tmp_path / "second.notified").read_text() == (
            f"waiting for release/manifest.lock held by pid {first.pid}\n"
        )
        time.sleep(0.3)
        assert not (tmp_path / "second.acquired").exists(), "the second process did not wait"
        (tmp_path / "first.release").write_text("")
        wait_for(tmp_path / "second.acquired")
        (tmp_path / "second.release").write_text("")
    finally:
        (tmp_path / "first.release").write_text("")
        (tmp_path / "second.release").write_text("")
        codes = finish(first, *([second] if second else []))
    assert codes == [0, 0]
    assert (tmp_path / "first.acquired").read_text() == f"{first.pid}\n"  # the holder's pid is in the file
    assert (tmp_path / "second.acquired").read_text() == f"{second.pid}\n"
    assert lock.exists() and lock.read_text() == ""  # never deleted; no stale pid left


def test_a_bounded_wait_raises_busy_naming_the_holder(tmp_path: Path) -> None:
    lock = tmp_path / ".netra-write.lock"
    first = holder(lock, tmp_path, "first")
    try:
        wait_for(tmp_path / "first.acquired")
        second = holder(lock, tmp_path, "second", wait=0.5)
        assert finish(second) == [3]
    finally:
        (tmp_path / "first.release").write_text("")
        finish(first)
    busy = (tmp_path / "second.busy").read_text()
    assert busy.startswith(f"{lock}: release/manifest.lock is held by pid {first.pid}; hint: ")
    assert "waiting for release/manifest.lock held by pid" in (tmp_path / "second.notified").read_text()
    assert not (tmp_path / "second.acquired").exists()


# Locks, then writes its pid only after a pause: the window every holder has between flock and write.
SLOW_WRITER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
open(sys.argv[2], "w").close()
time.sleep(0.3)
os.pwrite(fd, str(os.getpid()).encode(), 0)
time.sleep(float(sys.argv[3]))
"""


def test_a_waiter_names_a_holder_that_has_locked_but_not_yet_written_its_pid(tmp_path: Path) -> None:
    lock, locked = tmp_path / ".netra-write.lock", tmp_path / "locked"
    slow = subprocess.Popen([sys.executable, "-c", SLOW_WRITER, str(lock), str(locked), "1"])
    try:
        wait_for(locked)
        messages: list[str] = []
        with writelock.exclusive(lock, what="release/manifest.lock", wait=10, notify=messages.append):
            pass
    finally:
        slow.kill()
        slow.wait()
    assert messages == [f"waiting for release/manifest.lock held by pid {slow.pid}"]


def test_a_holder_that_dies_releases_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / ".netra-write.lock"
    first = holder(lock, tmp_path, "first")
    wait_for(tmp_path / "first.acquired")
    first.kill()
    first.wait()
    with writelock.exclusive(lock, what="w", wait=10):
        assert lock.read_text() == f"{os.getpid()}\n"


def test_uncontended_lock_creates_the_file_and_does_not_notify(tmp_path: Path) -> None:
    lock = tmp_path / "build.lock"
    messages: list[str] = []
    with writelock.exclusive(lock, what="the build folder", wait=0, notify=messages.append):
        assert lock.read_text() == f"{os.getpid()}\n"
        assert stat.S_IMODE(lock.stat().st_mode) == 0o644 & ~_umask()
    assert messages == [] and lock.exists()
    with writelock.exclusive(lock, what="the build folder", wait=0):  # reusable
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_threads_exclude_each_other_too(tmp_path: Path) -> None:
    lock = tmp_path / "w.lock"
    inside = 0
    most = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        for _ in range(20):
            with writelock.exclusive(lock, what="w"):
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.001)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert most == 1


def test_wait_zero_tries_once(tmp_path: Path) -> None:
    lock = tmp_path / "w.lock"
    messages: list[str] = []
    with (
        writelock.exclusive(lock, what="w"),
        pytest.raises(BusyError, match=f"held by pid {os.getpid()}"),
        writelock.exclusive(lock, what="w", wait=0, notify=messages.append),
    ):
        pass
    assert messages == []


def test_a_lock_path_that_is_a_symlink_or_fifo_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("")
    (tmp_path / "link.lock").symlink_to(tmp_path / "real")
    with (
        pytest.raises(PathError, match="is a symlink"),
        writelock.exclusive(tmp_path / "link.lock", what="w"),
    ):
        pass
    os.mkfifo(tmp_path / "fifo.lock")
    with (
        pytest.raises(PathError, match="not a regular file"),
        writelock.exclusive(tmp_path / "fifo.lock", what="w"),
    ):
        pass
