"""netra.runtime.verifier on the tree's own release files: the one place that decides what each file of a
release must be. Doctor, the wheel gate and the catalog render its findings (their end-to-end tests:
test_doctor.py, test_wheel_gate.py, test_bad_inputs.py's resealed installs, test_runtime_integrity.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from netra.runtime import lockfile, tables, verifier

REPO = Path(__file__).resolve().parents[1]
GAP = (
    '\n[[fallbacks]]\nop = "rmsnorm"\ngpu_class = "gfx950"\nhidden = 3584\nweight_offset = 1\n'
    'reason = "said not built, though it is"\n'
)


def _release() -> tuple[lockfile.Lock, dict[str, bytes]]:
    lock = lockfile.read(REPO / lockfile.LOCK_PATH)
    return lock, {f.path: (REPO / f.path).read_bytes() for f in lock.files}


def test_the_release_agrees_with_itself() -> None:
    lock, intact = _release()
    for f in lock.files:
        assert verifier.locked_file(f.path, f.role, intact[f.path], f.sha256) == [], f.path
    said = verifier.agreement(lock, intact, str)
    assert said.invalid == {} and said.disagreements == []
    assert sorted(said.tables) == sorted(
        c for f in lock.files_with_role("table") if (c := tables.gpu_class_of(f.path))
    )


def test_findings_name_the_file_the_check_and_both_sides() -> None:
    lock, intact = _release()
    f = next(f for f in lock.files if f.path.startswith(verifier.MODELS))
    (found,) = verifier.locked_file(f.path, f.role, intact[f.path] + b"\n", f.sha256)
    got = hashlib.sha256(intact[f.path] + b"\n").hexdigest()
    assert (found.kind, found.member, found.check, found.expected, found.found, found.source) == (
        "altered", f.path, "sha256", f.sha256, got, "lock"
    )  # fmt: skip


def test_a_fallback_the_lock_contradicts_is_a_disagreement() -> None:
    """A model manifest saying gfx950 does not build a contract the lock has gfx950 artifacts for."""
    lock, intact = _release()
    gemma = "manifests/models/gemma-2-9b.toml"
    intact[gemma] += GAP.encode()
    (d,) = verifier.agreement(lock, intact, str).disagreements
    assert (d.kind, d.member, d.role, d.check) == ("disagrees", gemma, "manifest", "fallback")
    assert (
        "fallback says gfx950 does not build rmsnorm(hidden=3584,weight_offset=1), but the lock has"
        in d.detail
    )


def test_a_table_against_its_evidence_and_the_lock() -> None:
    """An evidence record contradicting its table's summary is named on the evidence file; a table
    naming an artifact the lock lacks, on the table. The evidence file reported missing or altered on
    its own: the table is checked alone, and not counted as holding."""
    lock, intact = _release()
    ev_path = tables.evidence_path("sm_90")
    ev = json.loads(intact[ev_path])
    ev["hardware"][sorted(ev["hardware"])[0]]["max_rel_deviation"] = 0.5
    changed = dict(intact, **{ev_path: (json.dumps(ev, indent=1, sort_keys=True) + "\n").encode()})
    said = verifier.agreement(lock, changed, str)
    ((name, (f,)),) = said.invalid.items()
    assert name == tables.table_path("sm_90") and (f.member, f.role, f.check) == (
        ev_path,
        "evidence",
        "rules",
    )
    assert "differs from its summary in release/tables/sm_90.json (max_rel_deviation)" in f.detail, f.detail

    without = {p: b for p, b in intact.items() if p != ev_path}
    said = verifier.agreement(lock, without, str)
    assert said.invalid == {} and "sm_90" not in said.tables and "gfx950" in said.tables

    t_path = tables.table_path("gfx950")
    t = json.loads(intact[t_path])
    t["entries"][0]["candidates"][0]["artifact"] = "netra_rmsnorm_h64_wo0_b256"
    said = verifier.agreement(lock, dict(intact, **{t_path: json.dumps(t).encode()}), str)
    found = said.invalid[t_path]
    assert found and {f.check for f in found} <= {"rules", "lock"} and "gfx950" not in said.tables
    assert any("netra_rmsnorm_h64_wo0_b256" in f.detail for f in found), found
