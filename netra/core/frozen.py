"""Frozen dataclasses built from data a gated build wrote, without their __init__.

A frozen dataclass's __init__ sets each field through object.__setattr__; a first lookup builds a few
hundred lock and build-record entries, and those calls were a fifth of its time. Bytes whose sha256 the
wheel's RECORD vouches for are what the gated build wrote through the schemas, so their fields are set
directly. The data must have exactly the class's fields (anything else raises ValueError, and the
caller reads the data through its schema, which names what is wrong).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

T = TypeVar("T")

_FIELDS: dict[type, frozenset[str]] = {}


def build(cls: type[T], data: dict[str, Any], **overrides: Any) -> T:
    """An instance of the frozen dataclass `cls` (no __post_init__, no slots) with `data`'s fields,
    `overrides` replacing some (e.g. a list the class holds as a tuple)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    if data.keys() != names:
        raise ValueError(f"not the fields of {cls.__name__}")
    obj = object.__new__(cls)
    obj.__dict__.update(data)
    if overrides:
        obj.__dict__.update(overrides)
    return obj
