"""The one argument check of the Python API: every public call validates its arguments here.

A wrong type used to escape from deep inside as whatever the first operation on it raised (a bare
TypeError from a dict lookup, torch's AssertionError); a string where an integer belongs was carried
along silently. Each check raises the project's error instead, in one line naming the call and the
argument: ArgumentTypeError (a ContractError and a TypeError) for a wrong type, ContractError (a
ValueError) for a value of the right type that is not allowed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from netra.errors import ArgumentTypeError, ContractError

_SHOWN = 80  # characters of a bad value's repr in a message


def shown(value: object) -> str:
    """A value as a message shows it: its repr, on one line and short, whatever its __repr__ does."""
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not replace the error being reported
        text = f"<{type(value).__name__}>"
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def wrong_type(
    call: str, arg: str, value: object, expected: str, hint: str | None = None
) -> ArgumentTypeError:
    return ArgumentTypeError(
        f"{call}: {arg} must be {expected}, got {type(value).__name__} {shown(value)}",
        hint or f"pass {expected} as {arg}",
    )


def text(
    value: object, *, call: str, arg: str, optional: bool = False, hint: str | None = None
) -> str | None:
    """A str (or None when optional)."""
    if isinstance(value, str) or (optional and value is None):
        return value
    raise wrong_type(call, arg, value, "a str or None" if optional else "a str", hint)


def choice(value: object, choices: Iterable[str], *, call: str, arg: str, hint: str | None = None) -> str:
    """One of `choices` (a str: anything else is a wrong type, never a failed dict lookup)."""
    allowed = tuple(choices)
    if not isinstance(value, str):
        raise wrong_type(call, arg, value, f"one of {', '.join(map(repr, allowed))}", hint)
    if value not in allowed:
        raise ContractError(
            f"{call}: {arg} {shown(value)} is not one of {', '.join(allowed)}",
            hint or f"pass one of {allowed}",
        )
    return value


def count(value: object, *, call: str, arg: str, optional: bool = False) -> int | None:
    """A non-negative int (never a bool, a float or a numeric string), or None when optional."""
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise wrong_type(call, arg, value, "a non-negative int" + (" or None" if optional else ""))
    if value < 0:
        raise ContractError(f"{call}: {arg} must be a non-negative int, got {value}", f"pass {arg} >= 0")
    return value


def path(value: object, *, call: str, arg: str) -> str | None:
    """A filesystem path (str or os.PathLike of str) as a str, or None."""
    if value is None:
        return None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        if "\0" in value:
            raise ContractError(
                f"{call}: {arg} {shown(value)} contains a NUL byte", f"pass a real path as {arg}"
            )
        return value
    raise wrong_type(call, arg, value, "a path (str or os.PathLike) or None")


def instance(value: object, cls: type, *, call: str, arg: str, optional: bool = False) -> Any:
    """An instance of `cls` (or None when optional)."""
    if isinstance(value, cls) or (optional and value is None):
        return value
    raise wrong_type(call, arg, value, f"a {cls.__name__}" + (" or None" if optional else ""))
