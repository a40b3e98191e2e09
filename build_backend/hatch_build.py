"""The netra release gate as a hatch build hook: a thin adapter, every decision lives in netra.

wheel (standard): initialize runs netra.release.staging.stage(), which runs netra.release.build.build() (the same
pipeline as `netra build`: tree vs lock, assembly, .text and static gates) in a temporary directory
and stages exactly the files netra.runtime.layout.members() names (lock, build.json, tables, manifests, code
objects) and the SBOM the lock generates; the hook force-includes them under netra/_data (the SBOM
under the dist-info's sboms/, PEP 770); finalize checks the finished wheel with netra.release.wheelgate and deletes it on any
problem. wheel (editable): packages no data (docs/release.md says where the runtime looks instead).
sdist: initialize refuses a tree that does not match its lock; finalize checks the sdist carries
every locked and build file.

Hatchling imports this file by path, possibly more than once: no sibling imports, no side effects at
import time, and no dataclasses (they crash with `from __future__ import annotations` here).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

# Hatchling's own options for any hook, plus ours.
_HATCH_OPTIONS = frozenset(
    {"path", "dependencies", "require-runtime-dependencies", "require-runtime-features", "enable-by-default"}
)
_OUR_OPTIONS = frozenset({"jobs"})
# pyproject.toml force-includes this path that never exists: hatchling fails unless this hook removed it.
_GUARD = "build_backend/the-netra-build-hook-did-not-run"
_TAG = "py3-none-any"  # code objects are not host code; no CPU binary ships (yet)


def _import_netra(root: str) -> None:
    """Make `import netra` mean the package in the tree being built, never an installed copy."""
    root = os.path.realpath(root)
    if not sys.path or sys.path[0] != root:
        sys.path.insert(0, root)
    loaded = sys.modules.get("netra")
    if loaded is not None and not _inside(getattr(loaded, "__file__", None), root):
        for name in [n for n in sys.modules if n == "netra" or n.startswith("netra.")]:
            del sys.modules[name]
    import netra

    if not _inside(netra.__file__, root):
        raise RuntimeError(f"`import netra` resolved to {netra.__file__}, not the tree being built ({root})")


def _remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _end_direct(scratch: Any, saved: tuple[str | None, str | None], restore: Any) -> None:
    """A direct run's end, however it ends: the scratch folder (and hatchling's archive, if it is still
    there) removed, tempfile's folder, TMPDIR and the signal handlers as they were."""
    tempfile.tempdir = saved[0]
    if saved[1] is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = saved[1]
    restore()
    scratch.remove()
    scratch.finished()


def _inside(path: str | None, root: str) -> bool:
    return bool(path) and os.path.realpath(str(path)).startswith(os.path.join(root, "netra") + os.sep)


class NetraGateHook(BuildHookInterface):
    """Assemble, gate and package the locked kernels; refuse any archive that is not exactly the lock."""

    PLUGIN_NAME = "custom"

    # Per build, set by _reset() (a hook instance may be asked to build more than once).
    _lock: Any
    _lock_bytes: bytes | None
    _lock_name: str
    _what: str
    _t0: float
    _cleanup: Any  # removes the wheel's staging folder (a weakref.finalize once there is one)
    _end_direct: Any  # ends a direct run's scratch folder and signal handlers
    _unchecked: Path | None  # the archive finalize is checking, removed by a signal
    _scratch: Any  # a direct run's netra.core.scratch.Scratch (None under the backend)

    # -- hatch entry points ---------------------------------------------------------------------

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        self._reset()
        if self.target_name == "wheel":  # the hook runs: hatchling may now build (pyproject.toml says why)
            self.build_config.force_include.pop(os.path.abspath(os.path.join(self.root, _GUARD)), None)
        jobs = self._validated_config(version)
        _import_netra(self.root)
        if "netra_backend" not in sys.modules and version == "standard":
            self._begin_direct()
        if self.target_name == "sdist":
            self._initialize_sdist()
        elif version == "editable":
            self.app.display_warning(
                "netra: editable install: no code objects or data are packaged; the runtime reads "
                "release/ and manifests/ from this tree and code objects from build/kernels "
                "(run `netra build build/kernels`; see docs/release.md)"
            )
        else:
            self._initialize_wheel(build_data, jobs)

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        try:
            if self._lock is None:
                return  # editable: nothing was packaged, nothing to check
            from netra.release import wheelgate

            artifact = Path(artifact_path)
            self._unchecked = artifact  # a signal now removes it (a direct run's handler)
            if self._scratch is not None:  # and a SIGKILL: the janitor, unless it passes the gate
                self._scratch.remove_if_cut_off(artifact)
            self.app.display_waiting(f"netra: checking {artifact.name} against {self._lock_name}")
            try:
                if self.target_name == "sdist":
                    problems = wheelgate.check_sdist(artifact, self.root, self._lock)
                    hint = wheelgate.SDIST_HINT
                else:
                    problems = wheelgate.check_wheel(artifact, self._lock, self._lock_bytes)
                    hint = None  # chosen from the problems
            except BaseException:
                artifact.unlink(missing_ok=True)  # unchecked is as bad as refused
                raise
            if problems:
                artifact.unlink(missing_ok=True)
                self.app.abort(f"netra: error: {wheelgate.error(artifact, problems, hint=hint)}")
            wheelgate.vouch(artifact)
            self._unchecked = None
            if self._scratch is not None:
                self._scratch.keep(artifact)
            self.app.display_success(
                f"netra: {artifact.name}: release gate passed ({self._what} checked against "
                f"{self._lock_name}); hook total {time.monotonic() - self._t0:.1f}s"
            )
        finally:
            self._cleanup()
            self._end_direct()

    # -- the two targets --------------------------------------------------------------------------

    def _initialize_sdist(self) -> None:
        from netra.errors import NetraError
        from netra.release import build
        from netra.runtime import lockfile as lock

        self._t0 = time.monotonic()
        try:
            self._lock_bytes, self._lock = self._read_lock()
            build.verify_tracked(Path(self.root), self._lock)
        except NetraError as e:
            self.app.abort(f"netra: error: {e}")
        self._lock_name = lock.LOCK_PATH
        self._what = f"{len(self._lock.files) + 1} locked files and the build inputs"

    def _initialize_wheel(self, build_data: dict[str, Any], jobs: int | None) -> None:
        from netra.errors import NetraError
        from netra.release import staging
        from netra.runtime import layout
        from netra.runtime.lockfile import LOCK_PATH

        self._t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix="netra-wheel-"))
        # Removed in finalize; the weakref also covers a build that dies between initialize and finalize.
        self._cleanup = weakref.finalize(self, _remove, str(tmp))
        try:
            self.app.display_waiting("netra: building the locked code objects")
            staged = staging.stage(
                Path(self.root), tmp, jobs=jobs, progress=lambda msg: self.app.display_info(f"netra: {msg}")
            )
        except NetraError as e:
            self._cleanup()
            self.app.abort(f"netra: error: {e}")
        except BaseException:
            self._cleanup()
            raise
        for data_path, src in staged.files.items():
            build_data["force_include"][str(src)] = f"{layout.PACKAGE_DATA}/{data_path}"
        build_data["sbom_files"].append(str(staged.sbom))  # PEP 770: <name>.dist-info/sboms/
        build_data["tag"] = _TAG
        build_data["pure_python"] = True
        self._lock, self._lock_bytes, self._lock_name = (
            staged.lock,
            staged.lock_bytes,
            LOCK_PATH,
        )
        self._what = f"{len(staged.files)} members under {layout.PACKAGE_DATA}"
        report = staged.report
        chains = ", ".join(f"{t}: {tools.describe()}" for t, tools in sorted(report.tools.items()))
        self.app.display_success(
            f"netra: {len(report.examined)} code objects built and gated in {report.seconds:.1f}s with "
            f"{chains}; packaging {len(staged.files)} files under {layout.PACKAGE_DATA}"
        )

    # -- helpers ----------------------------------------------------------------------------------

    def _reset(self) -> None:
        self._lock = None
        self._lock_bytes = None
        self._lock_name = ""
        self._what = ""
        self._t0 = time.monotonic()
        self._cleanup = lambda: None
        self._end_direct = lambda: None
        self._unchecked = None
        self._scratch = None

    def _begin_direct(self) -> None:
        """Run by hatchling directly (no netra_backend): every temporary of this build, hatchling's
        half-written archive included (hatchling 1.33 keeps its mkstemp file when the archive fails),
        goes in one scratch folder that a janitor removes even after SIGKILL; SIGINT, SIGTERM and
        SIGHUP remove it, and an archive not yet gated, in one line and end the build by that signal;
        after SIGKILL the janitor removes both. Under the backend, the backend does all of this (and
        delivers an archive only once gated)."""
        from netra.core import interrupts, scratch

        folder = self._scratch = scratch.Scratch(f"netra-hatchling-{self.target_name}-")
        saved = tempfile.tempdir, os.environ.get("TMPDIR")
        tempfile.tempdir = str(folder.path)
        os.environ["TMPDIR"] = str(folder.path)  # the tools' temporaries too (nvcc, llvm)
        restore = interrupts.fatal(self._interrupted)
        self._end_direct = weakref.finalize(self, _end_direct, folder, saved, restore)

    def _interrupted(self, signum: int) -> None:
        import signal

        self._cleanup()
        if self._unchecked is not None:
            self._unchecked.unlink(missing_ok=True)
        self._end_direct()
        print(
            f"netra: error: the {self.target_name} build was interrupted ({signal.Signals(signum).name}); "
            f"no {self.target_name} was written",
            file=sys.stderr,
        )

    def _validated_config(self, version: str) -> int | None:
        """Refuse an unknown option or target before any work, naming the pyproject.toml key."""
        where = "pyproject.toml [tool.hatch.build.hooks.custom]"
        unknown = sorted(set(self.config) - _HATCH_OPTIONS - _OUR_OPTIONS)
        if unknown:
            self.app.abort(
                f"netra: error: {where}: unknown option(s) {', '.join(unknown)}; hint: the netra release "
                f"gate accepts only {', '.join(sorted(_OUR_OPTIONS))}"
            )
        if self.target_name not in ("wheel", "sdist") or version not in ("standard", "editable"):
            self.app.abort(
                f"netra: error: {where}: the netra release gate builds wheels and sdists, not "
                f"{self.target_name} ({version}); hint: build with `python -m build` or tools/release"
            )
        jobs = self.config.get("jobs")
        if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
            self.app.abort(f"netra: error: {where}: jobs = {jobs!r}; hint: use a positive integer or omit it")
        return jobs

    def _read_lock(self) -> tuple[bytes, Any]:
        """The lock's bytes (what ships) and their parse (what is checked): one read, so they agree."""
        from netra.release import wheelgate
        from netra.runtime import lockfile as lock_mod

        raw, parsed = wheelgate.read_lock(Path(self.root) / lock_mod.LOCK_PATH)
        return raw, parsed
