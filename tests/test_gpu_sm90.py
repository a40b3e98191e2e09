"""On an H200: the installed wheel is proven, every accepted sm_90 kernel runs through the public runtime
API and matches the float64 reference, and a damaged install is refused by name.

Run on the GPU machine against an installed wheel (docs/gpu.md): NETRA_TEST_INSTALLED=1 makes `import
netra` the installed package instead of this tree. Skipped elsewhere (CI has no GPU).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu


def _netra(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "netra", *args], capture_output=True, text=True, check=False, timeout=600,
        env={**os.environ, **(env or {})}, cwd="/",
    )  # fmt: skip


def test_the_installed_wheel_is_used() -> None:
    import netra
    from netra.runtime import installed

    assert installed.locate().kind == "wheel", (
        f"netra is imported from {netra.__file__}, not an installed wheel"
    )


def test_doctor_require_gpu_passes_and_reports_sm_90_accepted() -> None:
    r = _netra("doctor", "--require-gpu")
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads(_netra("doctor", "--require-gpu", "--json").stdout)
    sm90 = [g for g in rep["gpus"] if g["class"] == "sm_90"]
    assert sm90 and all(g["serves_by_default"] for g in sm90)
    assert rep["certified_classes"]["sm_90"]["certification"] == "hardware"
    assert rep["certified_classes"]["sm_90"]["maturity"]["accepted"] > 0


def test_env_reports_the_driver_and_cuda_version_nvidia_smi_reports_and_the_need_is_met() -> None:
    """On the H200: the driver version /proc gives equals nvidia-smi's, the driver API's CUDA version is
    13.x or newer, and the host meets what the installed sm_90 cubins need (driver >= 580)."""
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60, check=True).stdout.split()[0]  # fmt: skip
    r = _netra("env", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    env = json.loads(r.stdout)
    (vendor,) = [v for name, v in env["host"]["vendors"].items() if v["driver"]]
    assert vendor["driver"] == smi, vendor
    assert vendor["runtime"].startswith("CUDA ") and int(vendor["runtime"].split()[1].split(".")[0]) >= 13, (
        vendor
    )
    need = env["needs"]["sm_90"]
    assert need["minimum"] == "580" and need["found"] == smi and need["met"] is True, need
    human = _netra("env").stdout
    print(human)
    assert f"sm_90 code objects need NVIDIA driver >= 580: this host has {smi} (met)" in human, human
    doctor = json.loads(_netra("doctor", "--json").stdout)
    assert doctor["needs"]["sm_90"]["met"] is True
    assert all(g["driver_met"] is True for g in doctor["gpus"] if g["class"] == "sm_90"), doctor["gpus"]


def test_every_accepted_kernel_matches_the_reference_through_the_public_api() -> None:
    from netra.certify import conformance, measure
    from netra.loaders.cuda import Cuda
    from netra.runtime import open_catalog

    cat = open_catalog()  # the detected class: sm_90
    assert cat.gpu_class == "sm_90" and cat.table.certification == "hardware"
    cu = Cuda()
    ran = []
    # contracts with no accepted candidate yet (new families before `netra certify`: the fused ones,
    # tests/test_gpu_torch_fused.py runs them at the experiment policy) are listed, not run here
    certified = [
        k for k in cat.contracts() if any(c.maturity == "accepted" for c in cat.table.entries[k].candidates)
    ]
    print(f"not certified yet: {sorted(set(cat.contracts()) - set(certified))}")
    assert certified
    for key in certified:
        entry = cat.table.entries[key]
        kernels = {}
        for rows in (1, 16, 8192):  # what the certified dispatch serves at decode and prefill sizes
            k = cat.select(key, rows=rows)
            assert k, f"{key}: {k}"
            assert k.maturity == "accepted"
            kernels[k.artifact] = k
        for k in kernels.values():
            cases = conformance.cases(
                entry.op, entry.params, rows_per_block=k.candidate.launch.rows_per_block
            )
            ok, reason, dev, tol, _ = measure.correctness(cu, k, entry, cases)
            ran.append((k.artifact, ok, dev, tol))
            assert ok, f"{k.artifact}: {reason}"
            assert dev is not None and dev <= tol
    for a, _, dev, tol in ran:
        print(f"{a}: max_rel_deviation {dev:.3g} <= tolerance {tol:.3g}")
    assert len(ran) >= len(certified)


def _copy_install(tmp: Path) -> Path:
    """A private copy of the installed package to damage (the shared install stays intact)."""
    import netra

    site = tmp / "site"
    shutil.copytree(Path(netra.__file__).parent, site / "netra", ignore=shutil.ignore_patterns("__pycache__"))
    return site


def _in_copy(site: Path, code: str) -> dict[str, Any]:
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300, cwd="/",
        env={**os.environ, "PYTHONPATH": str(site)},
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


_OPEN = """
import json
from netra.runtime import open_catalog
try:
    cat = open_catalog("sm_90")
    k = cat.select(KEY, rows=8192)
    print(json.dumps(["served", k.artifact]))
except Exception as e:
    print(json.dumps([type(e).__name__, getattr(e, "message", str(e)), getattr(e, "hint", "")]))
"""


def test_a_deleted_table_and_a_flipped_text_byte_are_refused_by_name(tmp_path: Path) -> None:
    from netra.core import elf
    from netra.runtime import open_catalog
    from netra.runtime.catalog import Fallback

    # the first contract the install serves (a contract whose tactics are all at experiment is answered by
    # its fallback and has no code object to damage); the copy is asked for the same one
    cat = open_catalog("sm_90")
    k = next(
        s for s in (cat.select(c, rows=8192) for c in sorted(cat.contracts())) if not isinstance(s, Fallback)
    )
    opened = _OPEN.replace("KEY", repr(k.contract))
    site = _copy_install(tmp_path)
    data = site / "netra" / "_data"
    table = data / "tables" / "sm_90.json"
    saved = table.read_bytes()
    table.unlink()
    name, message, _ = _in_copy(site, opened)
    assert name == "MissingFileError" and str(table) in message and "sm_90" in message, message
    doctor = subprocess.run([sys.executable, "-m", "netra", "doctor"], capture_output=True, text=True, cwd="/",
                            env={**os.environ, "PYTHONPATH": str(site)}, check=False)  # fmt: skip
    print(doctor.stdout)
    assert doctor.returncode == 1 and "missing table tables/sm_90.json" in doctor.stdout
    table.write_bytes(saved)

    cubin = data / k.candidate.file
    blob = bytearray(cubin.read_bytes())
    text = next(s for s in elf.sections(bytes(blob)) if s.name == f".text.{k.symbol}".encode())
    blob[text.offset + 16] ^= 0x01
    cubin.write_bytes(bytes(blob))
    name, message, _ = _in_copy(site, opened)
    assert name == "AlteredFileError" and str(cubin) in message and k.artifact in message, message
    doctor = subprocess.run([sys.executable, "-m", "netra", "doctor"], capture_output=True, text=True, cwd="/",
                            env={**os.environ, "PYTHONPATH": str(site)}, check=False)  # fmt: skip
    print(doctor.stdout)
    assert doctor.returncode == 1 and f"altered code_object {k.candidate.file}" in doctor.stdout
    assert "text_sha256" in doctor.stdout
