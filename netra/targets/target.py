"""What a GPU class is: the Target protocol, and what its methods return.

The pipeline (manifests, lock, build, wheel gate, tables, runtime, doctor, certify) is written once
against `Target`; a class supplies what only it knows, in netra/targets/<class>/:

- who makes it: its vendor (netra.targets.vendor: loader, driver library, detection, probes) and which
  of the vendor's device identities are this class (`identities`);
- its toolchain: discovery in a documented order, a proof that it can target the class, its identity
  as the lock records it (`discover`), the flavours it may be and how each is named (`flavours`), and
  the oldest host driver or runtime that loads what that toolchain built (`driver_need`);
- its template manifests' budget keys (`budget`), where its template sources live (`sources`), the
  rules a tactic must follow (`tactic_problem`), what a tactic defines (`tactic_defines`,
  `rows_per_block`);
- how a template source becomes a code object (`instantiation`, `compile`, and what decides it besides
  the sources: `recipe`) and its file suffix;
- where the machine code lives in a code object (`text_sha256`), what a kernel launches with
  (`launch_digest`), and the static facts and checks of its code objects (`examine`, `checks`).

A class module imports only netra.core and netra.targets at module level, and its build machinery
(compilers, checks) inside the methods that use it, so the runtime can ask a class for `text_sha256`
without paying for the build.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from netra.core.schema import Field
    from netra.core.types import ArtifactSpec, Tactic, Template, Toolchain
    from netra.targets.host import DriverNeed
    from netra.targets.vendor import Vendor


@dataclass(frozen=True)
class Tools:
    """A proven toolchain for one class: what the lock records (identity) and how to run it."""

    target: str
    identity: Toolchain
    paths: dict[str, str]  # tool name -> absolute path
    origin: str  # where it was found, for messages only (never written into anything built)
    env: dict[str, str] = field(default_factory=dict)  # extra environment the tools need (PATH)

    def describe(self) -> str:
        return f"{self.identity} ({self.origin})"

    def __getitem__(self, tool: str) -> str:
        return self.paths[tool]


@dataclass(frozen=True)
class Recipe:
    """What decides a code object besides its sources (netra.release.compilecache keys on it): the exact
    flags of every tool the compile runs, and the binaries whose bytes decide the output (name -> path);
    and the name of the instantiation file the compile writes into its work folder (a cache hit writes
    it too, so `netra build --keep` keeps the same files either way)."""

    flags: tuple[str, ...]
    binaries: dict[str, str]
    source: str


@dataclass(frozen=True)
class Problem:
    """One static check a code object fails."""

    check: str
    detail: str


@dataclass
class Examined:
    """What the static gate learned about one built code object."""

    spec: ArtifactSpec
    path: Path
    text_sha256: str
    launch_sha256: str
    code_sha256: str
    symbols: tuple[str, ...]
    kernarg_bytes: int
    lds_bytes: int
    max_threads: int
    facts: dict[str, int]
    problems: list[Problem]


class Target(Protocol):
    @property
    def name(self) -> str:
        """The class's name: kernels/<name>/, manifests/<name>/, release/tables/<name>.json."""

    @property
    def vendor(self) -> Vendor: ...

    @property
    def identities(self) -> tuple[Hashable, ...]:
        """The vendor's device identities that are this class (Vendor.gpu_class reads them)."""

    @property
    def suffix(self) -> str:
        """A code object's file suffix (".cubin")."""

    @property
    def checks(self) -> tuple[str, ...]:
        """The names of the static checks every code object passes (recorded as table evidence)."""

    @property
    def budget(self) -> Mapping[str, Field]:
        """The class's keys of a template manifest (registers, LDS, ...), as schema fields."""

    @property
    def flavours(self) -> Mapping[str, str]:
        """Toolchain flavours the lock may record for this class -> how messages name each."""

    @property
    def sources(self) -> tuple[str, ...]:
        """Folders (relative to the root, under kernels/) a template manifest's `source` is looked up in,
        in order: the class's own first, then any folder it shares with other classes."""

    @property
    def provision(self) -> tuple[str, str]:
        """How tools/ensure-toolchain installs the toolchain when `discover` finds none: ("apt", the Debian
        packages, as root) or ("pip-pinned", the name prefix of the hash-pinned requirements/build.txt
        entries to install into the Python environment)."""

    @property
    def toolchain_package(self) -> str | None:
        """For a "pip-pinned" toolchain, the pinned package that is the toolchain itself, whose version is
        the toolchain's (sm_90: nvidia-cuda-nvcc); None otherwise. `netra lock` records its pins
        (netra.release.requirements) and the SBOM names the toolchain by it."""

    def discover(self, env: dict[str, str] | None = None) -> Tools: ...

    def driver_need(self, toolchain: Toolchain) -> DriverNeed:
        """The oldest host driver or runtime that loads the code objects `toolchain` built for this class
        (doctor and `netra env` hold each GPU's host to it; docs/doctor.md)."""

    def tactic_problem(self, template: Template, tactic: Tactic) -> str | None:
        """Why this tactic cannot launch this template on this class, or None."""

    def rows_per_block(self, template: Template, tactic: Tactic) -> int: ...

    def tactic_defines(self, tactic: Tactic) -> dict[str, int]:
        """The compile-time constants a tactic adds to the contract's and NETRA_BLOCK."""

    def instantiation(self, spec: ArtifactSpec) -> str: ...

    def compile(self, spec: ArtifactSpec, tools: Tools, root: Path, work: Path, out: Path) -> Path: ...

    def recipe(self, spec: ArtifactSpec, tools: Tools) -> Recipe:
        """The flags and binaries `compile` uses for `spec` (the compile cache's key holds them)."""

    def examine(self, built: list[tuple[ArtifactSpec, Path]], tools: Tools, jobs: int) -> list[Examined]: ...

    def text_sha256(self, data: bytes, symbol: str, name: str) -> str: ...

    def launch_digest(self, data: bytes, symbol: str, name: str) -> str: ...

    def first_difference(self, tools: Tools, ours: Path, theirs: bytes, spec: ArtifactSpec) -> str: ...
