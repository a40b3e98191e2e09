"""Refuse, before hatchling writes anything, a build of this tree that would skip the release gate.

The gate is the build hook (build_backend/hatch_build.py). `python -m hatchling build --no-hooks`,
HATCH_BUILD_NO_HOOKS or the hook switched off in pyproject.toml run hatchling with no build hook and
without build_backend/netra_backend.py, which gates any archive itself. pyproject.toml's forced-include
guard still stops such a wheel, but only once hatchling has begun writing it: by then an ungated sdist
may be in the output folder, hatchling's half-written wheel is left in TMPDIR (hatchling 1.33 keeps its
mkstemp file when the archive fails) and the stop is a traceback. A metadata hook is instantiated
however the build hooks are switched and before any archive or output folder exists, so this one
refuses there, in one line. Under netra_backend it does nothing: the backend checks the archive and
keeps hatchling's temporaries in its own scratch folder (docs/release.md).

Hatchling imports this file by path: no sibling imports, no side effects at import time.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from hatchling.builders.constants import BuildEnvVars
from hatchling.metadata.plugin.interface import MetadataHookInterface

_HOOK = "custom"  # the build hook's name in pyproject.toml: [tool.hatch.build.hooks.custom]
_PATH = "build_backend/hatch_build.py"  # its file, as pyproject.toml names it


def _on(var: str) -> bool:
    return os.environ.get(var) in ("1", "true")  # as hatchling reads its switches


def _skipped(root: str) -> tuple[str, str] | None:
    """(why the build hook will not run, the fix), or None when it will: hatchling's own rules for
    enabling a build hook (its switches, a target's table replacing the global one, `enable-by-default`),
    applied to the gate's hook for every target this tree builds."""
    if _on(BuildEnvVars.NO_HOOKS):
        return (
            f"{BuildEnvVars.NO_HOOKS}={os.environ[BuildEnvVars.NO_HOOKS]}, which hatchling's --no-hooks sets",
            f"drop --no-hooks and unset {BuildEnvVars.NO_HOOKS}: the release gate cannot be skipped",
        )
    enable = f"{BuildEnvVars.HOOK_ENABLE_PREFIX}{_HOOK.upper()}"
    for table, hook in _hook_configs(root):
        if hook is None:
            return (
                f"pyproject.toml has no {table}",
                f'restore {table} (path = "{_PATH}") in pyproject.toml',
            )
        if hook.get("path") != _PATH:
            return (
                f"pyproject.toml {table} names path = {hook.get('path')!r} in place of the gate",
                f'set path = "{_PATH}" there',
            )
        if hook.get("enable-by-default", True) is False and not (
            _on(BuildEnvVars.HOOKS_ENABLE) or _on(enable)
        ):
            return (
                f"pyproject.toml {table} sets enable-by-default = false",
                f"remove that line (or set {enable}=true)",
            )
    return None


def _hook_configs(root: str) -> list[tuple[str, dict[str, Any] | None]]:
    """The gate hook's table for each target, as hatchling picks it: a target's own
    [tool.hatch.build.targets.<target>.hooks.custom] replaces the global one (hatchling has already
    read pyproject.toml: it parses)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # hatchling itself depends on tomli there
        import tomli as tomllib

    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        build = _table(tomllib.load(f), "tool", "hatch", "build")
    default = _table(build, "hooks", _HOOK)
    found: list[tuple[str, dict[str, Any] | None]] = []
    targets = _table(build, "targets") or {}
    for target in sorted({"sdist", "wheel", *targets}):
        own = _table(targets, target, "hooks", _HOOK)
        if own is not None:
            found.append((f"[tool.hatch.build.targets.{target}.hooks.{_HOOK}]", own))
        else:
            found.append((f"[tool.hatch.build.hooks.{_HOOK}]", default))
    return found


def _table(data: Any, *keys: str) -> dict[str, Any] | None:
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else None


class NetraGateGuard(MetadataHookInterface):
    """Changes no metadata; stops a build whose release gate would not run."""

    PLUGIN_NAME = "custom"

    def __init__(self, root: str, config: dict[str, Any]) -> None:
        super().__init__(root, config)
        if "netra_backend" in sys.modules:
            return  # the backend gates whatever hatchling builds
        skipped = _skipped(root)
        if skipped is not None:
            why, fix = skipped
            print(
                f"netra: error: {root}: build refused before anything was written: hatchling would run "
                f"without the build hook, netra's release gate ({why}); hint: {fix}; release with "
                "`python -m build` or tools/release",
                file=sys.stderr,
            )
            raise SystemExit(1)

    def update(self, metadata: dict[str, Any]) -> None:
        """Nothing to change: the check ran when hatchling loaded this hook."""
