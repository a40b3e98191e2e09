"""netra.core.interrupts: a real netra-like child process, signalled from here, cleans up and exits 128+N."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import alive, signals_default

from netra.core import interrupts, proc
from netra.errors import ToolInterruptedError

REPO = Path(__file__).resolve().parents[1]

# A child that works the way the pipeline does: under handled(), in a temporary folder, with a tool
# running (in the main thread, or in a worker thread while the main thread waits for it). It records
# its temporary folder and the tool's pid, and exits with interrupts.exit_code.
CHILD = r"""
import concurrent.futures, sys, tempfile, time
from pathlib import Path
from netra.core import interrupts, proc

mode, state = sys.argv[1], Path(sys.argv[2])

def tool():
    proc.run(["sh", "-c", 'echo $$ > "$0"; exec sleep 60', str(state / "tool.pid")],
             tool="sleep", what="test", timeout=120)

try:
    with interrupts.handled():
        with tempfile.TemporaryDirectory(dir=state) as tmp:
            (Path(tmp) / "scratch.s").write_text("s_endpgm\n")
            (state / "tmp.name").write_text(tmp)
            try:
                if mode == "worker":
                    with concurrent.futures.ThreadPoolExecutor(2) as pool:
                        pool.submit(tool).result()
                else:
                    tool()
            finally:
                if mode == "slow-cleanup":
                    (state / "cleaning").write_text("")
                    time.sleep(1.5)  # the test signals again meanwhile
                    (state / "cleaned").write_text("")
except KeyboardInterrupt as e:
    (state / "caught").write_text(f"{type(e).__name__} {getattr(e, 'signum', '')}")
    sys.exit(interrupts.exit_code(e))
sys.exit(0)
"""


def wait_for(path: Path, seconds: float = 30, *, line: bool = False) -> None:
    """Until the file exists (with `line`: holding a whole line; the shell creates it before it writes)."""
    deadline = time.monotonic() + seconds
    while not (path.exists() and (not line or path.read_text().endswith("\n"))):
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def start(mode: str, state: Path, child: str = CHILD) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", child, mode, str(state)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=signals_default,
    )


@pytest.mark.parametrize("mode", ["main", "worker"])
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_a_signal_cleans_up_kills_the_tool_and_exits_128_plus_n(
    tmp_path: Path, mode: str, sig: signal.Signals, code: int
) -> None:
    child = start(mode, tmp_path)
    try:
        wait_for(tmp_path / "tool.pid", line=True)
        tool_pid = int((tmp_path / "tool.pid").read_text())
        tmp = Path((tmp_path / "tmp.name").read_text())
        assert tmp.is_dir() and alive(tool_pid)
        child.send_signal(sig)
        _, err = child.communicate(timeout=20)  # the tool alone would run 60 s
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == code, err
    assert (tmp_path / "caught").read_text() == f"Interrupted {int(sig)}"
    assert not tmp.exists(), "the temporary folder survived the signal"
    assert not alive(tool_pid), "the tool survived the signal"


def terminate_then_repeat(child: subprocess.Popen[str], state: Path) -> str:
    """SIGTERM once the tool runs, then each signal again while the cleanup runs; the child's stderr."""
    try:
        wait_for(state / "tool.pid", line=True)
        child.send_signal(signal.SIGTERM)
        wait_for(state / "cleaning")
        for again in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            child.send_signal(again)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return err


def test_a_repeated_signal_does_not_abort_the_cleanup(tmp_path: Path) -> None:
    child = start("slow-cleanup", tmp_path)
    err = terminate_then_repeat(child, tmp_path)
    assert (tmp_path / "cleaned").exists(), f"cleanup was cut short: {err}"
    assert child.returncode == 143, err  # the first signal's code
    assert not Path((tmp_path / "tmp.name").read_text()).exists()


# A child inside "another program's" call stack (as the build hook is inside hatchling): fatal() runs
# the cleanup, kills the tool, and ends the process by the signal; a scratch folder outlives nothing.
FATAL_CHILD = r"""
import sys, time
from pathlib import Path
from netra.core import interrupts, proc, scratch

mode, state = sys.argv[1], Path(sys.argv[2])
folder = scratch.Scratch("netra-test-")
(folder.path / "half-written.whl").write_bytes(b"PK")
(state / "scratch.name").write_text(str(folder.path))

def cleanup(signum):
    (state / "cleaning").write_text(str(signum))
    if mode == "slow-cleanup":
        time.sleep(1.5)  # the test signals again meanwhile
    folder.remove()
    (state / "cleaned").write_text("")

interrupts.fatal(cleanup)
try:  # "their" code: an exception here would end in their traceback
    proc.run(["sh", "-c", 'echo $$ > "$0"; exec sleep 60', str(state / "tool.pid")],
             tool="sleep", what="test", timeout=120)
except BaseException as e:
    (state / "unwound").write_text(repr(e))
    raise
"""


def gone_eventually(path: Path, seconds: float = 20) -> bool:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not path.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_fatal_cleans_up_kills_the_tool_and_dies_by_the_signal(tmp_path: Path, sig: signal.Signals) -> None:
    child = start("main", tmp_path, FATAL_CHILD)
    try:
        wait_for(tmp_path / "tool.pid", line=True)
        tool_pid = int((tmp_path / "tool.pid").read_text())
        folder = Path((tmp_path / "scratch.name").read_text())
        assert folder.is_dir() and alive(tool_pid)
        child.send_signal(sig)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -sig, err  # ended by the signal itself: 128 + n to a shell
    assert (tmp_path / "cleaned").exists() and "Traceback" not in err, err
    assert not (tmp_path / "unwound").exists(), "an exception unwound through the caller's code"
    assert not folder.exists() and not alive(tool_pid)


DEFERRED_FATAL_CHILD = r"""
import os, signal, sys
from pathlib import Path
from netra.core import interrupts

state = Path(sys.argv[1])
interrupts.fatal(lambda signum: (state / "cleaned").write_text(str(signum)))
with interrupts.deferred():  # as proc.run spawns a tool and registers it
    os.kill(os.getpid(), signal.SIGTERM)
    (state / "registered").write_text("")
(state / "went-on").write_text("")
"""


def test_fatal_waits_for_the_end_of_a_deferred_step(tmp_path: Path) -> None:
    """A signal while a tool is being spawned and registered (proc.run's deferred step) is acted on when
    the step ends: the tool is in the registry, so the kill reaches it (the race a loaded CI machine hit)."""
    r = subprocess.run([sys.executable, "-c", DEFERRED_FATAL_CHILD, str(tmp_path)],
                       env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60,
                       check=False)  # fmt: skip
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert (tmp_path / "registered").exists(), "the step was cut in two"
    assert (tmp_path / "cleaned").read_text() == str(int(signal.SIGTERM))
    assert not (tmp_path / "went-on").exists(), "the signal was lost at the end of the step"


def test_fatal_is_not_cut_short_by_a_repeated_signal(tmp_path: Path) -> None:
    child = start("slow-cleanup", tmp_path, FATAL_CHILD)
    err = terminate_then_repeat(child, tmp_path)
    assert (tmp_path / "cleaned").exists(), f"cleanup was cut short: {err}"
    assert child.returncode == -signal.SIGTERM, err


def test_a_scratch_folder_is_removed_by_its_janitor_after_sigkill(tmp_path: Path) -> None:
    """SIGKILL runs nothing in the process: the janitor, waiting on a pipe only the process held, removes
    the folder once the process is gone."""
    child = start("main", tmp_path, FATAL_CHILD)
    try:
        wait_for(tmp_path / "tool.pid", line=True)
        folder = Path((tmp_path / "scratch.name").read_text())
        assert (folder / "half-written.whl").exists()
        child.kill()
        child.wait(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not (tmp_path / "cleaning").exists()
    assert gone_eventually(folder), f"{folder} outlived its process"
    with contextlib.suppress(ProcessLookupError):  # SIGKILL ran no cleanup: the tool's group is ours to end
        os.killpg(int((tmp_path / "tool.pid").read_text()), signal.SIGKILL)


JANITOR_CHILD = r"""
import os, signal, sys
from pathlib import Path
from netra.core import scratch

how, state = sys.argv[1], Path(sys.argv[2])
folder = scratch.Scratch("netra-test-")
(state / "scratch.name").write_text(str(folder.path))
for name in ("unchecked.whl", "gated.whl"):
    (state / name).write_bytes(b"PK")
    folder.remove_if_cut_off(state / name)
folder.keep(state / "gated.whl")  # it passed the gate: it stays whatever happens next
if how == "finished":
    folder.remove()
    folder.finished()
    sys.exit(0)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("how", ["sigkill", "finished"])
def test_the_janitor_removes_what_was_named_only_when_the_process_was_cut_off(
    tmp_path: Path, how: str
) -> None:
    child = subprocess.run([sys.executable, "-c", JANITOR_CHILD, how, str(tmp_path)], env={**os.environ,
                           "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert child.returncode == (-signal.SIGKILL if how == "sigkill" else 0), child.stderr
    assert gone_eventually(Path((tmp_path / "scratch.name").read_text()))
    assert (tmp_path / "gated.whl").exists()
    if how == "sigkill":
        assert gone_eventually(tmp_path / "unchecked.whl"), "the janitor left the unchecked archive"
    else:
        time.sleep(0.5)  # the janitor has had its chance
        assert (tmp_path / "unchecked.whl").exists(), "a finished process's files are not the janitor's"


# ---------------------------------------------------------------------------------------------------
# In this process (pytest runs tests on the main thread)


def test_interrupted_is_a_keyboard_interrupt_with_its_exit_code() -> None:
    e = interrupts.Interrupted(signal.SIGTERM)
    assert isinstance(e, KeyboardInterrupt) and e.signum == signal.SIGTERM
    assert interrupts.exit_code(e) == 143
    assert interrupts.exit_code(interrupts.Interrupted(signal.SIGINT)) == 130
    assert interrupts.exit_code(KeyboardInterrupt()) == 130
    assert "SIGTERM" in str(e)


def test_previous_handlers_are_restored() -> None:
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    mine = signal.signal(signal.SIGHUP, lambda *_: None)
    try:
        before[signal.SIGHUP] = signal.getsignal(signal.SIGHUP)
        with interrupts.handled():
            assert all(signal.getsignal(s) is not before[s] for s in interrupts.SIGNALS)
        assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before
        with pytest.raises(interrupts.Interrupted), interrupts.handled():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this returns
        assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before
    finally:
        signal.signal(signal.SIGHUP, mine)


def test_a_signal_inside_deferred_is_raised_when_it_ends() -> None:
    steps: list[str] = []
    with pytest.raises(interrupts.Interrupted) as e, interrupts.handled():
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            steps.append("finished the step")
        steps.append("went on after it")
    assert steps == ["finished the step"]
    assert e.value.signum == signal.SIGTERM


def test_a_signal_stops_tools_running_in_worker_threads() -> None:
    errors: list[BaseException] = []
    done = threading.Event()  # not Thread.join: an interrupted join can make is_alive() lie (CPython)

    def worker() -> None:
        try:
            proc.run(["sleep", "60"], tool="sleep", what="t", timeout=120)
        except BaseException as e:
            errors.append(e)
        finally:
            done.set()

    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    with pytest.raises(interrupts.Interrupted), interrupts.handled():
        threading.Thread(target=worker, daemon=True).start()
        timer.start()
        done.wait()  # interrupted by the SIGINT
    timer.cancel()
    assert done.wait(20), "the worker is still blocked in run()"  # only the handler's kill_all ends it
    assert [type(e) for e in errors] == [ToolInterruptedError]
    assert proc.live() == []


def test_handled_is_a_no_op_outside_the_main_thread() -> None:
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    seen: list[object] = []

    def worker() -> None:
        with interrupts.handled(), interrupts.deferred():
            seen.append({s: signal.getsignal(s) for s in interrupts.SIGNALS})

    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert seen == [before]


def test_an_error_the_signal_causes_inside_the_standard_library_is_the_interruption() -> None:
    """A signal landing inside threading's Condition.wait leaves its lock half released, and the
    RuntimeError that escapes was raised while the Interrupted was handled (the CI's `netra build`
    interrupted at a pool's result, 2026-12-07): handled() raises it as the Interrupted it is."""
    with pytest.raises(interrupts.Interrupted) as e, interrupts.handled():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this returns
        except interrupts.Interrupted:
            raise RuntimeError("cannot release un-acquired lock") from None  # as threading's __exit__ does
    assert e.value.signum == signal.SIGTERM
    assert isinstance(e.value.__cause__, RuntimeError)


def test_an_error_with_no_signal_behind_it_stays_an_error() -> None:
    with pytest.raises(RuntimeError), interrupts.handled():
        try:
            raise interrupts.Interrupted(signal.SIGTERM)  # raised by hand: no signal was handled
        except interrupts.Interrupted:
            raise RuntimeError("a bug") from None


# A finalizer that fails, as a ZipFile whose constructor the signal cut short does (hatchling's wheel being
# written when `python -m build` is stopped): after an interruption it prints nothing.
FINALIZER = r"""
import os, signal, sys, time
from netra.core import interrupts

class HalfBuilt:
    def __del__(self):
        raise AttributeError("'HalfBuilt' object has no attribute '_writing'")

held = []
try:
    with interrupts.handled():
        if sys.argv[1] == "signal":
            held.append(HalfBuilt())
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
except KeyboardInterrupt as e:
    print("interrupted", file=sys.stderr)
    code = interrupts.ending(e)  # as the CLI and the build backend end
    held.clear()  # the half-built object goes (in the build: as the process exits)
    sys.exit(code)
held.append(HalfBuilt())
held.clear()
"""


@pytest.mark.parametrize(("how", "rc", "ignored"), [("signal", 143, False), ("none", 0, True)])
def test_after_an_interruption_a_half_built_objects_finalizer_prints_nothing(
    how: str, rc: int, ignored: bool
) -> None:
    r = subprocess.run(
        [sys.executable, "-c", FINALIZER, how],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
        timeout=60,
    )
    assert r.returncode == rc, r.stderr
    assert ("Exception ignored" in r.stderr) is ignored, r.stderr  # without a signal Python reports it


# pool_map under handled(): two workers, eight items, each running a tool of about 2 s and recording its
# start; the test signals once two have started.
POOL_CHILD = r"""
import concurrent.futures, sys, time
from pathlib import Path
from netra.core import interrupts, proc

state, use_pool_map = Path(sys.argv[1]), sys.argv[2] == "pool_map"

def item(i):
    (state / f"started.{i}").write_text("")
    proc.run(["sleep", "2"], tool="sleep", what="test", timeout=60)
    return i

try:
    with interrupts.handled():
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            if use_pool_map:
                got = interrupts.pool_map(pool, item, range(8))
            else:
                got = list(pool.map(item, range(8)))
except KeyboardInterrupt as e:
    (state / "caught").write_text(type(e).__name__)
    sys.exit(interrupts.exit_code(e))
sys.exit(0)
"""


def _pool_child(tmp_path: Path, how: str) -> tuple[int, float, int]:
    state = tmp_path / how
    state.mkdir(parents=True)
    child = subprocess.Popen(
        [sys.executable, "-c", POOL_CHILD, str(state), how],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
        preexec_fn=signals_default,
    )
    try:
        deadline = time.monotonic() + 30
        while len(list(state.glob("started.*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        t0 = time.monotonic()
        child.send_signal(signal.SIGTERM)
        rc = child.wait(timeout=60)
        return rc, time.monotonic() - t0, len(list(state.glob("started.*")))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)


def test_a_signal_while_the_main_thread_waits_on_a_pool_cancels_what_has_not_started(tmp_path: Path) -> None:
    """interrupts.pool_map (netra's compile and disassembly pools): the main thread waits for the workers
    deferred(), so the signal is not raised inside threading's locks (raised there, it once left a
    Future's condition held and `netra lock` waited for ever on the worker blocked on it: a race, not
    reproduced here). The items not yet started are not started, the running tools are killed, and the
    child exits 143 at once. A pool_map that cancelled only from the main thread's wait let a worker
    freed by its killed tool start the third item and run it to the end (3 started, 2.1 s: this test's
    first run), which fails here."""
    for _ in range(3):
        rc, took, started = _pool_child(tmp_path / str(_), "pool_map")
        assert rc == 128 + signal.SIGTERM, rc
        assert (tmp_path / str(_) / "pool_map" / "caught").read_text() == "Interrupted"
        assert started == 2 and took < 1.5, (started, took)


# wait_first under handled(): the main thread waits on a future nothing will complete (a worker process of
# certify's pool busy for minutes), as certify's loop does; the test signals once it waits.
WAIT_CHILD = r"""
import sys
from concurrent.futures import Future
from pathlib import Path
from netra.core import interrupts

state = Path(sys.argv[1])
try:
    with interrupts.handled():
        (state / "waiting").write_text("")
        interrupts.wait_first([Future()])
except KeyboardInterrupt as e:
    (state / "caught").write_text(type(e).__name__)
    sys.exit(interrupts.exit_code(e))
sys.exit(0)
"""


def test_a_signal_ends_a_deferred_wait_on_futures_at_once(tmp_path: Path) -> None:
    """interrupts.wait_first (certify's loop over its worker pool): the wait holds the signal off, so it
    never lands inside a future's lock, yet ends as soon as one arrives and raises it: the child exits
    143 at once, not when the future completes (here never: a wait that only deferred would hang, and
    the child is killed at the deadline)."""
    child = subprocess.Popen(
        [sys.executable, "-c", WAIT_CHILD, str(tmp_path)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
        preexec_fn=signals_default,
    )
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "waiting").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # inside the wait
        child.send_signal(signal.SIGTERM)
        rc = child.wait(timeout=10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
    assert rc == 128 + signal.SIGTERM, rc
    assert (tmp_path / "caught").read_text() == "Interrupted"


def test_wait_first_returns_at_the_first_result_or_the_timeout() -> None:
    """Without a signal, wait_first is concurrent.futures.wait(FIRST_COMPLETED): it returns once one of
    the futures is done, or when the timeout has passed with none done."""
    from concurrent.futures import Future

    pending: Future[int] = Future()
    t0 = time.monotonic()
    interrupts.wait_first([pending], timeout=0.3)
    assert 0.3 <= time.monotonic() - t0 < 5 and not pending.done()
    finished: Future[int] = Future()
    finished.set_result(1)
    t0 = time.monotonic()
    with interrupts.handled():
        interrupts.wait_first([pending, finished])
    assert time.monotonic() - t0 < 5
