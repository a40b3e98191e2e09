"""Names and numbers typed on the command line, held to the valid ones before any work.

A name that is none of the valid choices is a usage error (exit 2): one line naming what was typed,
the closest valid names ("did you mean", never the typed string itself, case-insensitively first),
and the valid choices. A valid name that this install cannot serve is a refusal (exit 1), said by the
command that knows why.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable

from netra.errors import UsageError

_LISTED = 12  # more valid choices than this: the closest ones and where to see them all


def closest(typed: str, valid: Iterable[str], n: int = 3) -> list[str]:
    """The valid names nearest to `typed`, an exact match with other case first; never `typed` itself."""
    import difflib

    names = sorted(set(valid) - {typed})
    same = [v for v in names if v.casefold() == typed.casefold()]
    by_case = {v.casefold(): v for v in names if v not in same}
    near = difflib.get_close_matches(typed.casefold(), list(by_case), n=n, cutoff=0.6)
    if same:  # the name itself, typed in another case: nothing else is as close
        return same[:n]
    return [by_case[c] for c in near][:n]


def did_you_mean(typed: str, valid: Iterable[str]) -> str:
    """'did you mean 'x' or 'y'? ' (trailing space), or '' when nothing is close."""
    near = closest(typed, valid)
    return ("did you mean " + " or ".join(repr(c) for c in near) + "? ") if near else ""


def unknown(what: str, typed: str, valid: Iterable[str], *, where: str = "") -> UsageError:
    """The refusal of a name that is none of `valid`: what was typed, the closest, the choices."""
    names = sorted(set(valid))
    listed = (
        ", ".join(names)
        if len(names) <= _LISTED
        else ", ".join(names[:_LISTED]) + f" and {len(names) - _LISTED} more"
    )
    hint = did_you_mean(typed, names) + (f"valid: {listed}" if names else f"there are none{where}")
    return UsageError(f"unknown {what} {typed!r}{where}", hint)


def check(what: str, typed: str | None, valid: Iterable[str], *, where: str = "") -> None:
    """Refuse `typed` unless it is one of `valid` (None: nothing was typed)."""
    names = set(valid)
    if typed is not None and typed not in names:
        raise unknown(what, typed, names, where=where)


def _whole(text: str, least: int, example: int, bound: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (e.g. {example})") from None
    if n < least:
        raise argparse.ArgumentTypeError(f"{text} must be {bound}")
    return n


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (-j 0 or -j -3 is refused, not taken as 1)."""
    return _whole(text, 1, 4, "at least 1")


def natural_int(text: str) -> int:
    """argparse type: a whole number >= 0."""
    return _whole(text, 0, 0, "0 or more")


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0 (nan and inf are no time limit one can wait for)."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds (e.g. 600)") from None
    if not math.isfinite(s) or s <= 0:
        raise argparse.ArgumentTypeError(f"{text} must be a positive, finite number of seconds (e.g. 600)")
    return s


def path(text: str) -> str:
    """argparse type: a path. '' would be the current folder to Path() (and `if args.x` would read it as
    not given), a NUL no path at all: both refused as what was typed, not taken for a default."""
    if text == "" or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not a path")
    return text
