"""The developer tools a vendor offers certification: memory checkers and a profiler (vendor.py's
`memory_checkers`, `profiler`), and what they report.

Apart from vendor.py, which every lookup imports, so that serving never builds these types: only
`netra certify` and the vendors' tool modules (netra/targets/nvidia_tools.py) use them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Tool:
    """A developer tool found on this host, as certification records it."""

    name: str  # the program ("compute-sanitizer")
    path: str
    version: str  # as the tool prints it ("2025.3.1.0")


@dataclass(frozen=True)
class Report:
    """One report a memory checker printed: its first line and the lines that belong to it."""

    headline: str
    lines: tuple[str, ...]  # the headline first, then its detail lines

    def summary(self) -> str:
        """One line: the headline and where (what `evidence.hardware.sanitizer.checks[].first` records)."""
        where = [x for x in self.lines[1:] if x.startswith(("at ", "by thread", "and "))][:2]
        return "; ".join([self.headline, *where])[:300]


@dataclass(frozen=True)
class CheckerOutput:
    """A memory checker's output, read: its reports and the program's own lines in the order printed,
    the number of reports the tool's own summary line says it printed (None when it printed none: it
    did not finish), how many of them it counts as errors and as warnings (errors decide its exit
    status; warnings may), and its informational lines."""

    events: tuple[Report | str, ...]  # a str is a line the program printed (not the tool's)
    summary: int | None
    notes: tuple[str, ...]
    errors: int = 0
    warnings: int = 0


class MemoryChecker(ABC):
    """One memory checker (a tool and a mode of it) that runs a program and reports what it finds.

    `canary` names the deliberately bad launch it must report, so certify can prove on this host, before
    trusting a clean result, that the tool checks kernels at all: "overrun" (a launch with more rows
    than its buffers hold), "uninitialized" (an input never written), or None (no such launch can be
    made from the class's own kernels)."""

    check: str  # the evidence's `check` ("memcheck")
    tool: str  # the program ("compute-sanitizer")
    install_hint: str  # how to get the tool when find() finds nothing
    canary: str | None = None

    @abstractmethod
    def find(self) -> Path | None:
        """The tool's executable on this host, None when it is not found."""

    @abstractmethod
    def searched(self) -> list[str]:
        """Where find() looks, in order (for the message when it finds nothing)."""

    @abstractmethod
    def version(self, exe: Path) -> str:
        """The version the tool reports (raises NetraError when it cannot say)."""

    @abstractmethod
    def argv(self, exe: Path, program: Sequence[str], *, error_exitcode: int, print_limit: int) -> list[str]:
        """The command that runs `program` under the checker: reports on stdout, exit status
        `error_exitcode` when it reported anything, at most `print_limit` reports printed."""

    @abstractmethod
    def read(self, text: str) -> CheckerOutput:
        """The checker's stdout, read into reports, program lines and its summary."""


@dataclass(frozen=True)
class Profile:
    """One profiled kernel launch: what the evidence's `profile` records."""

    kernel: str  # the kernel's symbol
    duration_us: float
    dram_throughput_pct: float
    dram_read_bytes: int
    dram_write_bytes: int


class Profiler(ABC):
    """A profiler that reads the hardware counters of each launch of a program."""

    tool: str
    install_hint: str

    @abstractmethod
    def find(self) -> Path | None: ...

    @abstractmethod
    def searched(self) -> list[str]: ...

    @abstractmethod
    def version(self, exe: Path) -> str: ...

    @abstractmethod
    def argv(self, exe: Path, program: Sequence[str], *, symbols: Sequence[str], report: Path) -> list[str]:
        """The command that profiles every launch of these kernels by `program` into `report`."""

    @abstractmethod
    def export_argv(self, exe: Path, report: Path) -> list[str]:
        """The command that prints the report's per-launch counters (what `read` parses)."""

    @abstractmethod
    def read(self, text: str) -> list[Profile]:
        """export_argv's output: one Profile per profiled launch, in launch order."""
