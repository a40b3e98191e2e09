"""The integer expressions an op family's record is written in: shapes, bytes, grid axes, workspace sizes.

A record is data, so its sizes are strings such as "hidden / group" or "cdiv(tokens * topk, 8)" read by
this small interpreter: integers, names, + - *, exact division /, remainder %, and the functions cdiv
(ceiling division), min and max; `holds` compares two of them (a template's requirements). Nothing is passed to eval(); a name is looked up in the mapping the caller
gives (contract parameters, runtime values, tactic constants). Parsing is cached per string, so a
record costs nothing at import and one parse per expression afterwards.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from netra.errors import LaunchError

# A parsed expression: an int, a name, or (operator or function, operands...).
Node = int | str | tuple[str, tuple["Node", ...]]

_TOKEN = r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))"  # compiled at the first parse, not at import
FUNCTIONS = ("cdiv", "min", "max")


def _tokens(text: str) -> list[str]:
    import re

    out: list[str] = []
    for m in re.finditer(_TOKEN, text):
        tok = m.group(1) or m.group(2) or m.group(3)
        if tok is None:
            continue
        if m.group(3) is not None and tok not in "+-*/%(),":
            raise LaunchError(
                f"expression {text!r}: unexpected {tok!r}", "use integers, names, + - * / % ( ) ,"
            )
        out.append(tok)
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def fail(self, what: str) -> LaunchError:
        return LaunchError(
            f"expression {self.text!r}: {what}",
            f"write integers, names, + - * / %, and {', '.join(FUNCTIONS)}(...) (netra/core/expr.py)",
        )

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (want is not None and tok != want):
            raise self.fail(f"expected {want or 'more'} at token {self.i + 1}")
        self.i += 1
        return tok

    def expr(self) -> Node:
        node = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            node = (op, (node, self.term()))
        return node

    def term(self) -> Node:
        node = self.atom()
        while self.peek() in ("*", "/", "%"):
            op = self.take()
            node = (op, (node, self.atom()))
        return node

    def atom(self) -> Node:
        tok = self.take()
        if tok == "(":
            node = self.expr()
            self.take(")")
            return node
        if tok.isdigit():
            return int(tok)
        if tok[0].isalpha() or tok[0] == "_":
            if self.peek() != "(":
                return tok
            if tok not in FUNCTIONS:
                raise self.fail(f"unknown function {tok!r}")
            self.take("(")
            args = [self.expr()]
            while self.peek() == ",":
                self.take(",")
                args.append(self.expr())
            self.take(")")
            if tok == "cdiv" and len(args) != 2:
                raise self.fail("cdiv takes two operands")
            return (tok, tuple(args))
        raise self.fail(f"unexpected {tok!r}")


@functools.lru_cache(maxsize=1024)
def parse(text: str) -> Node:
    """The expression's tree; a malformed one is a LaunchError naming it."""
    p = _Parser(text)
    node = p.expr()
    if p.peek() is not None:
        raise p.fail(f"unexpected {p.peek()!r} after a complete expression")
    return node


def names(text: str) -> frozenset[str]:
    """Every name an expression reads."""

    def walk(n: Node) -> set[str]:
        if isinstance(n, int):
            return set()
        if isinstance(n, str):
            return {n}
        return set().union(*(walk(a) for a in n[1]))

    return frozenset(walk(parse(text)))


def evaluate(text: str | int, env: Mapping[str, int]) -> int:
    """The expression's integer value with the names in `env`; an unknown name, a division that is not
    exact, or a division (or remainder) by zero is a LaunchError naming the expression."""
    if isinstance(text, int):
        return text
    return evaluate_tree(parse(text), env, text)


def evaluate_tree(tree: Node, env: Mapping[str, Any], text: str) -> Any:
    """evaluate() of a tree parsed beforehand: plain recursion over ints, names and tuples, which
    torch.compile can trace (a fake run's sizes may be symbolic integers)."""

    def ev(n: Node) -> Any:
        if isinstance(n, int):
            return n
        if isinstance(n, str):
            if n not in env:
                raise LaunchError(
                    f"expression {text!r}: no value for {n!r}",
                    f"the record's expressions may name {', '.join(sorted(env)) or 'nothing here'}",
                )
            return env[n]
        op, args = n
        v = [ev(a) for a in args]
        if op == "+":
            return v[0] + v[1]
        if op == "-":
            return v[0] - v[1]
        if op == "*":
            return v[0] * v[1]
        if op == "min":
            return min(v)
        if op == "max":
            return max(v)
        if v[1] == 0:
            raise LaunchError(f"expression {text!r}: division by zero", "check the values it was given")
        if op == "cdiv":
            return -(-v[0] // v[1])
        if op == "%":
            return v[0] % v[1]
        if v[0] % v[1]:
            raise LaunchError(
                f"expression {text!r}: {v[0]} / {v[1]} is not exact", "use cdiv() where a ceiling is meant"
            )
        return v[0] // v[1]

    return ev(tree)


def bind(text: str, env: Mapping[str, int], rename: Mapping[str, str] | None = None) -> int | str:
    """The expression with the names in `env` replaced by their values and every operation on constants
    folded: an int when nothing is left, else the remaining expression as text (names in `rename`
    renamed). What a table records of a record's grid once the contract and the tactic are known:
    "min(experts, tokens * topk)" at experts 128, topk 8 is "min(128, rows * 8)" with tokens -> rows."""
    text_of = rename or {}

    def fold(n: Node) -> Node:
        if isinstance(n, int):
            return n
        if isinstance(n, str):
            return env[n] if n in env else text_of.get(n, n)
        op, args = n
        folded = tuple(fold(a) for a in args)
        if all(isinstance(a, int) for a in folded):
            return int(evaluate_tree((op, folded), {}, text))
        consts = [a for a in folded if isinstance(a, int)]
        if op in ("min", "max") and len(consts) > 1:  # min(128, rows * 8, 1024) is min(128, rows * 8)
            at = next(i for i, a in enumerate(folded) if isinstance(a, int))
            keep = (min if op == "min" else max)(consts)
            folded = tuple(
                keep if i == at else a for i, a in enumerate(folded) if i == at or not isinstance(a, int)
            )
        return (op, folded)

    def render(n: Node, parent: int = 0) -> str:
        if isinstance(n, (int, str)):
            return str(n)
        op, args = n
        if op in FUNCTIONS:
            return f"{op}(" + ", ".join(render(a) for a in args) + ")"
        rank = 1 if op in "+-" else 2  # * / % bind alike, left to right
        s = f"{render(args[0], rank)} {op} {render(args[1], rank + 1)}"
        return f"({s})" if rank < parent else s

    out = fold(parse(text))
    return out if isinstance(out, int) else render(out)


COMPARISONS = ("==", "!=", "<=", ">=", "<", ">")
_COMPARE = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
}


@functools.lru_cache(maxsize=256)
def comparison(text: str) -> tuple[str, str, str]:
    """A condition "<expression> <comparison> <expression>" split into (left, comparison, right), each
    side parsed; a malformed one is a LaunchError naming it. No expression holds < > = or !, so the
    comparison is the one run of those characters."""
    import re

    found = re.findall(r"[<>=!]+", text)
    if len(found) != 1 or found[0] not in COMPARISONS:
        raise LaunchError(
            f"condition {text!r}: not one comparison of two expressions",
            f"write <expression> <comparison> <expression>, the comparison one of {' '.join(COMPARISONS)}",
        )
    left, right = (part.strip() for part in text.split(found[0]))
    parse(left)  # parsed now: a malformed side is refused where the condition is read
    parse(right)
    return left, found[0], right


def condition_names(text: str) -> frozenset[str]:
    """Every name a condition reads."""
    left, _, right = comparison(text)
    return names(left) | names(right)


def holds(text: str, env: Mapping[str, int]) -> bool:
    """Whether the condition holds with the names in `env` (evaluate()'s errors, for either side)."""
    left, op, right = comparison(text)
    return bool(_COMPARE[op](evaluate(left, env), evaluate(right, env)))
