"""The memory-checker evidence: every candidate under each of its vendor's memory checkers, read back.

One process per checker runs the worker (netra.certify.worker) over every candidate's conformance
cases; the four checkers run concurrently (they are CPU-heavy instrumentation), after the timing and
never during it. The tool's reports and the worker's begin/end lines share one stream, and `settle`
attributes each report to one candidate: to the candidate whose kernel symbol it names, else to the
candidate whose begin and end lines it lies between. Anything else fails the run loudly and marks
nothing clean: a report no candidate can own, a missing summary, a summary counting more than was
printed (short of the print limit), an exit status that disagrees with the summary, a worker that dies
without saying why. A worker that stops on a device error (the context is lost) has its report
attributed and the remaining candidates continue in a new process; so do the candidates after the
last printed report once the tool's print limit is reached.

Before the long run, `preflight` proves on this host that each checker works and that this reader
understands it: memcheck must report a deliberately bad launch (more rows than its buffers hold),
initcheck one whose input was never written, racecheck and synccheck must finish with a summary.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netra.certify import plan as planfile
from netra.core import interrupts, proc
from netra.errors import CertificationError, ToolError, ToolTimeoutError
from netra.targets.devtools import CheckerOutput, MemoryChecker, Report

EXIT_FINDINGS = 86  # the checker's exit status when it reported anything (--error-exitcode)
PRINT_LIMIT = 1000  # reports printed per process; past it the remaining candidates run again
OUTPUT_LIMIT = 256 << 20
TIMEOUT_S = 600.0  # per checker, over all its processes
HINT = "see the log named; docs/certify.md says how the memory checkers are run and read"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Checked:
    """One candidate under one checker."""

    artifact: str
    text_sha256: str  # the machine code the worker loaded
    findings: int
    first: str  # the first finding's one-line summary ("" when clean)
    launches: int


@dataclass(frozen=True)
class Settled:
    """What one checker process established: results for the plan's first items, and where a new
    process must continue (None: nothing left)."""

    results: tuple[Checked, ...]
    next_start: int | None


# A warning of the tool itself (not a report about a launch: those name their kernel or lie between a
# launch's begin and end lines), e.g. about the host or the driver.
_TOOL_WARNING = re.compile(r"(?i)warning:(?!.*race reported)")


def _symbol_pattern(symbol: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(symbol)}(?![A-Za-z0-9_])")


def settle(
    out: CheckerOutput,
    returncode: int,
    items: list[planfile.Item],
    symbols: list[str],
    *,
    check: str,
    log: str,
    print_limit: int = PRINT_LIMIT,
) -> Settled:
    """Attribute one checker process's reports to the plan's items (see the module docstring)."""
    n = len(items)
    pats = [_symbol_pattern(s) for s in symbols]
    begun: dict[int, planfile.Marker] = {}
    ended: dict[int, planfile.Marker] = {}
    done: int | None = None
    window: int | None = None
    owned: dict[int, list[Report]] = {i: [] for i in range(n)}

    def fail(what: str) -> CertificationError:
        return CertificationError(f"{check}: {what}; its log: {log}", HINT)

    for ev in out.events:
        if isinstance(ev, str):
            m = planfile.marker(ev)
            if m is None:
                continue
            if m.kind == "done":
                done = m.item
                continue
            if not 0 <= m.item < n or m.artifact != items[m.item].artifact:
                raise fail(f"the worker printed a line for an item it was not given ({ev[:200]})")
            if m.kind == "begin":
                if window is not None or m.item != len(begun):
                    raise fail(f"the worker began {m.artifact} out of order")
                begun[m.item] = m
                window = m.item
            else:
                if window != m.item:
                    raise fail(f"the worker ended {m.artifact} without beginning it")
                ended[m.item] = m
                window = None
            continue
        text = "\n".join(ev.lines)
        named = [i for i, p in enumerate(pats) if p.search(text)]
        if len(named) == 1:
            owner = named[0]
        elif window is not None and (not named or window in named):
            owner = window
        elif not named and _TOOL_WARNING.match(ev.headline):
            continue  # the tool's own warning between launches (its log keeps it): no kernel's finding
        else:
            which = "several candidates" if named else "no candidate"
            raise fail(f"a report names {which} and was printed outside every launch: {ev.headline[:200]}")
        owned[owner].append(ev)
    if out.summary is None:
        raise fail(f"the tool printed no summary (exit status {returncode}): it did not finish")
    printed = sum(len(v) for v in owned.values())
    limited = out.summary > printed and printed >= print_limit
    if out.summary > printed and not limited:
        raise fail(f"the tool counted {out.summary} errors but printed {printed} netra could attribute")
    faults = [i for i, m in ended.items() if m.status == "fault"]
    if faults:
        covered = faults[0] + 1
    elif done == n and len(ended) == n:
        covered = n
        # errors decide the exit status; warnings (racecheck's) may or may not
        want = {EXIT_FINDINGS} if out.errors else {0, EXIT_FINDINGS} if out.warnings else {0}
        if returncode not in want:
            raise fail(
                f"exit status {returncode} with a summary of {out.errors} errors and {out.warnings} warnings "
                f"(expected {' or '.join(map(str, sorted(want)))})"
            )
    elif window is not None:
        raise fail(
            f"the worker died while launching {items[window].artifact} (exit status {returncode}) "
            "without reporting a device error"
        )
    else:
        raise fail(f"the worker stopped after {len(ended)} of {n} candidates (exit status {returncode})")
    if limited:
        covered = min(covered, max(i for i, v in owned.items() if v) + 1)
    results = []
    for i in range(covered):
        if i not in begun or i not in ended:
            raise fail(f"the worker never ran {items[i].artifact}")
        reports, end = owned[i], ended[i]
        first = reports[0].summary() if reports else ""
        count = len(reports)
        if end.status == "fault" and not reports:
            first, count = f"the launch failed under {check}: {end.message}"[:300], 1
        results.append(Checked(items[i].artifact, begun[i].text_sha256, count, first, end.launches))
    return Settled(tuple(results), covered if covered < n else None)


def worker_env() -> dict[str, str]:
    """The environment the worker runs in: this netra first on its path, output unbuffered."""
    import netra

    env = dict(os.environ)
    here = str(Path(netra.__file__).resolve().parents[1])
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def worker_argv(plan_path: Path, progress: Path) -> list[str]:
    return [sys.executable, "-m", "netra.certify.worker", str(plan_path), "--progress", str(progress)]


def _last_begun(progress: Path) -> str:
    try:
        lines = progress.read_text().splitlines()
    except OSError:
        return "before its first candidate"
    marks = [m for m in map(planfile.marker, lines) if m is not None]
    return (
        f"while launching {marks[-1].artifact}"
        if marks and marks[-1].kind == "begin"
        else "between candidates"
    )


def run_checker(
    checker: MemoryChecker,
    exe: Path,
    p: planfile.Plan,
    symbols: dict[str, str],
    folder: Path,
    *,
    timeout: float = TIMEOUT_S,
    label: str = "",
) -> list[Checked]:
    """Every item of the plan under one checker, restarting after a lost context or the print limit."""
    env = worker_env()
    deadline = time.monotonic() + timeout
    results: list[Checked] = []
    start, attempt = 0, 0
    while start < len(p.items):
        attempt += 1
        if attempt > len(p.items) + 1:
            raise CertificationError(f"{checker.check}: no progress after {attempt - 1} processes", HINT)
        part = p.part(start)
        stem = folder / f"{label}{checker.check}.{attempt}"
        plan_path, progress, log = (Path(f"{stem}.plan.json"), Path(f"{stem}.progress"), Path(f"{stem}.log"))
        part.write(plan_path)
        argv = checker.argv(
            exe, worker_argv(plan_path, progress), error_exitcode=EXIT_FINDINGS, print_limit=PRINT_LIMIT
        )
        what = f"{checker.tool} {checker.check} over {len(part.items)} candidates"
        try:
            cp = proc.run(argv, tool=checker.tool, what=what, timeout=max(1.0, deadline - time.monotonic()),
                          env=env, output_limit=OUTPUT_LIMIT)  # fmt: skip
        except ToolTimeoutError:
            raise CertificationError(
                f"{checker.check}: did not finish within {timeout:g} s ({_last_begun(progress)}); its progress: "
                f"{progress}",
                "a kernel that hangs under the checker cannot be certified; pass a longer --tool-timeout, "
                "or --skip-sanitizer for a quick run (recorded as skipped, never as clean)",
            ) from None
        except ToolError as e:
            raise CertificationError(f"{checker.check}: {e.message}", HINT) from None
        log.write_text(cp.stdout + ("\n--- stderr ---\n" + cp.stderr if cp.stderr else ""))
        s = settle(
            checker.read(cp.stdout), cp.returncode, list(part.items), [symbols[i.artifact] for i in part.items],
            check=checker.check, log=str(log),
        )  # fmt: skip
        results += s.results
        if s.next_start is None:
            break
        start += s.next_start
    return results


def run_all(
    checkers: list[tuple[MemoryChecker, Path]],
    p: planfile.Plan,
    symbols: dict[str, str],
    folder: Path,
    *,
    timeout: float = TIMEOUT_S,
    progress: Progress | None = None,
    label: str = "",
) -> dict[str, list[Checked]]:
    """Every checker over the plan, concurrently; the first failure stops the others and is raised."""
    first: list[BaseException] = []  # the failure that stopped the others (theirs follow from it)
    mutex = threading.Lock()

    def one(checker: MemoryChecker, exe: Path) -> list[Checked]:
        t0 = time.monotonic()
        try:
            got = run_checker(checker, exe, p, symbols, folder, timeout=timeout, label=label)
        except BaseException as e:
            with mutex:
                if not first:
                    first.append(e)
                    proc.kill_all()  # the other checkers' processes: their results no longer matter
            raise
        if progress:
            found = sum(1 for c in got if c.findings)
            progress(f"{label}{checker.check}: {len(got)} candidates in {time.monotonic() - t0:.1f} s: "
                     f"{len(got) - found} clean, {found} with findings")  # fmt: skip
        return got

    def settled(item: tuple[MemoryChecker, Path]) -> list[Checked]:
        try:
            return one(*item)
        except BaseException:
            return []  # recorded in `first`, raised below once every checker is done

    with ThreadPoolExecutor(max_workers=max(1, len(checkers))) as ex:
        got = interrupts.pool_map(ex, settled, checkers)
    if first:
        raise first[0]
    return {c.check: r for (c, _), r in zip(checkers, got, strict=True)}


def preflight(
    checkers: list[tuple[MemoryChecker, Path]],
    plans: dict[str | None, planfile.Plan],
    symbols: dict[str, str],
    folder: Path,
    *,
    timeout: float = TIMEOUT_S,
) -> None:
    """Each checker once over a one-item plan (plans[checker.canary]: the deliberately bad launch it must
    report, or plans[None], a plain launch): raises unless it runs, is read, and reports its canary."""

    def one(checker: MemoryChecker, exe: Path) -> None:
        p = plans[checker.canary]
        got = run_checker(checker, exe, p, symbols, folder, timeout=timeout, label="preflight.")
        if checker.canary is not None and not (got and got[0].findings):
            raise CertificationError(
                f"{checker.check} reported nothing for a deliberately bad launch ({checker.canary}: "
                f"{p.items[0].artifact}): on this host it does not check kernels, so a clean result would "
                f"mean nothing; its log: {folder / f'preflight.{checker.check}.1.log'}",
                "check the tool and the driver (docs/certify.md), or pass --skip-sanitizer (recorded as skipped)",
            )

    def settled(item: tuple[MemoryChecker, Path]) -> BaseException | None:
        try:
            one(*item)
        except BaseException as e:
            return e  # every checker runs; the first one's failure (in their order) is raised
        return None

    with ThreadPoolExecutor(max_workers=max(1, len(checkers))) as ex:
        errors = [e for e in interrupts.pool_map(ex, settled, checkers) if e is not None]
    if errors:
        raise errors[0]


# -- the evidence ----------------------------------------------------------------------------------


def evidence_skipped(checkers: list[MemoryChecker], note: str) -> dict[str, Any]:
    return {
        "result": "skipped",
        "note": note,
        "text_sha256": None,
        "checks": [
            {"check": c.check, "tool": c.tool, "version": None, "result": "skipped", "findings": 0, "first": "",
             "launches": 0}
            for c in checkers
        ],
    }  # fmt: skip


def evidence_unavailable(vendor: str) -> dict[str, Any]:
    return {"result": "unavailable", "note": f"no memory checker is available for {vendor}", "text_sha256": None,
            "checks": []}  # fmt: skip


def evidence(text_sha256: str, runs: list[tuple[MemoryChecker, str, Checked]]) -> dict[str, Any]:
    """A candidate's memory-checker evidence from each checker's result (in the vendor's order)."""
    checks = []
    for checker, version, c in runs:
        if c.text_sha256 != text_sha256:
            raise CertificationError(
                f"{c.artifact}: {checker.check} ran machine code {c.text_sha256}, not the certified {text_sha256}",
                "the install changed during certification; reinstall and certify again",
            )
        checks.append({
            "check": checker.check, "tool": checker.tool, "version": version,
            "result": "findings" if c.findings else "clean", "findings": c.findings, "first": c.first,
            "launches": c.launches,
        })  # fmt: skip
    result = "findings" if any(c["findings"] for c in checks) else "clean"
    return {"result": result, "note": "", "text_sha256": text_sha256, "checks": checks}


def reason(ev: dict[str, Any]) -> str:
    """Why a finding rejects the candidate: the first checker that found something, and what."""
    c = next(c for c in ev["checks"] if c["result"] == "findings")
    n = c["findings"]
    return f"{c['tool']} {c['check']}: {n} finding{'s' if n != 1 else ''}; first: {c['first']}"[:600]
