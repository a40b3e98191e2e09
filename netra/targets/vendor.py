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
  `profiler`, of the types in netra/targets/devtools.py): how each is found, run and read. A vendor without them (the default) gives none, and
  certification records them as unavailable, never as clean (docs/certify.md).
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from netra.targets.devtools import MemoryChecker, Profiler
    from netra.targets.host import GPU, Versions


class Vendor(ABC):
    name: str
    loader: str
    loader_module: str  # defines `loader_class`; imported only when a loader is opened
    loader_class: str
    runtime: str
    libraries: tuple[str, ...]
    sources: tuple[str, ...]
    install_hint: str
    _shared: Any = None  # open_loader(shared=True) of a loader module without its own shared()

    def library_dirs(self) -> list[str]:
        """The vendor's own folders for its driver library, searched after LD_LIBRARY_PATH."""
        return []

    def find_library(self) -> Path | None:
        """The driver library's path, found by looking (nothing is loaded)."""
        from netra.core import libraries  # on a host that loads kernels; a lookup needs no library

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
        from netra.targets.host import Versions

        return Versions(None, None, (f"{self.name}: versions not readable",))

    def memory_checkers(self) -> tuple[MemoryChecker, ...]:
        """The memory checkers certification runs over every candidate (none by default)."""
        return ()

    def profiler(self) -> Profiler | None:
        """The profiler certification reads each candidate's DRAM throughput with (none by default)."""
        return None

    def open_loader(self, *, shared: bool = False) -> Any:
        """A new instance of the vendor's loader (RuntimeUnavailableError without its driver library);
        `shared`: the process's one instance instead, so that modules load once per process whoever
        launches (the loader module's `shared()` where it has one)."""
        module = importlib.import_module(self.loader_module)
        if shared:
            one = getattr(module, "shared", None)
            if one is not None:
                return one()
            if self._shared is None:
                self._shared = getattr(module, self.loader_class)()
            return self._shared
        return getattr(module, self.loader_class)()
