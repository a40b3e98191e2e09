"""TOML reading that works on Python 3.10 (tomli) and 3.11+ (tomllib), failing one way only.

tomllib raises its TOMLDecodeError for bad syntax, but a plain ValueError for an integer of more digits
than Python converts (sys.get_int_max_str_digits, 4300 by default) and RecursionError for arrays or
inline tables nested thousands deep. Every reader of a manifest or a lock catches TOMLDecodeError and
names the file; here the other two become one too, so no input can slip past that catch.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class TOMLDecodeError(ValueError):
    """Text that is not TOML this parser can turn into data; the message says why."""


def load(path: str | Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        return loads(f.read().decode())


def loads(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise TOMLDecodeError("arrays or inline tables nested too deeply") from None
    except ValueError as e:  # tomllib's own error, and int()'s limit on the digits it converts
        raise TOMLDecodeError(str(e)) from None
