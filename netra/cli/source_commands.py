"""The kernel authors' commands, which work on a source tree: `netra lock`, `netra cache`, `netra build`.
Each is a thin shell over netra.release, imported when the command runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from netra.cli.support import (
    _PROGRESS,
    WRITER_LOCK,
    _json,
    _need,
    _path,
    _progress,
    _root,
    _say,
)
from netra.errors import NetraError


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
    refused = fresh.derived.manifests.not_admitted if fresh.derived is not None else ()
    if args.json:
        _json({
            "schema": 1, "command": "lock", "check": False, "root": str(root), "wrote": "release/manifest.lock",
            "artifacts": len(lk.artifacts), "files": len(lk.files),
            "toolchains": {t: str(tc) for t, tc in sorted(lk.toolchains.items())},
            "tables": sorted(fresh.tables), "voided": list(fresh.voided),
            "not_admitted": [{
                "gpu_class": n.target, "contract": n.key, "tactic": n.tactic, "template": n.template,
                "requires": n.requirement.holds, "why": n.requirement.why,
            } for n in refused],
        })  # fmt: skip
    else:
        print(
            f"wrote release/manifest.lock: {len(lk.artifacts)} artifacts, {len(lk.files)} files, "
            f"{lk.describe_toolchains()}"
        )
        if refused:  # what the artifact count leaves out, and why: a template's requirement, not an omission
            print(f"not built, the template does not admit the pair ({len(refused)}):")
            for n in refused:
                print(f"  {n.key}: {n}")
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
    if args.clear and entries:  # what could not be removed (permissions, a read-only or busy folder)
        raise NetraError(
            f"{where}: {entries} entries ({size} bytes) could not be removed ({removed[0]} were)",
            f"check the folder's permissions, or remove it yourself: rm -rf -- {where}",
        )
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
