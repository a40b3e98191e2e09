"""NVIDIA's developer tools that `netra certify` runs: compute-sanitizer's four memory checkers and Nsight
Compute's `ncu`. How each is found, run and read; docs/certify.md says why each option is there.

Found on PATH, then in $CUDA_HOME/bin, $CUDA_PATH/bin and /usr/local/cuda/bin, then in the tool's own
install folders (compute-sanitizer/ beside a toolkit's bin/; for ncu, /opt/nvidia/nsight-compute/<version>/
and a toolkit's nsight-compute-<version>/, newest first).

compute-sanitizer (2025.3.1, the CUDA 13.0 toolkit's; options as its --help lists them): reports go to
stdout with the program's own lines (every tool line starts with the prefix `=========`): a report is a
headline (`Invalid __global__ write of size 4 bytes`, `Error: Race reported between ...`,
`Uninitialized __global__ memory read ...`, `Barrier error detected. ...`, `Program hit ... on CUDA API
call to ...`) and its indented detail lines (`at <kernel>+0x160 in ...`, `by thread (0,0,0) in block
(0,0,0)`, `Address ... is out of bounds`), ended by a bare prefix line or the next headline; the run
ends with the tool's summary (`ERROR SUMMARY: 3 errors`; racecheck: `RACECHECK SUMMARY: 1 hazard
displayed (1 error, 0 warnings)`). Racecheck warnings count as findings: its manual says warp-synchronous
hazards it reports as warnings must be fixed on every GPU since Volta.

ncu (Nsight Compute 2025.3.1): `--clock-control none` (the clocks as the card runs them; the default
locks them to base), only the four metrics the evidence records, `--kernel-name regex:` on the
candidates' symbols; the report is read back with `--import ... --csv --page raw`: a header row (`ID`,
`Kernel Name`, one column per metric), a units row, then one row per profiled launch.
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from netra.core import proc
from netra.errors import ToolError, ToolOutputError
from netra.targets.devtools import CheckerOutput, MemoryChecker, Profile, Profiler, Report

PREFIX = "========="
_VERSION = re.compile(r"\bVersion\s+([0-9][0-9A-Za-z.+-]*)")
_VERSION_TIMEOUT_S = 60.0
# A summary line: `ERROR SUMMARY: 3 errors`, `RACECHECK SUMMARY: 1 hazard displayed (...)`; the first
# number is what the tool printed (errors, or hazards displayed).
_SUMMARY = re.compile(r"^([A-Z]+) SUMMARY:\s*([0-9]{1,12})\s+(?:errors?|hazards?)\b")
# racecheck's "(1 error, 0 warnings)"
_SPLIT = re.compile(r"\(([0-9]{1,12}) errors?, ([0-9]{1,12}) warnings?")
# The tool's own informational lines (not findings): its banner, a leak summary, the program's exit.
_INFO = re.compile(
    r"^(COMPUTE-SANITIZER$|LEAK SUMMARY:|Target application returned an error|"
    r"Program exited with (?:code|error)|This tool is deprecated)"
)
# memcheck's count of the records its device-side buffer dropped (`16128 errors were skipped (error
# buffer overflow).`), printed after its summary; the launch it happened in carries the tool's `Error
# buffer overflow has been detected` warning, a finding of that launch. Read as a note only after a
# summary that counted errors: anywhere else it stays a report that no candidate owns, and fails the run.
_SKIPPED = re.compile(r"^\d+ errors? (?:were|was) skipped\b")
# Detail lines of a report, where the tool does not indent them.
_DETAIL = re.compile(
    r"^(at |by thread|and |Address |Saved host backtrace|Host Frame|Device Frame|Current Value|"
    r"Not written|These unused|Sync mask|is located|is \d+ bytes)"
)
HINT = "see the tool's log; docs/certify.md says how each tool is run and read"


def _cuda_dirs() -> list[Path]:
    dirs = [Path(os.environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return [*dirs, Path("/usr/local/cuda")]


def _newest(pattern_dirs: list[Path], glob: str) -> list[Path]:
    """Folders matching glob under each dir, newest version first."""
    found: list[Path] = []
    for d in pattern_dirs:
        with contextlib.suppress(OSError):
            found += list(d.glob(glob))

    def key(p: Path) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", p.name))

    return sorted(found, key=key, reverse=True)


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _find(name: str, folders: list[Path]) -> Path | None:
    exe = shutil.which(name)
    if exe:
        return Path(exe)
    return next((d / name for d in folders if _executable(d / name)), None)


def _version(exe: Path, name: str) -> str:
    r = proc.run([str(exe), "--version"], tool=name, what=f"{exe} --version", timeout=_VERSION_TIMEOUT_S)
    m = _VERSION.search(r.stdout + "\n" + r.stderr)
    if r.returncode != 0 or m is None:
        last = (r.stdout + r.stderr).strip().splitlines()[-1:] or ["nothing"]
        raise ToolError(
            f"{exe} --version exited {r.returncode} and printed no version ({last[0][:200]})",
            f"check the {name} installation, or point CUDA_HOME at a CUDA toolkit that has it",
        )
    return m.group(1)


def _sanitizer_folders() -> list[Path]:
    cuda = _cuda_dirs()
    return [*(d / "bin" for d in cuda), *(d / "compute-sanitizer" for d in cuda)]


class Sanitizer(MemoryChecker):
    """One compute-sanitizer tool (--tool memcheck|racecheck|initcheck|synccheck)."""

    tool = "compute-sanitizer"
    install_hint = "install the CUDA toolkit's compute-sanitizer, or point CUDA_HOME at a toolkit that has it"

    def __init__(self, check: str, canary: str | None, summaries: tuple[str, ...], options: tuple[str, ...]):
        self.check = check
        self.canary = canary
        self.summaries = summaries  # the summary kinds whose count is this tool's, in preference order
        self.options = options  # the tool's own options

    def find(self) -> Path | None:
        return _find(self.tool, _sanitizer_folders())

    def searched(self) -> list[str]:
        return ["PATH", *(str(d) for d in _sanitizer_folders())]

    def version(self, exe: Path) -> str:
        return _version(exe, self.tool)

    def argv(self, exe: Path, program: Sequence[str], *, error_exitcode: int, print_limit: int) -> list[str]:
        # --destroy-on-device-error kernel: a precise error ends that kernel, not the context, so the
        #   next candidate still runs (the default, context, would end the whole worker);
        # --show-backtrace no: the host frames are the Python interpreter's, the kernel is in the "at" line;
        # --target-processes application-only: the worker is the only process to watch;
        # --launch-timeout 120: the worker starts Python, numpy and the CUDA driver under the tool (the
        #   default 10 s is close to that on a loaded host).
        return [
            str(exe), "--tool", self.check, "--error-exitcode", str(error_exitcode),
            "--print-limit", str(print_limit), "--destroy-on-device-error", "kernel",
            "--show-backtrace", "no", "--target-processes", "application-only", "--launch-timeout", "120",
            *self.options, "--", *program,
        ]  # fmt: skip

    def read(self, text: str) -> CheckerOutput:
        events: list[Report | str] = []
        notes: list[str] = []
        counts: dict[str, tuple[int, int, int]] = {}  # kind -> (printed, errors, warnings)
        block: list[str] | None = None

        def close() -> None:
            nonlocal block
            if block is not None:
                events.append(Report(block[0], tuple(block)))
            block = None

        for line in text.splitlines():
            if not line.startswith(PREFIX):
                close()
                events.append(line)
                continue
            body = line[len(PREFIX) :]
            stripped = body.strip()
            if not stripped:
                close()
            elif block is not None and (body.startswith("  ") or _DETAIL.match(stripped)):
                block.append(stripped)
            elif m := _SUMMARY.match(stripped):
                close()
                n = int(m.group(2))
                split = _SPLIT.search(stripped)
                errors, warnings = (int(split.group(1)), int(split.group(2))) if split else (n, 0)
                was = counts.get(m.group(1), (0, 0, 0))
                counts[m.group(1)] = (was[0] + n, was[1] + errors, was[2] + warnings)
                notes.append(stripped)
            elif _INFO.match(stripped) or (_SKIPPED.match(stripped) and any(c[1] for c in counts.values())):
                close()
                notes.append(stripped)
            else:
                close()
                block = [stripped]
        close()
        mine = next((counts[k] for k in self.summaries if k in counts), None)
        if mine is None:
            return CheckerOutput(tuple(events), None, tuple(notes))
        return CheckerOutput(tuple(events), mine[0], tuple(notes), errors=mine[1], warnings=mine[2])


# The memory checkers, in the order the evidence lists them. --padding 4096 (memcheck): a buffer after
# every allocation, so an access just past one buffer is out of bounds instead of landing unseen in the
# next allocation (the manual's Padding section).
CHECKERS: tuple[MemoryChecker, ...] = (
    Sanitizer("memcheck", "overrun", ("ERROR",), ("--padding", "4096")),
    Sanitizer("racecheck", None, ("RACECHECK", "ERROR"), ()),
    Sanitizer("initcheck", "uninitialized", ("INITCHECK", "ERROR"), ()),
    Sanitizer("synccheck", None, ("SYNCCHECK", "ERROR"), ()),
)

# ncu's raw page: the metric column for each Profile field.
METRICS = {
    "duration": "gpu__time_duration.sum",
    "dram_pct": "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "read": "dram__bytes_read.sum",
    "write": "dram__bytes_write.sum",
}
# ncu picks a unit per column; these bring times to microseconds and sizes to bytes.
_TIME_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
            "second": 1e6}  # fmt: skip
_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12, "KB": 1e3, "MB": 1e6,
          "GB": 1e9, "TB": 1e12}  # fmt: skip
_PERCENT = {"%": 1.0}


def _ncu_folders() -> list[Path]:
    cuda = _cuda_dirs()
    return [
        *(d / "bin" for d in cuda),
        *_newest([Path("/opt/nvidia/nsight-compute")], "[0-9]*"),
        *_newest(cuda, "nsight-compute-*"),
    ]


class NsightCompute(Profiler):
    tool = "ncu"
    install_hint = (
        "install Nsight Compute (its ncu: /opt/nvidia/nsight-compute/<version>/ncu is found), or point CUDA_HOME "
        "at a CUDA toolkit that has it"
    )

    def find(self) -> Path | None:
        return _find(self.tool, _ncu_folders())

    def searched(self) -> list[str]:
        return ["PATH", *(str(d) for d in _ncu_folders())]

    def version(self, exe: Path) -> str:
        return _version(exe, self.tool)

    def argv(self, exe: Path, program: Sequence[str], *, symbols: Sequence[str], report: Path) -> list[str]:
        names = "|".join(re.escape(s) for s in sorted(set(symbols)))
        return [
            str(exe), "--clock-control", "none", "--target-processes", "application-only",
            "--metrics", ",".join(METRICS.values()), "--kernel-name", f"regex:^({names})$",
            "--export", str(report.with_suffix("")), "--force-overwrite", *program,
        ]  # fmt: skip

    def export_argv(self, exe: Path, report: Path) -> list[str]:
        return [str(exe), "--import", str(report), "--csv", "--page", "raw"]

    def read(self, text: str) -> list[Profile]:
        start = text.find('"ID"')
        rows = list(csv.reader(io.StringIO(text[start:]))) if start >= 0 else []
        if len(rows) < 2:
            raise ToolOutputError(
                f"ncu's raw page has no header and units rows ({text.strip()[:200]!r})", HINT
            )
        head, units, data = rows[0], rows[1], rows[2:]
        col = {name: i for i, name in enumerate(head)}
        missing = [m for m in ("Kernel Name", *METRICS.values()) if m not in col]
        if missing:
            raise ToolOutputError(f"ncu's raw page lacks the columns {', '.join(missing)}", HINT)
        out = []
        for r in data:
            if len(r) != len(head):
                raise ToolOutputError(f"ncu's raw page has a row of {len(r)} fields, not {len(head)}", HINT)
            kernel = r[col["Kernel Name"]]

            def value(key: str, scales: dict[str, float], r: list[str] = r, kernel: str = kernel) -> float:
                i = col[METRICS[key]]
                unit, raw = units[i].strip(), r[i].strip().replace(",", "")
                try:
                    return float(raw) * scales[unit]
                except (KeyError, ValueError):
                    raise ToolOutputError(
                        f"ncu: {kernel}: {METRICS[key]} is {raw!r} in unit {unit!r}, not a number in "
                        f"{' or '.join(scales)}",
                        HINT,
                    ) from None

            out.append(
                Profile(
                    kernel=kernel,
                    duration_us=value("duration", _TIME_US),
                    dram_throughput_pct=value("dram_pct", _PERCENT),
                    dram_read_bytes=round(value("read", _BYTES)),
                    dram_write_bytes=round(value("write", _BYTES)),
                )
            )
        return out


PROFILER = NsightCompute()
