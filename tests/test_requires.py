"""A tactic serves the contracts its template admits (issue 28, DeepSeek-V3's routed experts): a template
manifest's [[requires]] decide which (contract, tactic) pairs are built, each mirrors a static_assert the
real nvcc still enforces, and a malformed one is refused naming the manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import REPO

from netra import targets
from netra.core import expr
from netra.core.types import ArtifactSpec, artifact_file, artifact_name
from netra.errors import AssemblyError, LaunchError, ManifestError
from netra.release import manifests

DEEPSEEK = {"experts": 256, "topk": 8, "hidden": 7168, "inter": 2048}
MOE = ("fp8_moe_gate_up", "fp8_moe_down")


@pytest.fixture(scope="module")
def cat() -> manifests.Manifests:
    return manifests.load(REPO)


@pytest.mark.parametrize(
    ("text", "env", "holds"),
    [
        ("TOPK <= EXPERTS", {"TOPK": 8, "EXPERTS": 8}, True),
        ("TOPK <= EXPERTS", {"TOPK": 8, "EXPERTS": 4}, False),
        ("HIDDEN % (NETRA_BLOCK / 32 * 128) == 0", {"HIDDEN": 7168, "NETRA_BLOCK": 256}, True),
        ("HIDDEN % (NETRA_BLOCK / 32 * 128) == 0", {"HIDDEN": 7168, "NETRA_BLOCK": 512}, False),
        ("896 / 128 % 2 != 0", {}, True),  # % binds as * and /, left to right: (896 / 128) % 2
        ("1 < 2", {}, True),
        ("2 >= 3", {}, False),
    ],
)
def test_conditions_compare_two_expressions(text: str, env: dict[str, int], holds: bool) -> None:
    assert expr.holds(text, env) is holds


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("HIDDEN % 128", "not one comparison"),
        ("A == B == C", "not one comparison"),
        ("A => B", "not one comparison"),
        ("A == (B", "expected )"),
        ("A % 0 == 0", "division by zero"),
    ],
)
def test_a_bad_condition_is_one_line_launch_error(text: str, fragment: str) -> None:
    with pytest.raises(LaunchError) as e:
        expr.holds(text, {"A": 1, "B": 1, "C": 1})
    assert "\n" not in str(e.value) and fragment in str(e.value), str(e.value)


# One failing (contract, tactic) pair per requirement of the two templates: it fails that requirement
# first, and nvcc refuses its instantiation with the static_assert whose message is the requirement's why.
FAILING = [
    ("fp8_moe_gate_up", 0, "g8s", {"experts": 4, "topk": 8, "hidden": 2048, "inter": 768}),
    ("fp8_moe_gate_up", 1, "g16", DEEPSEEK),
    ("fp8_moe_gate_up", 2, "g8", DEEPSEEK),
    ("fp8_moe_gate_up", 3, "g4p", {"experts": 128, "topk": 8, "hidden": 2560, "inter": 768}),
    ("fp8_moe_down", 0, "d3", {"experts": 4, "topk": 8, "hidden": 2048, "inter": 768}),
    ("fp8_moe_down", 1, "d3", DEEPSEEK),
    ("fp8_moe_down", 2, "d3", {"experts": 128, "topk": 8, "hidden": 2048, "inter": 1152}),
    ("fp8_moe_down", 3, "d3p", {"experts": 128, "topk": 8, "hidden": 2048, "inter": 1152}),
]


def test_every_requirement_has_a_failing_pair_below(cat: manifests.Manifests) -> None:
    for op in MOE:
        tpl = cat.templates[("sm_90", op)]
        assert sorted(i for o, i, _, _ in FAILING if o == op) == list(range(len(tpl.requires)))


@pytest.mark.parametrize(("op", "index", "tactic", "contract"), FAILING)
def test_a_requirement_mirrors_the_static_assert_nvcc_enforces(
    cat: manifests.Manifests, tmp_path: Path, op: str, index: int, tactic: str, contract: dict[str, int]
) -> None:
    tpl = cat.templates[("sm_90", op)]
    tac = next(t for t in cat.tactics if t.target == "sm_90" and t.name == tactic)
    definitions = manifests.instance_definitions(tac, contract)
    requirement = tpl.requires[index]
    assert tpl.refusal(definitions) == requirement
    name = artifact_name(op, contract, tactic)
    spec = ArtifactSpec(
        name=name, target="sm_90", template=tpl, tactic=tac, contract=contract,
        definitions=dict(sorted(definitions.items())), rows_per_block=0,
        file=artifact_file("sm_90", name, ".cubin"),
    )  # fmt: skip
    sm90 = targets.get("sm_90")
    with pytest.raises(AssemblyError) as e:
        sm90.compile(spec, sm90.discover(), REPO, tmp_path, tmp_path / "out")
    assert f"{op}: {requirement.why}" in str(e.value), str(e.value)


def _tree(tmp_path: Path) -> Path:
    for d in ("kernels", "manifests", "release", "requirements"):
        shutil.copytree(REPO / d, tmp_path / d, symlinks=True)
    return tmp_path


@pytest.mark.parametrize(
    ("holds", "fragment"),
    [
        ("HIDDEN % THREADS == 0", "reads THREADS, which no instantiation defines"),
        ("HIDDEN % 128", "not one comparison"),
        ("HIDDEN / (NETRA_BLOCK == 0", "expected )"),
    ],
)
def test_a_malformed_requirement_is_refused_naming_the_template_manifest(
    tmp_path: Path, holds: str, fragment: str
) -> None:
    root = _tree(tmp_path)
    rel = "kernels/cuda/fp8_moe_gate_up.toml"
    text = (root / rel).read_text()
    (root / rel).write_text(text.replace('holds = "TOPK <= EXPERTS"', f"holds = {json.dumps(holds)}", 1))
    with pytest.raises(ManifestError) as e:
        manifests.load(root)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(rel) and fragment in msg, msg


def test_a_requirement_that_cannot_be_evaluated_is_the_manifest_s_error(tmp_path: Path) -> None:
    """A division the requirements before it do not make exact: named, with the fix, never a crash."""
    root = _tree(tmp_path)
    rel = "kernels/cuda/fp8_moe_gate_up.toml"
    text = (root / rel).read_text()
    (root / rel).write_text(text.replace('holds = "TOPK <= EXPERTS"', 'holds = "HIDDEN / 3 >= 0"', 1))
    with pytest.raises(ManifestError) as e:
        manifests.load(root)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(rel) and "is not exact" in msg and "cdiv" in msg, msg
