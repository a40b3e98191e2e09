"""sm_90 tactics by name, or a built one with constants changed: how the tests reach a template option that
no built tactic uses any more (docs/ops/fp8_moe.md, "Retired tactics"). The template keeps the option, its
requirement and its static_assert, so its machine code and its refusals stay testable."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from netra.core.types import ArtifactSpec, Tactic
from netra.release import manifests

# Retired tactics the tests still compile, as the built tactic and the constants that made them.
RETIRED = {
    "d3e": "d3+EARLY=1",
    "d3oe": "d3+MIN_BLOCKS=7+K_SLICE=128+EARLY=1",
    "d3yse": "d3+GRID_EXPERTS=8+SLOT_SUM=1+EARLY=1",
    "d3o": "d3+MIN_BLOCKS=7+K_SLICE=128",
    "d3ys": "d3+GRID_EXPERTS=8+SLOT_SUM=1",
    "g4r8y": "g4r8+GRID_EXPERTS=8",
    "g8x8p": "g8x8+OVERLAP=1",
    "d8x8p": "d8x8+OVERLAP=1",
    "d8x64": "d8x64s3m+STAGES=5+SLOT_SUM=0+MIN_BLOCKS=1",
    "d8x64p": "d8x64s3m+STAGES=5+OVERLAP=1+SLOT_SUM=0+MIN_BLOCKS=1",
    "d8x64s3": "d8x64s3m+SLOT_SUM=0",
    "d8x64m": "d8x64s3m+STAGES=5+MIN_BLOCKS=1",
    "d8x32c": "d8x32cm+SLOT_SUM=0",
}


def tactic(cat: manifests.Manifests, spec: str) -> Tactic:
    """An sm_90 tactic: a built one by name, a retired one of RETIRED by its name, or "NAME+K=V+...": NAME
    with constants changed in order ("block": its threads), named after the changes."""
    if spec in RETIRED:
        return dataclasses.replace(tactic(cat, RETIRED[spec]), name=spec)
    name, *changes = spec.split("+")
    tac = next(t for t in cat.tactics if t.target == "sm_90" and t.name == name)
    for change in changes:
        k, _, v = change.partition("=")
        tac = (
            dataclasses.replace(tac, name=f"{tac.name}b{v}", block=int(v))
            if k == "block"
            else dataclasses.replace(
                tac, name=f"{tac.name}{k.lower()}{v}", constants={**tac.constants, k: int(v)}
            )
        )
    return tac


def artifact(cat: manifests.Manifests, contract: dict[str, int], tac: Tactic) -> ArtifactSpec:
    """The sm_90 code object of (contract, tactic), made as the catalog makes a built one."""
    tpl = cat.templates[("sm_90", tac.template)]
    return manifests.artifact_spec(tpl, tac, contract, manifests.instance_definitions(tac, contract))


def add_to_manifest(root: Path, cat: manifests.Manifests, names: tuple[str, ...]) -> None:
    """Append the RETIRED tactics `names` to the sm_90 tactics manifest of the tree at `root` (a copy of the
    repository's): a kernel author adding them back, as docs/ops/fp8_moe.md says."""
    blocks = []
    for name in names:
        t = tactic(cat, name)
        lines = ["[[tactics]]", f'op = "{t.op}"', f'name = "{t.name}"', f'template = "{t.template}"',
                 f"block = {t.block}", 'maturity = "experiment"', f'why = "{RETIRED[name]}"',
                 "[tactics.constants]", *(f"{k} = {v}" for k, v in t.constants.items())]  # fmt: skip
        blocks.append("\n".join(lines) + "\n")
    path = root / "manifests" / "sm_90" / "tactics.toml"
    path.write_text(path.read_text() + "\n" + "\n".join(blocks))
