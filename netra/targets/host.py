"""What a vendor finds on this host (its GPUs, its driver and runtime versions) and what a class's
code objects need of it.

Apart from vendor.py, which every lookup imports: detection, doctor and `netra env` use these types,
serving a kernel does not (a frozen dataclass costs about a millisecond to define).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GPU:
    vendor: str  # the vendor's name
    gpu_class: str  # a registered class's name, or the vendor's name for a device no class claims
    name: str  # what the source calls it ("NVIDIA H200", a marketing name)
    index: int  # the source's own numbering (a KFD node id, a device ordinal)
    source: str  # one of the vendor's `sources`


@dataclass(frozen=True)
class Versions:
    """This host's driver and GPU runtime of one vendor, as a bug report gives them (None: not found),
    with one note per place looked at."""

    driver: str | None  # the kernel driver ("580.159.04")
    runtime: str | None  # the user-space runtime the vendor's loader uses ("CUDA 13.0", "ROCm 7.0.2")
    notes: tuple[str, ...] = ()


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """The first dotted number in a version string: 'CUDA 13.0' -> (13, 0); None when there is none."""
    import re

    m = re.search(r"(?<![0-9])[0-9]{1,9}(?:\.[0-9]{1,9})*", text or "")  # not int()'s 4300-digit ValueError
    return tuple(int(x) for x in m.group(0).split(".")) if m else None


@dataclass(frozen=True)
class DriverNeed:
    """The oldest host software that loads a class's code objects: what it is, its minimum version,
    which of the vendor's Versions it is held to, and where the number comes from."""

    what: str  # "NVIDIA driver", "ROCm"
    minimum: str | None  # None: no minimum known for the toolchain that built them
    of: str  # "driver" or "runtime": the Versions field compared
    why: str

    def met(self, versions: Versions) -> bool | None:
        """Whether this host's version is at least the minimum; None when either is unknown."""
        found, need = version_tuple(getattr(versions, self.of)), version_tuple(self.minimum)
        return None if found is None or need is None else found >= need

    def describe(self) -> str:
        return f"{self.what} >= {self.minimum}" if self.minimum else f"{self.what} (minimum unknown)"
