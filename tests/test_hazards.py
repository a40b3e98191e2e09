"""tools/hazard-check: the templates' hand-written s_nop / s_waitcnt agree with LLVM 22's own passes.

The checker rebuilds the catalog, converts each code object to MIR and runs LLVM's wait-count
insertion and post-RA hazard recognizer over it (docs/build.md, "Hazards and wait counts"). The
repository must pass; a copy with one hazard NOP and one s_waitcnt removed must fail, naming the
artifacts and the instructions LLVM would have protected.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHECKER = REPO / "tools" / "hazard-check"


def run_checker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(CHECKER), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=str(REPO),
    )


def verdicts(out: str) -> dict[str, str]:
    return {m[2]: m[1] for m in re.finditer(r"^(ok|FAIL|ERROR)\s+(\S+):", out, re.M)}


def test_catalog_agrees_with_llvm() -> None:
    r = run_checker()
    assert r.returncode == 0, r.stdout + r.stderr
    v = verdicts(r.stdout)
    for template in ("rmsnorm", "fp8_group_quant", "silu_mul_fp8_quant", "moe_topk_softmax"):
        assert any(a.startswith(f"netra_{template}_") for a in v), (template, r.stdout)
    assert set(v.values()) == {"ok"}, r.stdout


def _remove_once(path: Path, text: str) -> None:
    src = path.read_text()
    assert src.count(text) == 1, f"{path.name}: the mutation site moved; update this test"
    path.write_text(src.replace(text, "", 1))


def test_broken_copy_fails_naming_the_artifact(tmp_path: Path) -> None:
    copy = tmp_path / "tree"
    for d in ("kernels", "manifests", "release", "requirements"):
        shutil.copytree(REPO / d, copy / d)
    k = copy / "kernels" / "gfx950"
    # rmsnorm: the NOP between v_pk_fma's result and the v_add_f32 reading it (1 wait state needed)
    _remove_once(
        k / "rmsnorm.s",
        "    s_nop 0                                // v_pk_fma v[2:3] result -> VALU: 1 wait state (dst-sel rule)\n",
    )
    # moe_topk_softmax: the vmcnt(0) before the first use of the loaded logits (no-tail path)
    src = (k / "moe_topk_softmax.s").read_text()
    site = "    .else\n      s_waitcnt vmcnt(0)\n    .endif\n"
    assert src.count(site) == 1, "moe_topk_softmax.s: the mutation site moved; update this test"
    (k / "moe_topk_softmax.s").write_text(src.replace(site, "    .else\n    .endif\n"))

    lock = subprocess.run(
        [sys.executable, "-m", "netra", "lock", "--root", str(copy), "-q"],
        capture_output=True,
        text=True,
        check=False,
        cwd=str(REPO),
    )
    assert lock.returncode == 0, lock.stdout + lock.stderr

    r = run_checker("--root", str(copy))
    assert r.returncode == 1, r.stdout + r.stderr
    v = verdicts(r.stdout)
    failed = {a for a, s in v.items() if s == "FAIL"}
    assert any(a.startswith("netra_rmsnorm_") for a in failed), r.stdout
    assert any(a.startswith("netra_moe_topk_softmax_") for a in failed), r.stdout
    assert all(a.startswith(("netra_rmsnorm_", "netra_moe_topk_softmax_")) for a in failed), r.stdout
    assert "ERROR" not in v.values(), r.stdout
    assert re.search(r"inserts `S_NOP 0 \(1 wait states\)` before 0x[0-9a-f]+: v_add_f32", r.stdout), r.stdout
    assert re.search(
        r"inserts `S_WAITCNT \d+ \(s_waitcnt vmcnt\(0\)\)` before 0x[0-9a-f]+: v_pk_", r.stdout
    ), r.stdout
