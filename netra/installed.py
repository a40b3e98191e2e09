"""Where this netra's release data lives: the wheel's netra/_data, or a source checkout's release/ and build/.

A wheel install carries everything under netra/_data (netra/layout.py says what). An editable or plain
source checkout has no netra/_data: the lock and tables are the tree's release/ files, and the code
objects come from `netra build build/kernels`. Locating reads nothing but directory entries, so it can
run anywhere; what is found there is checked by the runtime and doctor, never here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from netra import __version__
from netra.layout import BUILD_RECORD, PACKAGE_DATA, data_path
from netra.lock import LOCK_PATH

PACKAGE_DIR = Path(__file__).resolve().parent
EDITABLE_BUILD = "build/kernels"  # `netra build build/kernels` output, relative to the source root
DISTRIBUTION = "netra-kernel"


@dataclass(frozen=True)
class Install:
    """One install's layout. kind is "wheel" (netra/_data present) or "editable" (source checkout)."""

    kind: str
    root: Path  # wheel: netra/_data; editable: the source tree
    version: str = __version__

    @property
    def lock_file(self) -> Path:
        return self.root / ("manifest.lock" if self.kind == "wheel" else LOCK_PATH)

    @property
    def build_record(self) -> Path | None:
        """build.json: the whole-file sha256 of each code object as built (wheel installs only)."""
        return self.root / BUILD_RECORD if self.kind == "wheel" else None

    @property
    def code_dir(self) -> Path:
        return self.root if self.kind == "wheel" else self.root / EDITABLE_BUILD

    def tracked(self, lock_path: str) -> Path | None:
        """Where a file the lock tracks lives in this install; None when it is not shipped (sources)."""
        if self.kind == "editable":
            return self.root / lock_path
        dp = data_path(lock_path)
        return None if dp is None else self.root / dp

    def code_object(self, artifact_file: str) -> Path:
        return self.code_dir / artifact_file

    @property
    def reinstall(self) -> str:
        """The one command that restores a damaged install."""
        if self.kind == "wheel":
            return f"pip install --force-reinstall {DISTRIBUTION}=={self.version}"
        return f"run `netra lock` or restore release/ from version control in {self.root}"

    @property
    def rebuild(self) -> str:
        """The fix for a missing or altered code object."""
        if self.kind == "wheel":
            return self.reinstall
        return f"run `netra build {EDITABLE_BUILD}` in {self.root}"


def wheel(data_dir: str | Path) -> Install:
    return Install("wheel", Path(data_dir))


def editable(source_root: str | Path) -> Install:
    return Install("editable", Path(source_root))


def locate(package_dir: str | Path | None = None) -> Install:
    """The install this netra package belongs to.

    A package that sits in a source tree (pyproject.toml, kernels/ and manifests/ beside it; never the
    case in site-packages) is a checkout: its data is release/ and build/kernels/, even if a wheel build
    left a netra/_data behind. Anything else is a wheel install, whose data must be netra/_data; when
    that is missing the runtime names it.
    """
    pkg = Path(package_dir) if package_dir is not None else PACKAGE_DIR
    src = pkg.parent
    if (src / "pyproject.toml").is_file() and (src / "kernels").is_dir() and (src / "manifests").is_dir():
        return editable(src)
    return wheel(src / PACKAGE_DATA)
