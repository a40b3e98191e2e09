"""The one policy for bytes from outside netra that are shown or parsed as text, never trusted as UTF-8.

Tool output (llvm-mc, nvcc, nvidia-smi, rocminfo, ldconfig), sysfs files and strings a driver returns
are bytes in whatever encoding the host happens to use, or garbage on a broken one. Each is decoded
here, the same way everywhere: UTF-8 with U+FFFD for what is not, and universal newlines (as
subprocess's text mode gives them), so no reader can fail on them with a UnicodeDecodeError. Files
netra tracks or ships are read strictly instead (netra.core.files.read_text): a byte that is not UTF-8
there is the file's error, not something to paper over.
"""

from __future__ import annotations


def decode(data: bytes) -> str:
    """`data` as text, never failing: UTF-8, U+FFFD for what is not, '\\r\\n' and '\\r' as '\\n'."""
    return data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def integer(text: str, *, digits: int = 18) -> int | None:
    """`text` as an int when it is an optional '-' and 1 to `digits` ASCII digits, else None.

    Never int() on text from outside alone: str.isdigit() and a regex's \\d also hold for '²' (which int()
    refuses) and other scripts' digits, and int() raises ValueError past 4300 digits, where a reader
    that expects a number wants a clear "not one" instead."""
    body = text[1:] if text.startswith("-") else text
    if 0 < len(body) <= digits and body.isascii() and body.isdigit():
        return int(text)
    return None
