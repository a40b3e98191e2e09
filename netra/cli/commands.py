"""The `netra` command. Each subcommand is a thin shell over the module that does the work.

Conventions (docs/cli.md): reports go to stdout, human-readable by default and as one JSON document
with --json (schemas: netra/schemas/<command>.schema.json); progress and errors go to stderr. An error
a user can cause is one line, `netra: error: <what, naming the file or artifact>; hint: <the fix>`,
then one line per problem when there are several, and exit status 1: never a traceback. Start-up
imports nothing beyond the standard library: each command imports what it needs (shtab only for
`netra completion`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from netra import __version__
from netra.cli import choices
from netra.core import interrupts  # here, not in main(): a Ctrl-C before main's try is netra.__main__'s
from netra.core.types import MATURITIES
from netra.errors import NetraError, UsageError

EXIT_SIGPIPE = 128 + 13  # what a shell reports for a process killed by SIGPIPE (`netra catalog | head`)
# Optional or required modules -> (the requirement, the extra that brings it); None: a core dependency.
MODULES: dict[str, tuple[str, str | None]] = {
    "tomli_w": ("tomli-w>=1.0", "author"),
    "numpy": ("numpy>=1.24", "certify"),
    "torch": ("torch>=2.4", "torch"),
    "shtab": ("shtab>=1.7", "completion"),
    "msgpack": ("msgpack>=1.0", None),
    "elftools": ("pyelftools>=0.31", None),
    "tomli": ("tomli>=2.0", None),
}
# shtab's completion actions, spelled out so that building the parser never imports shtab.
_FILE = {"bash": "_shtab_compgen_files", "zsh": "_files", "tcsh": "f"}
_DIR = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/", "tcsh": "d"}
_WHEEL = {"bash": "_shtab_compgen_files", "zsh": "_files -g '*.whl'", "tcsh": "f:*.whl"}


def _path(arg: str, option: str) -> Path:
    """A path the user passed: '' would mean the current folder to Path(), and a NUL no path at all."""
    if arg == "" or "\0" in arg:
        raise NetraError(
            f"{option} {arg!r} is not a path",
            f"pass a real path as {option}, e.g. build/kernels",
        )
    return Path(arg)


def _root(arg: str | None) -> Path:
    """The source tree: --root, else the nearest parent of the cwd holding kernels/ and manifests/."""
    if arg is not None:
        return _path(arg, "--root").resolve()
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "kernels").is_dir() and (d / "manifests").is_dir():
            return d
    raise NetraError(
        f"{here}: not inside a netra source tree (no kernels/ and manifests/)",
        "run it in a checkout of https://github.com/netra-kernel/netra, or pass --root",
    )


WRITER_LOCK = "release/.netra-lock"  # flock file of `netra lock` (gitignored, never deleted)


def _say(msg: str) -> None:
    _PROGRESS.line(msg)


class _Progress:
    """Progress lines on stderr, from any thread (the build's workers report): each line is written
    whole, under a lock. `[i/n] ...` steps overwrite one line on a terminal; elsewhere (a log, a pipe)
    every step is its own line."""

    def __init__(self) -> None:
        import threading

        self.open = False
        self.mutex = threading.Lock()

    def __call__(self, msg: str) -> None:
        if msg.startswith("[") and "/" in msg.partition("]")[0] and sys.stderr.isatty():
            with self.mutex:
                sys.stderr.write(f"\r\x1b[Knetra: {msg}")
                sys.stderr.flush()
                self.open = True
        else:
            self.line(msg)

    def line(self, msg: str) -> None:
        with self.mutex:
            sys.stderr.write(("\n" if self.open else "") + f"netra: {msg}\n")
            sys.stderr.flush()
            self.open = False

    def end(self) -> None:
        with self.mutex:
            if self.open:
                sys.stderr.write("\n")
                sys.stderr.flush()
                self.open = False


_PROGRESS = _Progress()


def _progress(args: argparse.Namespace) -> Any:
    return None if getattr(args, "quiet", False) else _PROGRESS


def _json(data: Any) -> None:
    import json

    print(json.dumps(data, indent=1, sort_keys=True))


def _need(module: str, what: str) -> None:
    """Refuse before any work when an optional module is missing, naming the extra that brings it."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise _missing(module, what)


def _missing(module: str, what: str | None = None) -> NetraError:
    req, extra = MODULES.get(module, (module, None))
    who = what or "netra"
    if extra is not None:
        return NetraError(
            f"{who} needs {module} (the {extra} extra of netra-kernel), which is not installed",
            f"pip install 'netra-kernel[{extra}]'",
        )
    return NetraError(
        f"{who} needs {module}, a dependency of netra-kernel, which is not installed",
        f"pip install '{req}' (or reinstall netra-kernel with its dependencies)",
    )


# -- commands ------------------------------------------------------------------------------------------


def cmd_lock(args: argparse.Namespace) -> int:
    from netra.release import build, writelock

    root = _root(args.root)
    progress = _progress(args)
    if args.check:
        diffs = build.check_lock(root, jobs=args.jobs, progress=progress, cache=_cache(args))
        _PROGRESS.end()
        if args.json:
            _json({"schema": 1, "command": "lock", "check": True, "root": str(root), "up_to_date": not diffs,
                   "differences": diffs})  # fmt: skip
        else:
            for d in diffs:
                print(d)
        if diffs:
            raise NetraError(
                f"release/manifest.lock is out of date with the sources ({len(diffs)} difference(s) above)",
                "run `netra lock` and commit the result",
            )
        if not args.json:
            print("release/manifest.lock is up to date with the sources")
        return 0
    _need("tomli_w", "netra lock")  # before the work, not after it
    # One writer at a time: two `netra lock` end with one valid lock and its tables, never a mix.
    with writelock.exclusive(root / WRITER_LOCK, what="the release lock", notify=_say if progress else None):
        fresh = build.make_lock(root, jobs=args.jobs, progress=progress, cache=_cache(args))
        _PROGRESS.end()
        for v in fresh.voided:
            _say(f"certification void: {v}; run `netra certify` on that GPU class again")
        with build.committing("release/manifest.lock and its tables"):
            build.write_lock(root, fresh)
    lk = fresh.lock
    if args.json:
        _json({
            "schema": 1, "command": "lock", "check": False, "root": str(root), "wrote": "release/manifest.lock",
            "artifacts": len(lk.artifacts), "files": len(lk.files),
            "toolchains": {t: str(tc) for t, tc in sorted(lk.toolchains.items())},
            "tables": sorted(fresh.tables), "voided": list(fresh.voided),
        })  # fmt: skip
    else:
        print(
            f"wrote release/manifest.lock: {len(lk.artifacts)} artifacts, {len(lk.files)} files, "
            f"{lk.describe_toolchains()}"
        )
    return 0


def _cache(args: argparse.Namespace) -> Any:
    """The compile cache `netra build` and `netra lock` use: on unless --no-cache or NETRA_COMPILE_CACHE=0."""
    from netra.release import compilecache

    return None if args.no_cache else compilecache.open_cache(default=True)


def cmd_cache(args: argparse.Namespace) -> int:
    from netra.release import compilecache

    cache = compilecache.Cache(compilecache.location(), compilecache.max_bytes())
    where = cache.folder
    if where.exists() and not where.is_dir():
        raise NetraError(
            f"{where}: the compile cache's folder is not a folder",
            f"remove it, or point {compilecache.ENV_DIR} at a folder",
        )
    removed = cache.clear() if args.clear else (0, 0)
    entries, size = cache.usage()
    on = {"build": compilecache.enabled(True), "wheel": compilecache.enabled(False)}
    if args.json:
        _json({
            "schema": 1, "command": "cache", "folder": str(where), "entries": entries, "bytes": size,
            "max_bytes": cache.bound, "cleared": {"entries": removed[0], "bytes": removed[1]},
            "used_by": {"build_and_lock": on["build"], "wheel_hook": on["wheel"]},
        })  # fmt: skip
        return 0
    if args.clear:
        print(f"removed {removed[0]} entries ({removed[1]} bytes) from {where}")
    uses = "netra build and netra lock" if on["build"] else "nothing (NETRA_COMPILE_CACHE=0)"
    if on["wheel"]:
        uses += " and the wheel build hook (NETRA_COMPILE_CACHE=1)"
    print(f"compile cache {where}: {entries} entries, {size} bytes of at most {cache.bound}; used by {uses}")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from netra.release import build

    root = _root(args.root)
    report = build.build(
        root,
        _path(args.out, "the output folder"),
        jobs=args.jobs,
        reference=_path(args.reference, "--reference") if args.reference is not None else None,
        keep=_path(args.keep, "--keep") if args.keep is not None else None,
        progress=_progress(args),
        cache=_cache(args),
    )
    _PROGRESS.end()
    if args.json:
        import hashlib

        _json({
            "schema": 1, "command": "build", "root": str(root), "out": str(Path(args.out).resolve()),
            "lock_sha256": hashlib.sha256(report.lock_bytes).hexdigest(),
            "toolchains": {t: str(tools.identity) for t, tools in sorted(report.tools.items())},
            "artifacts": sorted(({
                "artifact": e.spec.name, "gpu_class": e.spec.target, "file": e.spec.file,
                "text_sha256": e.text_sha256, "launch_sha256": e.launch_sha256, "sha256": e.code_sha256,
            } for e in report.examined), key=lambda a: (a["gpu_class"], a["artifact"])),
        })  # fmt: skip
        return 0
    chains = ", ".join(f"{t}: {tools.identity}" for t, tools in sorted(report.tools.items()))
    print(
        f"built {len(report.examined)} artifacts into {args.out} in {report.seconds:.2f}s with {chains}: "
        "the lock is exactly what the sources declare, every static check passed"
    )
    return 0


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
    for g in d.get("not_built", []):
        out.append(f"{d['matches'][0]['key']} on {g['gpu_class']}: not built ({g['model']}: {g['reason']})")
    return "\n".join(out)


def _candidate_lines(k: dict[str, Any]) -> list[str]:
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
    grid = ", ".join(
        f"ceil(rows/{a['rows_per_block']})" if isinstance(a, dict) else str(a) for a in ln["grid"]
    )
    lines.append(f"launch: block {'x'.join(map(str, ln['block']))}, grid ({grid}); LDS {k['lds_bytes']} static + "
                 f"{ln['dynamic_lds_bytes']} dynamic bytes; workspace {k['workspace_bytes']} bytes; "
                 f"max {k['max_threads']} threads")  # fmt: skip
    ka = k["kernarg"]
    args = ", ".join(f"{a['name']} {a['type']} @{a['offset']}" for a in ka["args"])
    lines.append(f"kernarg ({ka['size']} bytes): {args}")
    if k["facts"]:
        lines.append("facts: " + ", ".join(f"{n} {v}" for n, v in sorted(k["facts"].items())))
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
        raise NetraError(f"{wheel}: no such file", "pass the path of a .whl file")
    if not zipfile.is_zipfile(wheel):
        raise NetraError(f"{wheel}: not a wheel (a wheel is a zip archive)", "pass the path of a .whl file")
    own = False  # checked against the lock the wheel carries: self-consistency, not authenticity
    if args.lock or args.root:
        path = Path(args.lock) if args.lock else _root(args.root) / lock.LOCK_PATH
        raw, against, where = *wheelgate.read_lock(path), str(path)
    else:
        try:
            path = _root(None) / lock.LOCK_PATH
            raw, against, where = *wheelgate.read_lock(path), str(path)
        except NetraError:  # not in a source tree: the wheel can still be checked for consistency
            raw = wheelgate.packaged_lock(wheel)
            against, where = wheelgate.parse_lock(raw, f"{wheel.name}:manifest.lock"), "the lock it carries"
            own = True
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

    report = doctor.run(sysfs_nodes=args.sysfs_nodes, require_gpu=args.require_gpu)
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


def cmd_certify(args: argparse.Namespace) -> int:
    """Run, judge, time, memory-check and profile every candidate of a class's table on this host's GPU;
    write the certified table."""
    _known_class(args.gpu_class)
    _need("numpy", "netra certify")
    from netra import certify

    out = Path(args.out) if args.out else Path.cwd() / f"{args.gpu_class}.json"
    opts = certify.Options(
        sanitize=not (args.skip_sanitizer or args.quick),
        profile=not (args.skip_profile or args.quick),
        logs=Path(args.logs) if args.logs else None,
        **({"tool_timeout": args.tool_timeout} if args.tool_timeout is not None else {}),
    )
    table = certify.certify(args.gpu_class, progress=_progress(args), seed=args.seed, options=opts)
    certify.write(table, out)
    _PROGRESS.end()
    counts = dict.fromkeys(MATURITIES, 0)
    checks: dict[str, int] = {}
    profiles: dict[str, int] = {}
    for e in table["entries"]:
        for c in e["candidates"]:
            counts[c["maturity"]] = counts.get(c["maturity"], 0) + 1
            hw = c["evidence"]["hardware"]
            checks[hw["sanitizer"]["result"]] = checks.get(hw["sanitizer"]["result"], 0) + 1
            profiles[hw["profile"]["result"]] = profiles.get(hw["profile"]["result"], 0) + 1
    if args.json:
        from netra.core.hashing import sha256_bytes

        _json({
            "schema": 1, "command": "certify", "gpu_class": args.gpu_class, "out": str(out),
            "table_sha256": sha256_bytes(out.read_bytes()), "evidence": str(certify.evidence_out(out)),
            "evidence_sha256": sha256_bytes(certify.evidence_out(out).read_bytes()), "contracts": len(table["entries"]),
            "candidates": counts, "memory_checks": dict(sorted(checks.items())),
            "profiles": dict(sorted(profiles.items())), "run": table["certification"]["runs"][-1],
        })  # fmt: skip
        return 0
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v)
    print(f"wrote {out}: {len(table['entries'])} contracts, candidates {summary}; its evidence: "
          f"{certify.evidence_out(out)}")  # fmt: skip
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


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the shell completion script (generated by shtab from this parser)."""
    _need("shtab", "netra completion")
    import shtab

    names = _artifact_names()
    fn = "_netra_artifacts"
    preamble = {
        "bash": f'{fn}() {{\n  compgen -W "{" ".join(names)}" -- "$1"\n}}\n',
        "zsh": "",
        "tcsh": "",
    }
    p = parser()
    for sp in _subparsers(p).values():
        for a in sp._actions:
            if a.dest == "name" and sp.prog.endswith(" explain"):
                a.complete = {"bash": fn, "zsh": "(" + " ".join(names) + ")", "tcsh": f"({' '.join(names)})"}  # type: ignore[attr-defined]
    # shtab takes the preamble per shell as a dict too (its annotation says str)
    sys.stdout.write(shtab.complete(p, shell=args.shell, preamble=preamble))  # type: ignore[arg-type]
    return 0


def _artifact_names() -> list[str]:
    """The installed artifacts, for `netra explain <TAB>`; none when the install cannot be read."""
    from netra import runtime
    from netra.runtime import installed

    try:
        lock, _ = runtime.installed_lock(installed.locate())
    except NetraError:
        return []
    return sorted(a.name for a in lock.artifacts)


# -- the parser ----------------------------------------------------------------------------------------


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            return dict(a.choices)
    return {}


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors on one line like every other error (exit status 2)."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message}; hint: `{self.prog} --help` lists its arguments\n")


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="netra",
        description="Locked, certified ahead-of-time GPU kernels: inspect and verify an install, or build "
        "and lock a release from a source tree.",
        epilog="Every reporting command takes --json. Documentation: "
        "https://github.com/netra-kernel/netra/blob/main/docs/cli.md",
    )
    p.add_argument("--version", action="version", version=f"netra {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def root(
        sp: argparse.ArgumentParser, what: str = "source tree (default: found from the current directory)"
    ) -> None:
        sp.add_argument("--root", help=what).complete = _DIR  # type: ignore[attr-defined]

    def common(sp: argparse.ArgumentParser) -> None:
        root(sp)
        sp.add_argument(
            "-j",
            "--jobs",
            type=choices.positive_int,
            default=None,
            help="parallel assemblies (default: all cores)",
        )
        sp.add_argument(
            "--no-cache",
            action="store_true",
            help="compile every code object now, without the compile cache (see `netra cache`)",
        )
        quiet(sp)

    def quiet(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress lines")

    def as_json(sp: argparse.ArgumentParser, schema: str) -> None:
        sp.add_argument(
            "--json", action="store_true", help=f"the report as JSON (netra/schemas/{schema}.schema.json)"
        )

    # A serving host's commands first: they read the installed package.
    d = sub.add_parser("doctor", help="verify this install file by file; report GPUs and runtime libraries")
    as_json(d, "doctor")
    d.add_argument("--require-gpu", action="store_true", help="also exit 1 unless a certified GPU is found")
    d.add_argument(
        "--sysfs-nodes", help="KFD topology nodes (default: /sys/class/kfd/kfd/topology/nodes)"
    ).complete = _DIR  # type: ignore[attr-defined]
    d.set_defaults(func=cmd_doctor)

    en = sub.add_parser(
        "env",
        help="this host for a bug report: Python, platform, torch, GPU drivers and runtimes, what the code needs",
        description="Python, the platform, torch and the packages netra uses, each vendor's driver and GPU "
        "runtime, this host's GPUs, and the oldest driver each class's code objects need (paste it into a bug "
        "report). Reads no code object: fast, and it works on a damaged install.",
    )
    as_json(en, "env")
    en.set_defaults(func=cmd_env)

    c = sub.add_parser(
        "catalog", help="list the installed artifacts: class, contract, tactic, maturity, users"
    )
    root(c, "describe this source tree's release/ instead of the installed package")
    c.add_argument("--gpu-class", help="only this GPU class")
    c.add_argument("--model", help="only the contracts this model's manifest needs")
    as_json(c, "catalog")
    c.set_defaults(func=cmd_catalog)

    e = sub.add_parser(
        "explain",
        help="everything the install records about an artifact or a contract",
        description="Contract, tactic, maturity, evidence, kernarg layout, launch geometry, users and hashes "
        "of one artifact (netra_rmsnorm_h4096_wo0_b256) or of every candidate of one contract "
        "('rmsnorm(hidden=4096,weight_offset=0)').",
    )
    e.add_argument("name", metavar="ARTIFACT|CONTRACT", help="an artifact name or a contract key")
    e.add_argument("--gpu-class", help="only this GPU class")
    root(e, "describe this source tree's release/ instead of the installed package")
    as_json(e, "explain")
    e.set_defaults(func=cmd_explain)

    vw = sub.add_parser("verify-wheel", help="check a built wheel carries exactly the locked files")
    vw.add_argument("wheel", help="the .whl to check").complete = _WHEEL  # type: ignore[attr-defined]
    vw.add_argument(
        "--lock",
        help="lock to check against (default: the source tree's, else the wheel's own, which proves "
        "self-consistency only, not authenticity)",
    ).complete = _FILE  # type: ignore[attr-defined]
    root(vw, "source tree whose release/manifest.lock to use")
    as_json(vw, "verify-wheel")
    vw.set_defaults(func=cmd_verify_wheel)

    ce = sub.add_parser(
        "certify", help="run, judge and time every candidate on this host's GPU; write the table"
    )
    ce.add_argument("--gpu-class", required=True, help="the class to certify (this host's GPU must be of it)")
    ce.add_argument(
        "--out", help="where to write the certified table (default: ./<class>.json)"
    ).complete = _FILE  # type: ignore[attr-defined]
    ce.add_argument(
        "--seed", type=choices.natural_int, default=0, help="seed of the test vectors (recorded in the table)"
    )
    ce.add_argument(
        "--skip-sanitizer",
        action="store_true",
        help="do not run the vendor's memory checkers: recorded as skipped, so no candidate is accepted (at most verified)",
    )
    ce.add_argument(
        "--skip-profile", action="store_true", help="do not run the vendor's profiler: recorded as skipped"
    )
    ce.add_argument("--quick", action="store_true", help="both: --skip-sanitizer --skip-profile")
    ce.add_argument(
        "--logs",
        help="keep the memory checkers' and the profiler's logs here (default: kept only on failure)",
    ).complete = _DIR  # type: ignore[attr-defined]
    ce.add_argument(
        "--tool-timeout",
        type=choices.positive_seconds,
        metavar="SECONDS",
        help="the most one memory checker, or the profiler, may take over all candidates (default: 600)",
    )
    quiet(ce)
    as_json(ce, "certify")
    ce.set_defaults(func=cmd_certify)

    # Kernel authors' commands: they work on a source tree.
    lk = sub.add_parser("lock", help="(source tree) assemble the catalog and write release/manifest.lock")
    common(lk)
    lk.add_argument(
        "--check", action="store_true", help="exit 1, naming each difference, if the lock is stale"
    )
    as_json(lk, "lock")
    lk.set_defaults(func=cmd_lock)

    b = sub.add_parser(
        "build", help="(source tree) assemble every locked artifact and gate it against the lock"
    )
    common(b)
    b.add_argument(
        "out", help="output folder for the code objects (<out>/<class>/<artifact>.<suffix>)"
    ).complete = _DIR  # type: ignore[attr-defined]
    b.add_argument(
        "--reference", help="a previous build folder or wheel, to show the first differing instruction"
    ).complete = _FILE  # type: ignore[attr-defined]
    b.add_argument("--keep", help="copy the generated instantiation files here").complete = _DIR  # type: ignore[attr-defined]
    as_json(b, "build")
    b.set_defaults(func=cmd_build)

    ca = sub.add_parser(
        "cache",
        help="the compile cache of netra build and netra lock: where it is, what it holds; --clear empties it",
        description="The compile cache `netra build` and `netra lock` share: each code object compiled once "
        "per exact set of inputs (sources and includes, toolchain, flags). Folder: $NETRA_CACHE_DIR, else "
        "$XDG_CACHE_HOME/netra/compile; bound: $NETRA_CACHE_MAX_MB (default 512). docs/build.md says when "
        "it is used.",
    )
    ca.add_argument("--clear", action="store_true", help="remove every entry")
    as_json(ca, "cache")
    ca.set_defaults(func=cmd_cache)

    co = sub.add_parser(
        "completion",
        help="print the shell completion script (bash, zsh, tcsh)",
        description="Print a completion script for the shell. bash: "
        "`netra completion bash > ~/.local/share/bash-completion/completions/netra`; zsh: "
        '`netra completion zsh > "${fpath[1]}/_netra"`. Needs shtab (the completion extra).',
    )
    co.add_argument("shell", choices=("bash", "zsh", "tcsh"))
    co.set_defaults(func=cmd_completion)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            with interrupts.handled():
                args = parser().parse_args(argv)
                return int(args.func(args))
        finally:
            _PROGRESS.end()
            sys.stdout.flush()  # a closed pipe shows here, inside the handlers below
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_SIGPIPE
    except UsageError as e:
        _error(str(e), e.details)
        return 2
    except NetraError as e:
        _error(str(e), e.details)
        return 1
    except ModuleNotFoundError as e:
        if e.name is None or e.name.partition(".")[0] not in MODULES:
            raise
        _error(str(_missing(e.name.partition(".")[0])))
        return 1
    except OSError as e:
        if e.filename is None:
            raise  # not about a file the user named: a bug, shown as one
        _error(f"{e.filename}: {e.strerror or e}; hint: check the path, its permissions and the free space")
        return 1
    except KeyboardInterrupt as e:
        written = getattr(e, "written", None)  # set when the signal came during a commit (build.committing)
        if written:
            _error(f"interrupted once {written} had been written whole; nothing is partial", label="")
        else:
            _error("interrupted: nothing was written", label="")
        return interrupts.exit_code(e)


def _error(line: str, details: tuple[str, ...] = (), label: str = "error: ") -> None:
    try:
        print(f"netra: {label}{line}", file=sys.stderr)
        for d in details:
            print(f"  {d}", file=sys.stderr)
    except (BrokenPipeError, OSError):
        pass


def _quiet_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush does not fail again."""
    import os

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
