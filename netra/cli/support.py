"""What every `netra` command shares: the paths it is given, progress on stderr, a report as JSON on
stdout, and the refusal that names the extra bringing a missing module. Standard library only, like
the parser: `netra --help` imports nothing more."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from netra.errors import NetraError

# Optional or required modules -> (the requirement, the extra that brings it); None: a core dependency.
MODULES: dict[str, tuple[str, str | None]] = {
    "tomli_w": ("tomli-w>=1.0", "author"),
    "numpy": ("numpy>=1.24", "certify"),
    "torch": ("torch>=2.11", "torch"),
    "shtab": ("shtab>=1.7", "completion"),
    "msgpack": ("msgpack>=1.0", None),
    "elftools": ("pyelftools>=0.31", None),
    "tomli": ("tomli>=2.0", None),
}


def _path(arg: str, option: str) -> Path:
    """A path the user passed: '' would mean the current folder to Path(), and a NUL no path at all."""
    if arg == "" or "\0" in arg:
        raise NetraError(
            f"{option} {arg!r} is not a path",
            f"pass a real path as {option}, e.g. build/kernels",
        )
    return Path(arg)


def _root(arg: str | None) -> Path:
    """The source tree: --root, else the nearest parent of the cwd holding kernels/ and manifests/."""
    if arg is not None:
        root = _path(arg, "--root").resolve()
        if not _is_tree(root):  # else a file under it is reported missing, with a fix for a tree
            raise NetraError(
                f"--root {arg}: not a netra source tree (no kernels/ and manifests/ in {root})",
                "pass the top folder of a netra checkout, the one holding kernels/, manifests/ and release/",
            )
        return root
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if _is_tree(d):
            return d
    raise NetraError(
        f"{here}: not inside a netra source tree (no kernels/ and manifests/)",
        "run it in a checkout of https://github.com/netra-kernel/netra, or pass --root",
    )


def _is_tree(d: Path) -> bool:
    return (d / "kernels").is_dir() and (d / "manifests").is_dir()


WRITER_LOCK = "release/.netra-lock"  # flock file of `netra lock` (gitignored, never deleted)


def _say(msg: str) -> None:
    _PROGRESS.line(msg)


class _Progress:
    """Progress lines on stderr, from any thread (the build's workers report): each line is written
    whole, under a lock. `[i/n] ...` steps overwrite one line on a terminal; elsewhere (a log, a pipe)
    every step is its own line."""

    def __init__(self) -> None:
        import threading

        self.open = False
        self.mutex = threading.Lock()

    def __call__(self, msg: str) -> None:
        if msg.startswith("[") and "/" in msg.partition("]")[0] and sys.stderr.isatty():
            with self.mutex:
                sys.stderr.write(f"\r\x1b[Knetra: {msg}")
                sys.stderr.flush()
                self.open = True
        else:
            self.line(msg)

    def line(self, msg: str) -> None:
        with self.mutex:
            sys.stderr.write(("\n" if self.open else "") + f"netra: {msg}\n")
            sys.stderr.flush()
            self.open = False

    def end(self) -> None:
        with self.mutex:
            if self.open:
                sys.stderr.write("\n")
                sys.stderr.flush()
                self.open = False


_PROGRESS = _Progress()


def _progress(args: argparse.Namespace) -> Any:
    return None if getattr(args, "quiet", False) else _PROGRESS


def _json(data: Any) -> None:
    import json

    print(json.dumps(data, indent=1, sort_keys=True))


def _need(module: str, what: str) -> None:
    """Refuse before any work when an optional module is missing, naming the extra that brings it."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise _missing(module, what)


def _missing(module: str, what: str | None = None) -> NetraError:
    req, extra = MODULES.get(module, (module, None))
    who = what or "netra"
    if extra is not None:
        return NetraError(
            f"{who} needs {module} (the {extra} extra of netra-kernel), which is not installed",
            f"pip install 'netra-kernel[{extra}]'",
        )
    return NetraError(
        f"{who} needs {module}, a dependency of netra-kernel, which is not installed",
        f"pip install '{req}' (or reinstall netra-kernel with its dependencies)",
    )
