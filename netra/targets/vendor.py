"""What the GPU classes of one vendor share: the loader, the driver library, detection and the probes.

A vendor object (netra/targets/amd.py, netra/targets/nvidia.py) is named by the classes it makes
(`Target.vendor`); the registry's vendors are the vendors of its classes. It says:

- its name (the tables' `vendor`) and its loader's (the tables' `loader`, `Kernel.loader`), the loader
  module (netra.loaders.<loader>) and what the certify run calls its driver API (`runtime`);
- its driver library: the names in preference order, the vendor's own folders to look in, the install
  hint when it is missing;
- how this host's GPUs are found (`detect`, `sources`: every detection source, in the order asked),
  and how a device identity (a compute capability, a gfx target version) is named: by the registered
  class that declares it (`Target.identities`), else by the vendor's own convention;
- the driver version and clocks a certification run records;
- the developer tools `netra certify` runs besides its own judge and timing (`memory_checkers`,
  `profiler`): how each is found, run and read. A vendor without them (the default) gives none, and
  certification records them as unavailable, never as clean (docs/certify.md).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from netra.core import libraries


@dataclass(frozen=True)
class GPU:
    vendor: str  # the vendor's name
    gpu_class: str  # a registered class's name, or the vendor's name for a device no class claims
    name: str  # what the source calls it ("NVIDIA H200", a marketing name)
    index: int  # the source's own numbering (a KFD node id, a device ordinal)
    source: str  # one of the vendor's `sources`


@dataclass(frozen=True)
class Versions:
    """This host's driver and GPU runtime of one vendor, as a bug report gives them (None: not found),
    with one note per place looked at."""

    driver: str | None  # the kernel driver ("580.159.04")
    runtime: str | None  # the user-space runtime the vendor's loader uses ("CUDA 13.0", "ROCm 7.0.2")
    notes: tuple[str, ...] = ()


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """The first dotted number in a version string: 'CUDA 13.0' -> (13, 0); None when there is none."""
    import re

    m = re.search(r"\d+(?:\.\d+)*", text or "")
    return tuple(int(x) for x in m.group(0).split(".")) if m else None


@dataclass(frozen=True)
class DriverNeed:
    """The oldest host software that loads a class's code objects: what it is, its minimum version,
    which of the vendor's Versions it is held to, and where the number comes from."""

    what: str  # "NVIDIA driver", "ROCm"
    minimum: str | None  # None: no minimum known for the toolchain that built them
    of: str  # "driver" or "runtime": the Versions field compared
    why: str

    def met(self, versions: Versions) -> bool | None:
        """Whether this host's version is at least the minimum; None when either is unknown."""
        found, need = version_tuple(getattr(versions, self.of)), version_tuple(self.minimum)
        return None if found is None or need is None else found >= need

    def describe(self) -> str:
        return f"{self.what} >= {self.minimum}" if self.minimum else f"{self.what} (minimum unknown)"


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


class Vendor(ABC):
    name: str
    loader: str
    loader_module: str  # defines `loader_class`; imported only when a loader is opened
    loader_class: str
    runtime: str
    libraries: tuple[str, ...]
    sources: tuple[str, ...]
    install_hint: str

    def library_dirs(self) -> list[str]:
        """The vendor's own folders for its driver library, searched after LD_LIBRARY_PATH."""
        return []

    def find_library(self) -> Path | None:
        """The driver library's path, found by looking (nothing is loaded)."""
        return libraries.find(self.libraries, self.library_dirs())

    @abstractmethod
    def detect(self, sysfs_nodes: str | Path | None, *, tools: bool) -> tuple[list[GPU], list[str]]:
        """This host's GPUs of this vendor, and one note per source asked (a source that finds nothing
        or fails says so; nothing raises). `tools=False`: files only, no subprocess, no library
        loaded. `sysfs_nodes`: where a sysfs-based source reads (None: the system's)."""

    @abstractmethod
    def conventional_name(self, identity: Hashable) -> str | None:
        """The vendor's own name for a device identity no registered class claims (None: not one)."""

    def gpu_class(self, identity: Hashable) -> str | None:
        """The class of a device identity: the registered class that declares it, else the vendor's
        conventional name (a class this netra does not have: doctor reports it as not certified)."""
        from netra import targets

        for t in targets.every():
            if t.vendor is self and identity in t.identities:
                return t.name
        return self.conventional_name(identity)

    def driver(self) -> str:
        """The driver's version, as a certification run records it."""
        import platform

        return platform.release()

    def clocks(self) -> dict[str, int] | None:
        """The device's maximum clocks (MHz) when readable: stable facts of the part a run records."""
        return None

    def versions(self) -> Versions:
        """This host's driver and runtime versions (`netra env`, doctor), read from files where the
        system has them; nothing raises."""
        return Versions(None, None, (f"{self.name}: versions not readable",))

    def memory_checkers(self) -> tuple[MemoryChecker, ...]:
        """The memory checkers certification runs over every candidate (none by default)."""
        return ()

    def profiler(self) -> Profiler | None:
        """The profiler certification reads each candidate's DRAM throughput with (none by default)."""
        return None

    def open_loader(self) -> Any:
        """A new instance of the vendor's loader (RuntimeUnavailableError without its driver library)."""
        return getattr(importlib.import_module(self.loader_module), self.loader_class)()
