"""Dynamic shared memory (issue 28's tensor-core tactics, whose ring of weights and chunk of activations
outgrow the 48 KB a kernel may declare statically): a template manifest declares the bytes every launch gives as an expression of the
instantiation's constants, the class's table carries them per candidate (the loaders launch with them and
raise the function's limit), the static gate refuses a kernel whose static and dynamic shared memory
together exceed what a CTA may hold, and a malformed expression is the manifest's one-line error."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from netra import targets
from netra.core.types import ArtifactSpec
from netra.errors import ManifestError
from netra.release import manifests
from netra.targets.sm_90 import checks, cubin


@pytest.fixture(scope="module")
def cat() -> manifests.Manifests:
    return manifests.load(REPO)


def _slots(a: ArtifactSpec) -> int:
    """The bytes the WGMMA kernels index (kernels/cuda/fp8_moe_*.cu: a chunk's activations, kParts tiles of
    2 WGMMA columns x k / kParts bytes, then its f32 scales), worked out here from the instantiation's
    constants, independently of the manifest's expression."""
    d = a.definitions
    if "TILE_PAIRS" not in d and not d.get("WGMMA"):
        return 0
    k = d["HIDDEN"] if a.op == "fp8_moe_gate_up" else d["INTER"]
    if "TILE_PAIRS" in d:  # the _tc templates: a ring of k blocks (each tile's rows x 128 bytes, then the
        # chunk's activations from a 1 KB boundary), the chunk's scales, and 1 KB to align the ring
        rows = d["COLUMNS"] * (2 if a.op == "fp8_moe_gate_up" else 1)  # gate and up rows, or down's
        acts = -(-d["TILE_PAIRS"] * 128 // 1024) * 1024
        return d["STAGES"] * (rows * 128 + acts) + d["TILE_PAIRS"] * (k // 128) * 4 + 1024
    return d["WGMMA"] * k + d["WGMMA"] * (k // 128) * 4


def test_every_candidate_gives_the_shared_memory_its_kernel_indexes(cat: manifests.Manifests) -> None:
    table = json.loads((REPO / "release" / "tables" / "sm_90.json").read_text())
    given = {
        c["artifact"]: c["launch"]["dynamic_lds_bytes"] for e in table["entries"] for c in e["candidates"]
    }
    specs = [a for a in cat.artifacts if a.target == "sm_90"]
    assert {a.name for a in specs} == set(given)
    for a in specs:
        assert a.dynamic_shared == _slots(a) == given[a.name], a.name
    dynamic = {a.tactic.name: a.dynamic_shared for a in specs if a.dynamic_shared}
    assert set(dynamic) == {"g8x8", "g8x64p", "g8x8s3", "g8x16s3", "g8x16c", "g8x64k2e16",
                            "d8x8", "d8x8s3", "d8x64s3m", "d8x32cm", "d8x64s3me16"}  # fmt: skip
    # Qwen3-30B-A3B's gate/up with 64 pairs a chunk: a ring of 5 k blocks of 256 rows x 128 bytes and 8 KB
    # of activations, 64 pairs x 16 blocks of scales, 1 KB to align: 210 KB, above a launch's default
    g8x64p = next(a for a in specs if a.tactic.name == "g8x64p" and a.contract["hidden"] == 2048)
    assert g8x64p.dynamic_shared == 5 * (256 * 128 + 8192) + 64 * 16 * 4 + 1024


@pytest.mark.parametrize(
    ("key", "text", "fragment"),
    [
        ("dynamic_shared", "THREADS * 32", "reads THREADS, which no instantiation defines"),
        ("dynamic_shared", "WGMMA * (32", "expected )"),
        ("dynamic_shared", "0 - 4096", "is -4096 bytes, outside [0, 1048576]"),
        ("dynamic_shared", "INTER / 3", "is not exact"),
        # the template's other expression (tests/test_accumulator_bits.py): the same checks, its own range
        ("accumulator_bits", "WARPS", "reads WARPS, which no instantiation defines"),
        ("accumulator_bits", "24 + TOPK", "accumulator_bits '24 + TOPK' is 32, outside [8, 24]"),
    ],
)
def test_a_malformed_dynamic_shared_is_refused_naming_the_template_manifest(
    tmp_path: Path, key: str, text: str, fragment: str
) -> None:
    for d in ("kernels", "manifests", "release", "requirements"):
        shutil.copytree(REPO / d, tmp_path / d, symlinks=True)
    rel = "kernels/cuda/fp8_moe_down.toml"
    path = tmp_path / rel
    lines = [f"{key} = {json.dumps(text)}" if ln.startswith(f"{key} =") else ln
             for ln in path.read_text().splitlines()]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ManifestError) as e:
        manifests.load(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(rel) and fragment in msg, msg
    # the command: one line naming the manifest, non-zero, no traceback, the lock and tables untouched (the
    # empty release/.netra-lock is the command's mutex, not its output)
    written = ("manifest.lock", "tables/*.json", "evidence/*.json")
    before = {p: p.read_bytes() for g in written for p in (tmp_path / "release").glob(g)}
    r = subprocess.run(
        [sys.executable, "-m", "netra", "lock", "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode != 0 and "Traceback" not in r.stderr and rel in r.stderr and fragment in r.stderr, (
        r.stderr
    )
    assert {p: p.read_bytes() for g in written for p in (tmp_path / "release").glob(g)} == before
    assert len(before) > 3


def test_the_static_gate_counts_dynamic_shared_memory(cat: manifests.Manifests, tmp_path: Path) -> None:
    """The real g8x64p cubin passes with its 210 KB of ring and activations; the same cubin launched with
    more than a CTA may hold beside its static shared memory is refused by the `shared` check."""
    spec = next(a for a in cat.artifacts if a.target == "sm_90" and a.tactic.name == "g8x64p"
                and a.contract["hidden"] == 2048)  # fmt: skip
    sm90 = targets.get("sm_90")
    path = sm90.compile(spec, sm90.discover(), REPO, tmp_path, tmp_path / "out")
    cb = cubin.inspect(path.read_bytes())
    assert checks.check(cb, spec) == []
    static = cb.kernels[spec.symbol].shared_bytes
    assert static > 0
    over = dataclasses.replace(
        spec,
        template=dataclasses.replace(
            spec.template, dynamic_shared=f"{checks.LIMITS['shared_bytes'] - static + 1}"
        ),
    )
    problems = checks.check(cb, over)
    assert [p.check for p in problems] == ["shared"], problems
    assert "dynamic" in problems[0].detail
