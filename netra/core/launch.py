"""The launch model an op family declares: runtime values, grids, workspaces, a chain of launches.

A contract is served by one launch or by a chain of them (a producer, then a reducer), each running its
own template's artifact. What a launch needs at call time is declared, not assumed:

- runtime values: named scalars the caller passes per call (rows or tokens, eps, counts, offsets),
  each with its kernarg type, packed into the kernargs by name;
- a grid of up to three axes, each an expression (netra.core.expr) of contract parameters, runtime
  values and the tactic's launch constants (rows_per_block, grid_y): "cdiv(rows, rows_per_block)",
  "min(experts, tokens * topk)", "1";
- workspaces: scratch a chain's launches share (one step writes, a later one reads), each sized by an
  expression, carved in order from one buffer that the caller or the runtime allocates;
- the dispatch key: the runtime value whose size picks a tactic (rows today, tokens for a routed MoE).

The existing families are one launch over rows, a grid of (cdiv(rows, rows_per_block), grid_y, 1),
with no workspace; the certified tables keep their JSON and are read into this model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from netra.core import expr
from netra.errors import LaunchError

GRID_AXIS_MAX = (2**31 - 1, 65535, 65535)  # the smaller of the CUDA and HIP limits per axis
WORKSPACE_ALIGN = 256  # every workspace starts at a multiple of this many bytes
VALUE_TYPES = ("u32", "i32", "u64", "i64", "f32")


@dataclass(frozen=True)
class Value:
    """A runtime value: a scalar given per call and packed into the kernargs under its name."""

    name: str
    type: str  # a kernarg by_value type: u32, i32, u64, i64, f32
    doc: str = ""

    @property
    def integral(self) -> bool:
        return self.type != "f32"


@dataclass(frozen=True)
class Workspace:
    """Scratch a chain's launches share, `bytes` an expression of parameters and runtime values."""

    name: str
    bytes: str


@dataclass(frozen=True)
class Step:
    """One launch of a chain: which template runs, over which grid, with which arguments (ABI order:
    the family's tensors, its workspaces and its runtime values, by name)."""

    template: str
    args: tuple[str, ...]
    grid: tuple[str, str, str] = ("cdiv(rows, rows_per_block)", "grid_y", "1")


@dataclass(frozen=True)
class Plan:
    """A chain made concrete for one call: each step's grid, each workspace's offset and size, the total
    workspace bytes to allocate."""

    grids: tuple[tuple[int, int, int], ...]
    offsets: dict[str, int]
    sizes: dict[str, int]
    workspace_bytes: int


@dataclass(frozen=True)
class LaunchModel:
    """How a family is launched: its runtime values, its chain of steps, its workspaces, its dispatch key."""

    values: tuple[Value, ...]
    steps: tuple[Step, ...]
    workspaces: tuple[Workspace, ...] = ()
    dispatch: str = "rows"
    value_names: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "value_names", frozenset(v.name for v in self.values))
        if self.dispatch not in self.value_names:
            raise LaunchError(
                f"launch model: dispatch key {self.dispatch!r} is not a runtime value",
                f"dispatch on one of {', '.join(sorted(self.value_names))}",
            )
        for v in self.values:
            if v.type not in VALUE_TYPES:
                raise LaunchError(f"runtime value {v.name}: type {v.type!r}", f"use one of {VALUE_TYPES}")
        if not self.steps:
            raise LaunchError("launch model: no steps", "declare at least one launch")
        known = {w.name for w in self.workspaces}
        used = {a for s in self.steps for a in s.args}
        unused = sorted(known - used)
        if unused:
            raise LaunchError(f"launch model: workspace {unused[0]} is no step's argument", "remove it")

    def names(self) -> frozenset[str]:
        """Every name the model's expressions read."""
        out: set[str] = set()
        for s in self.steps:
            for a in s.grid:
                out |= expr.names(a)
        for w in self.workspaces:
            out |= expr.names(w.bytes)
        return frozenset(out)

    def runtime(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The runtime values of one call, checked: every declared value, nothing else, integers where
        integral and never negative."""
        extra = sorted(set(given) - self.value_names)
        missing = [v.name for v in self.values if v.name not in given]
        if extra or missing:
            raise LaunchError(
                "runtime values do not match the family's launch model"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unknown {', '.join(extra)}" if extra else ""),
                f"pass exactly: {', '.join(v.name for v in self.values)}",
            )
        for v in self.values:
            x = given[v.name]
            if v.integral and (isinstance(x, bool) or not isinstance(x, int) or x < 0):
                raise LaunchError(
                    f"runtime value {v.name} must be a non-negative integer, got {x!r}", f"pass {v.name} >= 0"
                )
        return dict(given)

    def plan(self, env: Mapping[str, Any]) -> Plan:
        """Grids and workspace layout for `env`: contract parameters, tactic launch constants and this
        call's runtime values (floats such as eps are not read by any size)."""
        ints = {k: v for k, v in env.items() if isinstance(v, int) and not isinstance(v, bool)}
        grids = []
        for s in self.steps:
            axes = tuple(expr.evaluate(a, ints) for a in s.grid)
            for i, (n, hi) in enumerate(zip(axes, GRID_AXIS_MAX, strict=True)):
                if not 0 <= n <= hi:
                    raise LaunchError(
                        f"{s.template}: grid axis {i} = {s.grid[i]} = {n} is outside [0, {hi}]",
                        "split the work or pick a tactic with more work per block",
                    )
            grids.append((axes[0], axes[1], axes[2]))
        offsets: dict[str, int] = {}
        sizes: dict[str, int] = {}
        at = 0
        for w in self.workspaces:
            n = expr.evaluate(w.bytes, ints)
            if n < 0:
                raise LaunchError(
                    f"workspace {w.name}: {w.bytes} = {n} bytes", "check the record's expression"
                )
            at = -(-at // WORKSPACE_ALIGN) * WORKSPACE_ALIGN
            offsets[w.name], sizes[w.name] = at, n
            at += n
        return Plan(tuple(grids), offsets, sizes, at)

    def step_args(
        self, step: int, plan: Plan, tensors: Mapping[str, Any], runtime: Mapping[str, Any], base: int = 0
    ) -> dict[str, Any]:
        """The kernarg values of one step by name: tensors and runtime values as given, each workspace
        as `base` (the start of the one workspace buffer) plus its offset in `plan`."""
        s = self.steps[step]
        out: dict[str, Any] = {}
        for a in s.args:
            if a in plan.offsets:
                out[a] = base + plan.offsets[a]
            elif a in self.value_names:
                out[a] = runtime[a]
            elif a in tensors:
                out[a] = tensors[a]
            else:
                raise LaunchError(
                    f"{s.template}: no value for argument {a!r}", "pass every tensor the family names"
                )
        return out


def rows_launch(args: tuple[str, ...], template: str, *, eps: bool) -> LaunchModel:
    """The one-launch-over-rows model of the families that exist today (rows, and eps for the norms)."""
    values: tuple[Value, ...] = (Value("rows", "u32", "rows of the input (leading dimensions flattened)"),)
    if eps:
        values += (Value("eps", "f32", "the norm's epsilon"),)
    return LaunchModel(values=values, steps=(Step(template, args),))
