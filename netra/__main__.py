"""The `netra` command's entry (console script netra.__main__:main, and `python -m netra`).

Importing the CLI takes a tenth of a second or more; a Ctrl-C in that time raised KeyboardInterrupt
inside the import machinery, a traceback (or "Exception ignored in ...") instead of the line the CLI
prints once it runs. Until the CLI's own handling takes over, SIGINT ends the process here in that
line, with 130, before anything could have been written."""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    os.write(2, b"netra: interrupted: nothing was written\n")
    os._exit(128 + signum)


def main() -> int:
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not when the caller chose to ignore or handle it
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    try:
        from netra.cli import main as cli
    finally:
        if previous is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)
    return cli()


if __name__ == "__main__":
    sys.exit(main())
