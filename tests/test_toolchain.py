"""Toolchain discovery: the real LLVM is found and proven; without one, one line and a non-zero exit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from netra.targets.gfx950.toolchain import discover
from netra.targets.sm_90.toolchain import discover as discover_nvcc

REPO = Path(__file__).resolve().parents[1]


def empty_env(tmp: Path) -> dict[str, str]:
    # A PATH that holds only the Python running the tests: no llvm-mc anywhere the search looks.
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "python3").symlink_to(sys.executable)
    return {
        "PATH": str(bindir),
        "ROCM_PATH": str(tmp / "no-rocm"),
        "NETRA_LLVM_ROOTS": str(tmp / "no-llvm"),
        "NETRA_CUDA_ROOTS": str(tmp / "no-cuda"),
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp),
    }


def test_finds_and_proves_an_llvm_with_gfx950() -> None:
    tools = discover()
    assert tools.identity.version.split(".")[0].isdigit() and int(tools.identity.version.split(".")[0]) >= 20
    out = subprocess.run([tools["llvm-mc"], "--version"], capture_output=True, text=True, check=True).stdout
    assert tools.identity.version in out


def test_rocm_path_is_preferred(tmp_path: Path) -> None:
    # A ROCm-shaped folder whose tools are the real LLVM's: found first, and labelled rocm.
    real = discover()
    rocm_bin = tmp_path / "rocm" / "llvm" / "bin"
    rocm_bin.mkdir(parents=True)
    for name in ("llvm-mc", "ld.lld", "llvm-objdump"):
        (rocm_bin / name).symlink_to(real[name])
    found = discover({**os.environ, "ROCM_PATH": str(tmp_path / "rocm")})
    assert found.identity.flavour == "rocm" and found["llvm-mc"] == str(rocm_bin / "llvm-mc")


def test_no_toolchain_is_one_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    r = subprocess.run(
        [sys.executable, "-m", "netra", "build", str(tmp_path / "out"), "--root", str(REPO)],
        env=empty_env(tmp_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "no AMDGPU toolchain with gfx950 found" in lines[0]
    assert str(tmp_path / "no-rocm") in lines[0] and "apt-get install -y llvm-22 lld-22" in lines[0]
    assert list((tmp_path / "out").iterdir()) == []


def test_explicit_bindir_without_tools_is_refused(tmp_path: Path) -> None:
    env = {**empty_env(tmp_path), "NETRA_LLVM_BINDIR": str(tmp_path)}
    r = subprocess.run(
        [sys.executable, "-m", "netra", "lock", "--check", "--root", str(REPO)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 1 and f"NETRA_LLVM_BINDIR={tmp_path}" in r.stderr


def test_finds_and_proves_an_nvcc_for_sm_90a() -> None:
    tools = discover_nvcc()
    assert tools.identity.flavour == "nvcc" and tools.identity.version.count(".") == 2
    out = subprocess.run([tools["nvcc"], "--version"], capture_output=True, text=True, check=True).stdout
    assert f"V{tools.identity.version}" in out


def test_cuda_home_is_searched_before_path(tmp_path: Path) -> None:
    real = discover_nvcc()
    home = tmp_path / "cuda-home"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "nvcc").symlink_to(real["nvcc"])
    env = {**os.environ, "CUDA_HOME": str(home), "NETRA_CUDA_ROOTS": str(tmp_path / "none")}
    found = _discover_outside_venv(env)
    assert found == str(home / "bin" / "nvcc")


def _discover_outside_venv(env: dict[str, str]) -> str:
    """Discovery in a python that sees no site-packages (-S), so no nvcc wheel is in the way."""
    code = "from netra.targets.sm_90.toolchain import discover; print(discover()['nvcc'])"
    r = subprocess.run([sys.executable, "-S", "-c", code], env={**env, "PYTHONPATH": str(REPO)},
                       capture_output=True, text=True, check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def test_no_nvcc_is_one_line_naming_what_was_searched(tmp_path: Path) -> None:
    llvm = discover()
    env = {**empty_env(tmp_path), "NETRA_LLVM_BINDIR": str(Path(os.path.realpath(llvm["llvm-mc"])).parent)}
    (tmp_path / "out").mkdir()
    r = subprocess.run(
        [sys.executable, "-S", "-m", "netra", "build", str(tmp_path / "out"), "--root", str(REPO)],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    # the first NVIDIA class discovered names its architecture (sm_100a or sm_90a: the registry's order)
    assert re.search(r"no nvcc that builds sm_[0-9]+a cubins found", lines[0]) and "nvcc on PATH" in lines[0]
    assert str(tmp_path / "no-cuda") in lines[0] and "requirements/build.txt" in lines[0]
    assert list((tmp_path / "out").iterdir()) == []


def test_explicit_nvcc_that_is_not_one_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho not nvcc\n")
    fake.chmod(0o755)
    r = subprocess.run(
        [sys.executable, "-m", "netra", "lock", "--check", "--root", str(REPO)],
        env={**os.environ, "NETRA_NVCC": str(fake), "PYTHONPATH": str(REPO)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1
    assert f"NETRA_NVCC={fake} is not an nvcc" in r.stderr
