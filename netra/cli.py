"""The `netra` command. Each subcommand is a thin shell over the module that does the work."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from netra import __version__
from netra.errors import NetraError


def _root(arg: str | None) -> Path:
    """The source tree: --root, else the nearest parent of the cwd holding kernels/ and manifests/."""
    if arg:
        return Path(arg).resolve()
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / "kernels").is_dir() and (d / "manifests").is_dir():
            return d
    raise NetraError(f"{here}: not inside a netra source tree (no kernels/ and manifests/)", "pass --root")


WRITER_LOCK = "release/.netra-lock"  # flock file of `netra lock` (gitignored, never deleted)


def _say(msg: str) -> None:
    print(f"netra: {msg}", file=sys.stderr)


def cmd_lock(args: argparse.Namespace) -> int:
    from netra import build, writelock

    root = _root(args.root)
    progress = None if args.quiet else _say
    if args.check:
        diffs = build.check_lock(root, jobs=args.jobs, progress=progress)
        for d in diffs:
            print(d)
        if diffs:
            raise NetraError(
                f"release/manifest.lock is out of date with the sources ({len(diffs)} difference(s) above)",
                "run `netra lock` and commit the result",
            )
        print("release/manifest.lock is up to date with the sources")
        return 0
    # One writer at a time: two `netra lock` end with one valid lock and its tables, never a mix.
    with writelock.exclusive(root / WRITER_LOCK, what="the release lock", notify=progress):
        fresh = build.make_lock(root, jobs=args.jobs, progress=progress)
        for v in fresh.voided:
            _say(f"certification void: {v}; run `netra certify` on that GPU class again")
        with build.committing("release/manifest.lock and its tables"):
            build.write_lock(root, fresh)
    print(
        f"wrote release/manifest.lock: {len(fresh.lock.artifacts)} artifacts, {len(fresh.lock.files)} files, "
        f"{fresh.lock.describe_toolchains()}"
    )
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from netra import build

    root = _root(args.root)
    report = build.build(
        root,
        Path(args.out),
        jobs=args.jobs,
        reference=Path(args.reference) if args.reference else None,
        keep=Path(args.keep) if args.keep else None,
        progress=None if args.quiet else _say,
    )
    chains = ", ".join(f"{t}: {tools.identity}" for t, tools in sorted(report.tools.items()))
    print(
        f"built {len(report.examined)} artifacts into {args.out} in {report.seconds:.2f}s with {chains}: "
        "the lock is exactly what the sources declare, every static check passed"
    )
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    from netra import catalog

    cat = catalog.load(_root(args.root))
    for a in cat.artifacts:
        print(f"{a.name:48} {a.target:7} {a.key:45} {a.tactic.maturity:10} {', '.join(a.used_by)}")
    for f in cat.fallbacks:
        print(f"fallback {f.model}: {f.op}: {f.reason}")
    return 0


def cmd_verify_wheel(args: argparse.Namespace) -> int:
    """Check a wheel carries exactly the locked files: --lock, else the tree's lock, else the wheel's own."""
    from netra import lock, wheelgate

    wheel = Path(args.wheel)
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
    problems = wheelgate.check_wheel(wheel, against, raw)
    if problems:
        raise wheelgate.error(wheel, problems, why=f"checked against {where}")
    print(f"{wheel.name}: carries exactly the locked files ({where}): OK")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Verify this install and report the host; exit 1 when anything is missing or altered."""
    import json

    from netra import doctor

    report = doctor.run(sysfs_nodes=args.sysfs_nodes, require_gpu=args.require_gpu)
    print(json.dumps(report, indent=1, sort_keys=True) if args.json else doctor.render(report))
    return 0 if report["ok"] else 1


def cmd_certify(args: argparse.Namespace) -> int:
    """Run and time every candidate of a class's table on this host's GPU; write the certified table."""
    from netra import certify

    try:
        import numpy  # noqa: F401
    except ImportError:
        raise NetraError(
            "netra certify needs numpy (the float64 reference), which is not installed",
            "pip install 'netra-kernel[certify]'",
        ) from None
    out = Path(args.out) if args.out else Path.cwd() / f"{args.gpu_class}.json"
    table = certify.certify(args.gpu_class, progress=None if args.quiet else _say, seed=args.seed)
    certify.write(table, out)
    counts: dict[str, int] = {}
    for e in table["entries"]:
        for c in e["candidates"]:
            counts[c["maturity"]] = counts.get(c["maturity"], 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"wrote {out}: {len(table['entries'])} contracts, candidates {summary}")
    print(
        f"next: copy it to release/tables/{args.gpu_class}.json in the source tree, run `netra lock`, commit both"
    )
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="netra", description="Locked, certified ahead-of-time GPU kernels.")
    p.add_argument("--version", action="version", version=f"netra {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--root", help="source tree (default: found from the current directory)")
        sp.add_argument(
            "-j", "--jobs", type=int, default=None, help="parallel assemblies (default: all cores)"
        )
        sp.add_argument("-q", "--quiet", action="store_true", help="no progress lines")

    lk = sub.add_parser("lock", help="assemble the catalog and write release/manifest.lock")
    common(lk)
    lk.add_argument(
        "--check", action="store_true", help="exit 1, naming each difference, if the lock is stale"
    )
    lk.set_defaults(func=cmd_lock)

    b = sub.add_parser("build", help="assemble every locked artifact and gate it against the lock")
    common(b)
    b.add_argument("out", help="output folder for the code objects (<out>/<target>/<artifact>.hsaco)")
    b.add_argument(
        "--reference", help="a previous build folder or wheel, to show the first differing instruction"
    )
    b.add_argument("--keep", help="copy the generated instantiation files here")
    b.set_defaults(func=cmd_build)

    c = sub.add_parser("catalog", help="list artifacts, their contracts, maturity and users")
    c.add_argument("--root", help="source tree")
    c.set_defaults(func=cmd_catalog)

    vw = sub.add_parser("verify-wheel", help="check a built wheel carries exactly the locked files")
    vw.add_argument("wheel", help="the .whl to check")
    vw.add_argument("--lock", help="lock to check against (default: the source tree's, else the wheel's own)")
    vw.add_argument("--root", help="source tree whose release/manifest.lock to use")
    vw.set_defaults(func=cmd_verify_wheel)

    ce = sub.add_parser(
        "certify", help="run, judge and time every candidate on this host's GPU; write the table"
    )
    ce.add_argument("--gpu-class", required=True, help="the class to certify (this host's GPU must be of it)")
    ce.add_argument("--out", help="where to write the certified table (default: ./<class>.json)")
    ce.add_argument("--seed", type=int, default=0, help="seed of the test vectors (recorded in the table)")
    ce.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    ce.set_defaults(func=cmd_certify)

    d = sub.add_parser("doctor", help="verify this install file by file; report GPUs and runtime libraries")
    d.add_argument("--json", action="store_true", help="the report as JSON (schema: docs/doctor.md)")
    d.add_argument("--require-gpu", action="store_true", help="also exit 1 unless a certified GPU is found")
    d.add_argument("--sysfs-nodes", help="KFD topology nodes (default: /sys/class/kfd/kfd/topology/nodes)")
    d.set_defaults(func=cmd_doctor)
    return p


def main(argv: list[str] | None = None) -> int:
    from netra import interrupts

    try:
        with interrupts.handled():
            args = parser().parse_args(argv)
            return int(args.func(args))
    except NetraError as e:
        print(f"netra: error: {e}", file=sys.stderr)
        for line in e.details:
            print(f"  {line}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        written = getattr(e, "written", None)  # set when the signal came during a commit (build.committing)
        if written:
            print(f"netra: interrupted once {written} had been written whole; nothing is partial", file=sys.stderr)
        else:
            print("netra: interrupted: nothing was written", file=sys.stderr)
        return interrupts.exit_code(e)


if __name__ == "__main__":
    sys.exit(main())
