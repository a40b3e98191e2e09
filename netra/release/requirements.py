"""requirements/build.txt, the release build's hash-pinned requirements: its one reader, and the pins
of each class's toolchain it gives the lock.

tools/lock-requirements writes the file (uv pip compile --generate-hashes); tools/release and
tools/ensure-toolchain install from it with `pip --require-hashes`. A class whose toolchain is
provisioned "pip-pinned" (netra.targets: Target.provision) is built with the entries whose names start
with its prefix, and one of them is the toolchain itself (Target.toolchain_package: nvidia-cuda-nvcc
for nvcc). `netra lock` records those pins in the lock's [toolchains.<class>], so that everything
downstream (the SBOM above all) reads them from the lock alone; `netra lock --check` and the build
compare them with this file. Data flows one way: requirements -> lock -> build -> wheel.

Read strictly: the form tools/lock-requirements writes, and nothing else, is accepted; any other line is
refused naming the file and line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from netra.core.types import Toolchain
from netra.errors import LockError
from netra.runtime.lockfile import PinnedPackage, ToolchainPins

PATH = "requirements/build.txt"
_HINT = "regenerate it with tools/lock-requirements"
_OPTIONS = ("--only-binary :all:",)  # the global options tools/lock-requirements writes
_ENTRY = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[0-9][0-9A-Za-z.+!_-]*)"
    r"(?:\s*;\s*(?P<marker>[^\\]+?))?(?P<hashes>(?:\s+--hash=sha256:[0-9a-f]{64})+)"
)
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass(frozen=True)
class Requirement:
    name: str  # normalized (PEP 503)
    version: str
    marker: str  # "" when it applies everywhere
    sha256: tuple[str, ...]  # sorted
    line: int  # where its entry starts, for messages


def normalize(name: str) -> str:
    """PEP 503: the name pip and PyPI compare."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str, where: str = PATH) -> tuple[Requirement, ...]:
    """Every entry: `name==version [; marker]` with one or more `--hash=sha256:` continuation lines."""
    out: list[Requirement] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        start = i
        logical = lines[i]
        while logical.endswith("\\"):  # a continued entry: its hashes follow, one a line
            i += 1
            if i == len(lines):
                raise LockError(
                    f"{where}:{start + 1}: the entry ends with a continuation and no line follows", _HINT
                )
            logical = logical[:-1] + " " + lines[i]
        i += 1
        s = logical.strip()
        if not s or s.startswith("#") or s in _OPTIONS:
            continue
        m = _ENTRY.fullmatch(s)
        if m is None:
            raise LockError(
                f"{where}:{start + 1}: not an exactly pinned, hash-pinned requirement ({s[:80]!r})", _HINT
            )
        out.append(
            Requirement(
                name=normalize(m["name"]),
                version=m["version"],
                marker=(m["marker"] or "").strip(),
                sha256=tuple(sorted(set(_HASH.findall(m["hashes"])))),
                line=start + 1,
            )
        )
    return tuple(out)


def read(root: Path) -> tuple[Requirement, ...]:
    """The project's requirements/build.txt, bounded and strict."""
    from netra.core import files

    raw = files.read_bytes(Path(root), PATH, limit=files.SOURCE_LIMIT, where=PATH)
    try:
        return parse(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise LockError(f"{PATH}: not UTF-8 text (byte {e.start})", _HINT) from None


def toolchain_pins(
    reqs: tuple[Requirement, ...], toolchains: dict[str, Toolchain]
) -> dict[str, ToolchainPins]:
    """Per class whose toolchain is pinned here, at the version the lock records: its pins.

    A class provisioned otherwise (apt, ROCm) has none. A class built with a toolchain other than the
    pinned one (another nvcc version) has none either: the pins would describe what did not build it.
    A pinned class's entries must apply everywhere (no marker) and appear once, and its toolchain's own
    package must be among them: otherwise the file is refused, naming the class and the package.
    """
    from netra import targets

    out: dict[str, ToolchainPins] = {}
    for cls, tc in sorted(toolchains.items()):
        if not targets.known(cls):
            continue
        tgt = targets.get(cls)
        kind, prefix = tgt.provision
        package = tgt.toolchain_package
        if kind != "pip-pinned" or package is None:
            continue
        mine = [r for r in reqs if r.name.startswith(normalize(prefix))]
        by_name: dict[str, Requirement] = {}
        for r in mine:
            if r.marker or r.name in by_name:
                raise LockError(
                    f"{PATH}:{r.line}: {r.name} is part of {cls}'s toolchain, which must be pinned once, for every platform (no environment marker)",
                    "pin it once, without a marker, in requirements/build.in; then run tools/lock-requirements",
                )
            by_name[r.name] = r
        own = by_name.get(package)
        if own is None:
            raise LockError(
                f"{PATH}: does not pin {package}, {cls}'s toolchain ({' '.join(tgt.provision)})",
                "add it to requirements/build.in; then run tools/lock-requirements",
            )
        if own.version != tc.version:
            continue
        out[cls] = ToolchainPins(
            package=package,
            packages=tuple(PinnedPackage(r.name, r.version, r.sha256) for _, r in sorted(by_name.items())),
        )
    return out
