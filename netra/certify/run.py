"""`netra certify`: run every candidate of a GPU class's table on that GPU, judge it against the float64
reference, time it, run its vendor's memory checkers and profiler over it, rank it, and write the
hardware-certified table (docs/certify.md).

It runs from an installed wheel: the kernels are the install's verified code objects (the runtime's
integrity checks run first), the loader is the class's vendor's, and nothing but numpy is needed
besides (and the vendor's tools for the memory checkers and the profiler). Phases, each timed in the
progress lines:

1. tools: the vendor's memory checkers and profiler found and their versions read, before anything
   runs (a missing one is a one-line error unless its phase is skipped);
2. correctness: every netra.certify.conformance case of every candidate launched on poisoned, fenced
   outputs (netra.certify.measure); the cases, their float64 references and the judging are computed
   in worker processes meanwhile (netra.certify.prepare); a one-candidate run of each tool proves it
   works on this host (netra.certify.sanitizer.preflight) while the launches run;
3. timing: each candidate that passed, by CUDA-graph replay at every row count (nothing else on the GPU);
4. memory checkers: all of them concurrently over every passing candidate's cases (netra.certify.sanitizer);
5. profile: every passing candidate once at the prefill row count under the profiler (netra.certify.profile);
6. ranking (netra.certify.ranking) and the certified table (netra.certify.certified), checked by the
   runtime's own reader before it is returned.

With `reuse` (a certified table), the contracts whose candidates it certified as they are now are
carried from it and not run (netra.certify.reuse): the phases run over the other contracts only.

The tools are found first (netra.certify.tools). Nothing is written before the end;
netra.certify.certified.write writes the table and its evidence file atomically.
"""

from __future__ import annotations

import functools
import math
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netra import targets
from netra.certify import certified, measure
from netra.certify import plan as planfile
from netra.certify import profile as profiling
from netra.certify import sanitizer as sanitizing
from netra.certify import tools as toolset
from netra.certify.ranking import HYSTERESIS, PREFILL_ROWS, Result, rank, rerank
from netra.certify.tools import Tools
from netra.core import interrupts
from netra.errors import CertificationError, NetraError
from netra.runtime import tables

if TYPE_CHECKING:
    from netra.certify import prepare

__all__ = ["HYSTERESIS", "PREFILL_ROWS", "ROWS", "Options", "Result", "certify", "rank", "rerank"]

ROWS = (1, 16, 64, 512, 8192, 32768)
REPLAYS = 25
CANARY_ROWS = 64  # the memory checkers' deliberately bad launch: this many rows past its buffers
SCRATCH_BYTES = 24 << 30  # what the cases, references and timing inputs of a class may take on disk
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Options:
    """What certify runs besides the judge and the timing, and where the tools' logs go."""

    sanitize: bool = True  # False: the memory checkers are recorded as skipped (never as clean)
    profile: bool = True  # False: the profile is recorded as skipped
    tool_timeout: float | None = None  # per memory checker and for the profiler (None: tool_timeout())
    logs: Path | None = None  # the tools' logs (None: a temporary folder, kept only when certify fails)
    workers: int | None = None  # host worker processes (None: from the CPU count)


# What a memory checker or the profiler may take per candidate by default: racecheck took about 10 s a
# routed-MoE candidate on the H200 (2026-12-07, 11 instrumented launches each), where the 600 s it was
# given over all of them had sufficed for the 64 norm and quantization candidates before.
TOOL_SECONDS_PER_CANDIDATE = 60.0


def tool_timeout(opts: Options, candidates: int) -> float:
    """What one memory checker, or the profiler, may take over `candidates`: --tool-timeout where given,
    else the larger of the tools' own TIMEOUT_S and TOOL_SECONDS_PER_CANDIDATE each, so that a hang is still
    caught and a class of many slow kernels is not failed for its size."""
    if opts.tool_timeout is not None:
        return opts.tool_timeout
    return max(sanitizing.TIMEOUT_S, profiling.TIMEOUT_S, TOOL_SECONDS_PER_CANDIDATE * candidates)


def _say(progress: Progress | None, msg: str) -> None:
    if progress:
        progress(msg)


def _scratch() -> Path:
    """A folder for the cases, references and timing inputs: memory-backed where it has the room."""
    places = [Path("/dev/shm"), Path(tempfile.gettempdir())]
    usable = []
    for p in places:
        try:
            if p.is_dir() and os.access(p, os.W_OK):
                usable.append((shutil.disk_usage(p).free, p))
        except OSError:
            continue
    roomy = [p for free, p in usable if free >= SCRATCH_BYTES]
    base = roomy[0] if roomy else max(usable, default=(0, Path(tempfile.gettempdir())))[1]
    return Path(tempfile.mkdtemp(prefix="netra-certify-", dir=base))


class _Pool:
    """The host work in worker processes (netra.certify.prepare), and what is waiting on what.

    A task may name its cost, the host memory it takes at its peak (a judge's float64 temporaries); tasks
    start in the order given while the costs of those running stay within `budget` (one at a time when a
    single task is bigger), so that many workers never judge the widest contracts at once and exhaust the
    host. Held tasks start from poll(), which the run's loop calls at least once a second."""

    def __init__(self, workers: int, budget: int) -> None:
        self.ex = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        self.budget, self.held = budget, 0
        self.waiting: deque[tuple[Callable[..., Any], tuple[Any, ...], int, Future[Any]]] = deque()
        self.running: list[tuple[Future[Any], int]] = []

    def submit(self, fn: Callable[..., Any], *args: Any, cost: int = 0) -> Future[Any]:
        outer: Future[Any] = Future()
        self.waiting.append((fn, args, cost, outer))
        self.poll()
        return outer

    def poll(self) -> None:
        """Release the costs of the tasks that ended; start what now fits."""
        with interrupts.deferred():  # a signal must not land inside a future's or the pool's lock
            self._poll()

    def _poll(self) -> None:
        for f, cost in [r for r in self.running if r[0].done()]:
            self.running.remove((f, cost))
            self.held -= cost
        while self.waiting:
            fn, args, cost, outer = self.waiting[0]
            if self.held and self.held + cost > self.budget:
                return
            self.waiting.popleft()
            if not outer.set_running_or_notify_cancel():
                continue
            inner = self.ex.submit(fn, *args)
            inner.add_done_callback(functools.partial(_relay, outer=outer))
            self.running.append((inner, cost))
            self.held += cost

    def shutdown(self) -> None:
        for *_, outer in self.waiting:
            outer.cancel()
        self.waiting.clear()
        self.ex.shutdown(wait=True, cancel_futures=True)


def _relay(inner: Future[Any], *, outer: Future[Any]) -> None:
    """The worker's result or exception, onto the future the caller holds."""
    if inner.cancelled():
        outer.set_exception(CancelledError())
    elif (e := inner.exception()) is not None:
        outer.set_exception(e)
    else:
        outer.set_result(inner.result())


def _host_memory() -> int:
    """The host's physical memory in bytes (a generous guess where the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 64 << 30


# A judge's peak host memory per output element of its largest case: the outputs and the reference read
# back (float64 values, scaled values, gate terms) and the float64 temporaries of the comparisons. Measured:
# 82 bytes per element (peak RSS of a process that loads silu_mul_fp8_quant(inter=2048)'s 8192-row reference
# and judges it, 16.8 M elements: 1.34 GB); rounded up. At inter=25600 that is about 20 GB a judge: eight at
# once exhausted the H200 host's 128 GiB (a BrokenProcessPool, 2026-12-05).
JUDGE_BYTES_PER_ELEMENT = 96


def _result(f: Future[Any], what: str) -> Any:
    """The task's result, waited for as interrupts.wait_first waits (a signal never lands inside the
    future's lock, where a worker's set_result would then wait for ever, and the pool's shutdown on it)."""
    interrupts.wait_first([f])
    try:
        with interrupts.deferred():
            return f.result()
    except NetraError:
        raise
    except Exception as e:  # a worker process failed (or died: BrokenProcessPool)
        raise CertificationError(f"{what} failed in a worker process: {type(e).__name__}: {e}"[:600],
                                 "a bug or the host running out of memory; certify again") from None  # fmt: skip


@dataclass
class _Entry:
    """One contract's progress through the phases."""

    index: int
    entry: tables.Entry
    cases_f: Future[Any]
    timing_f: Future[Any] | None = None
    cases: prepare.Cases | None = None
    spans: list[Future[Any]] = field(default_factory=list)
    launched: dict[str, tuple[list[prepare.CaseFiles], list[dict[str, Any]], list[list[str]]]] = field(
        default_factory=dict
    )
    judges: dict[str, Future[Any]] = field(default_factory=dict)
    verdicts: dict[str, measure.Judged] = field(default_factory=dict)
    timings: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    timed: bool = False
    buffers: dict[str, measure.Buffers] = field(default_factory=dict)  # per case, shared by the candidates
    cleared: bool = False  # its reference files removed (every verdict is in)


def certify(
    gpu_class: str,
    *,
    install: Any = None,
    rows: tuple[int, ...] = ROWS,
    replays: int = REPLAYS,
    seed: int = 0,
    progress: Progress | None = None,
    options: Options | None = None,
    reuse: Path | None = None,
    only: tuple[str, ...] = (),
    across_devices: bool = False,
) -> tables.Table:
    """The certified table of `gpu_class` for this install, measured on this host's GPU (write it with
    netra.certify.certified.write); `reuse`: a certified table whose contracts that certified this
    install's candidates as they are now are carried instead of run again (netra.certify.reuse);
    `only` (with `reuse`): contract keys or op families: certify only those of them `reuse` does not
    carry, and hold every other contract as `reuse` has it (a device session shorter than the whole
    run banks its part; the next run reuses this one's table); `across_devices` (with `reuse`): carry
    and hold contracts a table certified on another device of the class (netra.certify.reuse.carry)."""
    from netra import runtime
    from netra.certify import reuse as reusing

    opts = options or Options()
    t_start = time.monotonic()
    cat = runtime.open_catalog(gpu_class, install=install)
    table = cat.table
    if table.certification != "hardware":
        raise CertificationError(
            f"the {gpu_class} table of this install is certified {table.certification!r}: its catalog "
            f'declares certification = "static" for {gpu_class}',
            f'set certification = "hardware" in manifests/{gpu_class}/tactics.toml, `netra lock`, rebuild, '
            "then certify from that wheel",
        )
    reused = reusing.read(reuse, gpu_class) if reuse is not None else None
    if only and reuse is None:
        raise CertificationError(
            "--only needs --reuse: the contracts it does not name are held as the reused table has them",
            f"add --reuse release/tables/{gpu_class}.json (the committed table), or certify without --only",
        )
    if across_devices and reuse is None:
        raise CertificationError(
            "--across-devices needs --reuse: it says which devices a reused table may have been certified on",
            f"add --reuse release/tables/{gpu_class}.json (the committed table), or drop --across-devices",
        )
    asked = selected(table, only) if only else None  # checked before anything needs the GPU
    vendor = targets.get(gpu_class).vendor
    tools = toolset.find(vendor, opts.sanitize, opts.profile)
    dev = vendor.open_loader()
    have = dev.gpu_class()
    if have != gpu_class:
        raise CertificationError(
            f"this host's GPU is {have} ({dev.device_name()}); certifying {gpu_class} needs an {gpu_class} GPU",
            f"run `netra certify --gpu-class {gpu_class}` on a host with that GPU",
        )
    carried = (
        reusing.carry(table, reused, dev.device_name(), asked, across_devices=across_devices)
        if reused is not None
        else None
    )
    if carried is not None and not carried.rerun and asked is not None:
        raise CertificationError(
            f"--only {' '.join(only)}: every contract it names is carried from {carried.source}: nothing to certify",
            "name a contract that --reuse does not carry (a run without --only lists them in its progress)",
        )
    if carried is not None and not carried.rerun:
        raise CertificationError(
            f"--reuse {carried.source}: certifies every contract of this install's {gpu_class} table with "
            "the same machine code: nothing to certify",
            "use that table as it is, or certify without --reuse to measure every contract again",
        )
    keys = set(carried.rerun) if carried is not None else set(table.entries)
    cat.verify()  # every code object against the lock before anything runs
    l2 = measure.l2_bytes(dev)
    total = sum(len(table.entries[k].candidates) for k in keys)
    checkers = ", ".join(c.check for c, _, _ in tools.checkers)
    also = ""
    if carried is not None:  # with --across-devices the table written names two devices, each contract one
        there = [d for d in carried.devices if d != dev.device_name()]
        on = f", certified there on {', '.join(there)}" if there else ""
        also = f" ({len(carried.entries)} carried from {carried.source}{on})"
    _say(progress, f"certify {gpu_class} on {dev.device_name()}: {total} candidates of {len(keys)} contracts{also}; "
                   + (f"memory checkers {checkers} ({tools.checkers[0][0].tool} {tools.checkers[0][2]})"
                      if tools.checkers else "memory checkers " + ("skipped" if tools.skipped_sanitizer else "unavailable"))
                   + "; profiler " + (f"{tools.profiler[0].tool} {tools.profiler[2]}" if tools.profiler
                                      else "skipped" if tools.skipped_profile else "unavailable"))  # fmt: skip
    if carried is not None:
        _say(progress, f"not carried from {carried.source} (changed, new, or without evidence there), "
                       "certified here: " + ", ".join(sorted(keys)))  # fmt: skip
    if carried is not None and carried.held:
        _say(progress, f"held as {carried.source} has them (not named by --only): " + ", ".join(carried.held))
    logs_given = opts.logs is not None
    logs = opts.logs if opts.logs is not None else Path(tempfile.mkdtemp(prefix="netra-certify-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    scratch = _scratch()
    # Up to 8 workers leave cores for this process and the driver; the judges of the widest contracts
    # (tens of GiB each) are held to half the host's memory by the pool (_Pool, JUDGE_BYTES_PER_ELEMENT).
    workers = opts.workers or max(1, min(8, (os.cpu_count() or 2) - 2))
    ok = False
    try:
        results = _measure(
            cat, keys, dev, tools, opts, rows, replays, seed, l2, scratch, logs, workers, progress
        )
        made = certified.table(
            cat, certified.run_info(dev, table, cat.lock, rows, replays, seed), results, logs, carried
        )
        ok = True
        _say(progress, f"certified {len(keys)} contracts"
                       + (f", carried {len(carried.entries)}" if carried is not None else "")
                       + (f", held {len(carried.held)}" if carried is not None and carried.held else "")
                       + f" in {time.monotonic() - t_start:.1f} s")  # fmt: skip
        return made
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if not logs_given and ok:
            shutil.rmtree(logs, ignore_errors=True)
        elif not ok:
            _say(progress, f"the tools' logs are kept in {logs}")


def selected(table: tables.Table, only: tuple[str, ...]) -> set[str]:
    """The contracts of `table` that `only` names (each a contract key or an op family); each name must
    name one at least."""
    keys: set[str] = set()
    for name in only:
        hit = {k for k, e in table.entries.items() if name in (k, e.op)}
        if not hit:
            raise CertificationError(
                f"--only {name}: no contract or op family of this install's {table.gpu_class} table",
                f"name a contract key or an op family that `netra catalog --gpu-class {table.gpu_class}` prints",
            )
        keys |= hit
    return keys


def _measure(
    cat: Any, keys: set[str], dev: Any, tools: Tools, opts: Options, rows: tuple[int, ...], replays: int,
    seed: int, l2: int, scratch: Path, logs: Path, workers: int, progress: Progress | None,
) -> dict[str, list[Result]]:  # fmt: skip
    """The results of every candidate of the contracts `keys` of the installed table."""
    from netra.certify import prepare

    table = cat.table
    entries = sorted((k, e) for k, e in table.entries.items() if k in keys)
    symbols = {c.artifact: c.symbol for c in table.candidates()}
    pool = _Pool(workers, _host_memory() // 2)
    state: list[_Entry] = []
    preflight: dict[str, Any] = {}
    try:
        # The pool runs its tasks in the order given: every contract's cases first (biggest first: they
        # take the longest), then, as each contract's cases are in, its references, then its timing
        # inputs (needed only once the launches are judged), then the judges.
        order = sorted(range(len(entries)), key=lambda i: -_size(entries[i][1]))
        futures: dict[int, Future[Any]] = {}
        for i in order:
            e = entries[i][1]
            rpbs = sorted({c.launch.rows_per_block for c in e.candidates})
            futures[i] = pool.submit(prepare.cases, e.op, e.params, rpbs, seed, str(scratch / f"e{i}"))
        state = [_Entry(i, e, futures[i]) for i, (_, e) in enumerate(entries)]
        t0 = time.monotonic()
        n, done = sum(len(s.entry.candidates) for s in state), 0
        pending = list(state)
        while pending:
            with interrupts.deferred():  # done() takes the future's lock (interrupts.wait_first)
                ready = [s for s in pending if s.cases_f.done()]
            if not ready:
                _pump(pool, state)
                interrupts.wait_first([s.cases_f for s in pending], timeout=1.0)
                continue
            s = ready[0]
            pending.remove(s)
            s.cases = _result(s.cases_f, f"{s.entry.key}: making its conformance cases")
            for cf in s.cases.cases.values():
                s.spans += [pool.submit(prepare.expected, s.entry.op, s.entry.params, cf, a, b)
                            for a, b in prepare.spans(cf)]  # fmt: skip
            s.timing_f = pool.submit(prepare.timing, s.entry.op, s.entry.params, list(_rows_of(s.entry.op, rows)), seed,
                                     str(scratch / f"e{s.index}"))  # fmt: skip
            if not preflight and (tools.checkers or tools.profiler):
                preflight = _start_preflight(cat, tools, s, scratch, logs, symbols, opts)
            try:
                for cand in s.entry.candidates:
                    done += 1
                    _launch(cat, dev, s, cand, scratch)
                    _say(progress, f"[{done}/{n}] {cand.artifact}: launched")
            finally:
                for b in s.buffers.values():
                    b.free()
                s.buffers.clear()
            if "error" in preflight:
                _join_preflight(preflight, progress)
            _pump(pool, state)
        _say(progress, f"correctness: {n} candidates launched in {time.monotonic() - t0:.1f} s")
        if preflight:
            _join_preflight(preflight, progress)
        t1 = time.monotonic()
        done = 0
        while any(not s.timed for s in state):
            _pump(pool, state)
            ready = [s for s in state if not s.timed and len(s.verdicts) == len(s.entry.candidates)]
            if not ready:
                with interrupts.deferred():
                    waiting = [f for s in state for f in (*s.spans, *s.judges.values()) if not f.done()]
                if waiting:
                    interrupts.wait_first(waiting, timeout=1.0)
                else:
                    time.sleep(0.05)  # judges were just handed out: collect them on the next round
                continue
            s = ready[0]
            _time_entry(cat, dev, s, rows, replays, l2)
            for cand in s.entry.candidates:
                done += 1
                ok = s.verdicts[cand.artifact][0]
                _say(progress, f"[{done}/{n}] {cand.artifact}: " + ("passed, timed" if ok else
                                                                    "FAILED: " + s.verdicts[cand.artifact][1][:160]))  # fmt: skip
        _say(progress, f"timing: {n} candidates in {time.monotonic() - t1:.1f} s")
    except BaseException:
        pool.shutdown()
        _stop_preflight(preflight)
        raise
    pool.shutdown()
    results = {s.entry.key: _results(s) for s in state}
    passed = [(s, c) for s in state for c in s.entry.candidates if s.verdicts[c.artifact][0]]
    checked: dict[str, dict[str, sanitizing.Checked]] = {}
    if tools.checkers and passed:
        t2 = time.monotonic()
        p = planfile.Plan(table.gpu_class, cat.install.kind, str(cat.install.root),
                          tuple(_item(s, c) for s, c in passed))  # fmt: skip
        runs = sanitizing.run_all([(c, exe) for c, exe, _ in tools.checkers], p, symbols, logs,
                                  timeout=tool_timeout(opts, len(passed)), progress=progress)  # fmt: skip
        checked = {check: {r.artifact: r for r in got} for check, got in runs.items()}
        _say(progress, f"memory checkers: {len(passed)} candidates in {time.monotonic() - t2:.1f} s")
    profiled: dict[str, tuple[str, Any]] = {}
    if tools.profiler and passed:
        t3 = time.monotonic()
        pr, exe, _ = tools.profiler
        p = planfile.Plan(table.gpu_class, cat.install.kind, str(cat.install.root),
                          tuple(_profile_item(s, c) for s, c in passed))  # fmt: skip
        profiled = profiling.run(pr, exe, p, symbols, logs, timeout=tool_timeout(opts, len(passed)))
        _say(progress, f"profile: {len(passed)} candidates in {time.monotonic() - t3:.1f} s")
    for s in state:
        for r in results[s.entry.key]:
            toolset.evidence(r, tools, checked, profiled)
    return results


def _rows_of(op: str, rows: tuple[int, ...]) -> tuple[int, ...]:
    """The row counts a contract is timed at: the run's, up to the family's limit (a routed MoE's 64
    tokens), which is timed itself."""
    from netra.core.ops import max_dispatch

    cap = max_dispatch(op)
    if cap is None:
        return rows
    return tuple(sorted({r for r in rows if r <= cap} | {cap}))


def _prefill_of(op: str) -> int:
    """The row count a contract is profiled and ranked at: PREFILL_ROWS, or the family's limit below it."""
    from netra.core.ops import max_dispatch

    cap = max_dispatch(op)
    return PREFILL_ROWS if cap is None else min(PREFILL_ROWS, cap)


def _size(e: tables.Entry) -> int:
    """A contract's host work, roughly: the bytes of its large case times its tactics."""
    from netra.certify import conformance

    return conformance.bytes_moved(e.op, e.params, _prefill_of(e.op)) * len(e.candidates)


def _pump(pool: _Pool, state: list[_Entry]) -> None:
    """Hand the judge every candidate whose outputs are written and whose references are complete;
    collect the verdicts that are in."""
    pool.poll()
    with interrupts.deferred():  # done() takes the future's lock (interrupts.wait_first)
        _collect(pool, state)


def _collect(pool: _Pool, state: list[_Entry]) -> None:
    from netra.certify import prepare

    for s in state:
        if s.spans and all(f.done() for f in s.spans):
            for f in s.spans:
                _result(f, f"{s.entry.key}: its float64 reference")
            for artifact, (cfs, outs, fences) in s.launched.items():
                if artifact not in s.judges:
                    cost = JUDGE_BYTES_PER_ELEMENT * max(
                        (sum(math.prod(shape) for _, _, shape in o.values()) for o in outs), default=0
                    )
                    bits = next(c.accumulator_bits for c in s.entry.candidates if c.artifact == artifact)
                    s.judges[artifact] = pool.submit(
                        prepare.judge, s.entry.op, s.entry.params, cfs, outs, fences, bits, cost=cost
                    )
        for artifact, f in s.judges.items():
            if artifact not in s.verdicts and f.done():
                s.verdicts[artifact] = _result(f, f"{artifact}: judging")
                for written in s.launched[artifact][1]:
                    for path, _, _ in written.values():
                        Path(path).unlink(missing_ok=True)
        if not s.cleared and s.cases is not None and len(s.verdicts) == len(s.entry.candidates):
            s.cleared = True  # the references are no longer needed: free the scratch space they take
            for cf in s.cases.cases.values():
                for path, _, _ in cf.expected.values():
                    Path(path).unlink(missing_ok=True)


def _launch(cat: Any, dev: Any, s: _Entry, cand: tables.Candidate, scratch: Path) -> None:
    """Every case of one candidate on the device; its outputs written for the judge."""
    import numpy as np

    assert s.cases is not None
    kernel = cat.kernel(cand)
    cfs = [s.cases.cases[k] for k in s.cases.by_rows_per_block[cand.launch.rows_per_block]]
    outs: list[dict[str, Any]] = []
    fences: list[list[str]] = []
    folder = scratch / f"e{s.index}" / f"out.{cand.tactic}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        for j, cf in enumerate(cfs):
            buf = s.buffers.get(cf.key)
            if buf is None:
                buf = s.buffers[cf.key] = measure.case_buffers(dev, s.entry, cf.load())
            raw, f = measure.launch(dev, kernel, buf, cf.stub(), s.entry.op)
            files = {}
            for name, (_, _, dtype, shape) in buf.outputs.items():
                path = folder / f"{j}.{name}.bin"
                path.write_bytes(raw[name])
                files[name] = (str(path), np.dtype(dtype).name, tuple(shape))
            outs.append(files)
            fences.append(f)
    except NetraError as e:
        raise CertificationError(
            f"{cand.artifact}: the GPU failed while certifying it ({e.message})",
            "a kernel that faults the device cannot be certified; fix it (or mark the tactic rejected) "
            "and certify again",
        ) from None
    s.launched[cand.artifact] = (cfs, outs, fences)


def _time_entry(cat: Any, dev: Any, s: _Entry, rows: tuple[int, ...], replays: int, l2: int) -> None:
    """Every passing candidate of one contract at every row count, on buffers they share."""
    from netra.certify import prepare

    assert s.cases is not None
    assert s.timing_f is not None
    timing = _result(s.timing_f, f"{s.entry.key}: making its timing inputs")
    passing = [c for c in s.entry.candidates if s.verdicts[c.artifact][0]]
    like = s.cases.cases[s.cases.by_rows_per_block[min(s.cases.by_rows_per_block)][0]]
    kernels = {c.artifact: cat.kernel(c) for c in passing}
    s.timings = {c.artifact: [] for c in s.entry.candidates}
    try:
        for r in _rows_of(s.entry.op, rows) if passing else ():
            sets = measure.TimingSets(dev, s.entry, r, l2, {k: prepare.load(a) for k, a in timing[r].items()})
            try:
                for c in passing:
                    s.timings[c.artifact].append(sets.time(kernels[c.artifact], like.scalars, replays))
            finally:
                sets.free()
    except NetraError as e:
        raise CertificationError(
            f"{s.entry.key}: the GPU failed while timing its candidates ({e.message})",
            "a kernel that faults the device cannot be certified; fix it (or mark the tactic rejected) "
            "and certify again",
        ) from None
    s.timed = True


def _results(s: _Entry) -> list[Result]:
    out = []
    for cand in s.entry.candidates:
        ok, reason, dev_max, tol, counts = s.verdicts[cand.artifact]
        ncases = len(s.launched[cand.artifact][0])
        out.append(Result(cand, ok, reason, dev_max, tol, ncases, counts, s.timings.get(cand.artifact, [])))
    return out


def _launch_of(cf: prepare.CaseFiles, s: _Entry, *, initialized: bool = True) -> planfile.Launch:
    from netra.certify import conformance

    outs = conformance.outputs(s.entry.op, s.entry.params, cf.rows)
    return planfile.Launch(
        rows=cf.rows,
        scalars=dict(cf.scalars),
        inputs={k: (a[0], initialized) for k, a in cf.inputs.items()},
        outputs={k: (dt.name, tuple(sh)) for k, (dt, sh) in outs.items()},
    )


def _item(s: _Entry, cand: tables.Candidate) -> planfile.Item:
    """A candidate's conformance cases, as the memory checkers' worker launches them."""
    assert s.cases is not None
    keys = s.cases.by_rows_per_block[cand.launch.rows_per_block]
    return planfile.Item(cand.artifact, tuple(_launch_of(s.cases.cases[k], s) for k in keys))


def _profile_item(s: _Entry, cand: tables.Candidate) -> planfile.Item:
    """A candidate's prefill-sized launch with the timing inputs, as the profiler's worker launches it."""
    from netra.certify import conformance

    assert s.cases is not None
    assert s.timing_f is not None
    timing = _result(s.timing_f, f"{s.entry.key}: making its timing inputs")
    like = s.cases.cases[s.cases.by_rows_per_block[min(s.cases.by_rows_per_block)][0]]
    top = _prefill_of(s.entry.op)
    outs = conformance.outputs(s.entry.op, s.entry.params, top)
    launch = planfile.Launch(
        rows=top,
        scalars=dict(like.scalars),
        inputs={k: (a[0], True) for k, a in timing[top].items()},
        outputs={k: (dt.name, tuple(sh)) for k, (dt, sh) in outs.items()},
    )
    return planfile.Item(cand.artifact, (launch,))


def _canary(op: str, rows: int) -> int:
    """Rows past the buffers of the memory checkers' bad launch: CANARY_ROWS, or as many as the family's
    limit allows (a kernel given more than its limit does nothing, and would hide the overrun)."""
    from netra.core.ops import max_dispatch

    cap = max_dispatch(op)
    return CANARY_ROWS if cap is None else max(1, min(CANARY_ROWS, cap - rows))


def _start_preflight(
    cat: Any, tools: Tools, s: _Entry, scratch: Path, logs: Path, symbols: dict[str, str], opts: Options
) -> dict[str, Any]:
    """Each tool once over one candidate of the first contract ready, in a thread, while the launches run."""
    assert s.cases is not None
    cand = s.entry.candidates[0]
    keys = s.cases.by_rows_per_block[cand.launch.rows_per_block]
    small = min((s.cases.cases[k] for k in keys), key=lambda c: (c.rows < 3, c.rows))
    inst = cat.install

    def one(item: planfile.Item) -> planfile.Plan:
        return planfile.Plan(cat.table.gpu_class, inst.kind, str(inst.root), (item,))

    plans: dict[str | None, planfile.Plan] = {
        None: one(planfile.Item(cand.artifact, (_launch_of(small, s),))),
        "overrun": one(
            planfile.Item(cand.artifact, (_launch_of(small, s),), extra_rows=_canary(s.entry.op, small.rows))
        ),
        "uninitialized": one(planfile.Item(cand.artifact, (_launch_of(small, s, initialized=False),))),
    }
    box: dict[str, Any] = {"t0": time.monotonic()}

    def body() -> None:
        try:
            if tools.checkers:
                sanitizing.preflight([(c, exe) for c, exe, _ in tools.checkers], plans, symbols, logs,
                                     timeout=tool_timeout(opts, 1))  # fmt: skip
            if tools.profiler:
                pr, exe, _ = tools.profiler
                profiling.run(pr, exe, one(_profile_item(s, cand)), symbols, logs, timeout=tool_timeout(opts, 1),
                              label="preflight.")  # fmt: skip
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=body, name="netra-certify-preflight", daemon=True)
    t.start()
    box["thread"] = t
    return box


def _join_preflight(box: dict[str, Any], progress: Progress | None) -> None:
    box["thread"].join()
    if "error" in box:
        raise box["error"]
    _say(progress, f"tools: each ran on this host and was read back in {time.monotonic() - box['t0']:.1f} s")


def _stop_preflight(box: dict[str, Any]) -> None:
    if box:
        from netra.core import proc

        proc.kill_all()
        box["thread"].join(timeout=30)
