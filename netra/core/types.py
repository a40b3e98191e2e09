"""The types every stage of the pipeline shares: templates, tactics, artifact specs, toolchain identity.

They are plain records. Whatever only a GPU class knows (a code object's file suffix, the constants a
tactic defines, the rows a block covers) is computed where a spec is made (netra.release.manifests)
and stored in it, so that this module, and everything that reads these types, imports nothing above
netra.core. Op families and contracts are in netra.core.ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from netra.core import expr
from netra.core.ops import FAMILIES, contract_key

if TYPE_CHECKING:
    from collections.abc import Callable

# Ordered: the runtime serves a candidate only when its maturity is at or above the caller's policy.
MATURITIES = ("rejected", "experiment", "verified", "accepted")
# How a class's tables are certified: by the static gate only, or by `netra certify` on its hardware.
CERTIFICATIONS = ("static", "hardware")


@dataclass(frozen=True)
class Range:
    """Which integers a constant accepts: bounded by min/max (and a step), or an explicit list."""

    min: int | None = None
    max: int | None = None
    multiple_of: int | None = None
    values: tuple[int, ...] | None = None
    note: str = ""

    def admits(self, v: int) -> bool:
        if self.values is not None and v not in self.values:
            return False
        if self.min is not None and v < self.min:
            return False
        if self.max is not None and v > self.max:
            return False
        return not (self.multiple_of and v % self.multiple_of)

    def __str__(self) -> str:
        if self.values is not None:
            return "one of " + ", ".join(map(str, self.values))
        step = f"a multiple of {self.multiple_of} " if self.multiple_of else ""
        return f"{step}in [{self.min}, {self.max}]"


@dataclass(frozen=True)
class Arg:
    name: str
    offset: int
    size: int
    value_kind: str
    type: str
    address_space: str | None = None
    access: str | None = None


@dataclass(frozen=True)
class Requirement:
    """A condition a template puts on a (contract, tactic) pair, over the compile-time constants its
    source sees (contract and tactic constants, NETRA_BLOCK): the pair is built only where it holds.
    It mirrors a static_assert of the source, which stays (netra.core.expr writes the condition)."""

    holds: str  # "<expression> <comparison> <expression>"
    why: str  # what the source needs, in words


@dataclass(frozen=True)
class NotAdmitted:
    """A (contract, tactic) pair a template does not admit: the first of its requirements that fails."""

    target: str
    key: str  # the contract key
    tactic: str
    template: str  # the template manifest's path, which declares the requirement
    requirement: Requirement

    def __str__(self) -> str:
        r = self.requirement
        return f"{self.target} tactic {self.tactic} fails {r.holds!r} ({r.why}; {self.template})"


@dataclass(frozen=True)
class Template:
    name: str
    target: str
    op: str
    source: str  # relative to the project root
    constants: dict[str, Range]
    args: tuple[Arg, ...]
    budget: dict[str, int] = field(default_factory=dict)  # the class's own keys (registers, LDS, ...)
    tactic_constants: dict[str, Range] = field(default_factory=dict)
    requires: tuple[Requirement, ...] = ()
    manifest: str = ""  # the template manifest's path, relative to the project root
    dynamic_shared: str = "0"  # dynamic shared memory bytes a launch gives, an expression of the constants
    # significant bits the tensor core keeps of each instruction's partial sum (what the family's judge
    # models), an expression of the constants: 24 (fp32) unless a tactic accumulates more coarsely
    accumulator_bits: str = "24"

    def refusal(self, definitions: dict[str, int]) -> Requirement | None:
        """The first requirement the instantiation with these compile-time constants fails, if any."""
        return next((r for r in self.requires if not expr.holds(r.holds, definitions)), None)

    @property
    def kernarg_bytes(self) -> int:
        return max((a.offset + a.size for a in self.args), default=0)


@dataclass(frozen=True)
class Tactic:
    op: str
    name: str
    template: str
    block: int
    maturity: str
    why: str
    target: str = ""
    rows_per_block: int | None = None  # None: the class derives it from block and the template
    grid_y: int = 1
    constants: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ArtifactSpec:
    """One code object a release must contain: a template specialized for one contract and one tactic.

    `definitions`, `rows_per_block` and `file` are what the class makes of the template and the tactic
    (netra.release.manifests asks it once, when the spec is made)."""

    name: str
    target: str
    template: Template
    tactic: Tactic
    contract: dict[str, int]
    definitions: dict[str, int]  # the compile-time constants: contract, launch geometry, tactic's own
    rows_per_block: int
    file: str  # where the code object lives, relative to a build folder or the packaged data
    used_by: tuple[str, ...] = field(default=(), compare=False)

    @property
    def op(self) -> str:
        return self.template.op

    @property
    def symbol(self) -> str:
        return self.name

    @cached_property  # read by the static gate, the table and its checks: evaluated once
    def dynamic_shared(self) -> int:
        """Dynamic shared memory bytes every launch of this artifact gives (its template's expression of
        the instantiation's constants; 0 for a template that declares none)."""
        return expr.evaluate(self.template.dynamic_shared, self.definitions)

    @cached_property
    def accumulator_bits(self) -> int:
        """Significant bits its tensor core keeps of each partial sum (its template's expression)."""
        return expr.evaluate(self.template.accumulator_bits, self.definitions)

    @property
    def key(self) -> str:
        return contract_key(self.op, self.contract)

    @property
    def launch_env(self) -> dict[str, int]:
        """What the family record's grid reads besides the dispatch value: the contract, the tactic's
        launch constants and its template's tactic constants in lower case (a routed MoE's grid_experts)."""
        return {
            **{k.lower(): v for k, v in self.tactic.constants.items()},
            **self.contract,
            "rows_per_block": self.rows_per_block,
            "grid_y": self.tactic.grid_y,
        }


@dataclass(frozen=True)
class ModelFallback:
    """A documented gap: a model needs an op Netra does not serve, and its manifest says why. With a
    gpu_class, the gap is one contract Netra serves elsewhere but does not build for that class."""

    model: str
    op: str
    use: str
    reason: str
    gpu_class: str = ""  # "" : the op is served nowhere; else the one class the contract is not built for
    contract: str = ""  # the contract key, with gpu_class only

    def covers(self, op: str, key: str) -> bool:
        """Whether this gap is the one a request for contract `key` of `op` falls into."""
        return self.op == op and self.contract in ("", key)


@dataclass(frozen=True)
class Toolchain:
    """What built a class's code objects, as the lock records it: flavour and version. `label` is how
    the class names the flavour in messages ("nvcc", "llvm LLVM"); it is not part of the identity."""

    flavour: str  # one of the class's flavours (netra.targets: Target.flavours)
    version: str  # e.g. "22.1.8", "13.0.88"
    label: str = field(default="", compare=False)
    # Without a label: gives it when a message needs it (a lock names every class; reading one must not
    # import every class's module to label toolchains no message may print).
    namer: Callable[[], str] | None = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        label = self.label or (self.namer() if self.namer is not None else "")
        return f"{label or self.flavour} {self.version}"


def artifact_name(op: str, contract: dict[str, int], tactic: str) -> str:
    """The artifact's global name: netra_<op>_<short param><value>..._<tactic>."""
    fam = FAMILIES[op]
    return "_".join(["netra", op, *(f"{fam.short[p]}{contract[p]}" for p in fam.params), tactic])


def artifact_file(target: str, name: str, suffix: str) -> str:
    """Where a code object lives, relative to a build folder or the packaged data."""
    return f"{target}/{name}{suffix}"
