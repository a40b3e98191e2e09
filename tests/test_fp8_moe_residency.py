"""The co-resident MoE tactics (docs/ops/fp8_moe.md, "Co-residency") and the capped grids ("Grid rows"), held to the lock's register facts
and the grids and blocks sm_90's table launches:
the down stage's weight requests before griddepcontrol.wait overlap the gate/up stage only where its
CTAs fit an SM beside gate/up's. At one token g4r8 and d3 do not (the trace on an H100, 2026-12-06:
no down CTA entered before gate/up CTAs exited); g4o and d8sh (the fastest chain at one token on the
H200) must, or the chain loses its reason.

sm_90's register file: 65536 per SM, allocated per warp in units of 256 (a thread's count rounded up to
8); 132 SMs on the H100 and H200 SXM. Shared memory is left out: its carveout is the driver's choice at
launch (bench/trace_moe.py --carveout measures that limit on the GPU)."""

from __future__ import annotations

import functools
import math
from typing import Any

import pytest
from conftest import REPO

from netra.core.ops import contract_key
from netra.runtime import lockfile, open_catalog

REGISTERS_PER_SM = 65536
SMS = 132
CONTRACTS = {
    "Qwen3-30B-A3B": {"experts": 128, "topk": 8, "hidden": 2048, "inter": 768},
    "Qwen3-235B-A22B": {"experts": 128, "topk": 8, "hidden": 4096, "inter": 1536},
}


@functools.cache
def registers() -> dict[str, int]:
    """Each locked sm_90 artifact's registers per thread (the lock's static facts), read once."""
    locked = lockfile.read(REPO / "release" / "manifest.lock").artifacts
    return {a.name: a.facts["registers"] for a in locked if a.target == "sm_90"}


def candidate(op: str, contract: str, tactic: str) -> Any:
    """The candidate of sm_90's table: its launch as the runtime makes it."""
    entry = open_catalog("sm_90").table.entries[contract_key(op, CONTRACTS[contract])]
    return next(c for c in entry.candidates if c.tactic == tactic)


def one_token(op: str, contract: str, tactic: str) -> tuple[int, int]:
    """(CTAs per SM at one token, registers one CTA holds) of a candidate of sm_90's table: its grid and
    block as the runtime launches them, its registers rounded up to 8 a thread."""
    c = candidate(op, contract, tactic)
    return math.ceil(math.prod(c.launch.grid(1)) / SMS), math.prod(c.launch.block) * math.ceil(
        registers()[c.artifact] / 8
    ) * 8


def one_token_fits(contract: str, gate: str, down: str) -> tuple[int, int, int]:
    """(gate/up CTAs per SM at one token, down CTAs that then fit beside them, down CTAs per SM wanted)."""
    gate_ctas, gate_regs = one_token("fp8_moe_gate_up", contract, gate)
    down_ctas, down_regs = one_token("fp8_moe_down", contract, down)
    left = REGISTERS_PER_SM - gate_ctas * gate_regs
    return gate_ctas, max(left, 0) // down_regs, down_ctas


def test_g4r8_and_d3_leave_no_room_for_a_down_cta_at_one_token() -> None:
    """What the trace saw, from the lock: the rule is not vacuous."""
    gate, fit, _ = one_token_fits("Qwen3-30B-A3B", "g4r8", "d3")
    assert (gate, fit) == (3, 0)


def test_the_co_resident_chain_fits_beside_each_other_at_one_token() -> None:
    """g4o's 3 CTAs an SM leave room for one d8sh CTA, and d8sh's 128 CTAs want one an SM: every down CTA
    of the call resident while gate/up runs. d3 beside g4o would want 4 and find room for 2."""
    assert one_token_fits("Qwen3-30B-A3B", "g4o", "d8sh") == (3, 1, 1)
    assert one_token_fits("Qwen3-30B-A3B", "g4o", "d3") == (3, 2, 4)


def test_g4o_fits_qwen3_235b_a22b_in_one_wave() -> None:
    """768 CTAs at one token: 6 per SM by registers where g4r8 fits 3 (two waves)."""
    for tactic, per_sm in (("g4o", 6), ("g4r8", 3)):
        ctas, regs = one_token("fp8_moe_gate_up", "Qwen3-235B-A22B", tactic)
        assert REGISTERS_PER_SM // regs == per_sm and ctas == 6, tactic  # 768 CTAs over 132 SMs


@pytest.mark.parametrize("contract", sorted(CONTRACTS))
@pytest.mark.parametrize(
    ("op", "capped", "full"),
    [("fp8_moe_gate_up", "g8x64k2e16", "g8x64p"), ("fp8_moe_down", "d8x64s3me16", "d8x64s3m")],
)
def test_grid_experts_caps_the_rows_and_leaves_one_token_alone(
    contract: str, op: str, capped: str, full: str
) -> None:
    """docs/ops/fp8_moe.md, "Fewer grid rows": GRID_EXPERTS 16 launches 16 CTA rows where 64 tokens could hit
    128 experts (the full grid's rows), and the full grid at one token, whose 8 experts are 8 rows either
    way. The columns do not change but for gate/up's split k (KSPLIT 2: two CTAs a column group)."""
    c, f = candidate(op, contract, capped), candidate(op, contract, full)
    assert c.launch.grid(1)[1] == f.launch.grid(1)[1] == 8
    assert c.launch.grid(64)[1] == 16 and f.launch.grid(64)[1] == 128
    split = 2 if op == "fp8_moe_gate_up" else 1
    assert c.launch.grid(64)[0] == f.launch.grid(64)[0] * split == c.launch.grid(1)[0]
