"""The profiler evidence: every candidate launched once at the prefill row count under the vendor's
profiler, with the timing inputs, and its DRAM throughput (% of peak), duration and DRAM bytes read back.

One process runs the worker (netra.certify.worker) over every candidate, after the memory checkers and
alone on the GPU. Each kernel symbol must come back exactly once; anything else (a missing or repeated
kernel, a worker that did not finish, a counter that is not a number) fails the run loudly.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from netra.certify import plan as planfile
from netra.certify import sanitizer
from netra.core import proc
from netra.errors import CertificationError, ToolError, ToolTimeoutError
from netra.targets.devtools import Profile, Profiler

TIMEOUT_S = 600.0
HINT = "see the log named; docs/certify.md says how the profiler is run and read"


def run(
    profiler: Profiler,
    exe: Path,
    p: planfile.Plan,
    symbols: dict[str, str],
    folder: Path,
    *,
    timeout: float = TIMEOUT_S,
    label: str = "",
) -> dict[str, tuple[str, Profile]]:
    """artifact -> (the machine code the worker loaded, its profile), for every item of the plan."""
    stem = folder / f"{label}profile"
    plan_path, progress, log = Path(f"{stem}.plan.json"), Path(f"{stem}.progress"), Path(f"{stem}.log")
    report = Path(f"{stem}.ncu-rep")
    p.write(plan_path)
    names = [symbols[i.artifact] for i in p.items]
    argv = profiler.argv(exe, sanitizer.worker_argv(plan_path, progress), symbols=names, report=report)
    deadline = time.monotonic() + timeout
    try:
        cp = proc.run(argv, tool=profiler.tool, what=f"{profiler.tool} over {len(p.items)} candidates",
                      timeout=timeout, env=sanitizer.worker_env(), output_limit=sanitizer.OUTPUT_LIMIT)  # fmt: skip
        log.write_text(cp.stdout + ("\n--- stderr ---\n" + cp.stderr if cp.stderr else ""))
        if cp.returncode != 0:
            raise CertificationError(f"{profiler.tool} exited {cp.returncode}; its log: {log}", HINT)
        marks = [m for m in map(planfile.marker, cp.stdout.splitlines()) if m is not None]
        begun = {m.artifact: m.text_sha256 for m in marks if m.kind == "begin"}
        ended = [m for m in marks if m.kind == "end" and m.status == "ok"]
        if len(ended) != len(p.items) or not any(m.kind == "done" for m in marks):
            raise CertificationError(
                f"{profiler.tool}: the worker finished {len(ended)} of {len(p.items)} candidates; its log: {log}",
                HINT,
            )
        exported = proc.run(profiler.export_argv(exe, report), tool=profiler.tool, what=f"{profiler.tool} --import",
                            timeout=max(1.0, deadline - time.monotonic()), output_limit=sanitizer.OUTPUT_LIMIT)  # fmt: skip
    except ToolTimeoutError:
        raise CertificationError(
            f"{profiler.tool}: did not finish within {timeout:g} s ({sanitizer._last_begun(progress)})",
            "pass a longer --tool-timeout, or --skip-profile (recorded as skipped)",
        ) from None
    except ToolError as e:
        raise CertificationError(f"{profiler.tool}: {e.message}", HINT) from None
    table = Path(f"{stem}.csv")
    table.write_text(exported.stdout)
    if exported.returncode != 0:
        raise CertificationError(
            f"{profiler.tool} --import exited {exported.returncode}; its output: {table}", HINT
        )
    try:
        rows = profiler.read(exported.stdout)
    except ToolError as e:
        raise CertificationError(f"{e.message}; its output: {table}", HINT) from None
    by_kernel: dict[str, list[Profile]] = {}
    for r in rows:
        by_kernel.setdefault(r.kernel, []).append(r)
    out = {}
    for item in p.items:
        got = by_kernel.get(symbols[item.artifact], [])
        if len(got) != 1:
            raise CertificationError(
                f"{profiler.tool}: {item.artifact} ({symbols[item.artifact]}) was profiled {len(got)} times, not "
                f"once; its output: {table}",
                HINT,
            )
        out[item.artifact] = (begun[item.artifact], got[0])
    extra = sorted(set(by_kernel) - {symbols[i.artifact] for i in p.items})
    if extra:
        raise CertificationError(
            f"{profiler.tool}: profiled kernels no candidate launched: {', '.join(extra)}", HINT
        )
    return out


def evidence_skipped(note: str) -> dict[str, Any]:
    return {"result": "skipped", "note": note, "text_sha256": None, "tool": None, "version": None, "rows": None,
            "dram_throughput_pct": None, "duration_us": None, "dram_read_bytes": None, "dram_write_bytes": None}  # fmt: skip


def evidence_unavailable(vendor: str) -> dict[str, Any]:
    return {**evidence_skipped(f"no profiler is available for {vendor}"), "result": "unavailable"}


def evidence(
    text_sha256: str, loaded: str, tool: str, version: str, rows: int, prof: Profile
) -> dict[str, Any]:
    if loaded != text_sha256:
        raise CertificationError(
            f"{prof.kernel}: {tool} profiled machine code {loaded}, not the certified {text_sha256}",
            "the install changed during certification; reinstall and certify again",
        )
    return {
        "result": "measured", "note": "", "text_sha256": text_sha256, "tool": tool, "version": version,
        "rows": rows, "dram_throughput_pct": round(prof.dram_throughput_pct, 2),
        "duration_us": round(prof.duration_us, 3), "dram_read_bytes": prof.dram_read_bytes,
        "dram_write_bytes": prof.dram_write_bytes,
    }  # fmt: skip
