"""netra.core.proc with real processes: shim tools written here, and the real llvm-mc, ld.lld and nvcc."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import alive, within

from netra.core import proc
from netra.errors import ToolCrashError, ToolError, ToolInterruptedError, ToolOutputError, ToolTimeoutError

REPO = Path(__file__).resolve().parents[1]
LLVM_BIN = Path("/usr/lib/llvm-22/bin")
NVCC = Path("/usr/local/bin/nvcc")


def gone(pids: list[int], seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


def shim(tmp: Path, name: str, body: str) -> Path:
    path = tmp / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def pids_in(path: Path, count: int, seconds: float = 10) -> list[int]:
    """The pids a shim wrote, one a line, once it has written `count` of them."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            lines = path.read_text().split()
            if len(lines) >= count:
                return [int(x) for x in lines]
        time.sleep(0.02)
    raise AssertionError(f"{path} never got {count} pids")


def test_returns_a_failing_exit_with_its_output(tmp_path: Path) -> None:
    tool = shim(tmp_path, "tool", "echo out; echo 'error: bad' >&2; exit 3\n")
    r = proc.run([str(tool)], tool="tool", what="t", timeout=30)
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "error: bad\n")
    assert r.args == [str(tool)]


def test_feeds_input_cwd_and_env(tmp_path: Path) -> None:
    text = "".join(f"line {i}\n" for i in range(100_000))  # several pipe buffers each way
    r = proc.run(["cat"], tool="cat", what="t", timeout=30, input=text)
    assert r.returncode == 0 and r.stdout == text
    r = proc.run(
        ["sh", "-c", "pwd; echo $ONLY"], tool="sh", what="t", timeout=30, cwd=tmp_path, env={"ONLY": "me"}
    )
    assert r.stdout == f"{tmp_path}\nme\n"


def test_timeout_kills_the_tool_and_everything_it_spawned(tmp_path: Path) -> None:
    tool = shim(tmp_path, "hang", 'sleep 60 &\necho $$ $! > "$1"\nsleep 60\n')
    with pytest.raises(ToolTimeoutError) as e:
        within(
            30,
            proc.run,
            [str(tool), str(tmp_path / "pids")],
            tool="llvm-mc",
            what="rmsnorm: assembling",
            timeout=1,
        )
    assert e.value.message == "rmsnorm: assembling: llvm-mc did not finish within 1s (killed)"
    assert e.value.hint and "toolchain" in e.value.hint
    pids = pids_in(tmp_path / "pids", 2)
    assert gone(pids), f"still running after the timeout: {[p for p in pids if alive(p)]}"
    assert proc.live() == []


def test_what_a_tool_leaves_behind_does_not_outlive_or_block_the_call(tmp_path: Path) -> None:
    # The background sleep keeps stdout open: without killing the group, the call would wait for it.
    tool = shim(tmp_path, "leaves", 'sleep 60 &\necho $! > "$1"\necho done\n')
    r = within(30, proc.run, [str(tool), str(tmp_path / "pids")], tool="t", what="t", timeout=60)
    assert r.returncode == 0 and r.stdout == "done\n"
    assert gone(pids_in(tmp_path / "pids", 1))


def test_a_tool_killed_by_a_signal_is_a_crash_naming_it(tmp_path: Path) -> None:
    tool = shim(
        tmp_path, "crash", "echo 'starting' >&2\necho 'PLEASE submit a bug report' >&2\nkill -SEGV $$\n"
    )
    with pytest.raises(ToolCrashError) as e:
        proc.run([str(tool)], tool="ld.lld", what="rmsnorm: linking", timeout=30, memory_bytes=1 << 30)
    assert e.value.message == "rmsnorm: linking: ld.lld crashed (SIGSEGV): PLEASE submit a bug report"
    assert e.value.hint and "toolchain" in e.value.hint and "1 GiB" in e.value.hint


def test_stderr_is_capped_keeping_head_and_tail(tmp_path: Path) -> None:
    code = "import sys\nsys.stderr.write('first line\\n' + 'x' * 50_000_000 + '\\nlast line\\n')\n"
    r = within(
        60, proc.run, [sys.executable, "-c", code], tool="python", what="t", timeout=60, output_limit=1 << 20
    )
    assert r.returncode == 0
    assert len(r.stderr) <= (1 << 20) + 200
    assert r.stderr.startswith("first line\n") and r.stderr.endswith("\nlast line\n")
    assert "bytes of output dropped" in r.stderr


def test_stdout_over_the_limit_is_refused_not_truncated(tmp_path: Path) -> None:
    tool = shim(tmp_path, "spew", 'echo $$ > "$1"\nexec yes netra\n')  # prints forever
    with pytest.raises(ToolOutputError) as e:
        within(
            60,
            proc.run,
            [str(tool), str(tmp_path / "pids")],
            tool="llvm-objdump",
            what="t",
            timeout=60,
            output_limit=1 << 20,
        )
    assert e.value.message == "t: llvm-objdump printed more than 1 MiB on stdout (killed)"
    assert gone(pids_in(tmp_path / "pids", 1))
    ok = proc.run(
        ["head", "-c", str(1 << 20), "/dev/zero"], tool="head", what="t", timeout=60, output_limit=1 << 20
    )
    assert len(ok.stdout) == 1 << 20  # exactly the limit is fine


def test_fifty_megabytes_of_output_with_the_default_limit(tmp_path: Path) -> None:
    tool = shim(tmp_path, "big", "head -c 50000000 /dev/zero | tr '\\0' e >&2\n")
    r = within(60, proc.run, [str(tool)], tool="t", what="t", timeout=60)
    assert r.returncode == 0 and len(r.stderr) <= proc.OUTPUT_LIMIT + 200
    with pytest.raises(ToolOutputError):
        within(60, proc.run, ["head", "-c", "50000000", "/dev/zero"], tool="t", what="t", timeout=60)


def test_a_missing_or_unexecutable_tool_is_a_tool_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as e:
        proc.run([str(tmp_path / "llvm-mc-99")], tool="llvm-mc", what="rmsnorm: assembling", timeout=30)
    assert type(e.value) is ToolError
    assert "rmsnorm: assembling: cannot run llvm-mc" in e.value.message and "No such file" in e.value.message
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    with pytest.raises(ToolError, match="Permission denied"):
        proc.run([str(script)], tool="t", what="t", timeout=30)
    assert proc.live() == []


def test_memory_limit_fails_a_tool_that_allocates_twice_the_limit() -> None:
    limit = 512 << 20
    code = "b = bytearray(1 << 30)\nprint('allocated')\n"  # calloc'ed: address space, not resident memory
    free = proc.run([sys.executable, "-c", code], tool="python", what="t", timeout=60)
    assert free.returncode == 0 and free.stdout == "allocated\n"  # the same child succeeds unlimited
    bounded = proc.run([sys.executable, "-c", code], tool="python", what="t", timeout=60, memory_bytes=limit)
    assert bounded.returncode != 0 and "MemoryError" in bounded.stderr and not bounded.stdout


def test_limits_are_inherited_by_the_tools_children() -> None:
    # nvcc runs cicc and ptxas: they must be bounded too. And no tool ever writes a core file.
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_AS), resource.getrlimit(resource.RLIMIT_CORE))"
    r = proc.run(
        ["sh", "-c", f'"{sys.executable}" -c "{code}"'], tool="sh", what="t", timeout=60, memory_bytes=3 << 30
    )
    assert r.stdout.strip() == f"({3 << 30}, {3 << 30}) (0, 0)"


def test_each_tool_runs_in_its_own_session() -> None:
    r = proc.run(
        ["sh", "-c", "cut -d' ' -f1,6 /proc/$$/stat"], tool="sh", what="t", timeout=30
    )  # pid, session
    pid, sid = r.stdout.split()
    assert pid == sid and int(sid) != os.getsid(0)


def test_run_from_many_threads_at_once(tmp_path: Path) -> None:
    results: dict[int, list[str]] = {}
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            got = [
                proc.run(
                    ["sh", "-c", 'echo "$1"; echo "$1" >&2', "sh", f"{n}.{i}"],
                    tool="sh",
                    what="t",
                    timeout=60,
                )
                for i in range(10)
            ]
            results[n] = [r.stdout + r.stderr for r in got]
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert results == {n: [f"{n}.{i}\n{n}.{i}\n" for i in range(10)] for n in range(16)}
    assert proc.live() == []


def test_kill_all_stops_tools_running_in_other_threads(tmp_path: Path) -> None:
    tool = shim(tmp_path, "slow", 'echo $$ >> "$1"\nsleep 60\n')
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            proc.run([str(tool), str(tmp_path / "pids")], tool="nvcc", what="gemm: compiling", timeout=120)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    pids = pids_in(tmp_path / "pids", 4)
    proc.kill_all()
    deadline = time.monotonic() + 20  # the tools alone would run 60 s
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    assert not any(t.is_alive() for t in threads), "a thread blocked in run() did not return after kill_all"
    assert len(errors) == 4 and all(isinstance(e, ToolInterruptedError) for e in errors), errors
    assert "gemm: compiling: nvcc was stopped" in str(errors[0])
    assert gone(pids)
    assert proc.run(["true"], tool="true", what="t", timeout=30).returncode == 0  # later runs are normal


def test_kill_all_from_a_signal_handler_while_the_main_thread_waits_in_run() -> None:
    old = signal.signal(signal.SIGALRM, lambda *_: proc.kill_all())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(ToolInterruptedError):
            # (were it not killed, the timeout would raise ToolTimeoutError)
            proc.run(["sleep", "60"], tool="sleep", what="t", timeout=20)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_kill_all_from_a_handler_that_interrupted_run_holding_the_registry() -> None:
    # A signal handler runs on the main thread, possibly while that thread holds the registry lock
    # in run(): kill_all must not deadlock on it (a child process, so a regression times out there).
    code = "from netra.core import proc\nwith proc._lock:\n    proc.kill_all()\nprint('ok')\n"
    r = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.stdout == "ok\n", r.stderr


# ---------------------------------------------------------------------------------------------------
# The real tools under the default limits


@pytest.mark.skipif(not (LLVM_BIN / "llvm-mc").exists(), reason="llvm-22 is not installed")
def test_llvm_assembles_links_and_disassembles_under_the_default_limits(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"timeout": proc.TOOL_TIMEOUT_S, "memory_bytes": proc.TOOL_MEMORY_BYTES}
    src = "v_cvt_pk_fp8_f32 v1, v2, v3\ns_endpgm\n"
    mc = [
        str(LLVM_BIN / "llvm-mc"),
        "-triple=amdgcn-amd-amdhsa",
        "-mcpu=gfx950",
        "-filetype=obj",
        "-o",
        "k.o",
        "-",
    ]
    r = proc.run(mc, tool="llvm-mc", what="k", cwd=tmp_path, input=src, **kw)
    assert r.returncode == 0, r.stderr
    ld = [str(LLVM_BIN / "ld.lld"), "-shared", "--no-undefined", "--build-id=none", "-o", "k.hsaco", "k.o"]
    assert proc.run(ld, tool="ld.lld", what="k", cwd=tmp_path, **kw).returncode == 0
    dis = [str(LLVM_BIN / "llvm-objdump"), "-d", "--mcpu=gfx950", "k.hsaco"]
    r = proc.run(dis, tool="llvm-objdump", what="k", cwd=tmp_path, **kw)
    assert r.returncode == 0 and "v_cvt_pk_fp8_f32 v1, v2, v3" in r.stdout
    bad = proc.run(mc, tool="llvm-mc", what="k", cwd=tmp_path, input="v_bogus v1\n", **kw)
    assert bad.returncode != 0 and "invalid instruction" in bad.stderr  # the tool's own words, returned


@pytest.mark.skipif(not NVCC.exists() or shutil.which("gcc") is None, reason="nvcc is not installed")
def test_nvcc_compiles_a_kernel_under_the_default_limits(tmp_path: Path) -> None:
    (tmp_path / "k.cu").write_text(
        "__global__ void k(float* a, const float* b, int n) {\n"
        "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
        "  if (i < n) a[i] = a[i] * 2.f + b[i];\n"
        "}\n"
    )
    argv = [str(NVCC), "-cubin", "-arch=sm_90a", "-O3", "-o", "k.cubin", "k.cu"]
    r = proc.run(
        argv,
        tool="nvcc",
        what="k",
        cwd=tmp_path,
        timeout=proc.TOOL_TIMEOUT_S,
        memory_bytes=proc.TOOL_MEMORY_BYTES,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"
