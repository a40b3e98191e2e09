"""Editing a built wheel the way someone who knows the formats would (shared by the gate, CLI and packaging tests)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Callable
from pathlib import Path


def rewrite(src: Path, dest: Path, edit: Callable[[dict[str, bytes]], None], reseal: bool = False) -> Path:
    """Copy a wheel, editing its members (a dict name -> bytes, changed in place); reseal=True also
    rewrites RECORD to match (a careful forger). Returns dest."""
    with zipfile.ZipFile(src) as z:
        members = {n: z.read(n) for n in z.namelist()}
    edit(members)
    if reseal:
        record = next(n for n in members if n.endswith(".dist-info/RECORD"))
        rows = []
        for n, b in members.items():
            if n != record:
                digest = base64.urlsafe_b64encode(hashlib.sha256(b).digest()).decode().rstrip("=")
                rows.append(f"{n},sha256={digest},{len(b)}")
        members[record] = ("\n".join([*rows, f"{record},,"]) + "\n").encode()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in members.items():
            z.writestr(n, b)
    return dest
