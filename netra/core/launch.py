"""The launch model an op family declares: runtime values, grids, workspaces, a chain of launches.

A contract is served by one launch or by a chain of them (a producer, then a reducer), each running its
own template's artifact. What a launch needs at call time is declared, not assumed:

- runtime values: named scalars the caller passes per call (rows or tokens, eps, counts, offsets),
  each with its kernarg type, packed into the kernargs by name;
- a grid of up to three axes, each an expression (netra.core.expr) of contract parameters, runtime
  values and the tactic's constants (rows_per_block, grid_y, grid_experts): "cdiv(rows, rows_per_block)",
  "min(experts, tokens * topk, grid_experts)", "1";
- workspaces: scratch a chain's launches share (one step writes, a later one reads), each sized by an
  expression, carved in order from one buffer that the caller or the runtime allocates;
- the dispatch key: the runtime value whose size picks a tactic (rows today, tokens for a routed MoE);
- per step, its dynamic shared memory (an expression) and whether it may overlap the previous step
  (programmatic dependent launch); per workspace, whether it must start zeroed (self-resetting counters).

Names an expression may read besides the contract's parameters and the runtime values are the tactic's
launch constants (rows_per_block, grid_y) and its template's tactic constants in lower case (a routed
MoE's grid_experts: "min(experts, tokens * topk, grid_experts)"), bound when the table is written
(netra.core.types.ArtifactSpec.launch_env): whatever the caller puts in the mapping a plan is made from.

The existing families are one launch over rows, a grid of (cdiv(rows, rows_per_block), grid_y, 1),
with no workspace; the certified tables keep their JSON and are read into this model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from netra.errors import LaunchError

# The small records are NamedTuples, not dataclasses: a family's record is made when netra.core.ops is
# imported (on every first lookup), and a NamedTuple class costs a tenth of a dataclass to create.

GRID_AXIS_MAX = (2**31 - 1, 65535, 65535)  # the smaller of the CUDA and HIP limits per axis
WORKSPACE_ALIGN = 256  # every workspace starts at a multiple of this many bytes
VALUE_TYPES = ("u32", "i32", "u64", "i64", "f32")


class Value(NamedTuple):
    """A runtime value: a scalar given per call and packed into the kernargs under its name."""

    name: str
    type: str  # a kernarg by_value type: u32, i32, u64, i64, f32
    doc: str = ""

    @property
    def integral(self) -> bool:
        return self.type != "f32"


class Workspace(NamedTuple):
    """Scratch a chain's launches share, `bytes` an expression of parameters and runtime values.
    `zeroed`: must hold zeros when the chain first runs (counters that the kernels reset themselves
    after use): the caller or the runtime clears it once, when it is allocated, not per call."""

    name: str
    bytes: str
    zeroed: bool = False
    dtype: str = "u8"  # what the kernel holds in it (netra.core.family.DTYPES): its pointer type in a
    # template manifest's [[args]] (access read_write)


class Step(NamedTuple):
    """One launch of a chain: which template runs, over which grid, with which arguments (ABI order:
    the family's tensors, its workspaces and its runtime values, by name)."""

    template: str
    args: tuple[str, ...]
    grid: tuple[str, str, str] = ("cdiv(rows, rows_per_block)", "grid_y", "1")
    shared: str = "0"  # dynamic shared memory bytes (an expression); above the default, the loader sets
    # the function's maximum dynamic shared memory attribute before the first launch
    overlaps_previous: bool = False  # may start before the previous step ends and wait for its data in
    # the kernel (CUDA's programmatic stream serialization, griddepcontrol.wait); never the first step


class Plan(NamedTuple):
    """A chain made concrete for one call: each step's grid and dynamic shared memory, each workspace's
    offset and size, the total workspace bytes to allocate, and the workspaces to zero at allocation."""

    grids: tuple[tuple[int, int, int], ...]
    offsets: dict[str, int]
    sizes: dict[str, int]
    workspace_bytes: int
    shared: tuple[int, ...] = ()
    zeroed: tuple[str, ...] = ()


class LaunchModel:
    """How a family is launched: its runtime values, its chain of steps, its workspaces, its dispatch key.

    A plain class with __slots__ (made once per family when netra.core.ops is imported), checked when
    made: the dispatch key is a runtime value, every value's type a kernarg type, every workspace some
    step's argument."""

    __slots__ = ("dispatch", "steps", "value_names", "values", "workspaces")

    def __init__(
        self,
        values: tuple[Value, ...],
        steps: tuple[Step, ...],
        workspaces: tuple[Workspace, ...] = (),
        dispatch: str = "rows",
    ) -> None:
        self.values, self.steps, self.workspaces, self.dispatch = values, steps, workspaces, dispatch
        self.value_names = frozenset(v.name for v in values)
        if dispatch not in self.value_names:
            raise LaunchError(
                f"launch model: dispatch key {dispatch!r} is not a runtime value",
                f"dispatch on one of {', '.join(sorted(self.value_names))}",
            )
        for v in values:
            if v.type not in VALUE_TYPES:
                raise LaunchError(f"runtime value {v.name}: type {v.type!r}", f"use one of {VALUE_TYPES}")
        if not steps:
            raise LaunchError("launch model: no steps", "declare at least one launch")
        if steps[0].overlaps_previous:
            raise LaunchError(
                f"{steps[0].template}: the first step has no previous one to overlap", "set it False"
            )
        unused = sorted({w.name for w in workspaces} - {a for s in steps for a in s.args})
        if unused:
            raise LaunchError(f"launch model: workspace {unused[0]} is no step's argument", "remove it")

    def __repr__(self) -> str:
        return f"LaunchModel({self.values!r}, {self.steps!r}, {self.workspaces!r}, {self.dispatch!r})"

    def names(self) -> frozenset[str]:
        """Every name the model's expressions read."""
        from netra.core import expr  # at first use: the record is made at import, read later

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
        from netra.core import expr  # at first use: the record is made at import, read later

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
        shared = tuple(expr.evaluate(s.shared, ints) for s in self.steps)
        return self.workspace(env)._replace(grids=tuple(grids), shared=shared)

    def workspace(self, env: Mapping[str, Any]) -> Plan:
        """The workspaces' layout alone (no grids: empty): what allocating a chain's scratch needs, from
        the contract and the runtime values only, where a grid may also read a tactic's constants (a
        routed MoE's grid_experts) that the caller of a chain of several tactics does not hold."""
        from netra.core import expr  # at first use: the record is made at import, read later

        ints = {k: v for k, v in env.items() if isinstance(v, int) and not isinstance(v, bool)}
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
        zeroed = tuple(w.name for w in self.workspaces if w.zeroed)
        return Plan((), offsets, sizes, at, (), zeroed)

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
