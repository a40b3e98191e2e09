"""`netra env` and the host part of doctor: versions read from the system's own files, and the oldest
driver or runtime each class's code objects need, derived from the toolchain the lock records."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from conftest import REPO, TIMEOUT, clean_env, log
from test_cli import valid

from netra import targets
from netra.runtime import lockfile
from netra.targets import amd, nvidia
from netra.targets.host import Versions


def _env(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netra", "env", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False, env=clean_env(PYTHONPATH=str(REPO)))  # fmt: skip


def test_env_reports_the_host_and_what_each_class_needs() -> None:
    r = _env("--json")
    assert r.returncode == 0, log(r)
    doc = valid("env", r.stdout)
    h = doc["host"]
    assert h["python"]["version"] == platform.python_version() and h["python"]["executable"] == sys.executable
    assert h["platform"]["machine"] == platform.machine()
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = None
    assert (h["torch"] or {}).get("version") == torch and h["packages"]["torch"] == torch
    assert sorted(h["vendors"]) == sorted(targets.vendor_names())
    lock = lockfile.read(REPO / "release" / "manifest.lock")
    assert sorted(doc["needs"]) == sorted(lock.toolchains)
    for cls, n in doc["needs"].items():
        want = targets.get(cls).driver_need(lock.toolchains[cls])
        assert (n["needs"], n["minimum"], n["compared_with"]) == (want.what, want.minimum, want.of), n
        assert n["found"] == h["vendors"][n["vendor"]][n["compared_with"]]
    human = _env()
    assert human.returncode == 0 and human.stdout.startswith("netra-kernel "), log(human)
    assert f"python: {platform.python_version()} " in human.stdout
    for cls, n in doc["needs"].items():
        assert f"needs: {cls} code objects need {n['needs']} >= {n['minimum']}: " in human.stdout, (
            human.stdout
        )


def test_env_answers_on_a_damaged_install(tmp_path: Path) -> None:
    """It reads no code object and needs no intact lock: the host is reported, the needs say why not."""
    r = subprocess.run([sys.executable, "-m", "netra", "env", "--json"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=TIMEOUT, check=False,
                       env=clean_env(PYTHONPATH=str(_broken_copy(tmp_path))))  # fmt: skip
    assert r.returncode == 0, log(r)
    doc = valid("env", r.stdout)
    assert doc["needs"] == {} and "run `netra doctor`" in doc["needs_note"], doc


def _broken_copy(tmp: Path) -> Path:
    """A source checkout whose lock is not TOML: netra/, kernels/, manifests/ and a broken release/."""
    import shutil

    dest = tmp / "tree"
    shutil.copytree(REPO / "netra", dest / "netra", ignore=shutil.ignore_patterns("__pycache__"))
    for d in ("kernels", "manifests"):
        shutil.copytree(REPO / d, dest / d)
    (dest / "release").mkdir()
    (dest / "release" / "manifest.lock").write_text("this is not a lock [")
    return dest


def test_the_sm90_minimum_driver_comes_from_the_locked_nvcc() -> None:
    """CUDA 13.x cubins need an NVIDIA driver >= 580 (NVIDIA's CUDA 13.0 release notes); 12.x >= 525."""
    lock = lockfile.read(REPO / "release" / "manifest.lock")
    need = targets.get("sm_90").driver_need(lock.toolchains["sm_90"])
    assert (
        lock.toolchains["sm_90"].version.startswith("13.") and need.minimum == "580" and need.of == "driver"
    )
    assert need.met(Versions("580.65.06", None)) is True and need.met(Versions("580.159.04", None)) is True
    assert need.met(Versions("575.57.08", None)) is False and need.met(Versions(None, "CUDA 13.0")) is None
    assert nvidia.NVIDIA.cubin_driver_need("12.8.93").minimum == "525"
    unknown = nvidia.NVIDIA.cubin_driver_need("14.1.2")
    assert unknown.minimum is None and unknown.met(Versions("600.1", None)) is None


def test_the_gfx950_minimum_is_the_first_rocm_with_gfx950() -> None:
    lock = lockfile.read(REPO / "release" / "manifest.lock")
    need = targets.get("gfx950").driver_need(lock.toolchains["gfx950"])
    assert (need.what, need.minimum, need.of) == ("ROCm", "7.0", "runtime")
    assert need.met(Versions(None, "ROCm 7.0.2")) is True and need.met(Versions(None, "ROCm 6.4.3")) is False


# The kernel modules' own files, in the formats the drivers write them (real lines from real hosts).
NVIDIA_PROC = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
    "(dvs-builder@U22-I3-AE18-23-3)  Thu Nov 13 06:27:39 UTC 2025\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04.2)\n"
)
NVIDIA_PROC_PROPRIETARY = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024\n"
)


@pytest.mark.parametrize(
    ("text", "version"), [(NVIDIA_PROC, "580.159.04"), (NVIDIA_PROC_PROPRIETARY, "550.127.05")]
)
def test_the_nvidia_driver_version_is_read_from_proc(
    text: str, version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc = tmp_path / "version"
    proc.write_text(text)
    monkeypatch.setattr(nvidia, "DRIVER_VERSION_FILE", str(proc))
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    found = nvidia.NVIDIA.versions()
    assert found.driver == version, found
    assert any(n == f"driver: {proc}" for n in found.notes), found


def test_the_amd_driver_and_rocm_versions_are_read_from_their_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "sys" / "module" / "amdgpu"
    module.mkdir(parents=True)
    (module / "version").write_text("6.12.12\n")
    rocm = tmp_path / "rocm-7.0.2"
    (rocm / ".info").mkdir(parents=True)
    (rocm / ".info" / "version").write_text("7.0.2-56\n")
    monkeypatch.setattr(amd, "AMDGPU_MODULE", str(module))
    monkeypatch.setenv("ROCM_PATH", str(rocm))
    found = amd.AMD.versions()
    assert (found.driver, found.runtime) == ("6.12.12", "ROCm 7.0.2-56"), found
    (module / "version").unlink()  # the kernel's own amdgpu has no version file
    assert amd.AMD.versions().driver == f"in-tree amdgpu of kernel {platform.release()}"
    need = targets.get("gfx950").driver_need(
        lockfile.read(REPO / "release" / "manifest.lock").toolchains["gfx950"]
    )
    assert need.met(found) is True


def test_doctor_reports_the_host_and_the_needs_too() -> None:
    r = subprocess.run([sys.executable, "-m", "netra", "doctor", "--json"], cwd=REPO, capture_output=True,
                       text=True, timeout=TIMEOUT, check=False, env=clean_env())  # fmt: skip
    doc = valid("doctor", r.stdout)
    env = json.loads(_env("--json").stdout)
    assert doc["needs"] == env["needs"] and doc["host"]["python"] == env["host"]["python"]
    human = subprocess.run([sys.executable, "-m", "netra", "doctor"], cwd=REPO, capture_output=True,
                           text=True, timeout=TIMEOUT, check=False, env=clean_env()).stdout  # fmt: skip
    for line in (
        "python: ",
        "platform: ",
        "torch: ",
        *(f"needs: {c} code objects need " for c in doc["needs"]),
    ):
        assert "\n" + line in human, (line, human)


def test_each_gpu_line_names_what_its_class_needs(tmp_path: Path) -> None:
    """A gfx950 node in the KFD topology (the kernel's format): its doctor line says what its code needs."""
    for nid, version in enumerate((0, 90500)):
        (tmp_path / str(nid)).mkdir()
        (tmp_path / str(nid) / "properties").write_text(
            f"simd_count {0 if version == 0 else 256}\ngfx_target_version {version}\nvendor_id 4098\n"
        )
    run = [sys.executable, "-m", "netra", "doctor", "--sysfs-nodes", str(tmp_path)]
    rep = json.loads(subprocess.run([*run, "--json"], cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT,
                                    check=False, env=clean_env()).stdout)  # fmt: skip
    (gpu,) = [g for g in rep["gpus"] if g["class"] == "gfx950"]
    assert gpu["driver_met"] == rep["needs"]["gfx950"]["met"], (gpu, rep["needs"])
    human = subprocess.run(run, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT, check=False,
                           env=clean_env()).stdout  # fmt: skip
    (line,) = [ln for ln in human.splitlines() if ln.startswith("gpu: gfx950 ")]
    state = {True: "met", False: "NOT met", None: "cannot tell"}[gpu["driver_met"]]
    assert line.endswith(f"; needs ROCm >= 7.0 ({state})"), line
    # An older ROCm than gfx950 needs (its .info/version as ROCm installs it): NOT met, and said on the line.
    rocm = tmp_path / "rocm-6.4.1"
    (rocm / ".info").mkdir(parents=True)
    (rocm / ".info" / "version").write_text("6.4.1-120\n")
    old = subprocess.run(run, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT, check=False,
                         env=clean_env(ROCM_PATH=str(rocm))).stdout  # fmt: skip
    (line,) = [ln for ln in old.splitlines() if ln.startswith("gpu: gfx950 ")]
    assert "older than its code objects need" in line and line.endswith("; needs ROCm >= 7.0 (NOT met)"), line
    assert (
        "needs: gfx950 code objects need ROCm >= 7.0: this host has ROCm 6.4.1-120 (TOO OLD: upgrade it)"
        in old
    )


# -- issue 29: the host's libraries and files are not trusted to be what their names say ---------------


def _host_run(cmd: str, *args: str, timeout: float = TIMEOUT, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "netra", cmd, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, check=False, env=clean_env(**env))  # fmt: skip


def _failing_smi(tmp_path: Path) -> str:
    """PATH with an nvidia-smi that fails, so the CUDA driver API is asked on any host (a GPU host too)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bindir / "nvidia-smi").chmod(0o755)
    return f"{bindir}:{os.environ['PATH']}"


def test_a_libcuda_that_lacks_the_driver_api_is_named_unusable_in_one_line(tmp_path: Path) -> None:
    """A libcuda.so.1 that loads but has no cuInit (built here by gcc, first on the library path) ended
    `netra env` and `netra doctor` in an AttributeError traceback; each now says which library is
    unusable and what it lacks, in one line, and answers."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("no C compiler to build the library with")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (tmp_path / "empty.c").write_text("int not_the_driver(void) { return 0; }\n")
    lib = libdir / "libcuda.so.1"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-o", str(lib), str(tmp_path / "empty.c")], check=True, timeout=TIMEOUT
    )
    env = {"LD_LIBRARY_PATH": str(libdir), "PATH": _failing_smi(tmp_path)}
    r = _host_run("env", **env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    (nv,) = [ln for ln in r.stdout.splitlines() if ln.startswith("nvidia: ")]
    assert f"runtime not found ({lib} is unusable: it lacks cuDriverGetVersion)" in nv, nv
    (gpu,) = [ln for ln in r.stdout.splitlines() if ln.startswith("gpu: ")]
    assert f"CUDA driver: {lib} is unusable: it lacks cuInit, cuDeviceGetCount" in gpu, gpu
    d = _host_run("doctor", "--json", **env)
    assert "Traceback" not in d.stderr and d.returncode in (0, 1), log(d)
    doc = valid("doctor", d.stdout)
    assert any(
        f"CUDA driver: {lib} is unusable: it lacks cuInit, cuDeviceGetCount" in n
        for n in doc["gpu_detection"]
    )
    assert any(
        f"{lib} is unusable: it lacks cuDriverGetVersion" in n
        for n in doc["host"]["vendors"]["nvidia"]["notes"]
    )
    human = _host_run("doctor", **env)
    assert "Traceback" not in human.stderr and f"{lib} is unusable: it lacks cuInit" in human.stdout, log(
        human
    )


def test_env_never_waits_on_a_fifo_where_a_version_file_or_a_library_is(tmp_path: Path) -> None:
    """torch/version.py, a package's METADATA and libcuda.so.1 as FIFOs: `netra env` blocked forever on
    the first (opened as a plain file). Every host file is read by files.read_path (regular files
    only, non-blocking, bounded); a library must be a regular file to be one."""
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch-9.9.dist-info").mkdir()
    (site / "torch-9.9.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: torch\nVersion: 9.9\n\n"
    )
    os.mkfifo(site / "torch" / "version.py")
    (site / "numpy-1.0.dist-info").mkdir()
    os.mkfifo(site / "numpy-1.0.dist-info" / "METADATA")
    libdir = tmp_path / "lib"
    libdir.mkdir()
    os.mkfifo(libdir / "libcuda.so.1")
    env = {"PYTHONPATH": f"{site}:{REPO}", "LD_LIBRARY_PATH": str(libdir), "PATH": _failing_smi(tmp_path)}
    r = _host_run("env", "--json", timeout=60, **env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, log(r)
    doc = valid("env", r.stdout)
    t = doc["host"]["torch"]
    assert t["version"] == "9.9" and t["cuda"] is None and "torch/version.py is a FIFO" in t["unread"], t
    assert doc["host"]["packages"]["numpy"] is None
    assert all(str(libdir) not in n for n in doc["gpu_detection"]), doc["gpu_detection"]
    human = _host_run("env", timeout=60, **env)
    assert (
        "torch: 9.9 (built for unknown: " in human.stdout and "is a FIFO, not a regular file)" in human.stdout
    )


def test_require_gpu_with_a_driver_below_the_minimum_says_the_driver_the_minimum_and_the_fix(
    tmp_path: Path,
) -> None:
    """An H200 (nvidia-smi's answer) on driver 470: --require-gpu said sm_90 had nothing accepted while
    listing "sm_90 (64 accepted)"; the problem is the driver, and the line says so as `netra env` does."""
    if Path(nvidia.DRIVER_VERSION_FILE).exists():
        pytest.skip("this host's loaded NVIDIA module gives the driver version, not nvidia-smi")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text(
        '#!/bin/sh\ncase "$1" in\n'
        "  --query-gpu=index,name,compute_cap) echo '0, NVIDIA H200, 9.0' ;;\n"
        "  --query-gpu=driver_version) echo '470.256.02' ;;\n"
        "  *) exit 6 ;;\nesac\n"
    )
    (bindir / "nvidia-smi").chmod(0o755)
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    env = {"PATH": f"{bindir}:{os.environ['PATH']}"}
    r = _host_run("doctor", "--require-gpu", "--json", "--sysfs-nodes", str(nodes), **env)
    doc = valid("doctor", r.stdout)
    assert r.returncode == 1 and not doc["ok"], log(r)
    (gpu,) = doc["gpus"]
    assert gpu["class"] == "sm_90" and gpu["driver_met"] is False and gpu["maturity"]["accepted"] > 0, gpu
    minimum = doc["needs"]["sm_90"]["minimum"]
    last = doc["problems"][-1]
    assert last.startswith("no GPU on this host is served by this install: sm_90 (NVIDIA H200): ") and (
        f"NVIDIA driver 470.256.02 is older than the {minimum} its code objects need" in last
        and f"fix: upgrade the NVIDIA driver to {minimum} or newer" in last
        and "accepted kernels in this install" not in last
    ), last
    human = _host_run("doctor", "--require-gpu", "--sysfs-nodes", str(nodes), **env).stdout
    (line,) = [ln for ln in human.splitlines() if ln.startswith("gpu: sm_90 ")]
    assert (
        "nothing is accepted" not in line
        and f"certified by this install ({gpu['maturity']['accepted']} accepted" in line
    )
