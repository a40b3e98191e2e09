"""On an H200: the memory checkers and the profiler run by `netra certify`, on the installed wheel's kernels.

compute-sanitizer's four checkers find one contract's candidates clean over their conformance cases; a
deliberately bad launch (more rows than its buffers hold) is reported by memcheck, and an input never
written by initcheck, each attributed to the candidate that made it and to no other; ncu reads each
candidate's DRAM throughput at 8192 rows. Seconds of device time: one small contract, one process per
tool. Skipped elsewhere, like every gpu-marked test (docs/gpu.md).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

SMALL = "rmsnorm(hidden=128,weight_offset=0)"
LARGE = "rmsnorm(hidden=4096,weight_offset=0)"


def _catalog() -> Any:
    from netra.runtime import open_catalog

    return open_catalog("sm_90")


def _checkers(*names: str) -> list[tuple[Any, Path]]:
    from netra import targets

    out = []
    for c in targets.get("sm_90").vendor.memory_checkers():
        if names and c.check not in names:
            continue
        exe = c.find()
        assert exe is not None, f"{c.tool} is not found on this H200 (looked in {', '.join(c.searched())})"
        out.append((c, exe))
    return out


def _plan(cat: Any, key: str, folder: Path, *, bad: dict[str, str] | None = None) -> Any:
    """Every candidate of one contract over its conformance cases; bad: artifact -> "overrun" or
    "uninitialized" (the deliberately bad launch that candidate makes)."""
    from netra.certify import conformance, prepare
    from netra.certify import plan as planfile

    entry = cat.table.entries[key]
    made = prepare.cases(
        entry.op, entry.params, [c.launch.rows_per_block for c in entry.candidates], 0, str(folder)
    )
    items = []
    for c in entry.candidates:
        how = (bad or {}).get(c.artifact)
        launches = []
        for k in made.by_rows_per_block[c.launch.rows_per_block]:
            cf = made.cases[k]
            outs = conformance.outputs(entry.op, entry.params, cf.rows)
            launches.append(planfile.Launch(
                cf.rows, dict(cf.scalars), {n: (a[0], how != "uninitialized") for n, a in cf.inputs.items()},
                {n: (dt.name, tuple(sh)) for n, (dt, sh) in outs.items()},
            ))  # fmt: skip
        items.append(planfile.Item(c.artifact, tuple(launches), extra_rows=64 if how == "overrun" else 0))
    inst = cat.install
    return planfile.Plan("sm_90", inst.kind, str(inst.root), tuple(items)), entry


def _symbols(cat: Any) -> dict[str, str]:
    return {c.artifact: c.symbol for c in cat.table.candidates()}


def test_the_memory_checkers_find_one_contracts_candidates_clean(tmp_path: Path) -> None:
    from netra.certify import sanitizer

    cat = _catalog()
    plan, entry = _plan(cat, SMALL, tmp_path / "cases")
    got = sanitizer.run_all(_checkers(), plan, _symbols(cat), tmp_path, timeout=300)
    assert sorted(got) == ["initcheck", "memcheck", "racecheck", "synccheck"]
    for check, results in got.items():
        assert [r.artifact for r in results] == [c.artifact for c in entry.candidates], check
        for r, c, item in zip(results, entry.candidates, plan.items, strict=True):
            assert (r.findings, r.first) == (0, ""), f"{check} on {r.artifact}: {r.first}"
            assert r.text_sha256 == c.text_sha256 and r.launches == len(item.launches)


def test_a_bad_launch_is_reported_and_attributed_to_its_candidate(tmp_path: Path) -> None:
    from netra.certify import sanitizer

    cat = _catalog()
    artifacts = [c.artifact for c in cat.table.entries[SMALL].candidates]
    assert len(artifacts) >= 3
    culprit = artifacts[1]
    for check, how in (("memcheck", "overrun"), ("initcheck", "uninitialized")):
        plan, _ = _plan(cat, SMALL, tmp_path / check, bad={culprit: how})
        ((checker, exe),) = _checkers(check)
        results = sanitizer.run_checker(
            checker, exe, plan, _symbols(cat), tmp_path, timeout=300, label=f"{how}."
        )
        found = {r.artifact: r.findings for r in results}
        assert set(found) == set(artifacts), (check, found)
        assert found[culprit] > 0 and all(n == 0 for a, n in found.items() if a != culprit), (check, found)
        first = next(r.first for r in results if r.artifact == culprit)
        print(f"{check} on {culprit}: {found[culprit]} findings, first: {first}")


def test_the_profiler_reads_each_candidates_dram_throughput(tmp_path: Path) -> None:
    from netra import targets
    from netra.certify import conformance, prepare, profile
    from netra.certify import plan as planfile

    cat = _catalog()
    entry = cat.table.entries[LARGE]
    pr = targets.get("sm_90").vendor.profiler()
    assert pr is not None
    exe = pr.find()
    assert exe is not None, f"ncu is not found on this H200 (looked in {', '.join(pr.searched())})"
    timing = prepare.timing(entry.op, entry.params, [8192], 0, str(tmp_path))[8192]
    outs = conformance.outputs(entry.op, entry.params, 8192)
    launch = planfile.Launch(8192, {"eps": 1e-6}, {n: (a[0], True) for n, a in timing.items()},
                             {n: (dt.name, tuple(sh)) for n, (dt, sh) in outs.items()})  # fmt: skip
    inst = cat.install
    plan = planfile.Plan("sm_90", inst.kind, str(inst.root),
                         tuple(planfile.Item(c.artifact, (launch,)) for c in entry.candidates))  # fmt: skip
    got = profile.run(pr, exe, plan, _symbols(cat), tmp_path, timeout=300)
    read_bytes = sum(math.prod(shape) * 2 for _, _, shape in timing.values())  # bf16 inputs
    for c in entry.candidates:
        loaded, p = got[c.artifact]
        print(f"{c.artifact}: {p.duration_us:.2f} us, DRAM {p.dram_throughput_pct:.1f}% of peak, "
              f"{p.dram_read_bytes} read, {p.dram_write_bytes} written")  # fmt: skip
        assert loaded == c.text_sha256 and p.kernel == c.symbol
        assert 0 < p.dram_throughput_pct <= 100 and p.duration_us > 0
        assert p.dram_read_bytes >= 0.8 * read_bytes  # the caches are flushed before each profiled launch
