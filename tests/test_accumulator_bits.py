"""A candidate's accumulation, from its template to its judge (issue 28's WGMMA tactics, whose tensor core
keeps 14 significant bits of each partial sum where mma.sync keeps fp32's 24): the template manifest's
`accumulator_bits` expression, the class's table records it per candidate where it is not fp32, the table
reader gives it to certify, and conformance judges the candidate by that accumulation's bounds
(tests/test_fp8_moe_numerics.py: the bounds themselves)."""

from __future__ import annotations

import copy
import json

import pytest
from conftest import REPO

from netra.errors import TableError
from netra.release import manifests
from netra.runtime import open_catalog
from netra.runtime.tables import reading


def _table(cls: str) -> dict:
    return json.loads((REPO / "release" / "tables" / f"{cls}.json").read_text())


def test_every_candidate_records_the_accumulation_its_kernel_uses() -> None:
    """14 exactly where the instantiation multiplies by wgmma (WGMMA > 0, or a _tc template: TILE_PAIRS,
    read from the manifests' constants, not from the table), absent elsewhere; the runtime's candidates
    read 24 where absent."""
    cat = manifests.load(REPO)
    wgmma = {
        a.name for a in cat.artifacts if a.definitions.get("WGMMA", 0) > 0 or "TILE_PAIRS" in a.definitions
    }
    # 6 gate/up and 5 down tensor-core tactics at each of the three MoE contracts
    assert len(wgmma) == (6 + 5) * 3 and all(a.startswith("netra_fp8_moe_") for a in wgmma)
    for cls in ("sm_90", "sm_100", "gfx950"):
        table = _table(cls)
        recorded = {c["artifact"]: c["accumulator_bits"] for e in table["entries"] for c in e["candidates"]
                    if "accumulator_bits" in c}  # fmt: skip
        assert recorded == ({a: 14 for a in wgmma} if cls == "sm_90" else {}), cls
    runtime = {c.artifact: c.accumulator_bits for e in open_catalog("sm_90").table.entries.values()
               for c in e.candidates}  # fmt: skip
    assert {a for a, b in runtime.items() if b == 14} == wgmma
    assert {b for a, b in runtime.items() if a not in wgmma} == {24}


@pytest.mark.parametrize("bits", [7, 25, "14"])
def test_the_reader_refuses_an_accumulation_outside_8_to_24(bits: object) -> None:
    data = _table("sm_90")
    bad = copy.deepcopy(data)
    cand = next(c for e in bad["entries"] for c in e["candidates"] if "accumulator_bits" in c)
    cand["accumulator_bits"] = bits
    reading.parse(data, "sm_90.json", "sm_90")  # the committed table reads
    with pytest.raises(TableError) as e:
        reading.parse(bad, "sm_90.json", "sm_90")
    assert "accumulator_bits" in str(e.value) and "\n" not in str(e.value).strip(), str(e.value)
