"""A tactic serves the contracts its template admits (issue 28, DeepSeek-V3's routed experts): a template
manifest's [[requires]] decide which (contract, tactic) pairs are built, each mirrors a static_assert the
real nvcc still enforces, every pair the manifests declared before is still built, and a contract none of
whose tactics is admitted is one line naming it and the requirement."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tactic_variants as variants
from conftest import REPO

from netra import targets
from netra.core import expr
from netra.errors import AssemblyError, LaunchError, ManifestError
from netra.release import manifests

DEEPSEEK = {"experts": 256, "topk": 8, "hidden": 7168, "inter": 2048}
# sm_90's down tactics that DeepSeek-V3's down contract (inter 2048) admits, in its table's candidate order
V3_DOWN = ("d8sh", "d8x8", "d8x8s3", "d8x64s3m", "d8x32cm", "d8x64s3me16")
QWEN3 = ({"experts": 128, "topk": 8, "hidden": 2048, "inter": 768},
         {"experts": 128, "topk": 8, "hidden": 4096, "inter": 1536})  # fmt: skip
MOE = ("fp8_moe_gate_up", "fp8_moe_down")
TEMPLATES = (*MOE, "fp8_moe_gate_up_tc", "fp8_moe_down_tc")  # the MoE stages' build paths


@pytest.fixture(scope="module")
def cat() -> manifests.Manifests:
    return manifests.load(REPO)


def _key(op: str, params: dict[str, int]) -> str:
    from netra.core.ops import contract_key

    return contract_key(op, params)


def _tactics(cat: manifests.Manifests, cls: str, key: str) -> set[str]:
    return {a.tactic.name for a in cat.artifacts if a.target == cls and a.key == key}


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


def test_every_contract_keeps_every_tactic_of_its_class_but_deepseek_s_routed_experts(
    cat: manifests.Manifests,
) -> None:
    """Only DeepSeek-V3's routed experts lose tactics (the ones that do not divide hidden 7168 or inter
    2048: sm_90's d3, sm_100's register-path tactics but bd2 and bd2a3), and every class that builds the
    op still builds it. The tensor-core templates (fp8_moe_gate_up_tc, fp8_moe_down_tc) take every
    contract, DeepSeek-V3's too."""
    deepseek = {_key(op, DEEPSEEK) for op in MOE}
    by_class_op: dict[tuple[str, str], set[str]] = {}
    for t in cat.tactics:
        by_class_op.setdefault((t.target, t.op), set()).add(t.name)
    for key in {a.key for a in cat.artifacts} - deepseek:
        for cls in cat.targets():
            built = _tactics(cat, cls, key)
            op = key.partition("(")[0]
            refused = {n.tactic for n in cat.not_admitted if (n.target, n.key) == (cls, key)}
            assert not built or built == by_class_op[(cls, op)] - refused, (cls, key)
    assert [(n.target, n.key, n.tactic) for n in cat.not_admitted if n.key not in deepseek] == []
    want = {
        ("sm_90", "fp8_moe_gate_up"): {
            "g4r8", "g4o", "g8x8", "g8x64p", "g8x8s3", "g8x16s3", "g8x16c", "g8x64k2e16",
        },
        ("sm_90", "fp8_moe_down"): set(V3_DOWN),
        ("sm_100", "fp8_moe_gate_up"): {"bg8s", "bg8sr4", "bg4r8", "bg4a2", "bg2a4"},
        ("sm_100", "fp8_moe_down"): {"bd2", "bd2a3"},
    }  # fmt: skip
    for (cls, op), tactics in want.items():
        key = _key(op, DEEPSEEK)
        assert _tactics(cat, cls, key) == tactics
        refused = {n.tactic for n in cat.not_admitted if (n.target, n.key) == (cls, key)}
        assert refused == by_class_op[(cls, op)] - tactics
    for q in QWEN3:  # bd2 divides inter 768 and 1536 as well: it applies to them
        assert "bd2" in _tactics(cat, "sm_100", _key("fp8_moe_down", q))
    reasons = {(n.target, n.tactic): n.requirement.holds for n in cat.not_admitted}
    assert reasons[("sm_100", "bg16")] == "HIDDEN % (NETRA_BLOCK / 32 * 128) == 0"
    assert reasons[("sm_100", "bg8")].startswith("HIDDEN / (NETRA_BLOCK / 32) % min(")
    assert reasons[("sm_90", "d3")] == (
        "INTER % ((NETRA_BLOCK / 32 - (NETRA_BLOCK / 32 - 1) * SLOT_TILE) / (1 + min(WGMMA, 1)) * 128) == 0"
    )


# One failing (contract, tactic) pair per requirement of the two templates: it fails that requirement
# first, and nvcc refuses its instantiation with the static_assert whose message is the requirement's why.
# A template option no built tactic uses (retired with its tactics, docs/ops/fp8_moe.md) is reached from a
# built one by changing its constants ("NAME+K=V+...", "block" its threads): the geometry the retired
# g16, g8, g4p, g4a2, g8w8, g8w64, d3p, d3a2, d4w8, d4w64 and g4x8 had.
G8W8 = "g4o+block=256+MIN_BLOCKS=1+K_SLICE=512+WGMMA=8"
D4W8 = "d3+block=128+MIN_BLOCKS=1+K_SLICE=512+WGMMA=8"
FAILING = [
    ("fp8_moe_gate_up", 0, "g4o", {"experts": 4, "topk": 8, "hidden": 2048, "inter": 768}),
    ("fp8_moe_gate_up", 1, "g4o+block=512+MIN_BLOCKS=1", DEEPSEEK),
    ("fp8_moe_gate_up", 2, "g4o+block=256+MIN_BLOCKS=1+K_SLICE=256", DEEPSEEK),
    ("fp8_moe_gate_up", 3, "g4o+MIN_BLOCKS=3+PREFETCH=1", {"experts": 128, "topk": 8, "hidden": 2560, "inter": 768}),
    ("fp8_moe_gate_up", 4, "g4o+MIN_BLOCKS=4+STAGES=2", {"experts": 128, "topk": 8, "hidden": 512, "inter": 768}),
    ("fp8_moe_gate_up", 5, f"{G8W8}+PREFETCH=1", {"experts": 128, "topk": 8, "hidden": 8192, "inter": 768}),
    ("fp8_moe_gate_up", 6, G8W8, {"experts": 128, "topk": 8, "hidden": 3072, "inter": 768}),
    ("fp8_moe_gate_up", 7, f"{G8W8}+WGMMA=64", QWEN3[1]),
    ("fp8_moe_gate_up", 8, f"{G8W8}+ACT_STAGE=1", QWEN3[0]),
    ("fp8_moe_down", 0, "d3", {"experts": 4, "topk": 8, "hidden": 2048, "inter": 768}),
    ("fp8_moe_down", 1, "d3", DEEPSEEK),
    ("fp8_moe_down", 2, "d3", {"experts": 128, "topk": 8, "hidden": 2048, "inter": 1152}),
    ("fp8_moe_down", 3, "d3+MIN_BLOCKS=3+K_SLICE=128+PREFETCH=1", {"experts": 128, "topk": 8, "hidden": 2048, "inter": 1152}),
    ("fp8_moe_down", 4, "d3+K_SLICE=128+STAGES=2", {"experts": 128, "topk": 8, "hidden": 2048, "inter": 384}),
    ("fp8_moe_down", 5, f"{D4W8}+PREFETCH=1", {"experts": 128, "topk": 8, "hidden": 2048, "inter": 4096}),
    ("fp8_moe_down", 6, D4W8, QWEN3[1]),
    ("fp8_moe_down", 7, f"{D4W8}+WGMMA=64", {"experts": 128, "topk": 8, "hidden": 2048, "inter": 4096}),
    ("fp8_moe_down", 8, f"{D4W8}+EARLY=1", QWEN3[0]),
    ("fp8_moe_down", 9, "d8sh+SLOT_SUM=1", QWEN3[0]),
    ("fp8_moe_down", 10, "d8sh+GRID_EXPERTS=8", QWEN3[0]),
    ("fp8_moe_down", 11, f"{D4W8}+L2_AHEAD=1", QWEN3[0]),
    ("fp8_moe_down", 12, f"{D4W8}+ACT_STAGE=1", QWEN3[0]),
    ("fp8_moe_down", 13, "d3+COLUMNS=16", QWEN3[0]),
    ("fp8_moe_gate_up_tc", 0, "g8x8", {"experts": 4, "topk": 8, "hidden": 2048, "inter": 768}),
    ("fp8_moe_gate_up_tc", 1, "g8x64p+OVERLAP=0+STAGES=8", QWEN3[0]),
    ("fp8_moe_gate_up_tc", 2, "g8x8+MAX_TOKENS=256", QWEN3[0]),
    ("fp8_moe_gate_up_tc", 3, "g8x8+COLUMNS=64", QWEN3[0]),
    ("fp8_moe_gate_up_tc", 4, "g8x8+OVERLAP=1+STAGES=2", QWEN3[0]),
    ("fp8_moe_gate_up_tc", 5, "g8x8+block=128+COLUMNS=64+KSPLIT=2", QWEN3[0]),
    ("fp8_moe_gate_up_tc", 6, "g8x64k2e16+GRID_EXPERTS=1024+KSPLIT=8", {"experts": 128, "topk": 8, "hidden": 1536, "inter": 768}),
    ("fp8_moe_down_tc", 0, "d8x8", {"experts": 4, "topk": 8, "hidden": 2048, "inter": 768}),
    ("fp8_moe_down_tc", 1, "d8x64s3m+SLOT_SUM=0+MIN_BLOCKS=1+STAGES=8", {"experts": 128, "topk": 8, "hidden": 2048, "inter": 16384}),
    ("fp8_moe_down_tc", 2, "d8x8+MAX_TOKENS=128", QWEN3[0]),
    ("fp8_moe_down_tc", 3, "d8x8+COLUMNS=64", QWEN3[0]),
    ("fp8_moe_down_tc", 4, "d8x8+OVERLAP=1+STAGES=2", QWEN3[0]),
]  # fmt: skip


def test_every_requirement_has_a_failing_pair_below(cat: manifests.Manifests) -> None:
    for op in TEMPLATES:
        tpl = cat.templates[("sm_90", op)]
        assert sorted(i for o, i, _, _ in FAILING if o == op) == list(range(len(tpl.requires)))


@pytest.mark.parametrize(("op", "index", "tactic", "contract"), FAILING)
def test_a_requirement_mirrors_the_static_assert_nvcc_enforces(
    cat: manifests.Manifests, tmp_path: Path, op: str, index: int, tactic: str, contract: dict[str, int]
) -> None:
    tpl = cat.templates[("sm_90", op)]  # op: the template's name
    tac = variants.tactic(cat, tactic)
    requirement = tpl.requires[index]
    assert tpl.refusal(manifests.instance_definitions(tac, contract)) == requirement
    spec = variants.artifact(cat, contract, tac)
    sm90 = targets.get("sm_90")
    with pytest.raises(AssemblyError) as e:
        sm90.compile(spec, sm90.discover(), REPO, tmp_path, tmp_path / "out")
    assert f"{op}: {requirement.why}" in str(e.value), str(e.value)


def _tree(tmp_path: Path) -> Path:
    for d in ("kernels", "manifests", "release", "requirements"):
        shutil.copytree(REPO / d, tmp_path / d, symlinks=True)
    return tmp_path


def _drop_tactic(root: Path, cls: str, name: str) -> None:
    rel = root / "manifests" / cls / "tactics.toml"
    text = rel.read_text()
    start = text.index(f'[[tactics]]\nop = "fp8_moe_down"\nname = "{name}"')
    end = text.find("[[tactics]]", start + 1)
    rel.write_text(text[:start] + (text[end:] if end >= 0 else ""))


def test_a_contract_no_tactic_is_admitted_for_is_one_line_naming_it_and_the_requirement(
    tmp_path: Path,
) -> None:
    root = _tree(tmp_path)
    for name in V3_DOWN:  # sm_90's down tactics at inter 2048
        _drop_tactic(root, "sm_90", name)
    with pytest.raises(ManifestError) as e:
        manifests.load(root)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"contract {_key('fp8_moe_down', DEEPSEEK)} (used by DeepSeek-V3)"), msg
    assert "none of the sm_90 tactics for fp8_moe_down" in msg
    assert (
        "'INTER % ((NETRA_BLOCK / 32 - (NETRA_BLOCK / 32 - 1) * SLOT_TILE) / (1 + min(WGMMA, 1)) * 128) == 0'"
        in msg
        and "kernels/cuda/fp8_moe_down.toml" in msg
    )
    assert "add to manifests/sm_90/tactics.toml a tactic for fp8_moe_down" in msg
    # the command says the same, one line, non-zero, no traceback, nothing written
    before = (root / "release" / "manifest.lock").read_bytes()
    r = subprocess.run(
        [sys.executable, "-m", "netra", "lock", "--root", str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "none of the sm_90 tactics for fp8_moe_down" in r.stderr
    assert (root / "release" / "manifest.lock").read_bytes() == before


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


def test_netra_lock_lists_every_pair_not_admitted_and_why(tmp_path: Path, cat: manifests.Manifests) -> None:
    """What the artifact count leaves out is visible where the lock is written (--json, its schema; the
    text report prints the same pairs, one a line), each with the condition it fails. One run: the lock
    examines every code object."""
    jsonschema = pytest.importorskip("jsonschema")
    from netra.cli import schemas

    root = _tree(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "netra", "lock", "--json", "-q", "--root", str(root)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    jsonschema.validate(doc, schemas.load("lock"))
    assert (root / "release/manifest.lock").read_bytes() == (REPO / "release/manifest.lock").read_bytes()
    want = [(n.target, n.key, n.tactic, n.requirement.holds, n.requirement.why) for n in cat.not_admitted]
    got = [(d["gpu_class"], d["contract"], d["tactic"], d["requires"], d["why"]) for d in doc["not_admitted"]]
    assert got == want and len(got) == 8
    assert {d["template"] for d in doc["not_admitted"]} == {
        "kernels/cuda/fp8_moe_gate_up.toml",
        "kernels/cuda/fp8_moe_down.toml",
    }


def test_the_table_and_netra_explain_say_why_a_tactic_is_no_candidate(cat: manifests.Manifests) -> None:
    """Where the contract is served (an install has no template manifests): the class's table records the
    tactics not admitted in the contract's entry, and `netra explain` prints them (and the routed MoE's
    grid expression, which it used to fail on with a KeyError)."""
    from test_cli import valid

    from netra.runtime import open_catalog

    key = _key("fp8_moe_down", DEEPSEEK)
    entry = open_catalog("sm_90").table.entries[key]
    down = list(V3_DOWN)
    assert [c.tactic for c in entry.candidates] == down
    want = [(n.tactic, n.requirement.holds, n.requirement.why) for n in cat.not_admitted
            if (n.target, n.key) == ("sm_90", key)]  # fmt: skip
    assert (
        sorted((n.tactic, n.requires, n.why) for n in entry.not_admitted) == sorted(want) and len(want) == 1
    )
    assert open_catalog("sm_90").table.entries[_key("fp8_moe_down", QWEN3[0])].not_admitted == ()
    r = subprocess.run(
        [sys.executable, "-m", "netra", "explain", key, "--gpu-class", "sm_90", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = valid("explain", r.stdout)
    # each candidate says the accumulation it is judged by: the WGMMA ones 14 bits, the others fp32's 24
    bits = {c["tactic"]: c["accumulator_bits"] for c in doc["matches"][0]["candidates"]}
    assert bits == {t: 14 if t.startswith(("d4w", "d8x", "d4x")) else 24 for t in down}
    assert [n["tactic"] for n in doc["matches"][0]["not_admitted"]] == ["d3"]
    r = subprocess.run(
        [sys.executable, "-m", "netra", "explain", key, "--gpu-class", "sm_90"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "  not admitted: tactic d3: INTER must split into whole 128-byte blocks per warp (" in r.stdout
    assert "grid (448, min(1, rows * 8), 1)" in r.stdout  # d8sh: HIDDEN / 16 CTAs of one row
    assert "grid (56, min(16, rows * 8), 1)" in r.stdout  # d8x64s3me16: 16 rows at most
    # d8x8, d8x8s3, d8x64s3m, d8x32cm, d8x64s3me16
    assert r.stdout.count("accumulation: tensor-core partials of 14 significant bits") == 5
