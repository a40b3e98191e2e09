"""The co-resident MoE tactics (docs/ops/fp8_moe.md, "Co-residency"), held to the lock's register facts:
the down stage's weight requests before griddepcontrol.wait overlap the gate/up stage only where its
CTAs fit an SM beside gate/up's. At one token g4r8 and d3 do not (the trace on an H100, 2026-12-06:
no down CTA entered before gate/up CTAs exited); g4o and d3o must, or the tactics lose their reason.

sm_90's register file: 65536 per SM, allocated per warp in units of 256 (a thread's count rounded up to
8); 132 SMs on the H100 and H200 SXM. Shared memory is left out: its carveout is the driver's choice at
launch (bench/trace_moe.py --carveout measures that limit on the GPU)."""

from __future__ import annotations

import math

import pytest
from conftest import REPO

from netra.runtime import lockfile

REGISTERS_PER_SM = 65536
SMS = 132
CONTRACTS = {"Qwen3-30B-A3B": (2048, 768), "Qwen3-235B-A22B": (4096, 1536)}


def per_cta(name: str) -> int:
    """Registers one CTA of the locked sm_90 artifact `name` holds."""
    art = next(a for a in lockfile.read(REPO / "release" / "manifest.lock").artifacts if a.name == name)
    regs = art.facts["registers"]
    warps = art.max_threads // 32
    return warps * 32 * math.ceil(regs / 8) * 8


def one_token_fits(contract: str, gate: str, down: str) -> tuple[int, int, int]:
    """(gate/up CTAs per SM at one token, down CTAs that then fit beside them, down CTAs per SM wanted)."""
    h, i = CONTRACTS[contract]
    stem = f"e128_k8_h{h}_i{i}"
    gate_ctas = math.ceil(i // 16 * 8 / SMS)  # grid (INTER / 16, 8 experts hit)
    down_ctas = math.ceil(h // 32 * 8 / SMS)  # grid (HIDDEN / 32, 8)
    left = REGISTERS_PER_SM - gate_ctas * per_cta(f"netra_fp8_moe_gate_up_{stem}_{gate}")
    return gate_ctas, max(left, 0) // per_cta(f"netra_fp8_moe_down_{stem}_{down}"), down_ctas


def test_g4r8_and_d3_leave_no_room_for_a_down_cta_at_one_token() -> None:
    """What the trace saw, from the lock: the rule is not vacuous."""
    gate, fit, _ = one_token_fits("Qwen3-30B-A3B", "g4r8", "d3")
    assert (gate, fit) == (3, 0)


@pytest.mark.parametrize("down", ["d3o", "d3ol", "d3ao"])
def test_the_co_resident_tactics_fit_beside_each_other_at_one_token(down: str) -> None:
    gate, fit, wanted = one_token_fits("Qwen3-30B-A3B", "g4o", down)
    assert gate == 3 and fit >= 3, (gate, fit, wanted)
    if down != "d3ao":  # every down CTA of the call resident while gate/up runs
        assert fit >= wanted == 4, (fit, wanted)


def test_g4o_fits_qwen3_235b_a22b_in_one_wave() -> None:
    """768 CTAs at one token: 6 per SM by registers where g4r8 fits 3 (two waves)."""
    stem = "e128_k8_h4096_i1536"
    for tactic, per_sm in (("g4o", 6), ("g4r8", 3)):
        assert REGISTERS_PER_SM // per_cta(f"netra_fp8_moe_gate_up_{stem}_{tactic}") == per_sm, tactic
    assert 6 * SMS >= 1536 // 16 * 8 > 3 * SMS
