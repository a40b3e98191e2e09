"""The op-family record (netra/core/families/) and what is derived from it, and the launch model
(netra.core.launch, netra.core.expr): real manifests read by the real reader, no mocks.

The derived torch schemas are held to the strings the operators had when they were written by hand;
the derived bytes moved and output shapes to the formulas conformance used to restate per family."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from netra.core import expr
from netra.core.launch import LaunchModel, Step, Value, Workspace
from netra.core.ops import FAMILIES
from netra.errors import LaunchError, ManifestError, NetraError
from netra.release import manifests
from netra.torch import signatures

REPO = Path(__file__).resolve().parents[1]

SCHEMAS = {  # the operators' schemas as they were written by hand before the record existed
    "fp8_group_quant": ("fp8_group_quant(Tensor x, int group=128) -> (Tensor, Tensor)"),
    "fp8_group_quant_out": (
        "fp8_group_quant_out(Tensor(a!) q, Tensor(b!) scales, Tensor x, int group=128) -> ()"
    ),
    "fused_add_rmsnorm": (
        "fused_add_rmsnorm(Tensor x, Tensor residual, Tensor w, float eps, int weight_offset=0) -> (Tensor, Tensor)"
    ),
    "fused_add_rmsnorm_": (
        "fused_add_rmsnorm_(Tensor x, Tensor(a!) residual, Tensor w, float eps, int weight_offset=0) -> Tensor"
    ),
    "fused_add_rmsnorm_fp8_group_quant": (
        "fused_add_rmsnorm_fp8_group_quant(Tensor x, Tensor residual, Tensor w, float eps, int weight_offset=0, int group=128) -> (Tensor, Tensor, Tensor)"
    ),
    "fused_add_rmsnorm_fp8_group_quant_": (
        "fused_add_rmsnorm_fp8_group_quant_(Tensor x, Tensor(a!) residual, Tensor w, float eps, int weight_offset=0, int group=128) -> (Tensor, Tensor)"
    ),
    "fused_add_rmsnorm_fp8_group_quant_out": (
        "fused_add_rmsnorm_fp8_group_quant_out(Tensor(a!) q, Tensor(b!) scales, Tensor(c!) residual_out, Tensor x, Tensor residual, Tensor w, float eps, int weight_offset=0, int group=128) -> ()"
    ),
    "fused_add_rmsnorm_out": (
        "fused_add_rmsnorm_out(Tensor(a!) y, Tensor(b!) residual_out, Tensor x, Tensor residual, Tensor w, float eps, int weight_offset=0) -> ()"
    ),
    "moe_topk_softmax": ("moe_topk_softmax(Tensor logits, int topk) -> (Tensor, Tensor)"),
    "moe_topk_softmax_out": (
        "moe_topk_softmax_out(Tensor(a!) ids, Tensor(b!) weights, Tensor logits, int topk) -> ()"
    ),
    "rmsnorm": ("rmsnorm(Tensor x, Tensor w, float eps, int weight_offset=0) -> Tensor"),
    "rmsnorm_fp8_group_quant": (
        "rmsnorm_fp8_group_quant(Tensor x, Tensor w, float eps, int weight_offset=0, int group=128) -> (Tensor, Tensor)"
    ),
    "rmsnorm_fp8_group_quant_out": (
        "rmsnorm_fp8_group_quant_out(Tensor(a!) q, Tensor(b!) scales, Tensor x, Tensor w, float eps, int weight_offset=0, int group=128) -> ()"
    ),
    "rmsnorm_out": ("rmsnorm_out(Tensor(a!) y, Tensor x, Tensor w, float eps, int weight_offset=0) -> ()"),
    "silu_mul_fp8_quant": ("silu_mul_fp8_quant(Tensor x, int group=128) -> (Tensor, Tensor)"),
    "silu_mul_fp8_quant_out": (
        "silu_mul_fp8_quant_out(Tensor(a!) q, Tensor(b!) scales, Tensor x, int group=128) -> ()"
    ),
}


# The routed MoE's stages came after the record: their schemas, written out from docs/ops/fp8_moe.md.
MOE_SCHEMAS = {
    "fp8_moe_gate_up": "fp8_moe_gate_up(Tensor xq, Tensor xs, Tensor ids, Tensor w13, Tensor w13s) -> (Tensor, Tensor)",
    "fp8_moe_gate_up_out": (
        "fp8_moe_gate_up_out(Tensor(a!) hq, Tensor(b!) hs, Tensor xq, Tensor xs, Tensor ids, Tensor w13, Tensor w13s) -> ()"
    ),
    "fp8_moe_down": (
        "fp8_moe_down(Tensor hq, Tensor hs, Tensor ids, Tensor weights, Tensor w2, Tensor w2s) -> Tensor"
    ),
    "fp8_moe_down_out": (
        "fp8_moe_down_out(Tensor(a!) out, Tensor hq, Tensor hs, Tensor ids, Tensor weights, Tensor w2, Tensor w2s) -> ()"
    ),
}
# DeepSeek-V3's router came after the record too: its schemas, written out from
# docs/ops/moe_grouped_topk_sigmoid.md (scale is the routed scaling factor, a runtime float).
ROUTER_SCHEMAS = {
    "moe_grouped_topk_sigmoid": (
        "moe_grouped_topk_sigmoid(Tensor logits, Tensor bias, int topk, int groups, int topk_groups, float scale) -> (Tensor, Tensor)"
    ),
    "moe_grouped_topk_sigmoid_out": (
        "moe_grouped_topk_sigmoid_out(Tensor(a!) ids, Tensor(b!) weights, Tensor logits, Tensor bias, int topk, int groups, int topk_groups, float scale) -> ()"
    ),
}
ROW_FAMILIES = sorted(op for op, fam in FAMILIES.items() if fam.dispatch == "rows")
TOKEN_FAMILIES = sorted(op for op, fam in FAMILIES.items() if fam.dispatch == "tokens")


def test_torch_schemas_derived_from_the_record_equal_the_hand_written_ones() -> None:
    derived: dict[str, str] = {}
    for fam in FAMILIES.values():
        derived |= signatures.all_schemas(fam)
    assert derived == SCHEMAS | MOE_SCHEMAS | ROUTER_SCHEMAS


def test_the_registered_operators_have_the_derived_schemas() -> None:
    torch = pytest.importorskip("torch")
    import netra.torch  # noqa: F401  (registers the operators)

    for name, schema in (SCHEMAS | ROUTER_SCHEMAS).items():
        got = str(getattr(torch.ops.netra, name).default._schema)
        assert got == f"netra::{schema}"


P = {
    "hidden": 4096,
    "weight_offset": 1,
    "group": 128,
    "inter": 1536,
    "experts": 128,
    "topk": 8,
    "groups": 8,
    "topk_groups": 4,
}


def _old_bytes_moved(op: str, p: dict[str, int], rows: int) -> int:
    """conformance.bytes_moved as it was written per family before the record."""
    h, g = p.get("hidden", 0), 128
    if op == "rmsnorm":
        return 4 * h * rows + 2 * h
    if op == "fp8_group_quant":
        return rows * (2 * h + h + 4 * (h // g))
    if op == "silu_mul_fp8_quant":
        i = p["inter"]
        return rows * (4 * i + i + 4 * (i // g))
    if op == "moe_topk_softmax":
        return rows * (2 * p["experts"] + 8 * p["topk"])
    if op == "moe_grouped_topk_sigmoid":  # fp32 logits per row, the fp32 bias once
        return rows * (4 * p["experts"] + 8 * p["topk"]) + 4 * p["experts"]
    residual = "fused_add" in op
    quant = op.endswith("quant")
    reads = 4 * h if residual else 2 * h
    writes = (2 * h if residual else 0) + (h + 4 * (h // g) if quant else 2 * h)
    return rows * (reads + writes) + 2 * h


@pytest.mark.parametrize("op", ROW_FAMILIES)
@pytest.mark.parametrize("rows", [0, 1, 7, 4096])
def test_bytes_moved_and_outputs_derived_from_the_record(op: str, rows: int) -> None:
    np = pytest.importorskip("numpy")
    from netra.certify import conformance

    fam = FAMILIES[op]
    p = {k: P[k] for k in fam.params}
    assert conformance.bytes_moved(op, p, rows) == _old_bytes_moved(op, p, rows)
    outs = conformance.outputs(op, p, rows)
    assert tuple(outs) == tuple(a for a in fam.args if a in fam.out_names)  # ABI order
    n = p.get("hidden", p.get("inter"))
    for name, (dtype, shape) in outs.items():
        if name == "scales":
            assert (dtype, shape) == (np.dtype(np.float32), (rows, n // 128))
        elif name == "q":
            assert (dtype, shape) == (np.dtype(np.uint8), (rows, n))
        elif name in ("ids", "weights"):
            assert shape == (rows, p["topk"])
        else:
            assert (dtype, shape) == (np.dtype(np.uint16), (rows, p["hidden"]))


@pytest.mark.parametrize("tokens", [0, 1, 7, 64])
def test_the_routed_moe_moves_the_experts_hit_and_writes_per_pair_and_per_token(tokens: int) -> None:
    """Issue 28's stages: every activation read once, only the hit experts' weights and scales (hit =
    min(E, tokens * topk) unless told), h's codes and scales per (token, slot) pair, out per token."""
    np = pytest.importorskip("numpy")
    from netra.certify import conformance

    assert TOKEN_FAMILIES == ["fp8_moe_down", "fp8_moe_gate_up"]
    p = {k: P[k] for k in ("experts", "topk", "hidden", "inter")}
    e, k, h, i = p["experts"], p["topk"], p["hidden"], p["inter"]
    pairs, hit = tokens * k, min(e, tokens * k)
    h_codes = pairs * i + 4 * pairs * (i // 128)
    gate_up = (
        tokens * h + 4 * tokens * (h // 128) + 4 * pairs + hit * (2 * i * h + 4 * (2 * i // 128) * (h // 128))
    )
    down = 4 * pairs + 4 * pairs + hit * (h * i + 4 * (h // 128) * (i // 128)) + 2 * tokens * h
    assert conformance.bytes_moved("fp8_moe_gate_up", p, tokens) == gate_up + h_codes
    assert conformance.bytes_moved("fp8_moe_down", p, tokens) == down + h_codes
    assert FAMILIES["fp8_moe_down"].bytes_moved(p, tokens, {"hit": 3}) == down + h_codes - (hit - 3) * (
        h * i + 4 * (h // 128) * (i // 128)
    )
    assert conformance.outputs("fp8_moe_gate_up", p, tokens) == {
        "hq": (np.dtype(np.uint8), (pairs, i)),
        "hs": (np.dtype(np.float32), (pairs, i // 128)),
    }
    assert conformance.outputs("fp8_moe_down", p, tokens) == {"out": (np.dtype(np.uint16), (tokens, h))}


def test_the_table_dtypes_derived_from_the_record_are_the_certified_ones() -> None:
    """The committed tables record each contract's dtypes; the record's derivation must equal them."""
    import json

    for table in sorted((REPO / "release/tables").glob("*.json")):
        for e in json.loads(table.read_text())["entries"]:
            c = e["contract"]
            fam = FAMILIES[c["op"]]
            assert (c["dtypes"], c["layout"], c["quant"]) == (fam.dtypes, fam.layout, fam.quant), table.name


# ---------------------------------------------------------------------------------------------------
# The template manifests' [[args]] are checked against the record


def _tree(tmp_path: Path) -> Path:
    for d in ("kernels", "manifests", "release", "requirements"):
        shutil.copytree(REPO / d, tmp_path / d, symlinks=True)
    return tmp_path


def test_a_grid_reading_a_constant_no_tactic_defines_is_refused_naming_it(tmp_path: Path) -> None:
    """The routed MoE's grid reads grid_experts (its templates' GRID_EXPERTS): without it the table would
    record an expression the runtime cannot evaluate, so the manifests are refused first."""
    root = _tree(tmp_path)
    drop = re.compile(r"^GRID_EXPERTS = .*\n", flags=re.M)  # from the gate/up templates and their tactics
    # and the _tc template's requirement that reads it
    req = re.compile(r'^\[\[requires\]\]\nholds = "GRID_EXPERTS >= EXPERTS"\n.*\n', flags=re.M)
    for rel in ("kernels/cuda/fp8_moe_gate_up.toml", "kernels/cuda/fp8_moe_gate_up_tc.toml"):
        (root / rel).write_text(drop.sub("", req.sub("", (root / rel).read_text())))
    for rel in ("manifests/sm_90/tactics.toml", "manifests/sm_100/tactics.toml"):
        blocks = (root / rel).read_text().split("[[tactics]]")
        gate_up = [drop.sub("", b) if 'op = "fp8_moe_gate_up"' in b else b for b in blocks]
        (root / rel).write_text("[[tactics]]".join(gate_up))
    with pytest.raises(ManifestError) as e:
        manifests.load(root)
    assert (
        "the fp8_moe_gate_up family's launch reads grid_experts, which neither the contract nor the tactic"
        in str(e.value)
    )
    assert "declare GRID_EXPERTS in kernels/cuda/fp8_moe_gate_up.toml's [tactic_constants]" in str(e.value)


def test_every_template_manifest_declares_its_family_kernel_arguments() -> None:
    m = manifests.load(REPO)
    assert m.artifacts
    for spec in m.artifacts:
        fam = FAMILIES[spec.op]
        assert tuple(a.name for a in spec.template.args) == fam.args


ARG_DAMAGE = {
    "renamed": (r'name = "rows"', 'name = "count"', "[[args]] are y, x, w, count, eps"),
    "reordered": (
        "",
        None,
        "[[args]] are y, w, x, rows, eps",
    ),
    "wrong type": (
        r'(name = "w"\s*size = 8\s*value_kind = "global_buffer"\s*address_space = "global"\s*)type = "bf16\*"',
        r'\1type = "f32*"',
        "argument w is f32*, read_only",
    ),
    "wrong access": (
        r'(name = "x"[^\[]*)access = "read_only"',
        r'\1access = "write_only"',
        "argument x is bf16*, write_only",
    ),
}


@pytest.mark.parametrize("case", sorted(ARG_DAMAGE))
def test_a_template_whose_args_differ_from_the_record_is_refused_naming_the_file(
    tmp_path: Path, case: str
) -> None:
    root = _tree(tmp_path)
    rel = "kernels/cuda/rmsnorm.toml"
    text = (root / rel).read_text()
    pattern, repl, fragment = ARG_DAMAGE[case]
    if repl is None:  # swap x and w (both bf16* read_only): the same layout, another order
        damaged = (
            text.replace('name = "x"', "@").replace('name = "w"', 'name = "x"').replace("@", 'name = "w"')
        )
    else:
        damaged = re.sub(pattern, repl, text, count=1, flags=re.S)
    assert damaged != text
    (root / rel).write_text(damaged)
    with pytest.raises(ManifestError) as e:
        manifests.load(root)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(rel), msg
    assert fragment in msg, msg
    assert "netra/core/families/rmsnorm.py" in msg


# ---------------------------------------------------------------------------------------------------
# Expressions and the launch model


@pytest.mark.parametrize(
    ("text", "env", "value"),
    [
        ("hidden / group", {"hidden": 4096, "group": 128}, 32),
        ("2 * inter", {"inter": 1536}, 3072),
        ("cdiv(rows, rows_per_block)", {"rows": 9, "rows_per_block": 4}, 3),
        ("cdiv(0, 4)", {}, 0),
        ("min(experts, tokens * topk)", {"experts": 128, "tokens": 3, "topk": 8}, 24),
        ("min(experts, tokens * topk)", {"experts": 128, "tokens": 64, "topk": 8}, 128),
        ("max(1, 2, 3) - (4 - 2) * 1", {}, 1),
        ("cdiv(2 * inter, 128)", {"inter": 1536}, 24),
        ("hidden % (8 * 128)", {"hidden": 7168}, 0),
        ("inter % (3 * 128)", {"inter": 2048}, 128),
        ("896 / 128 % 2", {}, 1),  # % binds as * and /: (896 / 128) % 2
    ],
)
def test_expressions_evaluate(text: str, env: dict[str, int], value: int) -> None:
    assert expr.evaluate(text, env) == value


@pytest.mark.parametrize(
    ("text", "env", "fragment"),
    [
        ("hidden / group", {"hidden": 100, "group": 128}, "100 / 128 is not exact"),
        ("rows / 0", {"rows": 1}, "division by zero"),
        ("rows % 0", {"rows": 1}, "division by zero"),
        ("tokens * topk", {"tokens": 1}, "no value for 'topk'"),
        ("__import__('os')", {}, 'unexpected "\'"'),
        ("open(1)", {}, "unknown function 'open'"),
        ("rows +", {"rows": 1}, "expected more"),
        ("rows rows", {"rows": 1}, "after a complete expression"),
        ("cdiv(rows)", {"rows": 1}, "cdiv takes two operands"),
        ("rows ** 2", {"rows": 1}, "unexpected '*'"),
    ],
)
def test_bad_expressions_are_one_line_launch_errors(text: str, env: dict[str, int], fragment: str) -> None:
    with pytest.raises(LaunchError) as e:
        expr.evaluate(text, env)
    assert isinstance(e.value, NetraError)
    msg = str(e.value)
    assert "\n" not in msg and repr(text) in msg and fragment.replace('"', "") in msg.replace('"', ""), msg


def test_the_existing_families_launch_one_step_over_rows() -> None:
    for op in ROW_FAMILIES:
        fam = FAMILIES[op]
        m = fam.launch
        assert [s.template for s in m.steps] == [op]
        assert m.steps[0].args == fam.args
        assert m.dispatch == "rows" and not m.workspaces
        plan = m.plan({"rows": 9, "rows_per_block": 4, "grid_y": 2})
        assert plan.grids == ((3, 2, 1),) and plan.workspace_bytes == 0
        assert m.plan({"rows": 0, "rows_per_block": 4, "grid_y": 1}).grids == ((0, 1, 1),)


def moe_like() -> LaunchModel:
    """A routed MoE at decode as issue 28's prototype needs it (docs/gpu-runs/moe-explore-2026-12-04):
    tokens as the runtime value and the dispatch key; gate/up over (n-tiles of 2I, hit experts) into FP8
    codes and scales, then down over (n-tiles of H, hit experts) into an f32 per-slot workspace, overlapping
    the first; a reducer over tokens; self-resetting counters that start zeroed; dynamic shared memory."""
    return LaunchModel(
        values=(Value("tokens", "u32"),),
        steps=(
            Step(
                "moe_gate_up",
                ("xq", "xs", "ids", "w13", "s13", "hq", "hs", "counters", "tokens"),
                ("cdiv(2 * inter, 128)", "min(experts, tokens * topk)", "1"),
                shared="4 * 16384",
            ),
            Step(
                "moe_down",
                ("hq", "hs", "ids", "w2", "s2", "acc", "tokens"),
                ("cdiv(hidden, 128)", "min(experts, tokens * topk)", "1"),
                overlaps_previous=True,
            ),
            Step("moe_reduce", ("y", "acc", "weights", "tokens"), ("min(sms, cdiv(tokens, 4))", "1", "1")),
        ),
        workspaces=(
            Workspace("hq", "tokens * topk * inter"),
            Workspace("hs", "tokens * topk * (inter / 128) * 4"),
            Workspace("acc", "tokens * topk * hidden * 4"),
            Workspace("counters", "experts * cdiv(2 * inter, 128) * 4", zeroed=True),
        ),
        dispatch="tokens",
    )


@pytest.mark.parametrize("tokens", [1, 3, 64, 200])
def test_a_chain_over_two_axes_with_workspaces_sized_by_runtime_values(tokens: int) -> None:
    m = moe_like()
    params = {"experts": 128, "topk": 8, "hidden": 4096, "inter": 1536}
    rt = m.runtime({"tokens": tokens})
    plan = m.plan({**params, **rt, "sms": 132})
    hit = min(128, tokens * 8)
    assert plan.grids == ((24, hit, 1), (32, hit, 1), (min(132, -(-tokens // 4)), 1, 1))
    assert plan.shared == (65536, 0, 0) and plan.zeroed == ("counters",)
    hq, hs, acc = tokens * 8 * 1536, tokens * 8 * 12 * 4, tokens * 8 * 4096 * 4
    assert plan.sizes == {"hq": hq, "hs": hs, "acc": acc, "counters": 128 * 24 * 4}
    assert plan.offsets["hq"] == 0
    assert plan.offsets["hs"] == -(-hq // 256) * 256
    assert plan.offsets["acc"] == -(-(plan.offsets["hs"] + hs) // 256) * 256
    assert plan.offsets["counters"] == -(-(plan.offsets["acc"] + acc) // 256) * 256
    assert plan.workspace_bytes == plan.offsets["counters"] + 128 * 24 * 4
    assert all(o % 256 == 0 for o in plan.offsets.values())
    args = m.step_args(1, plan, {"ids": 1, "w2": 2, "s2": 3}, rt, base=1 << 20)
    assert args == {
        "hq": 1 << 20,
        "hs": (1 << 20) + plan.offsets["hs"],
        "ids": 1,
        "w2": 2,
        "s2": 3,
        "acc": (1 << 20) + plan.offsets["acc"],
        "tokens": tokens,
    }


def test_runtime_values_are_checked_by_name() -> None:
    m = moe_like()
    with pytest.raises(LaunchError, match="missing tokens"):
        m.runtime({})
    with pytest.raises(LaunchError, match="unknown rows"):
        m.runtime({"tokens": 1, "rows": 1})
    with pytest.raises(LaunchError, match="non-negative integer"):
        m.runtime({"tokens": -1})
    with pytest.raises(LaunchError, match="non-negative integer"):
        m.runtime({"tokens": True})


def test_a_grid_axis_out_of_range_is_refused() -> None:
    m = moe_like()
    with pytest.raises(LaunchError, match=r"moe_gate_up: grid axis 1 .* is outside \[0, 65535\]"):
        m.plan({"experts": 1 << 20, "topk": 8, "hidden": 4096, "inter": 1536, "tokens": 1 << 20, "sms": 132})


def test_a_model_is_checked_when_declared() -> None:
    with pytest.raises(LaunchError, match="dispatch key 'rows' is not a runtime value"):
        LaunchModel(values=(Value("tokens", "u32"),), steps=(Step("t", ("tokens",)),))
    with pytest.raises(LaunchError, match="workspace w is no step's argument"):
        LaunchModel(
            values=(Value("rows", "u32"),), steps=(Step("t", ("rows",)),), workspaces=(Workspace("w", "1"),)
        )
    with pytest.raises(LaunchError, match="the first step has no previous one to overlap"):
        LaunchModel(values=(Value("rows", "u32"),), steps=(Step("t", ("rows",), overlaps_previous=True),))
    with pytest.raises(LaunchError, match="type 'f16'"):
        LaunchModel(values=(Value("rows", "f16"),), steps=(Step("t", ("rows",)),))


@pytest.mark.parametrize("table", sorted(p.name for p in (REPO / "release/tables").glob("*.json")))
def test_every_certified_launch_is_the_familys_launch_model(table: str) -> None:
    """The committed tables keep their JSON; read into the launch model, every candidate's grid is the
    one its family's record declares, at every row count (the existing launches, exactly)."""
    import json

    from netra.runtime import tables

    t = tables.parse(json.loads((REPO / "release/tables" / table).read_text()), table, table[: -len(".json")])
    specs = {a.name: a for a in manifests.load(REPO).artifacts}
    n = 0
    for entry in t.entries.values():
        fam = FAMILIES[entry.op]
        model = fam.launch
        for c in entry.candidates:
            if c.launch.per_block:  # the row-wise families: (cdiv(rows, rows_per_block), grid_y, 1)
                assert c.launch.expressions[0] == f"cdiv(rows, {c.launch.rows_per_block})"
                env = {"rows_per_block": c.launch.rows_per_block, "grid_y": c.launch.grid_axes[1]}
            else:  # the record's grid bound to the contract and the tactic (a routed MoE's: over the
                env = specs[c.artifact].launch_env  # experts hit, at most the tactic's grid_experts rows)
            for rows in (0, 1, 3, 64, 1000, 8192, 2**20 + 7):
                if not c.launch.per_block and rows > 64:
                    continue  # a routed MoE's calls stop at 64 tokens (its chain's limit)
                want = c.launch.grid(rows)
                assert c.launch.grid_for({"rows": rows}) == want
                if rows:
                    assert model.plan({**env, fam.dispatch: rows}).grids == (want,)
                n += 1
    assert n


def test_a_grid_bound_to_a_contract_is_what_a_table_records() -> None:
    from netra.core import expr

    assert expr.bind("min(experts, tokens * topk)", {"experts": 128, "topk": 8}, {"tokens": "rows"}) == (
        "min(128, rows * 8)"
    )
    assert expr.bind("inter / 16", {"inter": 768}) == 48
    assert expr.bind("cdiv(rows, rows_per_block)", {"rows_per_block": 4}) == "cdiv(rows, 4)"
    assert expr.bind("(a + b) * c - (d - e)", {"c": 2}) == "(a + b) * 2 - (d - e)"
    # with the tactic's constants bound too: min and max fold their constant arguments into one, so a
    # tactic whose GRID_EXPERTS caps nothing records the grid it always had
    grid, moe = "min(experts, tokens * topk, grid_experts)", {"experts": 128, "topk": 8}
    assert expr.bind(grid, {**moe, "grid_experts": 1024}, {"tokens": "rows"}) == "min(128, rows * 8)"
    assert expr.bind(grid, {**moe, "grid_experts": 8}, {"tokens": "rows"}) == "min(8, rows * 8)"
    assert expr.bind("max(1, t, 3, u, 2)", {}) == "max(3, t, u)"
    for text in (
        "(a + b) * c - (d - e)",
        "a - (b - c) / d",
        "cdiv(a * (b + 1), c)",
        "min(a, 9, b * c, d, 4)",
    ):
        env = {"a": 7, "b": 3, "c": 2, "d": 1, "e": 5}
        for bound in ({}, {"a": 7}, {"b": 3, "c": 2}):
            rest = expr.bind(text, bound)
            assert expr.evaluate(str(rest), env) == expr.evaluate(text, env)


def test_a_table_grid_expression_may_name_rows_only() -> None:
    import json

    from netra.errors import TableError
    from netra.runtime import tables

    raw = json.loads((REPO / "release/tables/sm_90.json").read_text())
    entry = next(e for e in raw["entries"] if e["contract"]["op"] == "fp8_moe_down")
    entry["candidates"][0]["launch"]["grid"][1] = {"rows": "min(experts, rows * 8)"}
    with pytest.raises(TableError, match=r"may name rows only, not \['experts'\]"):
        tables.parse(raw, "sm_90.json", "sm_90")
    entry["candidates"][0]["launch"]["grid"][1] = {"rows": "min(128, rows *"}
    with pytest.raises(TableError, match="expression 'min\\(128, rows \\*'"):
        tables.parse(raw, "sm_90.json", "sm_90")


@pytest.mark.parametrize("op", sorted(FAMILIES))
def test_every_family_has_its_numerics_module(op: str) -> None:
    pytest.importorskip("numpy")
    from netra.certify import conformance

    mod = conformance.numerics(op)
    assert mod.__name__ == f"netra.certify.numerics.{op}"
    assert set(mod.TOLERANCES) and callable(mod.cases) and callable(mod.expected) and callable(mod.judge)
    assert (REPO / "netra/core/families" / f"{op}.py").is_file()
