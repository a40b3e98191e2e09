"""netra.core.files on real files: every refused path form, links, FIFOs, sockets, devices, limits, atomic writes."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import within

from netra.core import files
from netra.errors import FileTooLargeError, MissingFileError, PathError, UnreadableFileError

REPO = Path(__file__).resolve().parents[1]
LIMIT = files.SOURCE_LIMIT
WHERE = "release/manifest.lock [[files]] #1"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "kernels" / "gfx950" / "include").mkdir(parents=True)
    (root / "kernels" / "gfx950" / "rmsnorm.s").write_text("s_endpgm\n")
    (root / "kernels" / "gfx950" / "include" / "wave.inc").write_text(".set W, 64\n")
    (root / "manifests").mkdir()
    (root / "manifests" / "m.toml").write_text("x = 1\n")
    return root


# ---------------------------------------------------------------------------------------------------
# relative


@pytest.mark.parametrize("rel", ["kernels/gfx950/rmsnorm.s", "a", "a/b.c/d", "x..y/..z", "a b/ü.s"])
def test_relative_accepts_and_returns_a_tracked_path_unchanged(rel: str) -> None:
    assert files.relative(rel, WHERE) is rel


@pytest.mark.parametrize(
    ("rel", "problem"),
    [
        ("", "is empty"),
        ("/etc/passwd", "is absolute"),
        ("//x", "is absolute"),
        ("kernels\\gfx950\\a.s", "backslash"),
        ("kernels/a\\b.s", "backslash"),
        (".", "'.' component"),
        ("..", "'..' component"),
        ("../x.s", "'..' component"),
        ("kernels/../../x.s", "'..' component"),
        ("kernels/./a.s", "'.' component"),
        ("kernels//a.s", "empty component"),
        ("kernels/", "ends with a slash"),
        ("kernels/a\0.s", "NUL"),
        (None, "not a string"),
        (3, "not a string"),
    ],
)
def test_relative_refuses(rel: Any, problem: str) -> None:
    with pytest.raises(PathError) as e:
        files.relative(rel, WHERE)
    assert problem in e.value.message
    assert WHERE in e.value.message and repr(rel) in e.value.message
    assert e.value.hint and "relative" in e.value.hint
    assert "\n" not in str(e.value)


def test_read_bytes_validates_the_path_first(tree: Path) -> None:
    with pytest.raises(PathError, match=r"'\.\.' component"):
        files.read_bytes(tree / "kernels", "../manifests/m.toml", limit=LIMIT, where=WHERE)


# ---------------------------------------------------------------------------------------------------
# read_bytes / read_text


def test_reads_a_regular_file(tree: Path) -> None:
    assert (
        files.read_bytes(tree, "kernels/gfx950/include/wave.inc", limit=LIMIT, where=WHERE) == b".set W, 64\n"
    )
    assert files.read_text(tree, "kernels/gfx950/rmsnorm.s", limit=LIMIT, where=WHERE) == "s_endpgm\n"


def test_root_may_be_reached_through_a_symlink(tree: Path, tmp_path: Path) -> None:
    (tmp_path / "link").symlink_to(tree)
    assert files.read_text(tmp_path / "link", "manifests/m.toml", limit=LIMIT, where=WHERE) == "x = 1\n"


@pytest.mark.parametrize("target", ["inside", "outside"])
def test_refuses_a_symlinked_file_even_with_identical_content(
    tree: Path, tmp_path: Path, target: str
) -> None:
    real = tree / "manifests" / "real.toml" if target == "inside" else tmp_path / "outside.toml"
    real.write_text("s_endpgm\n")  # the same bytes as the file it replaces
    link = tree / "kernels" / "gfx950" / "rmsnorm.s"
    link.unlink()
    link.symlink_to(real)
    with pytest.raises(PathError) as e:
        files.read_bytes(tree, "kernels/gfx950/rmsnorm.s", limit=LIMIT, where=WHERE)
    assert e.value.message == f"kernels/gfx950/rmsnorm.s ({WHERE}) is a symlink"
    assert e.value.hint and "link" in e.value.hint


@pytest.mark.parametrize("target", ["inside", "outside"])
def test_refuses_a_symlinked_folder_naming_it(tree: Path, tmp_path: Path, target: str) -> None:
    inc = tree / "kernels" / "gfx950" / "include"
    real = tree / "manifests" / "inc" if target == "inside" else tmp_path / "inc"
    shutil.copytree(inc, real)  # identical content behind the link
    shutil.rmtree(inc)
    inc.symlink_to(real, target_is_directory=True)
    with pytest.raises(PathError) as e:
        files.read_bytes(tree, "kernels/gfx950/include/wave.inc", limit=LIMIT, where=WHERE)
    assert "kernels/gfx950/include/wave.inc" in e.value.message
    assert e.value.message.endswith(": kernels/gfx950/include is a symlink")


def test_refuses_a_symlinked_top_folder(tree: Path, tmp_path: Path) -> None:
    shutil.move(tree / "kernels", tmp_path / "elsewhere")
    (tree / "kernels").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(PathError, match=r": kernels is a symlink; hint"):
        files.read_bytes(tree, "kernels/gfx950/rmsnorm.s", limit=LIMIT, where=WHERE)


def test_refuses_a_fifo_without_blocking(tree: Path) -> None:
    os.mkfifo(tree / "kernels" / "gfx950" / "pipe.s")
    with pytest.raises(PathError, match=r"pipe.s .* is a FIFO, not a regular file"):
        within(10, files.read_bytes, tree, "kernels/gfx950/pipe.s", limit=LIMIT, where=WHERE)


def test_refuses_a_directory_where_a_file_is_expected(tree: Path) -> None:
    with pytest.raises(PathError, match=r"kernels/gfx950/include .* is a folder, not a regular file"):
        files.read_bytes(tree, "kernels/gfx950/include", limit=LIMIT, where=WHERE)


def test_refuses_a_file_where_a_folder_is_expected(tree: Path) -> None:
    with pytest.raises(PathError, match=r": manifests/m.toml is a regular file, not a folder"):
        files.read_bytes(tree, "manifests/m.toml/x", limit=LIMIT, where=WHERE)


def test_refuses_a_socket(tree: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tree / "manifests" / "sock"))
        with pytest.raises(PathError, match="is a socket"):
            within(10, files.read_bytes, tree, "manifests/sock", limit=LIMIT, where=WHERE)


def test_refuses_a_device() -> None:
    with pytest.raises(PathError, match=r"null .* is a character device"):
        within(10, files.read_bytes, Path("/dev"), "null", limit=LIMIT, where=WHERE)


def test_missing_file_and_missing_folder(tree: Path) -> None:
    with pytest.raises(MissingFileError) as e:
        files.read_bytes(tree, "kernels/gfx950/gone.s", limit=LIMIT, where=WHERE)
    assert e.value.message == f"kernels/gfx950/gone.s ({WHERE}) is missing"
    assert e.value.hint and "restore kernels/gfx950/gone.s" in e.value.hint
    with pytest.raises(MissingFileError, match=r": kernels/gfx942 is missing"):
        files.read_bytes(tree, "kernels/gfx942/a.s", limit=LIMIT, where=WHERE)


def test_size_limit(tree: Path) -> None:
    (tree / "manifests" / "big.toml").write_bytes(b"x" * 101)
    (tree / "manifests" / "full.toml").write_bytes(b"x" * 100)
    assert len(files.read_bytes(tree, "manifests/full.toml", limit=100, where=WHERE)) == 100
    with pytest.raises(FileTooLargeError) as e:
        files.read_bytes(tree, "manifests/big.toml", limit=100, where=WHERE)
    assert (
        "manifests/big.toml" in e.value.message and "101 bytes, over the 100 bytes limit" in e.value.message
    )
    assert e.value.hint


def test_a_file_larger_than_it_says_is_refused_while_read() -> None:
    # /proc files report size 0 and then deliver more: the same as a file growing after fstat.
    status = Path(f"/proc/{os.getpid()}/status").read_bytes()
    assert len(status) > 200
    with pytest.raises(FileTooLargeError, match="grew past the 200 bytes limit while being read"):
        files.read_bytes(Path("/proc/self"), "status", limit=200, where=WHERE)
    assert files.read_bytes(Path("/proc/self"), "status", limit=1 << 20, where=WHERE).startswith(b"Name:")


def test_a_file_that_never_ends_is_read_only_to_the_limit() -> None:
    # /proc/PID/pagemap is a "regular empty file" that yields 8 bytes per page of the whole address
    # space (hundreds of GiB): only a bounded read returns. (It takes reads of 8-byte multiples, so the
    # limit is one below one: the single read of limit+1 bytes is whole.)
    with pytest.raises(FileTooLargeError, match="grew past the 1048575 bytes limit"):
        within(30, files.read_bytes, Path("/proc/self"), "pagemap", limit=(1 << 20) - 1, where=WHERE)


def test_an_io_error_is_unreadable() -> None:
    # Reading one's own /proc/PID/mem at address 0 fails with EIO: a real read error.
    with pytest.raises(UnreadableFileError, match=r"mem .*: Input/output error"):
        files.read_bytes(Path("/proc/self"), "mem", limit=LIMIT, where=WHERE)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder another user can traverse (pytest's tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="netra-test-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d)


def _as_nobody(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run python code as uid 65534, with the first interpreter that user can execute."""
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        try:
            r = subprocess.run(
                [python, "-c", code, *args],
                user=65534,
                group=65534,
                extra_groups=[],
                env={"PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"},
                cwd="/",
                capture_output=True,
                text=True,
                timeout=60,
            )
        except OSError:
            continue
        return r
    pytest.skip("no Python interpreter this test can run as an unprivileged user")


def test_permission_denied_is_unreadable(shared_dir: Path) -> None:
    (shared_dir / "kernels").mkdir()
    secret = shared_dir / "kernels" / "a.s"
    secret.write_text("s_endpgm\n")
    secret.chmod(0o000)
    (shared_dir / "closed").mkdir(mode=0o700)
    (shared_dir / "closed" / "b.s").write_text("s_endpgm\n")
    (shared_dir / "closed").chmod(0o700)
    if os.geteuid() != 0:
        with pytest.raises(UnreadableFileError, match="permission denied"):
            files.read_bytes(shared_dir, "kernels/a.s", limit=LIMIT, where=WHERE)
        return
    # As root, chmod stops nothing: read as an unprivileged user instead.
    code = (
        "import sys\nfrom pathlib import Path\nfrom netra.core import files\n"
        "for rel in ('kernels/a.s', 'closed/b.s'):\n"
        "    try:\n"
        "        files.read_bytes(Path(sys.argv[1]), rel, limit=1000, where='w')\n"
        "    except Exception as e:\n"
        "        print(type(e).__name__, e)\n"
        "    else:\n"
        "        print('read', rel)\n"
    )
    r = _as_nobody(code, str(shared_dir))
    if "ModuleNotFoundError" in r.stderr or "Permission denied" in r.stderr:
        pytest.skip(f"the unprivileged user cannot import netra from {REPO}: {r.stderr.strip()[-200:]}")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("UnreadableFileError kernels/a.s (w): permission denied"), lines
    assert lines[1].startswith("UnreadableFileError closed/b.s (w): closed: permission denied"), lines


def test_read_text_refuses_invalid_utf8_naming_the_offset(tree: Path) -> None:
    (tree / "manifests" / "bad.toml").write_bytes(b"name = 'caf\xc3\xa9'\nx = '\xff'\n")
    with pytest.raises(UnreadableFileError) as e:
        files.read_text(tree, "manifests/bad.toml", limit=LIMIT, where=WHERE)
    assert "manifests/bad.toml" in e.value.message
    assert "byte 0xff at offset 20" in e.value.message


# ---------------------------------------------------------------------------------------------------
# read_path


def test_read_path_reads_a_file_and_follows_a_given_symlink(tmp_path: Path) -> None:
    (tmp_path / "manifest.lock").write_text("schema = 1\n")
    (tmp_path / "link.lock").symlink_to(tmp_path / "manifest.lock")
    assert files.read_path(tmp_path / "manifest.lock", limit=LIMIT, what="lock") == b"schema = 1\n"
    assert files.read_path(tmp_path / "link.lock", limit=LIMIT, what="lock") == b"schema = 1\n"


def test_read_path_refuses_what_is_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name, kind in [("fifo", "a FIFO"), ("to-fifo", "a FIFO"), ("dir", "a folder")]:
        with pytest.raises(PathError) as e:
            within(10, files.read_path, tmp_path / name, limit=LIMIT, what="wheel")
        assert f"is {kind}, not a regular file" in e.value.message
        assert str(tmp_path / name) in e.value.message
    with pytest.raises(PathError, match="character device"):
        within(10, files.read_path, Path("/dev/zero"), limit=LIMIT, what="wheel")


def test_read_path_names_the_link_target(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "to-fifo").symlink_to(tmp_path / "fifo")
    with pytest.raises(PathError, match=r"to-fifo \(-> .*/fifo\): build record is a FIFO"):
        within(10, files.read_path, tmp_path / "to-fifo", limit=LIMIT, what="build record")


def test_read_path_missing_dangling_and_too_large(tmp_path: Path) -> None:
    with pytest.raises(MissingFileError, match="lock not found"):
        files.read_path(tmp_path / "nope.lock", limit=LIMIT, what="lock")
    (tmp_path / "dangling").symlink_to(tmp_path / "nope")
    with pytest.raises(MissingFileError, match="a symlink to nothing"):
        files.read_path(tmp_path / "dangling", limit=LIMIT, what="lock")
    (tmp_path / "big.whl").write_bytes(b"z" * 11)
    with pytest.raises(FileTooLargeError, match="11 bytes, over the 10 bytes limit"):
        files.read_path(tmp_path / "big.whl", limit=10, what="wheel")


# ---------------------------------------------------------------------------------------------------
# walk


def test_walk_lists_every_file_sorted_and_skips_pycache(tree: Path) -> None:
    (tree / "kernels" / "gfx950" / "a.toml").write_text("")
    (tree / "kernels" / "__pycache__").mkdir()
    (tree / "kernels" / "__pycache__" / "x.pyc").write_bytes(b"")
    assert files.walk(tree, "kernels", where=WHERE) == [
        "kernels/gfx950/a.toml",
        "kernels/gfx950/include/wave.inc",
        "kernels/gfx950/rmsnorm.s",
    ]
    assert files.walk(tree, "kernels/gfx950/include", where=WHERE) == ["kernels/gfx950/include/wave.inc"]


def test_walk_of_a_missing_base_is_empty(tree: Path) -> None:
    assert files.walk(tree, "release/tables", where=WHERE) == []
    assert files.walk(tree, "kernels/gfx942", where=WHERE) == []


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d: (d / ".DS_Store").write_text(""), "is hidden"),
        (lambda d: (d / ".git").mkdir(), "is hidden"),
        (lambda d: (d / "x.s").symlink_to(d / "rmsnorm.s"), "is a symlink"),
        (lambda d: (d / "x.s").symlink_to("/etc/hostname"), "is a symlink"),
        (lambda d: (d / "x").symlink_to(d / "include", target_is_directory=True), "is a symlink"),
        (lambda d: (d / "x").symlink_to(d / "nowhere"), "is a symlink"),
        (lambda d: os.mkfifo(d / "x"), "is a FIFO"),
        (lambda d: (d / "a\\b.s").write_text(""), "backslash"),
        (lambda d: Path(os.fsdecode(os.fsencode(d) + b"/caf\xe9.s")).write_text(""), "not UTF-8"),
    ],
)
def test_walk_refuses_untrackable_entries_naming_them(
    tree: Path, make: Callable[[Path], Any], problem: str
) -> None:
    make(tree / "kernels" / "gfx950")
    with pytest.raises(PathError) as e:
        within(10, files.walk, tree, "kernels", where=WHERE)
    assert problem in e.value.message
    assert e.value.message.startswith("kernels/gfx950/") and WHERE in e.value.message
    assert e.value.hint


def test_walk_refuses_a_socket(tree: Path) -> None:
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tree / "kernels" / "sock"))
        with pytest.raises(PathError, match=r"kernels/sock .* is a socket"):
            within(10, files.walk, tree, "kernels", where=WHERE)


def test_walk_does_not_follow_a_symlinked_base(tree: Path, tmp_path: Path) -> None:
    (tree / "release").mkdir()
    (tmp_path / "tables").mkdir()
    (tmp_path / "tables" / "gfx950.json").write_text("{}")
    (tree / "release" / "tables").symlink_to(tmp_path / "tables")
    with pytest.raises(PathError, match=r"release/tables .* is a symlink"):
        files.walk(tree, "release/tables", where=WHERE)
    with pytest.raises(PathError, match="not a folder"):
        files.walk(tree, "manifests/m.toml", where=WHERE)


# ---------------------------------------------------------------------------------------------------
# atomic_write


def test_atomic_write_writes_replaces_and_sets_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "manifest.lock"
    files.atomic_write(path, b"one")
    assert path.read_bytes() == b"one" and stat.S_IMODE(path.stat().st_mode) == 0o644
    files.atomic_write(path, b"two", mode=0o600)
    assert path.read_bytes() == b"two" and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.lock"]


class _Raises:
    """A mode whose conversion to int raises: the exception comes after the data was written."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __index__(self) -> int:
        raise self.exc


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(3), ValueError("boom")])
def test_atomic_write_removes_its_temporary_file_on_any_exception(tmp_path: Path, exc: BaseException) -> None:
    path = tmp_path / "manifest.lock"
    path.write_bytes(b"old")
    with pytest.raises(type(exc)):
        files.atomic_write(path, b"new" * 1000, mode=_Raises(exc))  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.lock"]


def test_atomic_write_failing_mid_write_leaves_the_old_file(tmp_path: Path) -> None:
    # A real short write: the file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes write() fail
    # with EFBIG after the first 64 KiB of a 1 MiB file.
    path = tmp_path / "out.hsaco"
    path.write_bytes(b"old")
    code = (
        "import resource, signal, sys\nfrom pathlib import Path\nfrom netra.core import files\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))\n"
        "try:\n"
        "    files.atomic_write(Path(sys.argv[1]), b'n' * (1 << 20))\n"
        "except OSError as e:\n"
        "    print('failed', e.errno)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "failed 27"  # EFBIG
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.hsaco"]


WRITER = """
import sys
from pathlib import Path
from netra.core import files
path, me, n = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    files.atomic_write(path, bytes([65 + me]) * (256 << 10) + b"|%d.%d" % (me, i))
"""


def _whole(data: bytes) -> bool:
    body, sep, tag = data.rpartition(b"|")
    return (
        bool(sep)
        and len(body) == 256 << 10
        and body == body[:1] * len(body)
        and body[:1] == bytes([65 + int(tag.split(b".")[0])])
    )


def test_atomic_write_under_concurrent_writers(tmp_path: Path) -> None:
    path = tmp_path / "manifest.lock"
    files.atomic_write(path, b"A" * (256 << 10) + b"|0.-1")
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), str(me), "50"],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for me in range(8)
    ]
    reads = 0
    try:
        while any(w.poll() is None for w in writers):
            data = path.read_bytes()
            assert _whole(data), f"a reader saw a partial file ({len(data)} bytes)"
            reads += 1
    finally:
        for w in writers:
            _, err = w.communicate(timeout=120)
            assert w.returncode == 0, err
    assert _whole(path.read_bytes())
    assert reads > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.lock"]


def test_atomic_write_from_threads(tmp_path: Path) -> None:
    path = tmp_path / "build.json"
    errors: list[BaseException] = []

    def write(me: int) -> None:
        try:
            for i in range(50):
                files.atomic_write(path, bytes([65 + me]) * (256 << 10) + b"|%d.%d" % (me, i))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=write, args=(me,)) for me in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    assert _whole(path.read_bytes())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build.json"]
