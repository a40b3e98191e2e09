"""The catalog, the lock and the cross-assembly gate, run for real on the repository's kernels."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from netra.errors import ManifestError
from netra.release import manifests
from netra.runtime import lockfile as lock

REPO = Path(__file__).resolve().parents[1]
LOCK = "release/manifest.lock"


def netra(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env_path = {"PYTHONPATH": str(REPO)}
    import os

    return subprocess.run(
        [sys.executable, "-m", "netra", *args],
        cwd=cwd,
        env={**os.environ, **env_path},
        capture_output=True,
        text=True,
        check=False,
    )


def copy_sources(dest: Path) -> Path:
    """The inputs `netra lock` and `netra build` read: kernels, manifests, release, requirements."""
    for d in ("kernels", "manifests", "release", "requirements"):
        shutil.copytree(REPO / d, dest / d)
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("build")
    r = netra("build", str(out), "--root", str(REPO), "-q")
    assert r.returncode == 0, r.stderr
    return out


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_catalog_shares_artifacts_between_models() -> None:
    cat = manifests.load(REPO)
    per_class = {t: len([a for a in cat.artifacts if a.target == t]) for t in cat.targets()}
    assert per_class["gfx950"] == 43 and per_class["sm_90"] == 187
    contracts = {t: {a.key for a in cat.artifacts if a.target == t} for t in cat.targets()}
    assert len(contracts["gfx950"]) == 26 and len(contracts["sm_90"]) == 51
    # the 18 fused norm contracts, 6 routed MoE ones and DeepSeek-V3's router: NVIDIA only, each
    # documented as not built for gfx950 by every model using it
    fused = contracts["sm_90"] - contracts["gfx950"]
    prefixes = ("fused_", "rmsnorm_fp8", "fp8_moe_", "moe_grouped_topk_sigmoid")
    assert len(fused) == 25 and all(k.startswith(prefixes) for k in fused)
    gaps = {(f.gpu_class, f.contract, f.model) for f in cat.fallbacks if f.gpu_class}
    for a in cat.artifacts:
        if a.key in fused:
            assert all(("gfx950", a.key, m) in gaps for m in a.used_by), a.key
    by_key = {}
    for a in cat.artifacts:
        by_key.setdefault((a.key, a.tactic.name), []).append(a)
    assert all(len(v) == 1 for v in by_key.values())  # one artifact per contract and tactic
    shared = next(a for a in cat.artifacts if a.key == "rmsnorm(hidden=4096,weight_offset=0)")
    assert set(shared.used_by) == {"Llama-3.1-8B", "Mistral-7B-v0.3", "Qwen3-235B-A22B", "Qwen3-8B"}
    assert all("qwen" not in a.name.lower() and "llama" not in a.name.lower() for a in cat.artifacts)


def test_full_catalog_builds_and_matches_the_lock(built: Path) -> None:
    from netra import targets

    locked = lock.read(REPO / LOCK)
    files = sorted(p.relative_to(built).as_posix() for p in built.rglob("*") if p.is_file())
    assert files == sorted(a.file for a in locked.artifacts)
    assert {a.target for a in locked.artifacts} == set(targets.names())
    for a in locked.artifacts:
        data = (built / a.file).read_bytes()
        tgt = targets.get(a.target)
        assert tgt.text_sha256(data, a.name, a.file) == a.text_sha256, a.name
        assert tgt.launch_digest(data, a.name, a.file) == a.launch_sha256, a.name
        assert hashlib.sha256(data).hexdigest() == a.code_sha256, a.name  # same toolchain: same bytes


def test_lock_is_up_to_date_with_the_sources() -> None:
    r = netra("lock", "--check", "--root", str(REPO), "-q")
    assert r.returncode == 0, r.stdout + r.stderr


def test_lock_twice_is_byte_identical(tmp_path: Path) -> None:
    root = copy_sources(tmp_path)
    (root / LOCK).unlink()
    assert netra("lock", "--root", str(root), "-q").returncode == 0
    first = (root / LOCK).read_bytes()
    assert netra("lock", "--root", str(root), "-q").returncode == 0
    assert (root / LOCK).read_bytes() == first
    assert first == (REPO / LOCK).read_bytes()  # and equal to the committed lock: no paths, no times
    assert str(tmp_path).encode() not in first


def test_two_builds_are_byte_identical(built: Path, tmp_path: Path) -> None:
    r = netra("build", str(tmp_path), "--root", str(REPO), "-q", "-j", "1")
    assert r.returncode == 0, r.stderr
    for p in [*built.rglob("*.hsaco"), *built.rglob("*.cubin")]:
        assert sha(p) == sha(tmp_path / p.relative_to(built)), p.name
        assert b"/tmp" not in p.read_bytes() and str(REPO).encode() not in p.read_bytes()


def insert_instruction(root: Path, template: str) -> None:
    """Add one instruction at the top of the template's kernel body (after its entry label)."""
    path = root / "kernels" / "gfx950" / f"{template}.s"
    text = path.read_text()
    marker = "NETRA_KERNEL_BEGIN \\name\n"
    assert marker in text, f"{template}.s does not open its kernel with NETRA_KERNEL_BEGIN"
    path.write_text(text.replace(marker, marker + "  s_nop 0\n", 1))


def test_one_instruction_change_fails_naming_the_artifacts(tmp_path: Path) -> None:
    root = copy_sources(tmp_path / "tree")
    insert_instruction(root, "moe_topk_softmax")
    out = tmp_path / "out"
    r = netra("build", str(out), "--root", str(root), "-q")
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert err[0].startswith("netra: error: release/manifest.lock is not what the sources declare")
    changed = {ln.split(":")[0].split()[-1] for ln in err[1:] if "text_sha256 locked" in ln}
    names = {
        a.name
        for a in manifests.load(root).artifacts
        if a.template.name == "moe_topk_softmax" and a.target == "gfx950"
    }
    assert names and changed == names  # exactly the artifacts the change affects
    assert any("file kernels/gfx950/moe_topk_softmax.s: sha256 locked" in ln for ln in err)
    assert not out.exists() or not any(out.rglob("*"))  # nothing published


def test_reference_build_shows_the_first_differing_instruction(built: Path, tmp_path: Path) -> None:
    root = copy_sources(tmp_path / "tree")
    insert_instruction(root, "moe_topk_softmax")
    r = netra("build", str(tmp_path / "out"), "--root", str(root), "--reference", str(built))
    assert r.returncode == 1
    assert (
        "first differing instruction #0 (at " in r.stderr and "built `s_nop 0`, reference `s_load" in r.stderr
    )


def test_constant_outside_its_declared_range_is_refused_before_assembly(tmp_path: Path) -> None:
    root = copy_sources(tmp_path)
    model = root / "manifests" / "models" / "qwen3-30b-a3b.toml"
    model.write_text(model.read_text().replace("hidden = 2048\ngroup = 128", "hidden = 2048\ngroup = 64"))
    before = (root / LOCK).read_bytes()
    r = netra("lock", "--root", str(root))
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "[1/" not in r.stderr  # refused before anything was compiled
    assert "fp8_group_quant(hidden=2048,group=64)" in err[0] and "Qwen3-30B-A3B" in err[0]
    assert "group = 64 is not one of 128" in err[0] and "GROUP" in err[0] and "fp8_group_quant.s" in err[0]
    assert (root / LOCK).read_bytes() == before  # the lock is untouched


def test_huge_dimension_is_refused_at_once(tmp_path: Path) -> None:
    root = copy_sources(tmp_path)
    model = root / "manifests" / "models" / "llama-3.1-8b.toml"
    for value in ("1099511627776", "1048576"):
        model.write_text(
            (REPO / "manifests/models/llama-3.1-8b.toml")
            .read_text()
            .replace("inter = 14336", f"inter = {value}")
        )
        r = netra("lock", "--root", str(root))
        assert r.returncode == 1 and "inter" in r.stderr and "[1/" not in r.stderr, r.stderr


def test_template_message_reaches_the_user_when_a_range_is_declared_too_wide(tmp_path: Path) -> None:
    root = copy_sources(tmp_path)
    manifests_found = sorted(root.glob("kernels/*/fp8_group_quant.toml"))  # each class's, or a shared one
    assert len(manifests_found) >= 2
    for tpl in manifests_found:
        text = tpl.read_text()
        assert "GROUP = { values = [128]" in text
        tpl.write_text(text.replace("GROUP = { values = [128]", "GROUP = { values = [64, 128]"))
    model = root / "manifests" / "models" / "qwen3-30b-a3b.toml"
    model.write_text(model.read_text().replace("hidden = 2048\ngroup = 128", "hidden = 2048\ngroup = 64"))
    r = netra("lock", "--root", str(root), "-q")
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()[0]
    assert "netra_fp8_group_quant_h2048_g64_" in err and "llvm-mc failed" in err and "GROUP" in err


def test_lock_check_names_each_difference(tmp_path: Path) -> None:
    root = copy_sources(tmp_path)
    # the expert activation of Qwen3-30B-A3B: the only model of inter 768 (no model has 640)
    model = root / "manifests" / "models" / "qwen3-30b-a3b.toml"
    model.write_text(model.read_text().replace("inter = 768\ngroup = 128", "inter = 640\ngroup = 128"))
    r = netra("lock", "--check", "--root", str(root), "-q")
    assert r.returncode == 1
    assert "file manifests/models/qwen3-30b-a3b.toml: sha256 locked" in r.stdout
    assert (
        "artifact netra_silu_mul_fp8_quant_i640_g128_b256: the sources declare it but the lock lacks it"
        in r.stdout
    )
    assert (
        "artifact netra_silu_mul_fp8_quant_i768_g128_b256: locked but the sources no longer declare it"
        in r.stdout
    )
    assert "out of date" in r.stderr


def pinned_in_requirements(text: str, prefix: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """name -> (version, sorted sha256s) of each requirements/build.txt entry starting with `prefix`,
    read the way tools/ensure-toolchain selects them (independently of netra's reader)."""
    out = {}
    for m in re.finditer(
        rf"^({re.escape(prefix)}\S*)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{{64}}.*\n)+)", text, re.M
    ):
        out[m[1]] = (m[2], tuple(sorted(re.findall(r"sha256:([0-9a-f]{64})", m[3]))))
    return out


def test_lock_records_the_toolchain_pins_of_requirements_and_check_names_a_disagreement(
    tmp_path: Path,
) -> None:
    """The lock's [toolchains.sm_90] and [toolchains.sm_100] pins are requirements/build.txt's nvidia-
    entries (what tools/ensure-toolchain installs), nvidia-cuda-nvcc at the locked nvcc version; one
    pinned file hash changed in requirements/build.txt makes `netra lock --check` fail naming it."""
    locked = lock.read(REPO / LOCK)
    want = pinned_in_requirements((REPO / "requirements" / "build.txt").read_text(), "nvidia-")
    assert want["nvidia-cuda-nvcc"][0] == "13.0.88" and "nvidia-nvvm" in want and len(want) >= 3, want
    for cls in ("sm_90", "sm_100"):
        pins = locked.pins[cls]
        assert pins.package == "nvidia-cuda-nvcc" and locked.toolchains[cls].version == want[pins.package][0]
        assert {p.name: (p.version, p.sha256) for p in pins.packages} == want, cls
    assert "gfx950" not in locked.pins  # Debian's or ROCm's LLVM: no pinned wheel is the toolchain

    root = copy_sources(tmp_path)
    assert netra("lock", "--check", "--root", str(root), "-q").returncode == 0
    reqs = root / "requirements" / "build.txt"
    old = want["nvidia-nvvm"][1][0]
    reqs.write_text(reqs.read_text().replace(old, "0" * 64, 1))
    r = netra("lock", "--check", "--root", str(root), "-q")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "toolchain sm_90 (nvcc 13.0.88): nvidia-nvvm 13.0.88 file hashes differ" in r.stdout, r.stdout
    assert f"locked only: {old[:16]}...; requirements/build.txt only: {'0' * 16}..." in r.stdout, r.stdout


def test_build_refuses_a_tree_missing_a_tracked_file(tmp_path: Path) -> None:
    root = copy_sources(tmp_path / "tree")
    (root / "manifests" / "models" / "gemma-2-9b.toml").unlink()
    r = netra("build", str(tmp_path / "out"), "--root", str(root))
    assert r.returncode == 1
    assert "file manifests/models/gemma-2-9b.toml: locked but no longer present" in r.stderr
    assert not (tmp_path / "out").exists()


def test_manifest_may_not_claim_accepted_without_hardware(tmp_path: Path) -> None:
    root = copy_sources(tmp_path)
    tactics = root / "manifests" / "gfx950" / "tactics.toml"
    tactics.write_text(tactics.read_text().replace('maturity = "verified"', 'maturity = "accepted"', 1))
    r = netra("lock", "--root", str(root))
    assert r.returncode == 1 and "static only" in r.stderr


def test_reference_can_be_a_released_wheel(built_wheel: Path, tmp_path: Path) -> None:
    root = copy_sources(tmp_path / "tree")
    insert_instruction(root, "moe_topk_softmax")
    r = netra("build", str(tmp_path / "out"), "--root", str(root), "--reference", str(built_wheel))
    assert r.returncode == 1
    assert "built `s_nop 0`, reference `s_load" in r.stderr
    assert "has no" not in r.stderr  # every artifact was found inside the wheel


def test_templates_in_a_shared_source_folder_serve_every_class_that_shares_it(
    make_repo_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    """The CUDA templates (sources, manifests, includes) live once in the folder the NVIDIA classes
    share: every class that lists it reads each manifest there for itself, and its compiled machine code
    is the locked one. A manifest of the same name in a class's own folder is that class's variant and
    replaces the shared one for it alone; a source in neither folder is refused naming both."""
    from netra import targets

    sharing = [t for t in targets.every() if len(t.sources) > 1]
    assert sharing, "no class shares a source folder"
    tgt = sharing[0]
    own, common = tgt.sources[0], tgt.sources[1]
    cat = manifests.load(REPO)
    for t in sharing:
        mine = {k[1]: v for k, v in cat.templates.items() if k[0] == t.name}
        assert mine and all(v.source.startswith(common + "/") for v in mine.values()), t.name
    shared_names = sorted(k[1] for k in cat.templates if k[0] == tgt.name)

    locked = lock.read(REPO / LOCK)
    tools = tgt.discover()
    (tmp_path / "src").mkdir()
    one_per_template = {a.template.name: a for a in cat.artifacts if a.target == tgt.name}
    built = [
        (a, tgt.compile(a, tools, REPO, tmp_path / "src", tmp_path / "out"))
        for a in one_per_template.values()
    ]
    for e in tgt.examine(built, tools, 1):
        want = locked.artifact(e.spec.name)
        assert want is not None and not e.problems, e.problems
        assert (e.text_sha256, e.launch_sha256) == (want.text_sha256, want.launch_sha256), e.spec.name

    root = make_repo_copy("shared-sources")
    name = shared_names[0]
    text = (root / common / f"{name}.toml").read_text()
    variant = re.sub(r"(?m)^registers = \d+$", "registers = 255", text)
    assert variant != text
    (root / own).mkdir(parents=True, exist_ok=True)
    (root / own / f"{name}.toml").write_text(variant)
    cat = manifests.load(root)
    mine = cat.templates[(tgt.name, name)]
    assert mine.budget["registers"] == 255 and mine.source.startswith(common + "/")  # the source stays shared
    for t in sharing[1:]:
        assert cat.templates[(t.name, name)].budget["registers"] != 255, t.name
    (root / own / f"{name}.toml").unlink()

    gone = root / cat.templates[(tgt.name, name)].source
    gone.unlink()
    with pytest.raises(ManifestError, match=rf"its source {own}/\S+ is missing \(nor in {common}/\)"):
        manifests.load(root)


def test_a_folder_or_a_tactics_file_of_no_registered_class_is_refused_in_one_line(
    make_repo_copy: Callable[[str], Path],
) -> None:
    """kernels/<name>/ and manifests/<name>/tactics.toml name a class: one that is not registered (nor
    a shared folder) is refused naming the file, with exit 1, no traceback and the lock untouched."""
    root = make_repo_copy("unknown-class")
    before = (root / LOCK).read_bytes()
    tactics = (root / "manifests" / "sm_100" / "tactics.toml").read_text()
    for path, text, message in (
        ("kernels/sm_999/rmsnorm.toml", "", "kernels/sm_999: not a GPU class this netra knows"),
        (
            "manifests/sm_999/tactics.toml",
            tactics.replace('target = "sm_100"', 'target = "sm_999"'),
            "manifests/sm_999/tactics.toml: sm_999 is not a GPU class this netra knows",
        ),
    ):
        f = root / path
        f.parent.mkdir(parents=True)
        f.write_text(text)
        with pytest.raises(ManifestError, match=re.escape(message)):
            manifests.load(root)
        r = netra("lock", "--root", str(root), "-q")
        assert r.returncode == 1 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and (root / LOCK).read_bytes() == before
        shutil.rmtree(f.parent)
    manifests.load(root)  # and the tree is whole again
