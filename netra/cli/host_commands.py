"""A serving host's commands, which read an install (or a wheel): `netra doctor`, `netra env`,
`netra catalog`, `netra explain`, `netra verify-wheel`, `netra certify`. Each is a thin shell over the
module that does the work, imported when the command runs; explain's human report is rendered here."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from netra.cli import choices
from netra.cli.support import (
    _PROGRESS,
    _json,
    _need,
    _progress,
    _root,
)
from netra.core.types import MATURITIES
from netra.errors import NetraError, UsageError


def _inventory(args: argparse.Namespace) -> Any:
    """The release data to describe: --root's source tree, else this netra's own install."""
    from netra.cli import inventory
    from netra.runtime import installed

    if not args.root:
        return inventory.load(installed.locate())
    root = _root(args.root)
    if not (root / "release").is_dir() or not (root / "manifests").is_dir():
        raise NetraError(
            f"{root}: not a netra source tree (no release/ and manifests/)",
            "pass the root of a checkout, or drop --root to describe the installed package",
        )
    return inventory.load(installed.source(root))


def _known_class(gpu_class: str | None) -> None:
    """A --gpu-class that names no registered class is a usage error, before any file is read."""
    from netra import targets

    choices.check("GPU class", gpu_class, targets.names())


def _certified_class(inv: Any, gpu_class: str | None) -> None:
    """A registered class this install has no certified table for is a refusal."""
    if gpu_class is not None and gpu_class not in inv.tables:
        raise NetraError(
            f"GPU class {gpu_class} is not certified by this install",
            f"certified: {', '.join(sorted(inv.tables)) or 'none'}",
        )


def cmd_catalog(args: argparse.Namespace) -> int:
    from netra.cli import inventory

    _known_class(args.gpu_class)
    inv = _inventory(args)
    _certified_class(inv, args.gpu_class)
    choices.check("model", args.model, inv.models, where=" in this install's model manifests")
    data = inventory.catalog(inv, gpu_class=args.gpu_class, model=args.model)
    if args.json:
        _json(data)
        return 0
    head = ("ARTIFACT", "CLASS", "CONTRACT", "TACTIC", "MATURITY", "USED BY")
    rows = [(a["artifact"], a["gpu_class"], a["contract"], a["tactic"], a["maturity"], ", ".join(a["users"]) or "-")
            for a in data["artifacts"]]  # fmt: skip
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    for r in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
    for f in data["fallbacks"]:
        if f.get("gpu_class"):
            print(f"not built for {f['gpu_class']}: {f['contract']} ({f['model']}): {f['reason']}")
        else:
            print(f"fallback {f['model']}: {f['op']}: {f['reason']}")
    for cls, c in data["classes"].items():
        m = c["maturity"]
        per = ", ".join(f"{k} {m[k]}" for k in reversed(MATURITIES))
        print(f"class {cls} ({c['certification']}, loader {c['loader']}): {c['contracts']} contracts, "
              f"{c['artifacts']} artifacts; {per}")  # fmt: skip
    return 0


def cmd_explain(args: argparse.Namespace) -> int:
    from netra.cli import inventory

    _known_class(args.gpu_class)
    inv = _inventory(args)
    _certified_class(inv, args.gpu_class)
    data = inventory.explain(inv, args.name, gpu_class=args.gpu_class)
    if args.json:
        _json(data)
    else:
        print(_render_explain(data))
    return 0


def _render_explain(d: dict[str, Any]) -> str:
    out: list[str] = []
    for m in d["matches"]:
        out.append(f"{m['key']} on {m['gpu_class']} ({m['certification']} certification, loader {m['loader']}, "
                   f"toolchain {m['toolchain']})")  # fmt: skip
        c = m["contract"]
        out.append("  contract: " + "; ".join(
            [f"dtypes {', '.join(f'{k} {v}' for k, v in sorted(c.get('dtypes', {}).items()))}"]
            + [f"{k} {c[k]}" for k in ("layout", "quant") if k in c]))  # fmt: skip
        out.append(f"  used by: {', '.join(m['users']) or 'no model manifest'}")
        served = m["served_by_default"] or "nothing (an explicit fallback)"
        out.append(f"  default policy ({m['default_policy']}) serves: {served}")
        if m["dispatch"]:
            rules = ", ".join(
                f"rows <= {r['max_rows']}: {r['tactic']}"
                if r["max_rows"] is not None
                else f"more: {r['tactic']}"
                for r in m["dispatch"]
            )
            out.append(f"  dispatch by rows: {rules}")
        for k in m["candidates"]:
            out.append(f"  candidate {k['rank']}: {k['artifact']} (tactic {k['tactic']}, {k['maturity']})")
            out += [f"    {line}" for line in _candidate_lines(k)]
        for n in m["not_admitted"]:  # a tactic of the op that is no candidate, and why
            out.append(f"  not admitted: tactic {n['tactic']}: {n['why']} ({n['requires']} fails)")
    for g in d.get("not_built", []):
        out.append(f"{d['matches'][0]['key']} on {g['gpu_class']}: not built ({g['model']}: {g['reason']})")
    return "\n".join(out)


def _axis(a: int | dict[str, Any]) -> str:
    """A grid axis as the table records it: a constant, ceil(rows / n), or an expression of rows (a routed
    MoE's experts hit, `min(128, rows * 8)`)."""
    if not isinstance(a, dict):
        return str(a)
    return f"ceil(rows/{a['rows_per_block']})" if "rows_per_block" in a else str(a["rows"])


def _candidate_lines(k: dict[str, Any]) -> list[str]:
    from netra.runtime.tables.model import FP32_ACCUMULATOR_BITS

    lines = []
    ev = k["evidence"]
    st = ev.get("static") or {}
    if st:
        tc = st.get("toolchain") or {}
        lines.append(f"evidence, static: checks {', '.join(st.get('checks', []))} "
                     f"({tc.get('flavour', '?')} {tc.get('version', '?')})")  # fmt: skip
    hw = ev.get("hardware")
    if hw:
        verdict = "passed" if hw.get("passed") else f"FAILED ({hw.get('reason')})"
        dev = hw.get("max_rel_deviation")
        lines.append(f"evidence, hardware: {verdict} {hw.get('cases')} cases against the {hw.get('reference')} "
                     f"reference, max relative deviation {dev if dev is not None else 'not finite'} "
                     f"(tolerance {hw.get('tolerance')})")  # fmt: skip
        times = ", ".join(f"{t['rows']} rows {t['median_us']} us" for t in hw.get("timings", []))
        if times:
            lines.append(f"timings (median): {times}")
        lines += _tool_lines(hw)
    ln = k["launch"]
    grid = ", ".join(_axis(a) for a in ln["grid"])
    lines.append(f"launch: block {'x'.join(map(str, ln['block']))}, grid ({grid}); LDS {k['lds_bytes']} static + "
                 f"{ln['dynamic_lds_bytes']} dynamic bytes; workspace {k['workspace_bytes']} bytes; "
                 f"max {k['max_threads']} threads")  # fmt: skip
    ka = k["kernarg"]
    args = ", ".join(f"{a['name']} {a['type']} @{a['offset']}" for a in ka["args"])
    lines.append(f"kernarg ({ka['size']} bytes): {args}")
    if k["facts"]:
        lines.append("facts: " + ", ".join(f"{n} {v}" for n, v in sorted(k["facts"].items())))
    if k["accumulator_bits"] != FP32_ACCUMULATOR_BITS:  # judged by its own accumulation's bounds
        lines.append(f"accumulation: tensor-core partials of {k['accumulator_bits']} significant bits, judged by "
                     "that model's bounds (docs/ops/)")  # fmt: skip
    h = k["hashes"]
    lines.append(f"code: {k['file']} (template {k['template']}), symbol {k['symbol']}")
    lines.append(f".text sha256 {h['text_sha256']}; launch sha256 {h['launch_sha256']}")
    whole = f"{h['file_sha256']} (build.json)" if h["file_sha256"] else "not recorded (a source checkout)"
    lines.append(f"code object sha256 {whole}; as locked {h['code_sha256']}")
    return lines


def _tool_lines(hw: dict[str, Any]) -> list[str]:
    """The memory checkers' and the profiler's evidence, one line each (docs/certify.md)."""
    lines = []
    sz = hw.get("sanitizer")
    if sz:
        checks = ", ".join(
            f"{c['check']} {c['result']}"
            + (f" ({c['findings']}, first: {c['first']})" if c["findings"] else "")
            for c in sz["checks"]
        )
        ran = next((f" [{c['tool']} {c['version']}]" for c in sz["checks"] if c["version"]), "")
        line = f"memory checkers: {sz['result']}" + (f" ({sz['note']})" if sz["note"] else "")
        line += (f": {checks}" if checks else "") + ran
        if sz["result"] in ("skipped", "unavailable"):
            line += "; without them a passing candidate is only verified, never served by the default policy"
        lines.append(line)
    pr = hw.get("profile")
    if pr and pr["result"] == "measured":
        lines.append(f"profile ({pr['tool']} {pr['version']}, {pr['rows']} rows): DRAM {pr['dram_throughput_pct']}% "
                     f"of peak, {pr['duration_us']} us, {pr['dram_read_bytes']} bytes read, "
                     f"{pr['dram_write_bytes']} written")  # fmt: skip
    elif pr:
        lines.append(f"profile: {pr['result']} ({pr['note']})")
    return lines


def _wheel_error(wheel: Path, problems: list[Any], where: str) -> NetraError:
    """The refusal: every problem on the one line while they are few; a summary and one line each when many."""
    from netra.release import wheelgate

    e = wheelgate.error(wheel, problems, why=f"checked against {where}")
    if len(problems) <= 3:
        return e
    counts = ", ".join(f"{k} {n}" for k in wheelgate.KINDS if (n := sum(p.kind == k for p in problems)))
    return NetraError(
        f"{wheel.name} refused (checked against {where}): it does not carry exactly the locked files: "
        f"{counts} (listed below)",
        e.hint,
        tuple(f"{p.kind} {p}" for p in problems),
    )


def cmd_verify_wheel(args: argparse.Namespace) -> int:
    """Check a wheel carries exactly the locked files: --lock, else the tree's lock, else the wheel's own."""
    import zipfile

    from netra.release import wheelgate
    from netra.runtime import lockfile as lock

    wheel = Path(args.wheel)
    if not wheel.is_file():
        from netra.core import files

        what = f"is {files.kind(wheel.stat().st_mode)}" if wheel.exists() else "no such file"
        raise NetraError(f"{wheel}: {what}", "pass the path of a .whl file")
    if not zipfile.is_zipfile(wheel):
        raise NetraError(f"{wheel}: not a wheel (a wheel is a zip archive)", "pass the path of a .whl file")
    path: Path | None = None  # the lock to prove against; None: the one the wheel carries
    if args.lock is not None:
        path = Path(args.lock)
    elif args.root is not None:
        path = _root(args.root) / lock.LOCK_PATH
    else:
        try:
            path = _root(None) / lock.LOCK_PATH
        except NetraError:  # not in a source tree: the wheel can still be checked for consistency
            path = None
    own = path is None  # checked against the lock the wheel carries: self-consistency, not authenticity
    if path is not None:
        # A tree's lock that cannot be read is an error, never a quiet fall back to the wheel's own lock
        # (which proves less, and would say OK where the user asked for the tree's proof).
        raw, against, where = *wheelgate.read_lock(path), str(path)
    else:
        raw, where = wheelgate.packaged_lock(wheel), "the lock it carries"
        try:
            against = wheelgate.parse_lock(raw, f"{wheel.name}:manifest.lock")
        except NetraError as e:
            raise NetraError(
                e.message,
                "the wheel's own lock is damaged, so it is not a release: download it again, or rebuild it "
                "with `python -m build` from the release's commit",
            ) from None
    problems = wheelgate.check_wheel(wheel, against, raw)
    if args.json:
        from netra.core.hashing import sha256_bytes

        _json({
            "schema": 1, "command": "verify-wheel", "wheel": str(wheel), "against": where,
            "lock_sha256": sha256_bytes(raw), "ok": not problems,
            "proved": "self-consistency" if own else "lock",
            "problems": [{"kind": p.kind, "member": p.member, "detail": p.detail} for p in problems],
        })  # fmt: skip
    if problems:
        raise _wheel_error(wheel, problems, where)
    if args.json:
        return 0
    if own:
        print(
            f"{wheel.name}: self-consistent: it carries exactly the files of the lock it carries: OK. That proves "
            "the wheel is whole, not that it is an authentic release (a wheel and its lock can be altered together): "
            "to prove that, check it against the release's own lock, "
            "`netra verify-wheel WHEEL --lock release/manifest.lock` from the release's commit"
        )
    else:
        print(f"{wheel.name}: carries exactly the files of the lock {where}: OK (proved against that lock)")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Verify this install and report the host; exit 1 when anything is missing or altered."""
    from netra.cli import doctor

    if args.expect_wheel is not None:
        raise UsageError(
            "netra doctor --expect-wheel: an install cannot know the sha256 of the wheel it came from (pip "
            "keeps no copy of it, and RECORD hashes the installed files, not the archive)",
            "check the wheel's published sha256 before installing it (`sha256sum` the file, or pip's "
            "--require-hashes), then prove the install with --expect-lock, the release's lock digest",
        )
    if args.sysfs_nodes is not None and not Path(args.sysfs_nodes).is_dir():  # else "no amdgpu driver", rc 0
        raise NetraError(
            f"--sysfs-nodes {args.sysfs_nodes}: "
            + ("not a folder" if Path(args.sysfs_nodes).exists() else "no such folder"),
            "pass the KFD topology's nodes folder (default: /sys/class/kfd/kfd/topology/nodes)",
        )
    expect = doctor.expected_digest(args.expect_lock) if args.expect_lock is not None else None
    report = doctor.run(sysfs_nodes=args.sysfs_nodes, require_gpu=args.require_gpu, expect_lock=expect)
    if args.json:
        _json(report)
    else:
        print(doctor.render(report))
    return 0 if report["ok"] else 1


def cmd_env(args: argparse.Namespace) -> int:
    """The host for a bug report: Python, platform, torch, drivers and runtimes, what the code needs."""
    from netra.cli import environment

    report = environment.report()
    if args.json:
        _json(report)
    else:
        print(environment.render(report))
    return 0


def _writable_file(path: Path, option: str) -> None:
    """Refuse now a file a long run could not write at its end (its table would be lost)."""
    import os

    folder = path.parent
    if not folder.is_dir():
        raise NetraError(
            f"{option} {path}: its folder {folder} does not exist",
            f"create it (mkdir -p -- {folder}), or pass another {option}",
        )
    if path.is_dir():
        raise NetraError(
            f"{option} {path}: is a folder", f"pass a file's path as {option}, e.g. ./<class>.json"
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NetraError(f"{option} {path}: its folder {folder} is not writable", f"pass another {option}")


def cmd_certify(args: argparse.Namespace) -> int:
    """Run, judge, time, memory-check and profile every candidate of a class's table on this host's GPU;
    write the certified table."""
    _known_class(args.gpu_class)
    _need("numpy", "netra certify")
    from netra import certify

    out = Path(args.out) if args.out else Path.cwd() / f"{args.gpu_class}.json"
    for path in (out, certify.evidence_out(out)):  # before the run, which may take an hour on the device
        _writable_file(path, "--out")
    opts = certify.Options(
        sanitize=not (args.skip_sanitizer or args.quick),
        profile=not (args.skip_profile or args.quick),
        logs=Path(args.logs) if args.logs else None,
        **({"tool_timeout": args.tool_timeout} if args.tool_timeout is not None else {}),
    )
    reuse = Path(args.reuse) if args.reuse else None
    table = certify.certify(
        args.gpu_class,
        progress=_progress(args),
        seed=args.seed,
        options=opts,
        reuse=reuse,
        only=tuple(args.only),
        across_devices=args.across_devices,
    )
    carried = certify.carried(table)
    held = certify.held(table)
    certify.write(table, out)
    _PROGRESS.end()
    counts = dict.fromkeys(MATURITIES, 0)
    checks: dict[str, int] = {}
    profiles: dict[str, int] = {}
    for c in table.candidates():
        counts[c.maturity] = counts.get(c.maturity, 0) + 1
        if c.hardware is None:  # a candidate of a contract held by --only, never measured
            continue
        checks[c.hardware.sanitizer] = checks.get(c.hardware.sanitizer, 0) + 1
        profiles[c.hardware.profile] = profiles.get(c.hardware.profile, 0) + 1
    if args.json:
        from netra.core.hashing import sha256_bytes

        _json({
            "schema": 1, "command": "certify", "gpu_class": args.gpu_class, "out": str(out),
            "table_sha256": sha256_bytes(out.read_bytes()), "evidence": str(certify.evidence_out(out)),
            "evidence_sha256": sha256_bytes(certify.evidence_out(out).read_bytes()), "contracts": len(table.entries),
            "candidates": counts, "memory_checks": dict(sorted(checks.items())),
            "profiles": dict(sorted(profiles.items())), "run": table.runs[0],
            "reused": str(reuse) if reuse is not None else None, "carried": len(carried),
            "certified": len(table.entries) - len(carried) - len(held), "held": len(held),
        })  # fmt: skip
        return 0
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v)
    print(f"wrote {out}: {len(table.entries)} contracts, candidates {summary}; its evidence: "
          f"{certify.evidence_out(out)}")  # fmt: skip
    if reuse is not None:
        print(f"certified {len(table.entries) - len(carried) - len(held)} contracts on this host; carried "
              f"{len(carried)} from {reuse} as they were certified")  # fmt: skip
    if held:
        print(
            f"held {len(held)} contracts as {reuse} has them (not named by --only): certify them with "
            f"--reuse {out}"
        )
    print("memory checkers: " + ", ".join(f"{k} {v}" for k, v in sorted(checks.items()))
          + "; profile: " + ", ".join(f"{k} {v}" for k, v in sorted(profiles.items())))  # fmt: skip
    if counts.get("verified"):
        print(
            f"note: {counts['verified']} candidates passed on the GPU without memory-checker evidence: they are "
            "'verified', which the default policy does not serve; certify without --skip-sanitizer / --quick to "
            "accept them"
        )
    print(
        f"next: copy it to release/tables/{args.gpu_class}.json and {certify.evidence_out(out).name} to "
        f"release/evidence/{args.gpu_class}.json in the source tree, run `netra lock`, commit all three"
    )
    return 0
