"""docs/ops/fp8_moe.md's table of how often each routed-MoE tactic loads an expert's weights, held to the
tactics the lock builds: a warp's k range (K / warps, K = hidden for gate_up, inter for down) in
sub-slices of min(that, K_SLICE) bytes; one sub-slice stays in registers for the whole call, otherwise
the weights are loaded once per round of RESIDENT_CHUNKS chunks of 8 pairs (the templates' Bytes
paragraphs); "—" where the template does not admit the (contract, tactic) pair, so nothing is built
(its [[requires]]). A tactic added, or its constants changed, without its row fails here."""

from __future__ import annotations

import math
import re

from conftest import REPO

from netra.core.types import Tactic
from netra.release import manifests

PAGE = REPO / "docs" / "ops" / "fp8_moe.md"
STAGES = {"fp8_moe_gate_up": ("gate_up", "hidden"), "fp8_moe_down": ("down", "inter")}
PAIRS = (8, 16, 32, 64)
# the table's columns: Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3 (hidden, inter)
CONTRACTS = ((2048, 768), (4096, 1536), (7168, 2048))
NOT_BUILT = "—"


def loads(sub_slices: int, resident: int, pairs: int, chunk: int = 0) -> int:
    """How often the grid row of an expert with `pairs` pairs loads each byte of its weights: once where one
    sub-slice stays in registers; else once per round of `resident` chunks of 8 pairs, or per chunk of
    `chunk` pairs (WGMMA)."""
    if sub_slices == 1:
        return 1
    return math.ceil(pairs / chunk) if chunk else math.ceil(math.ceil(pairs / 8) / resident)


def tc_row(t: Tactic, k_name: str, built: set[tuple[str, int, int]]) -> list[str]:
    """A _tc template's row: no K_SLICE, R or P; S its ring's k blocks, W its chunk of pairs; its "sub-
    slices" the k blocks of 128 bytes a CTA streams (1 / KSPLIT of them with a split k); an expert's
    weights loaded once per chunk."""
    chunk, split = t.constants["TILE_PAIRS"], t.constants.get("KSPLIT", 1)
    blocks = [
        (h if k_name == "hidden" else i) // 128 // split if (t.name, h, i) in built else None
        for h, i in CONTRACTS
    ]
    return [
        str(t.block // 32), NOT_BUILT, NOT_BUILT, NOT_BUILT, str(t.constants["STAGES"]), str(chunk),
        " / ".join(NOT_BUILT if b is None else str(b) for b in blocks),
        *(NOT_BUILT if b is None else ", ".join(str(math.ceil(n / chunk)) for n in PAIRS) for b in blocks),
    ]  # fmt: skip


def rows_of_the_page() -> dict[tuple[str, str], list[str]]:
    row = re.compile(r"^\| (gate_up|down) \| (\w+) \|(.*)\|$")
    out = {}
    for line in PAGE.read_text().splitlines():
        m = row.match(line)
        if m:
            out[(m.group(1), m.group(2))] = [c.strip() for c in m.group(3).split("|")]
    return out


def derived_rows() -> dict[tuple[str, str], list[str]]:
    cat = manifests.load(REPO)
    moe = [a for a in cat.artifacts if a.target == "sm_90" and a.op in STAGES]
    assert {(a.contract["hidden"], a.contract["inter"]) for a in moe} == set(CONTRACTS)
    built = {(a.tactic.name, a.contract["hidden"], a.contract["inter"]) for a in moe}
    out = {}
    for t in {a.tactic.name: a.tactic for a in moe}.values():
        stage, k_name = STAGES[t.op]
        if t.template.endswith("_tc"):  # the tensor-core path: k blocks through a ring, chunks of TILE_PAIRS
            out[(stage, t.name)] = tc_row(t, k_name, built)
            continue
        warps, k_slice, resident = t.block // 32, t.constants["K_SLICE"], t.constants["RESIDENT_CHUNKS"]
        prefetch, stages, chunk = t.constants["PREFETCH"], t.constants["STAGES"], t.constants["WGMMA"]
        subs: list[int | None] = []
        for h, i in CONTRACTS:
            # a WGMMA tactic's k is split per warp pair; a SLOT_TILE one's warps each hold all of it
            parts = 1 if t.constants.get("SLOT_TILE") else warps // 2 if chunk else warps
            kw = (h if k_name == "hidden" else i) // parts  # a warp's k range (a part)
            subs.append(kw // min(kw, k_slice) if (t.name, h, i) in built else None)
        per_contract = [
            NOT_BUILT if s is None else ", ".join(str(loads(s, resident, n, chunk)) for n in PAIRS)
            for s in subs
        ]
        out[(stage, t.name)] = [
            str(warps),
            str(k_slice),
            str(resident),
            str(prefetch),
            str(stages),
            str(chunk),
            " / ".join(NOT_BUILT if s is None else str(s) for s in subs),
            *per_contract,
        ]
    return out


def test_the_pages_load_table_is_every_sm90_moe_tactic_as_built() -> None:
    want = derived_rows()
    # g4r8, g4o, the tensor-core g8x8 with OVERLAP, MIN_BLOCKS, SPREAD and KSPLIT (g8x64p, g8x8s3, g8x16s3,
    # g8x16c, g8x64k2e16) / d3, d8sh, d8x8 with MIN_BLOCKS, SPREAD and SLOT_SUM (d8x8s3, d8x64s3m, d8x32cm,
    # d8x64s3me16): the tactics left after the retirement of 2026-12-07 (the page's "Retired tactics")
    assert len(want) == 15
    assert rows_of_the_page() == want


def test_a_tactic_reading_every_chunk_is_seen_by_the_rule() -> None:
    """The rule is not vacuous: g4o (four sub-slices at hidden 2048, one chunk resident) loads an expert
    with 64 pairs 8 times; g4r8 (8 resident) once; one sub-slice once whatever the pairs."""
    assert loads(2, 1, 64) == 8 and loads(4, 8, 64) == 1 and loads(1, 1, 64) == 1 and loads(2, 4, 33) == 2
    assert loads(2, 1, 64, 32) == 2 and loads(1, 1, 64, 8) == 1  # WGMMA: per chunk unless kept
    assert derived_rows()[("gate_up", "g4o")][7] == "1, 2, 4, 8"
    assert derived_rows()[("gate_up", "g4r8")][7] == "1, 1, 1, 1"
