"""Toolchain discovery: the real LLVM is found and proven; without one, one line and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from netra.toolchain import discover

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
        "PYTHONPATH": str(REPO),
        "HOME": str(tmp),
    }


def test_finds_and_proves_an_llvm_with_gfx950() -> None:
    tools = discover()
    assert tools.identity.version.split(".")[0].isdigit() and int(tools.identity.version.split(".")[0]) >= 20
    out = subprocess.run([tools.llvm_mc, "--version"], capture_output=True, text=True, check=True).stdout
    assert tools.identity.version in out


def test_rocm_path_is_preferred(tmp_path: Path) -> None:
    # A ROCm-shaped folder whose tools are the real LLVM's: found first, and labelled rocm.
    real = discover()
    rocm_bin = tmp_path / "rocm" / "llvm" / "bin"
    rocm_bin.mkdir(parents=True)
    for name, target in (
        ("llvm-mc", real.llvm_mc),
        ("ld.lld", real.ld_lld),
        ("llvm-objdump", real.llvm_objdump),
    ):
        (rocm_bin / name).symlink_to(target)
    found = discover({**os.environ, "ROCM_PATH": str(tmp_path / "rocm")})
    assert found.identity.flavour == "rocm" and found.llvm_mc == str(rocm_bin / "llvm-mc")


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
