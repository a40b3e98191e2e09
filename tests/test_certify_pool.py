"""certify's worker pool holds tasks to a memory budget (netra.certify.run._Pool): the judges of the widest
contracts take tens of GiB each, and eight at once exhausted the H200 host's 128 GiB (2026-12-05).
Real worker processes (spawned, as certify's are); no GPU needed."""

from __future__ import annotations

import itertools
import time
from concurrent.futures import Future, wait

import pytest

from netra.certify.run import _Pool


def _span(x: int) -> tuple[int, float, float]:
    t0 = time.monotonic()
    time.sleep(0.25)
    return x, t0, time.monotonic()


def _fail(x: int) -> None:
    raise ValueError(f"task {x} failed")


def _drain(pool: _Pool, fs: list[Future[object]]) -> None:
    deadline = time.monotonic() + 60
    while not all(f.done() for f in fs) and time.monotonic() < deadline:
        pool.poll()
        wait(fs, timeout=0.05)


def test_costly_tasks_never_run_together_beyond_the_budget_and_free_ones_still_do() -> None:
    pool = _Pool(4, budget=100)
    try:
        costly = [pool.submit(_span, i, cost=60) for i in range(3)]  # two would exceed 100
        free = [pool.submit(_span, 10 + i) for i in range(3)]
        failing = pool.submit(_fail, 7, cost=30)
        _drain(pool, [*costly, *free, failing])
        spans = sorted(f.result()[1:] for f in costly)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"two tasks of cost 60 ran at once under a budget of 100: {spans}"
        assert sorted(f.result()[0] for f in free) == [10, 11, 12]
        with pytest.raises(ValueError, match="task 7 failed"):
            failing.result()
        pool.poll()
        assert pool.held == 0 and not pool.running and not pool.waiting
    finally:
        pool.shutdown()


def test_a_task_bigger_than_the_budget_runs_alone_rather_than_never() -> None:
    pool = _Pool(2, budget=10)
    try:
        f = pool.submit(_span, 1, cost=1000)
        _drain(pool, [f])
        assert f.result()[0] == 1
    finally:
        pool.shutdown()


def test_the_tools_bound_grows_with_the_candidates_unless_one_is_given() -> None:
    """racecheck took about 10 s a routed-MoE candidate on the H200: a fixed 600 s over every candidate
    failed a class for its size. The default is 60 s a candidate, never below the tools' own 600 s; an
    explicit --tool-timeout is used as given, however small."""
    from netra.certify.run import TOOL_SECONDS_PER_CANDIDATE, Options, tool_timeout

    assert tool_timeout(Options(), 1) == 600.0
    assert tool_timeout(Options(), 10) == 600.0
    assert tool_timeout(Options(), 65) == 65 * TOOL_SECONDS_PER_CANDIDATE == 3900.0
    assert tool_timeout(Options(tool_timeout=120.0), 65) == 120.0
