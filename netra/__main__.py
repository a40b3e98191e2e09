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


def _damaged(e: ImportError | SyntaxError) -> str | None:
    """The line for netra's own code failing to load in an install (a file deleted or edited after
    pip put it there): the fix is a reinstall, and doctor then proves it. None where the failure is
    not netra's own code, or where netra runs from a source checkout (a developer's error, shown whole)."""
    from pathlib import Path

    pkg = Path(__file__).resolve().parent
    # netra.cli.support._is_tree's test, written here: the code that would be imported may be what is damaged
    if (pkg.parent / "kernels").is_dir() and (pkg.parent / "manifests").is_dir():
        return None
    if isinstance(e, SyntaxError):
        own = e.filename is not None and Path(e.filename).resolve().is_relative_to(pkg)
    else:
        own = e.name is not None and (e.name == "netra" or e.name.startswith("netra."))
    if not own:
        return None
    try:
        from netra import __version__ as version

        spec = f"netra-kernel=={version}"
    except Exception:  # netra/__init__.py itself
        spec = "netra-kernel"
    return (
        f"netra: error: netra's own code in {pkg} failed to load ({type(e).__name__}: {e}): this install is "
        f"damaged; hint: reinstall it, {sys.executable} -m pip install --force-reinstall --no-deps {spec}, "
        "then run `netra doctor`\n"
    )


def main() -> int:
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.default_int_handler:  # not when the caller chose to ignore or handle it
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    try:
        try:
            from netra.cli import main as cli
        finally:
            if previous is signal.default_int_handler:
                signal.signal(signal.SIGINT, previous)
        return cli()
    except (ImportError, SyntaxError) as e:
        line = _damaged(e)
        if line is None:
            raise
        os.write(2, line.encode(errors="replace"))
        return 1


if __name__ == "__main__":
    sys.exit(main())
