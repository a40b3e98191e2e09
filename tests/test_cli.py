"""The `netra` command as a user meets it: JSON reports that follow their schemas, catalog and explain
from an installed package alone, progress, errors one problem per line, a closed pipe, Ctrl-C, shell
completion, and a start-up that imports nothing it does not need.

Real processes throughout: the session's wheel pip-installed in a venv (run from outside any source
tree), the repository's tree for the author commands, real bash for completion.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import certevidence
import pytest
from conftest import REPO, TIMEOUT, Venv, clean_env, log, signals_default
from wheeltools import rewrite

from netra import targets
from netra.cli import schemas
from netra.runtime import layout

SCHEMAS = REPO / "netra" / "schemas"
DATA = layout.PACKAGE_DATA + "/"
# The models of hidden 4096 without weight offset: they share every contract of that width.
FOUR_4096 = ["Llama-3.1-8B", "Mistral-7B-v0.3", "Qwen3-235B-A22B", "Qwen3-8B"]
jsonschema = pytest.importorskip("jsonschema")


def validator(command: str) -> Any:
    """A validator for `netra <command> --json`: every shipped schema, completed from the registry
    (netra.cli.schemas), in its registry ($ref by $id); the open form of each file is a schema too."""
    from referencing import Registry, Resource

    registry = Registry()
    for name in schemas.names():
        jsonschema.Draft202012Validator.check_schema(
            json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        )
        schema = schemas.load(name)
        jsonschema.Draft202012Validator.check_schema(schema)
        registry = registry.with_resource(schema["$id"], Resource.from_contents(schema))
    return jsonschema.Draft202012Validator(schemas.load(command), registry=registry)


def valid(command: str, out: str) -> dict[str, Any]:
    doc = json.loads(out)
    errors = sorted(validator(command).iter_errors(doc), key=str)
    assert not errors, f"netra {command} --json breaks its schema: {[e.message for e in errors[:5]]}"
    assert doc["schema"] == 1 and doc.get("command", command) == command
    return doc


def netra(*args: str | Path, cwd: Path | None = None, **kw: Any) -> subprocess.CompletedProcess[str]:
    """This tree's netra (the author commands), as `python -m netra`."""
    return subprocess.run([sys.executable, "-m", "netra", *map(str, args)], cwd=cwd or REPO,
                          env=clean_env(PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False, **kw)  # fmt: skip


def installed_tables(pkg: Path) -> dict[str, dict[str, Any]]:
    """Each installed table, with its evidence file's records in place of the summaries (as netra
    explain shows them)."""
    from netra.runtime import tables

    out = {}
    for p in sorted((pkg / "_data" / "tables").glob("*.json")):
        ev = pkg / "_data" / "evidence" / p.name
        out[p.stem] = tables.join(
            p.read_bytes(), ev.read_bytes() if ev.exists() else None, str(p), str(ev), p.stem
        )
    return out


# -- every report as JSON, against its shipped schema --------------------------------------------------


def test_every_schema_ships_in_the_wheel(built_wheel: Path) -> None:
    with zipfile.ZipFile(built_wheel) as z:
        shipped = {Path(n).name for n in z.namelist() if n.startswith("netra/schemas/")}
    want = {
        f"{c}.schema.json"
        for c in ("catalog", "explain", "lock", "build", "verify-wheel", "doctor", "certify", "env", "cache")
    }
    assert want | {"table.schema.json", "evidence.schema.json"} == shipped


def test_installed_reports_follow_their_schemas(installed_venv: Venv, built_wheel: Path) -> None:
    """From the venv's own folder, nowhere near a source tree: doctor, env, catalog, explain, verify-wheel."""
    cases = {
        "doctor": ["doctor", "--json"],
        "env": ["env", "--json"],
        "catalog": ["catalog", "--json"],
        "explain": ["explain", "netra_rmsnorm_h4096_wo0_b256", "--json"],
        "verify-wheel": ["verify-wheel", str(built_wheel), "--json"],
    }
    for command, argv in cases.items():
        r = installed_venv.run("netra", *argv)
        assert r.returncode == 0 and r.stderr == "", log(r)
        valid(command, r.stdout)
    r = installed_venv.run("netra", "explain", "rmsnorm(hidden=4096, weight_offset=0)", "--json")
    assert r.returncode == 0, log(r)
    doc = valid("explain", r.stdout)
    assert doc["kind"] == "contract" and {m["gpu_class"] for m in doc["matches"]} >= {"gfx950", "sm_90"}


def test_author_reports_follow_their_schemas_with_progress_unless_quiet(tmp_path: Path) -> None:
    r = netra("lock", "--check", "--json", "-q")
    assert r.returncode == 0 and r.stderr == "", log(r)  # -q: not one progress line
    doc = valid("lock", r.stdout)
    assert doc["up_to_date"] and doc["differences"] == []

    r = netra("build", tmp_path / "out", "--json")
    assert r.returncode == 0, log(r)
    doc = valid("build", r.stdout)
    n = len(doc["artifacts"])
    steps = [ln for ln in r.stderr.splitlines() if ln.startswith("netra: [")]
    assert steps and steps[-1].startswith(f"netra: [{n}/{n}] ") and len(steps) == n, r.stderr[-2000:]
    for a in doc["artifacts"]:
        blob = (tmp_path / "out" / a["file"]).read_bytes()
        assert hashlib.sha256(blob).hexdigest() == a["sha256"], a["artifact"]

    r = netra("cache", "--json")
    assert r.returncode == 0 and r.stderr == "", log(r)
    doc = valid("cache", r.stdout)
    assert doc["entries"] >= n and doc["used_by"] == {"build_and_lock": True, "wheel_hook": True}, doc


# -- catalog and explain from the installed package alone -----------------------------------------------


def test_catalog_lists_exactly_the_installed_tables(installed_venv: Venv, pkg: Path) -> None:
    r = installed_venv.run("netra", "catalog", "--json")
    assert r.returncode == 0, log(r)
    doc = valid("catalog", r.stdout)
    assert doc["install"]["kind"] == "wheel" and doc["install"]["root"] == str(pkg / "_data")
    want = sorted((cls, c["artifact"], e["key"], c["maturity"])
                  for cls, t in installed_tables(pkg).items() for e in t["entries"] for c in e["candidates"])  # fmt: skip
    assert (
        sorted((a["gpu_class"], a["artifact"], a["contract"], a["maturity"]) for a in doc["artifacts"])
        == want
    )
    shared = {
        a["artifact"]: a["users"]
        for a in doc["artifacts"]
        if a["contract"] == "rmsnorm(hidden=4096,weight_offset=0)"
    }
    assert shared and all(u == FOUR_4096 for u in shared.values()), shared
    assert any(f["model"] == "Gemma-2-9B" for f in doc["fallbacks"])

    human = installed_venv.run("netra", "catalog").stdout.splitlines()
    assert human[0].split() == ["ARTIFACT", "CLASS", "CONTRACT", "TACTIC", "MATURITY", "USED", "BY"]
    assert len([ln for ln in human if ln.startswith("netra_")]) == len(want)
    only = valid("catalog", installed_venv.run("netra", "catalog", "--json", "--gpu-class", "sm_90").stdout)
    assert {a["gpu_class"] for a in only["artifacts"]} == {"sm_90"} and set(only["classes"]) == {"sm_90"}
    gemma = valid("catalog", installed_venv.run("netra", "catalog", "--json", "--model", "Gemma-2-9B").stdout)
    assert gemma["artifacts"] and all("Gemma-2-9B" in a["users"] for a in gemma["artifacts"])


def test_explain_an_artifact_names_its_contract_evidence_launch_and_hashes(
    installed_venv: Venv, pkg: Path
) -> None:
    tables = installed_tables(pkg)
    entry = next(e for e in tables["sm_90"]["entries"] if e["dispatch"])
    cand = entry["candidates"][-1]
    build = json.loads((pkg / "_data" / "build.json").read_text())
    locked = next(a for a in build["lock"]["artifacts"] if a["name"] == cand["artifact"])

    r = installed_venv.run("netra", "explain", cand["artifact"], "--json")
    assert r.returncode == 0, log(r)
    (m,) = valid("explain", r.stdout)["matches"]
    (k,) = m["candidates"]
    assert (m["key"], m["contract"], m["dispatch"]) == (entry["key"], entry["contract"], entry["dispatch"])
    assert (k["tactic"], k["maturity"], k["rank"]) == (
        cand["tactic"],
        cand["maturity"],
        len(entry["candidates"]),
    )
    assert (k["launch"], k["kernarg"], k["evidence"]) == (cand["launch"], cand["kernarg"], cand["evidence"])
    assert k["hashes"] == {
        "text_sha256": locked["text_sha256"], "launch_sha256": locked["launch_sha256"],
        "code_sha256": locked["code_sha256"], "file_sha256": build["code_objects"][cand["file"]]["sha256"],
    }  # fmt: skip
    assert (
        k["hashes"]["file_sha256"] == hashlib.sha256((pkg / "_data" / cand["file"]).read_bytes()).hexdigest()
    )

    human = installed_venv.run("netra", "explain", cand["artifact"]).stdout
    for fact in (entry["key"], "used by:", "evidence, hardware: passed", "kernarg (", "launch: block",
                 locked["text_sha256"], "dispatch by rows:"):  # fmt: skip
        assert fact in human, (fact, human)


def test_explain_a_contract_lists_its_candidates_in_rank_order(installed_venv: Venv, pkg: Path) -> None:
    r = installed_venv.run(
        "netra", "explain", "rmsnorm(weight_offset=0,hidden=4096)", "--json", "--gpu-class", "gfx950"
    )
    assert r.returncode == 0, log(r)
    (m,) = valid("explain", r.stdout)["matches"]
    entry = next(e for e in installed_tables(pkg)["gfx950"]["entries"] if e["key"] == m["key"])
    assert [c["artifact"] for c in m["candidates"]] == [c["artifact"] for c in entry["candidates"]]
    assert m["served_by_default"] is None  # static evidence: the default policy (accepted) serves nothing
    assert all(c["hashes"]["file_sha256"] for c in m["candidates"])


def test_an_unknown_name_is_refused_with_the_closest_ones(installed_venv: Venv) -> None:
    for name, near in (("netra_rmsnorm_h4096_wo0_w9", "netra_rmsnorm_h4096_wo0_w8"),
                       ("rmsnorm(hidden=4097,weight_offset=0)", "rmsnorm(hidden=4096,weight_offset=0)")):  # fmt: skip
        r = installed_venv.run("netra", "explain", name)
        assert r.returncode == 1 and "Traceback" not in r.stderr and r.stdout == "", log(r)
        (line,) = r.stderr.splitlines()
        assert (
            line.startswith(f"netra: error: {name!r} is neither an artifact nor a contract") and near in line
        )
    r = installed_venv.run("netra", "explain", "gelu_tanh_mul_fp8_quant(inter=14336)")
    assert r.returncode == 1 and "fallback Gemma-2-9B" in r.stderr, log(r)


def test_a_contract_not_built_for_a_class_is_said_by_catalog_and_explain(installed_venv: Venv) -> None:
    key = "fused_add_rmsnorm(hidden=4096,weight_offset=0)"
    r = installed_venv.run("netra", "explain", key, "--json")
    assert r.returncode == 0, log(r)
    doc = valid("explain", r.stdout)
    # every class but gfx950 builds it (the NVIDIA classes share its CUDA template)
    assert [m["gpu_class"] for m in doc["matches"]] == sorted(set(targets.names()) - {"gfx950"})
    assert {(g["gpu_class"], g["model"]) for g in doc["not_built"]} == {
        ("gfx950", m) for m in FOUR_4096
    }  # fmt: skip
    human = installed_venv.run("netra", "explain", key).stdout
    assert f"{key} on gfx950: not built (" in human
    r = installed_venv.run("netra", "explain", key, "--gpu-class", "gfx950")
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stdout == "", log(r)
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"netra: error: {key} is not built for gfx950: no gfx950 template"), line
    cat = valid("catalog", installed_venv.run("netra", "catalog", "--json").stdout)
    gaps = {(f["gpu_class"], f["contract"]) for f in cat["fallbacks"] if "gpu_class" in f}
    # every contract some class builds and gfx950 does not is a gap (derived from the committed tables)
    tables = {
        cls: json.loads((REPO / "release" / "tables" / f"{cls}.json").read_text()) for cls in targets.names()
    }
    not_gfx950 = {e["key"] for t in tables.values() for e in t["entries"]} - {
        e["key"] for e in tables["gfx950"]["entries"]
    }
    assert ("gfx950", key) in gaps and {c for _, c in gaps} == not_gfx950, sorted(
        not_gfx950 ^ {c for _, c in gaps}
    )
    assert f"not built for gfx950: {key} (Llama-3.1-8B): " in installed_venv.run("netra", "catalog").stdout


def test_catalog_refuses_a_damaged_install_naming_the_file_and_the_fix(
    venv_factory: Any, built_wheel: Path
) -> None:
    from venvtools import package_dir

    venv = venv_factory(built_wheel, "catalog-damage")
    pkg = package_dir(str(venv.python))
    manifest = next((pkg / "_data" / "manifests" / "models").glob("*.toml"))
    manifest.write_text(manifest.read_text() + "\n[extra]\n")
    r = venv.run("netra", "catalog")
    assert r.returncode == 1 and "Traceback" not in r.stderr and r.stdout == "", log(r)
    (line,) = r.stderr.splitlines()
    assert (
        str(manifest) in line and "altered" in line and f"--force-reinstall --no-deps {built_wheel}" in line
    )


# -- errors, pipes and signals ---------------------------------------------------------------------------


def _without_data(wheel: Path, dest: Path) -> Path:
    """The wheel with every netra/_data member dropped and RECORD rewritten: what HATCH_BUILD_NO_HOOKS makes."""

    def drop(members: dict[str, bytes]) -> None:
        for name in [n for n in members if n.startswith(DATA)]:
            del members[name]

    return rewrite(wheel, dest / wheel.name, drop, reseal=True)


def test_many_problems_are_listed_one_per_line(built_wheel: Path, tmp_path: Path) -> None:
    bare = _without_data(built_wheel, tmp_path)
    r = netra("verify-wheel", bare, "--lock", REPO / "release/manifest.lock")
    assert r.returncode == 1 and "Traceback" not in r.stderr, log(r)
    first, *rest = r.stderr.splitlines()
    assert (
        first.startswith(f"netra: error: {bare.name} refused")
        and "(listed below)" in first
        and len(first) < 600
    )
    with zipfile.ZipFile(built_wheel) as z:
        members = sorted(n for n in z.namelist() if n.startswith(DATA))
    assert rest == [f"  missing {n}" for n in members]
    doc = valid(
        "verify-wheel", netra("verify-wheel", bare, "--lock", REPO / "release/manifest.lock", "--json").stdout
    )
    assert not doc["ok"] and sorted(p["member"] for p in doc["problems"]) == members


def test_a_closed_stdout_ends_quietly_with_the_sigpipe_status(installed_venv: Venv) -> None:
    """`netra catalog | head -n 1`: the reader is gone before netra writes; no BrokenPipeError traceback."""
    for argv in (["catalog"], ["catalog", "--json"], ["explain", "netra_rmsnorm_h4096_wo0_b256"], ["doctor"]):
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([str(installed_venv.bin("netra")), *argv], stdout=w, stderr=subprocess.PIPE,
                               text=True, timeout=TIMEOUT, env=clean_env(), cwd=installed_venv.root, check=False)  # fmt: skip
        finally:
            os.close(w)
        assert p.returncode == 141 and p.stderr == "", (argv, p.returncode, p.stderr)
    sh = subprocess.run(["bash", "-c", f"set -o pipefail; {installed_venv.bin('netra')} catalog | head -n 1"],
                        capture_output=True, text=True, timeout=TIMEOUT, env=clean_env(), check=False)  # fmt: skip
    assert sh.stdout.startswith("ARTIFACT") and "Traceback" not in sh.stderr, log(sh)


def test_a_report_that_cannot_be_written_is_one_line_not_a_traceback(installed_venv: Venv) -> None:
    """stdout on a full disk (/dev/full) or closed (`>&-`): the report is lost, and netra says so in one
    line naming stdout, exit 1. Both were tracebacks (an OSError from the last flush; an AttributeError
    on sys.stdout, None when fd 1 is closed), and a closed stdout once dropped the report with exit 0."""
    exe = str(installed_venv.bin("netra"))
    for argv in (["catalog"], ["env", "--json"], ["doctor"]):
        with open("/dev/full", "w") as full:
            p = subprocess.run([exe, *argv], stdout=full, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT,
                               env=clean_env(), cwd=installed_venv.root, check=False)  # fmt: skip
        assert p.returncode == 1 and p.stderr.count("\n") == 1, (argv, p.returncode, p.stderr)
        assert p.stderr.startswith("netra: error: stdout: the report could not be written (No space left"), (
            p.stderr
        )
        p = subprocess.run(["bash", "-c", f"exec {exe} {' '.join(argv)} >&-"], stderr=subprocess.PIPE, text=True,
                           timeout=TIMEOUT, env=clean_env(), cwd=installed_venv.root, check=False)  # fmt: skip
        assert p.returncode == 1 and p.stderr.startswith("netra: error: stdout is closed"), (argv, p.stderr)
        assert p.stderr.count("\n") == 1, p.stderr


def test_ctrl_c_during_a_build_says_so_in_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "netra", "build", str(out), "--root", str(REPO), "-j", "1"],
                         env=clean_env(PYTHONPATH=str(REPO)), stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, preexec_fn=signals_default)  # fmt: skip
    assert p.stderr is not None
    seen = []
    for line in p.stderr:
        seen.append(line)
        if line.startswith("netra: [1/"):
            p.send_signal(signal.SIGINT)
            break
    rest = p.stderr.read()
    p.wait(timeout=TIMEOUT)
    assert p.returncode == 130, (p.returncode, "".join(seen) + rest)
    assert (
        "Traceback" not in rest and rest.strip().splitlines()[-1] == "netra: interrupted: nothing was written"
    ), rest
    assert not out.exists() or not any(out.rglob("*"))


@pytest.mark.parametrize("entry", ["console script", "python -m netra"])
def test_ctrl_c_while_the_command_starts_says_so_in_one_line(installed_venv: Venv, entry: str) -> None:
    """A Ctrl-C while the CLI is still being imported (a tenth of a second or more) raised KeyboardInterrupt
    inside the import machinery: a traceback. -X importtime shows each import as it completes, so the
    signal lands mid-import (netra.errors done, the rest of netra.cli still to come), every time."""
    python = str(installed_venv.python)
    argv = [python, "-X", "importtime", *([str(installed_venv.bin("netra"))] if entry == "console script"
                                          else ["-m", "netra"]), "doctor"]  # fmt: skip
    p = subprocess.Popen(argv, env=clean_env(), cwd=installed_venv.root, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, preexec_fn=signals_default)  # fmt: skip
    assert p.stderr is not None
    seen = []
    for line in p.stderr:
        seen.append(line)
        if line.startswith("import time:") and line.split("|")[-1].strip() == "netra.errors":
            p.send_signal(signal.SIGINT)
            break
    rest = p.stderr.read()
    p.wait(timeout=TIMEOUT)
    said = [ln for ln in rest.splitlines() if not ln.startswith("import time:")]
    assert seen[-1].split("|")[-1].strip() == "netra.errors", "".join(seen)
    assert p.returncode == 130 and said == ["netra: interrupted: nothing was written"], (p.returncode, rest)


def test_usage_errors_and_help() -> None:
    r = netra("--help")
    assert r.returncode == 0
    for command in (
        "doctor",
        "env",
        "catalog",
        "explain",
        "verify-wheel",
        "certify",
        "lock",
        "build",
        "cache",
        "completion",
    ):
        assert command in r.stdout, command
    r = netra("explain")
    assert r.returncode == 2 and "ARTIFACT|CONTRACT" in r.stderr and "Traceback" not in r.stderr


# -- shell completion, and a start-up that imports nothing it does not need --------------------------------


def test_bash_completion_completes_commands_options_and_artifacts(tmp_path: Path) -> None:
    pytest.importorskip("shtab")
    r = netra("completion", "bash", cwd=tmp_path)
    assert r.returncode == 0, log(r)
    script = tmp_path / "netra.bash"
    script.write_text(r.stdout)
    probe = f"""
    source {script}
    complete_line() {{ COMP_LINE="$1"; COMP_POINT=${{#COMP_LINE}}; read -ra COMP_WORDS <<< "$1";
      [[ "$1" == *" " ]] && COMP_WORDS+=(""); COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 )); COMPREPLY=();
      _shtab_netra; echo "${{COMPREPLY[*]}}"; }}
    complete_line "netra "
    complete_line "netra explain netra_rmsnorm_h4096_wo0_"
    complete_line "netra doctor --"
    """
    out = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, log(out)
    commands, artifacts, options = out.stdout.splitlines()
    assert set(commands.split()) == {
        "doctor",
        "catalog",
        "explain",
        "verify-wheel",
        "certify",
        "lock",
        "build",
        "completion",
        "env",
        "cache",
    }
    assert "netra_rmsnorm_h4096_wo0_b256" in artifacts.split() and all(
        a.startswith("netra_rmsnorm_h4096_wo0_") for a in artifacts.split()
    )
    assert {"--json", "--require-gpu", "--sysfs-nodes"} <= set(options.split())
    zsh = netra("completion", "zsh", cwd=tmp_path)
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef netra"), log(zsh)


def test_start_up_imports_no_completion_library() -> None:
    """`import netra` stays free (tests/test_runtime.py); the CLI imports shtab/argcomplete only for completion."""
    code = (
        "import sys; from netra import cli; rc = cli.main(['catalog']); "
        "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in ('shtab', 'argcomplete')), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=clean_env(PYTHONPATH=str(REPO)),
                       cwd=REPO, timeout=TIMEOUT, check=False)  # fmt: skip
    assert r.returncode == 0 and r.stderr.strip() == "0 []", log(r)


@pytest.mark.gpu
def test_certify_json_follows_its_schema(tmp_path: Path) -> None:
    """On an H200 (docs/gpu.md): the installed netra certifies sm_90 (--quick: the memory checkers and the
    profiler skipped, so nothing is accepted) and reports it as JSON."""
    r = subprocess.run([sys.executable, "-m", "netra", "certify", "--gpu-class", "sm_90", "--out", str(tmp_path / "t.json"),
                        "--quick", "--json", "-q"], capture_output=True, text=True, timeout=3600, cwd="/", check=False)  # fmt: skip
    assert r.returncode == 0, log(r)
    doc = valid("certify", r.stdout)
    assert doc["table_sha256"] == hashlib.sha256((tmp_path / "t.json").read_bytes()).hexdigest()
    ev = tmp_path / "t.evidence.json"  # every candidate's record, which the table summarizes
    assert (
        doc["evidence"] == str(ev) and doc["evidence_sha256"] == hashlib.sha256(ev.read_bytes()).hexdigest()
    )
    assert doc["candidates"]["verified"] > 0 and doc["candidates"]["accepted"] == 0
    assert set(doc["memory_checks"]) == {"skipped"} and set(doc["profiles"]) <= {"skipped"}
    assert doc["reused"] is None and doc["carried"] == 0 and doc["certified"] == doc["contracts"]
    assert doc["held"] == 0


@pytest.mark.gpu
def test_certify_reuse_certifies_only_the_contracts_that_changed(tmp_path: Path) -> None:
    """On an H200: `netra certify --reuse` of the committed table, one small contract's evidence taken
    away (as if its kernel had changed), certifies that contract and those with a tactic added since
    their certification, and carries every other one as committed; a table certified on another device
    is refused in one line before anything runs."""
    from netra.runtime import tables

    committed = certevidence.read_certified(REPO)
    changed = next(e for e in committed["entries"] if e["contract"]["op"] == "rmsnorm")["key"]
    reused = json.loads(json.dumps(committed))
    for e in reused["entries"]:
        if e["key"] == changed:
            e["dispatch"] = None
            for c in e["candidates"]:
                c["maturity"], c["evidence"]["hardware"] = "experiment", None
    rerun = {
        e["key"] for e in reused["entries"] if any(c["evidence"]["hardware"] is None for c in e["candidates"])
    }

    def certify(table: dict[str, Any], *more: str) -> subprocess.CompletedProcess[str]:
        serving, evidence = tables.split(table)
        (tmp_path / "reused.json").write_text(tables.dumps(serving))
        (tmp_path / "reused.evidence.json").write_text(tables.dumps(evidence or {}))
        return subprocess.run([sys.executable, "-m", "netra", "certify", "--gpu-class", "sm_90", "--out", str(tmp_path / "t.json"),
                               "--reuse", str(tmp_path / "reused.json"), "--quick", "--json", "-q", *more],
                              capture_output=True, text=True, timeout=3600, cwd="/", check=False)  # fmt: skip

    elsewhere = json.loads(json.dumps(reused))
    elsewhere["certification"]["runs"][0]["device"] = "another GPU"
    r = certify(elsewhere)
    assert r.returncode == 1 and not (tmp_path / "t.json").exists(), log(r)
    assert len(r.stderr.strip().splitlines()) == 1 and "certified on another GPU" in r.stderr, log(r)
    # --only the changed contract: it alone is measured; the others the table cannot carry are held
    r = certify(reused, "--only", changed)
    assert r.returncode == 0, log(r)
    doc = valid("certify", r.stdout)
    assert (doc["certified"], doc["held"]) == (1, len(rerun) - 1), doc
    (tmp_path / "t.json").unlink()
    r = certify(reused)
    assert r.returncode == 0, log(r)
    doc = valid("certify", r.stdout)
    assert doc["certified"] == len(rerun) and doc["carried"] == len(committed["entries"]) - len(rerun)
    assert doc["held"] == 0
    out, ev = tmp_path / "t.json", tmp_path / "t.evidence.json"
    made = tables.join(out.read_bytes(), ev.read_bytes(), str(out), str(ev), "sm_90")
    assert made["certification"]["runs"][1:] == committed["certification"]["runs"]
    for e, was in zip(made["entries"], committed["entries"], strict=True):
        runs = {c["evidence"]["hardware"]["run"] for c in e["candidates"]}
        if e["key"] in rerun:
            assert runs == {0}, e["key"]  # measured by this run
        else:
            for c in was["candidates"]:
                c["evidence"]["hardware"]["run"] += 1
            assert e == was, e["key"]  # carried: evidence, maturity, order and dispatch as committed


# -- every name and number typed is held to the valid ones -----------------------------------------------


@pytest.mark.parametrize(
    ("args", "status", "says"),
    [
        # wrong case: a real "did you mean", and the valid choices
        (["catalog", "--model", "llama-3.1-8b"], 2, "unknown model 'llama-3.1-8b'"),
        (["catalog", "--model", "Llama-3.3-70B"], 2, "unknown model 'Llama-3.3-70B'"),
        (["catalog", "--model", "No-Such-Model"], 2, "valid: DeepSeek-V3, Gemma-2-9B, Llama-3.1-70B, Llama-3.1-8B, Mistral-7B-v0.3, Qwen3-14B, "
         "Qwen3-235B-A22B, Qwen3-30B-A3B, Qwen3-32B, Qwen3-8B"),
        (["catalog", "--gpu-class", "SM_90"], 2, "unknown GPU class 'SM_90'; hint: did you mean 'sm_90'?"),
        (["explain", "rmsnorm(hidden=4096,weight_offset=0)", "--gpu-class", "sm_91"], 2, "did you mean 'sm_90'"),
        (["explain", "rmsnorn(hidden=4096,weight_offset=0)"], 2, "unknown op family 'rmsnorn'"),
        (["explain", "RMSNORM(hidden=4096,weight_offset=0)"], 2, "did you mean 'rmsnorm'?"),
        (["explain", "rmsnorm"], 2, "its contracts here: rmsnorm(hidden=128,weight_offset=0), "),
        (["explain", "rmsnorm(hidden=4096)"], 2, "op rmsnorm takes parameters hidden, weight_offset, got hidden"),
        # a family the model manifests document a fallback for (issue 29: exit 1 and five lines before)
        (["explain", "fused_add_rmsnorm"], 2, "op family, not a contract: name one of its contracts (hidden, weight_offset)"),
        (["explain", "fused_add_rmsnorm(hidden=4096)"], 2, "op fused_add_rmsnorm takes parameters hidden, weight_offset, got hidden"),
        (["explain", "NETRA_RMSNORM_H4096_WO0_W8"], 1, "did you mean 'netra_rmsnorm_h4096_wo0_w8'"),
        # a malformed contract: the parser's own reason, exit 2 (was exit 1, "neither an artifact nor a contract")
        (["explain", "rmsnorm(hidden=4096,weight_offset=0"], 2, "'rmsnorm(hidden=4096,weight_offset=0' is not a contract"),
        (["explain", "rmsnorm(hidden=abc,weight_offset=0)"], 2, "parameter 'hidden=abc' is not name=integer"),
        (["explain", "rmsnorm(hidden=4096,hidden=4096,weight_offset=0)"], 2, "parameter 'hidden' is given twice"),
        (["explain", "RMSNORM"], 1, "did you mean 'rmsnorm'?"),
        (["explain", "rmsnorm(hidden=4097,weight_offset=0)"], 1, "did you mean 'rmsnorm(hidden=4096,weight_offset=0)'"),
        # a family whose other shapes the manifests document as fallbacks (gfx950's gaps, DeepSeek-V3's routed experts): one line
        (["explain", "fused_add_rmsnorm(hidden=4097,weight_offset=0)"], 1, "did you mean 'fused_add_rmsnorm(hidden=4096,"),
        (["certify", "--gpu-class", "gfx951"], 2, "did you mean 'gfx950'?"),
    ],
)  # fmt: skip
def test_a_name_that_is_none_of_the_valid_ones_is_refused_in_one_line(
    args: list[str], status: int, says: str
) -> None:
    root = ["--root", str(REPO)] if args[0] in ("catalog", "explain") else []
    r = netra(*args, *root)
    assert r.returncode == status and r.stdout == "" and "Traceback" not in r.stderr, log(r)
    (line,) = r.stderr.splitlines()
    assert line.startswith("netra: error: ") and says in line, line
    typed = next(a for a in reversed(args) if not a.startswith("--"))
    assert f"did you mean {typed!r}" not in line and f"or {typed!r}" not in line, (
        line
    )  # never the typed string


def test_a_valid_name_the_install_cannot_serve_is_a_refusal() -> None:
    """A registered class with a wrong-class artifact: exit 1 naming the class that serves it; the right
    name passes."""
    r = netra("explain", "netra_rmsnorm_h4096_wo0_w8", "--gpu-class", "gfx950", "--root", REPO)
    assert r.returncode == 1 and "is of GPU class sm_90, not gfx950" in r.stderr, log(r)
    r = netra("catalog", "--model", "Llama-3.1-8B", "--root", REPO, "--json")
    doc = valid("catalog", r.stdout)
    assert (
        r.returncode == 0 and doc["artifacts"] and all("Llama-3.1-8B" in a["users"] for a in doc["artifacts"])
    )


@pytest.mark.parametrize("cls", targets.names())
def test_catalog_of_one_class_says_that_class_s_gaps_only(cls: str) -> None:
    """Issue 30: `catalog --gpu-class sm_90` printed gfx950's "not built for" lines. One class's view holds
    its own gaps and the model-wide fallbacks (no class: no family computes the op), no other class's."""
    r = netra("catalog", "--gpu-class", cls, "--root", REPO, "--json")
    doc = valid("catalog", r.stdout)
    assert r.returncode == 0 and list(doc["classes"]) == [cls], log(r)
    assert {f.get("gpu_class", cls) for f in doc["fallbacks"]} <= {cls}
    every = valid("catalog", netra("catalog", "--root", REPO, "--json").stdout)["fallbacks"]
    assert doc["fallbacks"] == [f for f in every if f.get("gpu_class", cls) == cls]
    human = netra("catalog", "--gpu-class", cls, "--root", REPO).stdout
    others = [
        ln for ln in human.splitlines() if ln.startswith("not built for ") and f" for {cls}: " not in ln
    ]
    assert not others, others


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["lock", "--check", "-j", "-3"], "argument -j/--jobs: -3 must be at least 1"),
        (["build", "out", "-j", "0"], "argument -j/--jobs: 0 must be at least 1"),
        (["lock", "--check", "-j", "two"], "'two' is not a whole number"),
        (["certify", "--gpu-class", "sm_90", "--seed", "-1"], "argument --seed: -1 must be 0 or more"),
        (["certify", "--gpu-class", "sm_90", "--tool-timeout", "nan"], "must be a positive, finite number"),
        (["certify", "--gpu-class", "sm_90", "--tool-timeout", "0"], "must be a positive, finite number"),
    ],
)
def test_a_bad_number_is_a_one_line_usage_error(args: list[str], says: str, tmp_path: Path) -> None:
    r = netra(*args, cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr, log(r)
    (line,) = r.stderr.splitlines()
    assert (
        line.startswith(f"netra {args[0]}: error: ") and says in line and f"`netra {args[0]} --help`" in line
    ), line
    assert not any(tmp_path.iterdir())  # nothing was started
