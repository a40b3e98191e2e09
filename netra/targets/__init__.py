"""The registry of GPU classes: the one list a new class is added to.

Everything specific to a class lives in its package, netra/targets/<class>/, whose TARGET follows the
Target protocol (netra/targets/target.py); what the classes of one vendor share lives in the vendor
object (netra/targets/vendor.py, amd.py, nvidia.py; host.py and devtools.py hold the types of what it
finds on a host and of the tools certification runs). The pipeline names no class, vendor or toolchain
flavour: it asks this registry. Adding a class: a package here, its entry in MODULES, kernels/<class>/
and manifests/<class>/tactics.toml (docs/authoring.md).

Class modules are imported on first use; importing this package imports none of them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from netra.core.types import Toolchain
    from netra.targets.target import Target
    from netra.targets.vendor import Vendor

# GPU class -> its package (whose TARGET is the class).
MODULES = {"gfx950": "netra.targets.gfx950", "sm_90": "netra.targets.sm_90", "sm_100": "netra.targets.sm_100"}

_loaded: dict[str, Target] = {}


def names() -> tuple[str, ...]:
    return tuple(sorted(MODULES))


def known(name: str) -> bool:
    return name in MODULES


def get(name: str) -> Target:
    """The class's Target. Callers check `known` first and report an unknown class with their context."""
    t = _loaded.get(name)
    if t is None:
        t = _loaded[name] = importlib.import_module(MODULES[name]).TARGET
    return t


def every() -> list[Target]:
    """Every registered class, by name."""
    return [get(n) for n in names()]


def vendors() -> list[Vendor]:
    """The vendors of the registered classes, each once, in the order of their first class's name."""
    out: list[Vendor] = []
    for t in every():
        if all(v is not t.vendor for v in out):
            out.append(t.vendor)
    return out


def vendor_names() -> tuple[str, ...]:
    return tuple(v.name for v in vendors())


def loader_names() -> tuple[str, ...]:
    return tuple(v.loader for v in vendors())


def flavour_names() -> tuple[str, ...]:
    """Every toolchain flavour any registered class may be built with, sorted."""
    return tuple(sorted({f for t in every() for f in t.flavours}))


def toolchain(name: str, flavour: str, version: str) -> Toolchain:
    """A toolchain identity of class `name`, labelled as the class names its flavour when printed (the
    class's module is not imported to read a lock: a first lookup needs no other class)."""
    from netra.core.types import Toolchain

    if not known(name):
        return Toolchain(flavour=flavour, version=version, label=flavour)
    return Toolchain(flavour=flavour, version=version, namer=lambda: get(name).flavours.get(flavour, flavour))
