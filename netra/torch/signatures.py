"""The torch operator schemas of a family, derived from its record (netra/core/families/<op>.py).

Three operators per family: the functional one (new outputs, in the record's output order), `<op>_out`
(the caller owns the outputs, passed first and declared written: Tensor(a!), ...; returns nothing, so
torch.compile functionalizes it and inductor writes the buffers in place), and, where the record lets
an output be written over an input, the in-place `<op>_` (that input declared written; the other
outputs returned). No torch import here: the strings are plain data, tested against the schemas the
operators had when they were written by hand.
"""

from __future__ import annotations

from netra.core.family import OpFamily

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _arguments(fam: OpFamily, written: str = "") -> list[str]:
    out = [f"Tensor(a!) {o.name}" if o.name == written else f"Tensor {o.name}" for o in fam.inputs]
    for s in fam.scalars:
        out.append(f"{s.kind} {s.name}" + ("" if s.default is None else f"={s.default}"))
    return out


def _returns(n: int) -> str:
    return "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")"


def functional(fam: OpFamily) -> str:
    """`<op>(inputs, scalars) -> outputs`."""
    return f"{fam.name}({', '.join(_arguments(fam))}) -> {_returns(len(fam.outputs))}"


def out(fam: OpFamily) -> str:
    """`<op>_out(Tensor(a!) out0, ..., inputs, scalars) -> ()`."""
    outs = [f"Tensor({_LETTERS[i]}!) {o.name}" for i, o in enumerate(fam.outputs)]
    return f"{fam.name}_out({', '.join(outs + _arguments(fam))}) -> ()"


def in_place(fam: OpFamily) -> str | None:
    """`<op>_(..., Tensor(a!) input, ...) -> the other outputs`, for a family whose record lets an output
    be its input (None otherwise)."""
    if not fam.aliases:
        return None
    written = fam.aliases[0][1]
    rest = len(fam.outputs) - 1
    return f"{fam.name}_({', '.join(_arguments(fam, written))}) -> {_returns(rest)}"


def all_schemas(fam: OpFamily) -> dict[str, str]:
    """Every operator the family defines, by operator name."""
    out_ = {fam.name: functional(fam), f"{fam.name}_out": out(fam)}
    inplace = in_place(fam)
    if inplace is not None:
        out_[f"{fam.name}_"] = inplace
    return out_
