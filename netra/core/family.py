"""The record an op family is declared by, once: everything the pipeline used to restate is derived from it.

A family's record (netra/core/families/<op>.py) says what the family is: its contract parameters, its
tensors with dtypes and shapes (expressions of the parameters and the runtime values, netra.core.expr),
the scalars a call takes, which outputs may be written over which input, the kernel's arguments in ABI
order, and its launch model (netra.core.launch). From it come: the template manifests' [[args]] check
(netra.release.manifests), the table's dtypes, the torch schemas, fakes, output allocation and overlap
rules (netra.torch), and conformance's outputs and bytes moved (netra.certify). docs/authoring.md lists
the files a new family touches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from netra.core.launch import LaunchModel

# A tensor dtype -> (bytes per element, the kernel argument's pointer type in a template manifest).
DTYPES: dict[str, tuple[int, str]] = {
    "bf16": (2, "bf16*"),
    "fp8_e4m3fn": (1, "u8*"),
    "f32": (4, "f32*"),
    "i32": (4, "i32*"),
    "u32": (4, "u32*"),
    "u8": (1, "u8*"),
}


class Operand(NamedTuple):
    """A tensor the family reads or writes. `shape` holds one expression per dimension; a leading "rows"
    is the flattened leading dimensions of a torch call. `follows`: at the torch API the dtype is the
    named input's (a norm's output keeps x's dtype; the contract certifies `dtype`)."""

    name: str
    dtype: str
    shape: tuple[str, ...]
    follows: str = ""

    @property
    def rowwise(self) -> bool:
        return bool(self.shape) and self.shape[0] == "rows"

    def dims(self, env: dict[str, int]) -> tuple[int, ...]:
        from netra.core import expr  # at first use: the record is made at import, read later

        return tuple(expr.evaluate(d, env) for d in self.shape)

    def nbytes(self, env: dict[str, int]) -> int:
        return math.prod(self.dims(env)) * DTYPES[self.dtype][0]


class Scalar(NamedTuple):
    """A non-tensor argument of a call: a contract parameter (with its default) or a runtime value (eps)."""

    name: str
    kind: str  # "int" or "float", as a torch schema names it
    default: int | None = None
    param: bool = True  # a contract parameter; False: a runtime value the kernel reads (eps)


@dataclass(frozen=True)
class OpFamily:
    """One op family: its contract, tensors, scalars, aliasing, kernel arguments and launch."""

    name: str
    params: tuple[str, ...]  # contract parameters; each maps to the template constant params.upper()
    short: dict[str, str]  # parameter -> short tag used in artifact names
    inputs: tuple[Operand, ...]  # in the order a call takes them
    outputs: tuple[Operand, ...]  # in the order a call returns them
    scalars: tuple[Scalar, ...]  # after the tensors, in the order a call takes them
    args: tuple[str, ...]  # the kernel's arguments in ABI order (every template of the family takes them)
    launch: LaunchModel
    layout: str
    quant: str
    doc: str
    aliases: tuple[tuple[str, str], ...] = ()  # (output, input): the output may be the input itself
    compute: str = "f32"
    # Bytes a call must move of an operand that is not read whole (a routed MoE reads only the experts
    # its tokens hit): operand -> an expression of the parameters, the dispatch value and `derived`.
    reads: dict[str, str] = field(default_factory=dict)
    # Names such expressions read that a call's inputs decide (the experts hit), with the value bytes
    # moved assumes when the inputs are not at hand (the most the dispatch value allows).
    derived: dict[str, str] = field(default_factory=dict)
    operands: dict[str, Operand] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "operands", {o.name: o for o in (*self.inputs, *self.outputs)})

    @property
    def out_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

    @property
    def kernel_outputs(self) -> tuple[Operand, ...]:
        """The outputs in the kernel's ABI order (what a harness allocates, in order)."""
        return tuple(self.operands[a] for a in self.args if a in self.out_names)

    @property
    def dtypes(self) -> dict[str, str]:
        """The contract's dtypes as a certified table records them: every tensor, the float runtime
        values, and the compute precision."""
        out = {o.name: o.dtype for o in (*self.inputs, *self.outputs)}
        out |= {v.name: v.type for v in self.launch.values if not v.integral}
        return out | {"compute": self.compute}

    @property
    def dispatch(self) -> str:
        """The runtime value a call's size is (rows, or tokens for a routed MoE): what tables key on."""
        return self.launch.dispatch

    def env(self, params: dict[str, int], rows: int) -> dict[str, int]:
        """The names a shape reads: the parameters and the dispatch value (whatever the family calls it)."""
        return {**params, self.launch.dispatch: rows}

    def bytes_moved(self, params: dict[str, int], rows: int, given: dict[str, int] | None = None) -> int:
        """The fewest bytes a call must move: each input read once (only what `reads` says of an operand
        read in part), each output written once. `given`: the derived names (experts hit) of one call."""
        from netra.core import expr  # at first use: the record is made at import, read later

        env = self.env(params, rows)
        for name, default in self.derived.items():
            env[name] = (given or {}).get(name, expr.evaluate(default, env))
        return sum(
            expr.evaluate(self.reads[o.name], env) if o.name in self.reads else o.nbytes(env)
            for o in (*self.inputs, *self.outputs)
        )

    def kernel_arg(self, name: str) -> tuple[str, str | None]:
        """What a template manifest must declare for one kernel argument: (type, access); access is
        None for a by-value runtime value."""
        if name in self.operands:
            return DTYPES[self.operands[name].dtype][1], (
                "write_only" if name in self.out_names else "read_only"
            )
        space = next((w for w in self.launch.workspaces if w.name == name), None)
        if space is not None:
            return DTYPES[space.dtype][1], "read_write"
        value = next(v for v in self.launch.values if v.name == name)
        return value.type, None


class Chain(NamedTuple):
    """An operation served as a chain of families, each certified on its own (a routed MoE: gate/up,
    then down). Each stage's outputs named in `links` are the next stage's inputs of the same name,
    held in a workspace the caller never sees; a stage with `overlaps_previous` may start before the
    previous one ends (programmatic dependent launch) and waits for its data in the kernel. The chain
    is served only where every stage is; its contract is its stages' (they share their parameters)."""

    name: str
    stages: tuple[str, ...]  # family names, in launch order
    links: tuple[str, ...]  # tensors one stage writes and the next reads
    overlaps_previous: tuple[bool, ...]  # per stage; never the first
    inputs: tuple[str, ...]  # the call's tensors, in its order: every stage input but the links
    max_dispatch: int  # the most of the dispatch value (tokens) one call may carry: the contract's limit
    doc: str
