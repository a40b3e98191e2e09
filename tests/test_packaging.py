"""netra-kernel as a PyPI citizen: its metadata, its extras, every build route, and the fixes it prints.

All real: the session's wheel and sdist, `hatch build`, fresh venvs with pip (wheel, editable and a
source checkout on sys.path), and every fix doctor or the runtime prints run as printed, in a shell,
after which doctor must pass.
"""

from __future__ import annotations

import ast
import base64
import email.parser
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, TIMEOUT, Venv, clean_env, log
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from venvtools import package_dir
from wheeltools import rewrite

from netra import cli
from netra.core import toml as _toml

PYPROJECT = _toml.load(REPO / "pyproject.toml")
PROJECT = PYPROJECT["project"]
DATA = "netra/_data/"


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(z.read(name).decode())


def reqs(items: list[str]) -> dict[str, Requirement]:
    out = {}
    for item in items:
        r = Requirement(item)
        out[canonicalize_name(r.name)] = r
    return out


def shell(cmd: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A fix exactly as printed, run by a shell."""
    return subprocess.run(["bash", "-c", cmd], env=clean_env(**env), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False, cwd="/")  # fmt: skip


# -- metadata --------------------------------------------------------------------------------------


def test_wheel_and_sdist_carry_the_license_and_complete_metadata(
    built_wheel: Path, built_sdist: Path
) -> None:
    from trove_classifiers import classifiers as known

    license_text = (REPO / "LICENSE").read_bytes()
    assert b"MIT License" in license_text
    with zipfile.ZipFile(built_wheel) as z:
        licenses = [n for n in z.namelist() if "/licenses/" in n]
        assert licenses == ["netra_kernel-0.1.0.dist-info/licenses/LICENSE"], licenses
        assert z.read(licenses[0]) == license_text
    with tarfile.open(built_sdist) as t:
        member = t.extractfile("netra_kernel-0.1.0/LICENSE")
        assert member is not None and member.read() == license_text

    m = metadata(built_wheel)
    assert m["License-Expression"] == "MIT" and m.get_all("License-File") == ["LICENSE"]
    assert m["Author"], "an author is named"
    assert m["Keywords"] and "gpu" in m["Keywords"].split(",")
    urls = dict(u.split(", ", 1) for u in m.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Source", "Issues", "Documentation"}, urls
    assert all(u.startswith("https://github.com/netra-kernel/netra") for u in urls.values()), urls
    classifiers = m.get_all("Classifier")
    unknown = [c for c in classifiers if c not in known]
    assert not unknown, f"not trove classifiers (PyPI refuses the upload): {unknown}"
    assert "Environment :: GPU" in classifiers
    assert any(c.startswith("Development Status :: ") for c in classifiers)
    # One version classifier per supported minor version, from requires-python to the newest tested one.
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(m["Requires-Python"])
    versions = sorted(
        (
            c.rsplit(" ", 1)[1]
            for c in classifiers
            if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
        ),
        key=lambda v: int(v.split(".")[1]),
    )
    assert versions == ["3.10", "3.11", "3.12", "3.13"] and all(f"{v}.0" in spec for v in versions)
    assert "3.9.0" not in spec


def test_archives_are_readable_by_others_as_the_umask_allows(built_wheel: Path, built_sdist: Path) -> None:
    """The backend writes through a private temporary file; what it delivers has the usual mode."""
    mask = os.umask(0o022)
    os.umask(mask)
    for archive in (built_wheel, built_sdist):
        assert stat.S_IMODE(archive.stat().st_mode) == 0o666 & ~mask, archive.name


def test_pypi_description_is_install_first_with_absolute_links(built_wheel: Path) -> None:
    """The long description is README.pypi.md: it starts with pip, and every link works on pypi.org."""
    m = metadata(built_wheel)
    body = m.get_payload()
    assert m["Description-Content-Type"] == "text/markdown"
    assert body == (REPO / "README.pypi.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", body, re.S)
    assert first_block and first_block.group(1).startswith("pip install netra-kernel")
    links = re.findall(r"\]\(([^)]+)\)", body)
    assert links and all(u.startswith("https://") for u in links), [
        u for u in links if not u.startswith("https://")
    ]
    for u in links:  # documentation links name files that exist in this tree
        if "/blob/main/" in u:
            assert (REPO / u.split("/blob/main/", 1)[1]).is_file(), u
    # Every extra a PyPI user can install is explained there.
    for extra in ("torch", "certify", "completion", "author"):
        assert f"netra-kernel[{extra}]" in body, extra


def test_readme_links_resolve_and_its_commands_exist() -> None:
    text = (REPO / "README.md").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if not target.startswith("https://"):
            assert (REPO / target).exists(), f"README.md links to {target}, which does not exist"
    for tool in ("tools/release", "tools/test"):
        assert tool in text and os.access(REPO / tool, os.X_OK), tool


# -- extras and requirements ---------------------------------------------------------------------------


def test_every_optional_module_names_its_declared_extra() -> None:
    """The CLI's message for a missing module names a requirement pyproject.toml really declares."""
    deps = reqs(PROJECT["dependencies"])
    extras = {k: reqs(v) for k, v in PROJECT["optional-dependencies"].items()}
    for module, (req, extra) in cli.MODULES.items():
        r = Requirement(req)
        declared = extras[extra] if extra else deps
        assert canonicalize_name(r.name) in declared, f"{module}: {req} is not in {extra or 'dependencies'}"
        assert str(declared[canonicalize_name(r.name)].specifier) == str(r.specifier), module
    assert reqs(PROJECT["optional-dependencies"]["certify"]).keys() == {"numpy"}


def _test_in() -> dict[str, Requirement]:
    lines = [ln.split("#", 1)[0].strip() for ln in (REPO / "requirements/test.in").read_text().splitlines()]
    return reqs([ln for ln in lines if ln])


def test_test_extra_and_requirements_test_in_agree() -> None:
    """tools/test installs requirements/test.in; `pip install -e '.[test]'` the extra and the dependencies:
    the same packages with the same specifiers and markers, so both resolve to the same torch (a looser
    `torch>=2.4` in the extra once gave a 5.6 GB CUDA venv beside tools/test's 1.2 GB one)."""
    extra = reqs(PROJECT["optional-dependencies"]["test"])
    deps = reqs(PROJECT["dependencies"])
    test_in = _test_in()
    assert test_in.keys() == extra.keys() | deps.keys(), (
        f"only in test.in: {sorted(test_in.keys() - extra.keys() - deps.keys())}; "
        f"only in the extra: {sorted(extra.keys() | deps.keys() - test_in.keys())}"
    )
    for name, r in test_in.items():
        want = extra.get(name) or deps[name]
        assert (r.specifier, r.marker) == (want.specifier, want.marker), (
            f"{name}: requirements/test.in says {r}, pyproject.toml {want}"
        )
    (torch_pin,) = test_in["torch"].specifier
    assert torch_pin.operator == "==", "torch is pinned: one build for both routes"


def test_test_extra_provides_every_module_the_suite_imports() -> None:
    """Every third-party import in tests/ and every tool the suite runs comes with the test extra."""
    from importlib.metadata import packages_distributions

    extra = reqs(PROJECT["optional-dependencies"]["test"]).keys() | reqs(PROJECT["dependencies"]).keys()
    # the repository's own modules: tests/ and the bench scripts a test imports (bench/ on its path)
    local = {"conftest", "venvtools", "netra"} | {
        p.stem for d in ("tests", "bench") for p in (REPO / d).glob("*.py")
    }
    imported: set[str] = set()
    for path in (REPO / "tests").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "importorskip"
                  and node.args and isinstance(node.args[0], ast.Constant)):  # fmt: skip
                imported.add(str(node.args[0].value).split(".")[0])
    third = sorted(imported - local - set(sys.stdlib_module_names) - {"__future__"})
    # vLLM comes with the venv tools/vllm-venv makes (requirements/vllm.txt), never with the test extra:
    # tests/vllm_checks.py runs there, tests/test_gpu_integrations_vllm.py skips without it
    vllm_venv = {ln.split("==")[0] for ln in (REPO / "requirements/vllm.txt").read_text().splitlines()}
    assert "vllm" in vllm_venv and "vllm" not in extra
    third = [m for m in third if m != "vllm"]
    owners = packages_distributions()
    missing = [m for m in third if not {canonicalize_name(d) for d in owners.get(m, [m])} & extra]
    assert not missing, f"imported by tests/ but not in the test extra: {missing}"
    for tool in (
        "pytest",
        "build",
        "twine",
        "check-wheel-contents",
        "installer",
        "hatch",
        "hatchling",
        "ruff",
    ):
        assert tool in extra, tool


# -- build routes ---------------------------------------------------------------------------------------


def test_hatch_build_runs_the_gate_and_gives_the_same_archives(
    make_repo_copy: Callable[[str], Path], session_build: Any, tmp_path: Path
) -> None:
    """`hatch build` goes through build_backend/netra_backend.py (pyproject's hatch-build env puts it on
    the path): the same sdist and wheel as `python -m build`, and no way around the gate."""
    hatch = shutil.which("hatch", path=os.path.dirname(sys.executable)) or shutil.which("hatch")
    if hatch is None:
        pytest.skip("hatch is not installed (it is in the test extra)")
    root = make_repo_copy("hatch")
    env = clean_env(HATCH_DATA_DIR=str(tmp_path / "hatch-data"), HATCH_CACHE_DIR=str(tmp_path / "hatch-cache"),
                    PATH=f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}")  # fmt: skip
    r = subprocess.run([hatch, "build", str(tmp_path / "dist")], cwd=root, env=env, capture_output=True, text=True,
                       timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0, log(r)
    assert "release gate passed" in r.stderr + r.stdout, log(r)
    for built in (session_build.wheel, session_build.sdist):
        mine = tmp_path / "dist" / built.name
        assert mine.read_bytes() == built.read_bytes(), f"hatch build made another {built.name}"
    env["HATCH_BUILD_NO_HOOKS"] = "true"
    r = subprocess.run([hatch, "build", "-t", "wheel", str(tmp_path / "nohooks")], cwd=root, env=env,
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode != 0 and "HATCH_BUILD_NO_HOOKS=true" in r.stderr + r.stdout, log(r)
    assert not list(tmp_path.glob("nohooks/*.whl")), "a wheel without the gate was left behind"


# -- a missing extra: one line, before any work -----------------------------------------------------


def test_author_and_certify_commands_without_their_extras_say_what_to_install(
    installed_venv: Venv, make_repo_copy: Callable[[str], Path], tmp_path: Path
) -> None:
    root = make_repo_copy("no-author-extra")
    lock_before = (root / "release/manifest.lock").read_bytes()
    cases = {
        ("netra", "lock", "--root", root, "-q"): "netra-kernel[author]",
        ("netra", "certify", "--gpu-class", "sm_90", "--out", tmp_path / "t.json"): "netra-kernel[certify]",
        ("netra", "completion", "bash"): "netra-kernel[completion]",
        ("python", "-c", "import netra.certify.reference"): "netra-kernel[certify]",
        ("python", "-c", "import netra.torch"): "netra-kernel[torch]",
    }
    for argv, extra in cases.items():
        r = installed_venv.run(*argv)
        assert r.returncode == 1, log(r)
        if argv[0] == "netra":
            assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) == 1, log(r)
            assert r.stderr.startswith("netra: error: ") and extra in r.stderr, log(r)
        else:
            assert r.stderr.strip().splitlines()[-1].endswith(f"pip install '{extra}'"), log(r)
    assert (root / "release/manifest.lock").read_bytes() == lock_before
    assert not (tmp_path / "t.json").exists()
    # The author commands that need no extra work from a plain install: msgpack and pyelftools are
    # dependencies, so `netra build` of a source tree runs to the end.
    r = installed_venv.run("netra", "build", tmp_path / "out", "--root", root, "-q")
    assert r.returncode == 0 and "every static check passed" in r.stdout, log(r)


# -- every fix doctor and the runtime print, followed ------------------------------------------------


def _doctor(py: str, cwd: Path | None = None) -> tuple[int, dict[str, Any]]:
    r = subprocess.run([py, "-m", "netra", "doctor", "--json"], capture_output=True, text=True, timeout=TIMEOUT,
                       cwd=cwd or "/", env={k: v for k, v in clean_env().items() if not k.startswith("PYTHONPATH")},
                       check=False)  # fmt: skip
    assert r.stdout, log(r)
    return r.returncode, json.loads(r.stdout)


def _follow(report: dict[str, Any], **env: str) -> None:
    assert report["fixes"], report["problems"]
    for fix in report["fixes"]:
        r = shell(fix, **env)
        assert r.returncode == 0, f"the fix {fix!r} failed\n{log(r)}"


RUNTIME_HINT = """
from netra.errors import NetraError
from netra.runtime import open_catalog
try:
    open_catalog("gfx950")
    print("opened")
except NetraError as e:
    print(e.hint)
"""


def test_every_fix_of_a_damaged_wheel_install_makes_doctor_pass(
    venv_factory: Callable[..., Venv], built_wheel: Path, tmp_path: Path
) -> None:
    """A stray file (removed, since pip leaves files RECORD does not list), altered and missing data, an
    edited module: each problem names its fix; the runtime's own hint and then doctor's are run as
    printed, and doctor passes again."""
    wheel = tmp_path / "from-here" / built_wheel.name
    wheel.parent.mkdir()
    shutil.copy(built_wheel, wheel)
    venv = venv_factory(wheel, "damaged")
    py = str(venv.python)
    pkg = package_dir(py)
    rc, rep = _doctor(py)
    assert rc == 0 and rep["install"]["distribution"]["origin"] == "file", rep["problems"]
    assert rep["install"]["distribution"]["url"].endswith(str(wheel))

    stray = pkg / "_data" / "gfx950" / "stale.hsaco"
    stray.write_bytes(b"\x7fELF stale")
    table = pkg / "_data" / "tables" / "gfx950.json"
    table.write_bytes(table.read_bytes() + b"\n")
    code = next((pkg / "_data" / "sm_90").glob("*.cubin"))
    code.unlink()
    (pkg / "runtime" / "catalog.py").write_text((pkg / "runtime" / "catalog.py").read_text() + "\n# edited\n")

    rc, rep = _doctor(py)
    assert rc == 1
    text = "\n".join(rep["problems"])
    assert f"unexpected file gfx950/stale.hsaco (not in the lock); fix: rm -- {stray}" in text, text
    assert "altered table tables/gfx950.json" in text and f"missing code_object sm_90/{code.name}" in text
    assert rep["package_files"]["altered"] == ["netra/runtime/catalog.py"]
    assert len(rep["fixes"]) == 2, rep["fixes"]

    hint = venv.run("python", "-c", RUNTIME_HINT).stdout.strip()
    assert hint in rep["fixes"], (hint, rep["fixes"])
    r = shell(hint)
    assert r.returncode == 0, log(r)
    rc, rep = _doctor(py)
    assert rc == 1 and rep["fixes"] == [f"rm -- {stray}"], rep["problems"]  # pip leaves the stray file
    _follow(rep)
    rc, rep = _doctor(py)
    assert rc == 0 and rep["ok"], rep["problems"]

    # A link in place of a file, to a byte-identical copy outside the install: not what pip installed.
    copy = tmp_path / "outside.json"
    shutil.copyfile(table, copy)
    table.unlink()
    table.symlink_to(copy)
    rc, rep = _doctor(py)
    assert rc == 1 and "is a symlink" in "\n".join(rep["problems"]), rep["problems"]
    hint = venv.run("python", "-c", RUNTIME_HINT).stdout.strip()
    assert rep["fixes"] == [hint], (hint, rep["fixes"])
    _follow(rep)
    rc, rep = _doctor(py)
    assert rc == 0 and not table.is_symlink(), rep["problems"]

    # The wheel it was installed from is gone: the fix is this version from the index instead (here a
    # find-links folder stands in for the index).
    wheel.unlink()
    code = next((pkg / "_data" / "gfx950").glob("*.hsaco"))
    code.write_bytes(code.read_bytes()[:-1])
    rc, rep = _doctor(py)
    assert rc == 1 and rep["fixes"][0].endswith("--no-deps netra-kernel==0.1.0"), rep["fixes"]
    assert "no longer exists" in rep["install"]["distribution"]["reinstall_note"]
    _follow(rep, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(built_wheel.parent))
    rc, rep = _doctor(py)
    assert rc == 0, rep["problems"]
    assert rep["install"]["distribution"]["origin"] == "index"


def test_a_uv_install_is_repaired_through_uv_and_its_cache(built_wheel: Path, tmp_path: Path) -> None:
    """uv hard-links installed files to its cache, so damage reaches the cache: the fix cleans
    netra-kernel's cache entries before reinstalling, and then a new install from the cache is intact too."""
    uv = shutil.which("uv", path=os.path.dirname(sys.executable)) or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (it is in the test extra)")
    env = {
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "PATH": f"{os.path.dirname(uv)}{os.pathsep}{os.environ['PATH']}",
    }

    def install(venv: Path) -> str:
        for argv in ([uv, "venv", "-q", str(venv)],
                     [uv, "pip", "install", "-q", "--python", str(venv / "bin/python"), "--no-deps", str(built_wheel)]):  # fmt: skip
            r = subprocess.run(
                argv, env=clean_env(**env), capture_output=True, text=True, timeout=TIMEOUT, check=False
            )
            assert r.returncode == 0, log(r)
        return str(venv / "bin/python")

    py = install(tmp_path / "a")
    table = package_dir(py) / "_data" / "tables" / "sm_90.json"
    table.write_bytes(table.read_bytes() + b"\n")
    rc, rep = _doctor(py)
    assert rc == 1 and rep["install"]["distribution"]["installer"] == "uv"
    (fix,) = rep["fixes"]
    assert fix.startswith("uv cache clean netra-kernel && uv pip install --python "), fix
    _follow(rep, **env)
    rc, rep = _doctor(py)
    assert rc == 0, rep["problems"]
    rc, rep = _doctor(install(tmp_path / "b"))  # from the same cache
    assert rc == 0, rep["problems"]


def _reseal(wheel: Path, dest: Path, edit: Callable[[dict[str, bytes]], None]) -> Path:
    """A copy of a wheel with members edited and a fresh RECORD: the kind of wheel the gate refuses."""
    return rewrite(wheel, dest / wheel.name, edit, reseal=True)


def test_a_wheel_that_never_passed_the_gate_is_not_fixed_by_reinstalling_it(
    venv_factory: Callable[..., Venv], built_wheel: Path, tmp_path: Path
) -> None:
    """An edited manifest in a resealed wheel: the installed file is what RECORD says, so the fix is a
    gated release from the index, not the same wheel again; followed, doctor passes."""

    def edit(m: dict[str, bytes]) -> None:
        name = next(n for n in sorted(m) if n.startswith(DATA + "manifests/models/"))
        m[name] += b"\n# edited after the build\n"

    bad = _reseal(built_wheel, tmp_path / "bad", edit)
    venv = venv_factory(bad, "ungated")
    rc, rep = _doctor(str(venv.python))
    assert rc == 1 and len(rep["files"]["altered"]) == 1, rep["problems"]
    (fix,) = rep["fixes"]
    assert fix.endswith("--no-deps netra-kernel==0.1.0"), fix
    assert "did not pass the release gate" in rep["problems"][0], rep["problems"]
    _follow(rep, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(built_wheel.parent))
    rc, rep = _doctor(str(venv.python))
    assert rc == 0, rep["problems"]


def _house(tmp_path: Path, wheelhouse: Path) -> Path:
    """The session's dependency wheels plus hatchling, for a --no-build-isolation editable install."""
    house = tmp_path / "house"
    shutil.copytree(wheelhouse, house)
    r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(house), "hatchling==1.33.0"],
                       capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0, log(r)
    return house


def test_editable_install_is_recorded_and_doctor_says_to_build_then_passes(
    venv_factory: Callable[..., Venv], make_repo_copy: Callable[[str], Path], wheelhouse: Path, tmp_path: Path
) -> None:
    root = make_repo_copy("editable-install")
    venv = venv_factory(None, "editable")
    house = _house(tmp_path, wheelhouse)
    for argv in (["hatchling==1.33.0", "pyelftools", "msgpack"], ["--no-build-isolation", "-e", str(root)]):
        r = venv.run("python", "-m", "pip", "install", "-q", "--no-index", "--find-links", house, *argv)
        assert r.returncode == 0, log(r)
    rc, rep = _doctor(str(venv.python))
    assert rep["install"]["kind"] == "editable" and rep["install"]["root"] == str(root)
    assert rep["install"]["distribution"]["origin"] == "editable"
    assert (
        rc == 1
        and rep["files"]["missing"]
        and all(m["kind"] == "code_object" for m in rep["files"]["missing"])
    )
    (fix,) = rep["fixes"]
    assert fix.endswith("-m netra build build/kernels") and str(root) in fix, fix
    human = venv.run("netra", "doctor").stdout
    assert "editable install" in human and "netra build build/kernels" in human
    _follow(rep)
    rc, rep = _doctor(str(venv.python))
    assert rc == 0, rep["problems"]


def test_a_checkout_on_sys_path_is_a_source_install_that_names_the_wheel_it_hides(
    installed_venv: Venv, make_repo_copy: Callable[[str], Path]
) -> None:
    """`python -m netra doctor` run in a checkout imports the checkout's netra, not the installed wheel:
    doctor says so from the records (no wheel with 21 missing files), and each fix it prints works."""
    root = make_repo_copy("shadowing-checkout")
    git = ["git", "-C", str(root)]
    for argv in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run([*git, *argv], check=True, capture_output=True)
    manifest = next(p for p in sorted((root / "manifests" / "models").glob("*.toml")))
    manifest.write_text(manifest.read_text() + "\n# edited\n")
    py = str(installed_venv.python)
    rc, rep = _doctor(py, cwd=root)
    inst = rep["install"]
    assert inst["kind"] == "source" and inst["root"] == str(root) and inst["package"] == str(root / "netra")
    assert inst["distribution"] is None and inst["shadowed"]["dist_info"].endswith(
        "netra_kernel-0.1.0.dist-info"
    )
    rel = manifest.relative_to(root).as_posix()
    assert rc == 1 and [a["path"] for a in rep["files"]["altered"]] == [rel], rep["problems"]
    # In the order to run them: the manifest restored before the code objects are built from it.
    assert rep["fixes"][0] == f"git -C {root} checkout -- {rel}", rep["fixes"]
    assert len(rep["fixes"]) == 2 and rep["fixes"][1].endswith("-m netra build build/kernels"), rep["fixes"]
    human = subprocess.run([py, "-m", "netra", "doctor"], cwd=root, capture_output=True, text=True, check=False,
                           env=clean_env(), timeout=TIMEOUT).stdout  # fmt: skip
    assert "source checkout on sys.path" in human and "hides the installed netra-kernel 0.1.0" in human, human
    _follow(rep)
    rc, rep = _doctor(py, cwd=root)
    assert rc == 0, rep["problems"]
    # The installed wheel is untouched, and its own command still checks it from anywhere.
    r = installed_venv.run("netra", "doctor", cwd=root)
    assert r.returncode == 0 and "(wheel install" in r.stdout, log(r)


def test_doctor_reads_record_through_importlib_metadata(installed_venv: Venv, pkg: Path) -> None:
    """The RECORD hashes doctor holds the lock and build.json to are importlib.metadata's."""
    code = (
        "import json; from importlib import metadata; d = metadata.distribution('netra-kernel'); "
        "print(json.dumps({str(f): f.hash.value for f in d.files if f.hash and str(f).startswith('netra/_data/')}))"
    )
    r = installed_venv.run("python", "-c", code)
    assert r.returncode == 0, log(r)
    record = json.loads(r.stdout)
    rc, rep = _doctor(str(installed_venv.python))
    assert rc == 0 and rep["lock"]["record"] == "match"
    for name in ("manifest.lock", "build.json"):
        digest = base64.urlsafe_b64encode(
            hashlib.sha256((pkg / "_data" / name).read_bytes()).digest()
        ).decode()
        assert record[DATA + name] == digest.rstrip("=")
    assert rep["package_files"]["checked"] > 30 and not rep["package_files"]["altered"]


def test_a_wheel_package_copied_without_its_dist_info_is_checked_as_a_wheel(
    installed_venv: Venv, pkg: Path, tmp_path: Path
) -> None:
    """netra/ copied on its own (into an image, say) still carries its data: doctor and the runtime check
    it as a wheel install, say that no RECORD vouches for its Python files, and refuse damage by name."""
    from test_cli import valid

    site = tmp_path / "site"
    shutil.copytree(pkg, site / "netra", ignore=shutil.ignore_patterns("__pycache__"))
    env = {"PYTHONPATH": str(site)}

    def doctor() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(installed_venv.python), "-m", "netra", "doctor", "--json"], cwd="/",
                              env=clean_env(**env), capture_output=True, text=True, timeout=TIMEOUT, check=False)  # fmt: skip

    r = doctor()
    rep = valid("doctor", r.stdout)
    assert r.returncode == 0, log(r)
    inst = rep["install"]
    assert inst["kind"] == "wheel" and inst["distribution"] is None and inst["package"] == str(site / "netra")
    human = subprocess.run([str(installed_venv.python), "-m", "netra", "doctor"], cwd="/", env=clean_env(**env),
                           capture_output=True, text=True, timeout=TIMEOUT, check=False).stdout  # fmt: skip
    assert "wheel package without its .dist-info records" in human and "no RECORD" in human, human

    table = site / "netra" / DATA.removeprefix("netra/") / "tables" / "sm_90.json"
    table.unlink()
    code = "from netra.runtime import open_catalog\ntry:\n open_catalog('sm_90')\nexcept Exception as e:\n print(type(e).__name__, e)"
    r = subprocess.run([str(installed_venv.python), "-c", code], cwd="/", env=clean_env(**env), capture_output=True,
                       text=True, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.stdout.startswith(
        f"MissingFileError {table}: the certified table of GPU class sm_90 is missing"
    ), log(r)
    assert "pip install --force-reinstall --no-deps netra-kernel==0.1.0" in r.stdout, log(r)
    r = doctor()
    assert r.returncode == 1 and json.loads(r.stdout)["files"]["missing"][0]["path"] == "tables/sm_90.json", (
        log(r)
    )
