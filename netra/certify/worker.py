"""`python -m netra.certify.worker PLAN [--progress FILE]`: launch the candidates a plan lists, for a tool.

certify starts it under each memory checker and under the profiler (netra.certify.sanitizer,
netra.certify.profile); nothing else should. It opens the install the plan names the way certify does
(the lock and table checked, each code object verified before it is loaded), then per item: prints a
begin line, runs each launch on fresh buffers (inputs from the plan's files, outputs poisoned and fenced
as certify does), synchronizes after each launch, prints an end line. An input file is uploaded once and
kept on the device (Kept): each launch's input is still an allocation of its own and its exact size,
filled by a device-to-device copy, so the checkers see what they saw, without the host reading a routed
MoE's weights (400 MB at Qwen3-30B-A3B, 7.5 GB at DeepSeek-V3) again for every launch of every
candidate. It judges nothing: certify already did. On a device error it prints the end line with the
error and exits 3 (a CUDA context that saw an illegal access does not survive it; certify starts a new
worker after that item). Lines: netra.certify.plan.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, TextIO

from netra.certify import plan as planfile
from netra.errors import NetraError

EXIT_FAULT = 3
EXIT_ERROR = 2
KEPT_BYTES = 16 << 30  # the most a worker keeps uploaded; the least recently used file goes first
KEEP_ENV = "NETRA_CERTIFY_KEEP_INPUTS"  # "0": upload every input for every launch (what certify did before)


class Kept:
    """Each input file's bytes uploaded once and kept on the device, up to `limit` bytes (least recently used
    freed first; a file larger than that, and every file where the limit is 0, uploaded for each launch)."""

    def __init__(self, dev: Any, limit: int = KEPT_BYTES) -> None:
        self.dev, self.limit, self.used = dev, limit, 0
        self.files: OrderedDict[str, tuple[int, int]] = OrderedDict()  # file -> (device pointer, bytes)

    def fill(self, buf: Any, name: str, file: str) -> None:
        """buf's input `name`: a fresh allocation with `file`'s bytes."""
        import numpy as np

        from netra.certify import measure

        got = self.files.get(file)
        if got is None:
            data = measure.raw_bytes(np.load(file, mmap_mode="r", allow_pickle=False))
            if not self.limit or data.nbytes > self.limit:
                buf.input(name, data)
                return
            while self.files and self.used + data.nbytes > self.limit:
                _, (p, n) = self.files.popitem(last=False)
                self.dev.free(p)
                self.used -= n
            p = self.dev.alloc(data.nbytes)
            try:
                self.dev.upload(p, data)
            except BaseException:
                with contextlib.suppress(NetraError):  # the upload's own error is the one to report
                    self.dev.free(p)
                raise
            got = self.files[file] = (p, data.nbytes)
            self.used += data.nbytes
        self.files.move_to_end(file)
        buf.copy_of(name, *got)

    def free(self) -> None:
        while self.files:
            _, (p, _n) = self.files.popitem()
            with contextlib.suppress(NetraError):  # after a device error the context is gone
                self.dev.free(p)


def _emit(line: str, progress: TextIO | None) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if progress is not None:
        progress.write(line + "\n")
        progress.flush()


def run(p: planfile.Plan, progress: TextIO | None = None) -> int:
    from netra import runtime, targets
    from netra.runtime import installed

    inst = installed.locate()
    if str(inst.root) != p.install_root or inst.kind != p.install_kind:
        inst = installed.Install(kind=p.install_kind, root=Path(p.install_root))
    cat = runtime.open_catalog(p.gpu_class, install=inst)
    dev = targets.get(p.gpu_class).vendor.open_loader()
    by_artifact = {c.artifact: c for c in cat.table.candidates()}
    entry_of = {c.artifact: e for e in cat.table.entries.values() for c in e.candidates}
    kept = Kept(dev, KEPT_BYTES if os.environ.get(KEEP_ENV) != "0" else 0)
    try:
        return _items(p, cat, dev, kept, by_artifact, entry_of, progress)
    finally:
        kept.free()


def _items(p: planfile.Plan, cat: Any, dev: Any, kept: Kept, by_artifact: dict[str, Any],
           entry_of: dict[str, Any], progress: TextIO | None) -> int:  # fmt: skip
    import numpy as np

    from netra.certify import measure

    for i, item in enumerate(p.items):
        cand = by_artifact.get(item.artifact)
        if cand is None:
            raise NetraError(
                f"{item.artifact}: not a candidate of the {p.gpu_class} table of this install",
                "run the worker only through `netra certify`",
            )
        _emit(planfile.begin(i, cand.artifact, cand.text_sha256), progress)
        launches = 0
        cand_op, params = entry_of[cand.artifact].op, entry_of[cand.artifact].params
        try:
            kernel = cat.kernel(cand)
            for x in item.launches:
                buf = measure.Buffers(dev)
                try:
                    for name, (file, initialized) in sorted(x.inputs.items()):
                        if initialized:
                            kept.fill(buf, name, file)
                        else:
                            buf.uninitialized(
                                name, int(np.load(file, mmap_mode="r", allow_pickle=False).nbytes)
                            )
                    for name, (dtype, shape) in sorted(x.outputs.items()):
                        buf.output(name, np.dtype(dtype), shape)
                    rows = x.rows + item.extra_rows
                    buf.workspaces(cand_op, params, rows)
                    dev.launch(kernel, rows, 0, measure.values(cand_op, buf, x.scalars, rows))
                    dev.synchronize()
                    launches += 1
                finally:
                    with contextlib.suppress(NetraError):  # after a device error the context is gone
                        buf.free()
        except NetraError as e:
            _emit(planfile.end_fault(i, cand.artifact, e.message), progress)
            return EXIT_FAULT
        _emit(planfile.end_ok(i, cand.artifact, launches), progress)
    _emit(planfile.done(len(p.items)), progress)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m netra.certify.worker", description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", type=Path)
    ap.add_argument("--progress", type=Path, help="also append every line printed to this file")
    args = ap.parse_args(argv)
    progress = None
    try:
        p = planfile.read(args.plan)
        if args.progress is not None:
            progress = open(args.progress, "a")  # noqa: SIM115 - kept open for the whole run
        return run(p, progress)
    except NetraError as e:
        print(f"netra worker: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if progress is not None:
            progress.close()


if __name__ == "__main__":
    sys.exit(main())
