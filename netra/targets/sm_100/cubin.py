"""What an sm_100a cubin launches with: sm_90's EIATTR facts, and the kernel's Mercury form.

nvcc 13.0.88 gives every sm_100a kernel, besides its machine code `.text.<kernel>`, a section
`.nv.capmerc.text.<kernel>` and `.nv.merc.*` copies of its attribute, relocation and symbol sections
(docs/build.md: what the ELF of an sm_100a cubin holds); an sm_90a cubin has none. NVIDIA does not
document their format. What matters here is only that they are code the driver is handed with the
kernel, so the lock pins them beside `.text`: the launch digest is sm_90's facts plus the sha256 of the
kernel's Mercury text and Mercury attribute records. A cubin with the locked `.text` whose Mercury
form differs is refused as one whose launch attributes differ is.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from netra.core import elf, text
from netra.errors import ValidationError
from netra.targets.sm_90 import cubin as sm90

MERCURY_SECTIONS = (".nv.capmerc.text.", ".nv.merc.nv.info.")  # + the kernel's name


def mercury(data: bytes, symbol: str) -> dict[str, str | None]:
    """sha256 of each of the kernel's Mercury sections (None: the cubin has no such section)."""
    names = {text.decode(s.name) for s in elf.sections(data)}
    return {
        p: hashlib.sha256(elf.section_bytes(data, p + symbol)).hexdigest() if p + symbol in names else None
        for p in MERCURY_SECTIONS
    }


def launch_facts(data: bytes, symbol: str, name: str) -> dict[str, Any]:
    facts = sm90.launch_facts(sm90.inspect(data, name), symbol)
    try:
        facts["mercury"] = mercury(data, symbol)
    except ValueError as e:
        raise ValidationError(f"{name}: {e}", "rebuild it with `netra build`") from None
    return facts


def launch_digest(data: bytes, symbol: str, name: str) -> str:
    """sha256 of launch_facts, locked next to .text."""
    facts = launch_facts(data, symbol, name)
    return hashlib.sha256(json.dumps(facts, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
