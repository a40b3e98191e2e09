"""GPU classes (targets): the unit of extension. Everything specific to one class lives in its module.

The pipeline (catalog, lock, build, wheel gate, tables, runtime, doctor, certify) is written once
against `Target`; a class supplies what only it knows:

- its toolchain: discovery in a documented order, a proof that it can target the class, its identity
  as the lock records it (`discover`);
- how a template source becomes a code object (`instantiation`, `compile`) and the budget keys its
  template manifests declare (`budget`);
- where the machine code lives in a code object (`text_sha256`), what a kernel launches with
  (`launch_digest`: descriptor and metadata, or the cubin's kernel attributes), and the static facts
  and checks of its code objects (`examine`, `checks`);
- its vendor, loader (`netra.hip`, `netra.cuda`) and file suffix.

Target modules import their heavy dependencies (pyelftools, msgpack, subprocesses) inside functions,
so the runtime can ask a target for `text_sha256` without paying for the build machinery.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from netra.catalog import ArtifactSpec, Tactic, Template
    from netra.lock import Toolchain
    from netra.schema import Field

# Module per class, imported on first use. Adding a class: a module here, kernels/<class>/,
# manifests/<class>/tactics.toml (docs/authoring.md).
MODULES = {"gfx950": "netra.targets.gfx950", "sm_90": "netra.targets.sm_90"}


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
    name: str
    vendor: str
    loader: str
    suffix: str
    checks: tuple[str, ...]
    budget: dict[str, Field]  # template-manifest keys of this class (registers, LDS...), as schema fields
    flavours: tuple[str, ...]  # toolchain flavours the lock may record for this class

    def discover(self, env: dict[str, str] | None = None) -> Tools: ...

    def rows_per_block(self, template: Template, tactic: Tactic) -> int: ...

    def instantiation(self, spec: ArtifactSpec) -> str: ...

    def compile(self, spec: ArtifactSpec, tools: Tools, root: Path, work: Path, out: Path) -> Path: ...

    def examine(self, built: list[tuple[ArtifactSpec, Path]], tools: Tools, jobs: int) -> list[Examined]: ...

    def text_sha256(self, data: bytes, symbol: str, name: str) -> str: ...

    def launch_digest(self, data: bytes, symbol: str, name: str) -> str: ...

    def first_difference(self, tools: Tools, ours: Path, theirs: bytes, spec: ArtifactSpec) -> str: ...


_loaded: dict[str, Any] = {}


def names() -> tuple[str, ...]:
    return tuple(sorted(MODULES))


def get(name: str) -> Target:
    """The class's Target; KeyError-free: an unknown class is reported by the caller with context."""
    t = _loaded.get(name)
    if t is None:
        t = _loaded[name] = importlib.import_module(MODULES[name]).TARGET
    return t


def known(name: str) -> bool:
    return name in MODULES
