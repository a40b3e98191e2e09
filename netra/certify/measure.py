"""Running candidates on the device: poisoned and fenced buffers, correctness launches, graph-replay timing.

Every output is allocated with GUARD bytes on each side filled with FENCE and is filled with POISON
before each launch (NaN in bf16/fp32/FP8, -1 as an expert id: an output the kernel did not write fails
the judge); after it the guards must be intact. Timing: CUDA events around CUDA-graph replays (what a
serving engine runs), WARMUP replays first, then the median of `replays`; from ROTATE_FROM_ROWS up the
inputs rotate through enough buffer sets to exceed three times the L2. The same buffers serve every
candidate of a contract (inputs uploaded once; outputs poisoned again before each launch).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from netra.runtime import tables

GUARD = 256  # bytes fenced on each side of every output
POISON = 0xFF  # NaN in bf16/f32/FP8, -1 as an expert id: an unwritten output fails the judge
FENCE = 0xA5
ROTATE_FROM_ROWS = 512  # from here up inputs rotate through buffer sets larger than L2
WARMUP = 3
TARGET_REPLAY_US = 500.0  # launches per graph so that one replay lasts about this long
L2_ATTRIBUTE = 38  # CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (cuda.h); HIP's loader answers the same question


def raw_bytes(arr: Any) -> memoryview:
    """An array's bytes in memory order, without a copy where it is contiguous already."""
    import numpy as np

    a: Any = np.ascontiguousarray(arr)
    return memoryview(a).cast("B")


class Buffers:
    """Device allocations of one launch: inputs uploaded, outputs poisoned and fenced."""

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self.ptrs: list[int] = []
        # name -> (base, size, dtype, shape)
        self.outputs: dict[str, tuple[int, int, Any, tuple[int, ...]]] = {}
        self.args: dict[str, Any] = {}
        self.zeroed: dict[str, tuple[int, int]] = {}  # workspaces the kernel must leave all zero: (at, size)

    def input(self, name: str, data: bytes | memoryview) -> None:
        p = self.dev.alloc(len(data))
        self.ptrs.append(p)
        self.dev.upload(p, data)
        self.args[name] = p

    def copy_of(self, name: str, src: int, nbytes: int) -> None:
        """An input of its own allocation, exactly `nbytes`, filled on the device from `src` (an input kept
        uploaded across launches: netra.certify.worker.Kept)."""
        p = self.dev.alloc(nbytes)
        self.ptrs.append(p)
        if nbytes:
            self.dev.copy(p, src, nbytes)
        self.args[name] = p

    def uninitialized(self, name: str, nbytes: int) -> None:
        """An input of `nbytes` never written (the memory checkers' uninitialized-read canary)."""
        p = self.dev.alloc(nbytes)
        self.ptrs.append(p)
        self.args[name] = p

    def output(self, name: str, dtype: Any, shape: tuple[int, ...]) -> None:
        import numpy as np

        size = int(np.dtype(dtype).itemsize * math.prod(shape))
        base = self.dev.alloc(size + 2 * GUARD)
        self.ptrs.append(base)
        self.outputs[name] = (base, size, dtype, shape)
        self.args[name] = base + GUARD
        self._poison(base, size)

    def workspaces(self, op: str, params: dict[str, int], rows: int) -> None:
        """The family's workspaces for `rows` (its launch model's plan), in one allocation filled with
        zeros: a zeroed workspace (self-resetting counters) must hold zeros again after every launch."""
        from netra.core.ops import FAMILIES

        fam = FAMILIES[op]
        if not fam.launch.workspaces:
            return
        plan = fam.launch.workspace(fam.env(params, rows))
        base = self.dev.alloc(max(plan.workspace_bytes, 1))
        self.ptrs.append(base)
        self.dev.fill(base, 0, max(plan.workspace_bytes, 1))
        for w in fam.launch.workspaces:
            self.args[w.name] = base + plan.offsets[w.name]
            if w.zeroed:
                self.zeroed[w.name] = (base + plan.offsets[w.name], plan.sizes[w.name])

    def unreset(self) -> list[str]:
        """One line per zeroed workspace a launch left non-zero (the next call would read stale counters)."""
        return [
            f"workspace {name}: not all zero after the launch (its counters must reset themselves)"
            for name, (at, size) in self.zeroed.items()
            if size and self.dev.download(at, size) != bytes(size)
        ]

    def _poison(self, base: int, size: int) -> None:
        self.dev.fill(base, FENCE, GUARD)
        self.dev.fill(base + GUARD, POISON, size)
        self.dev.fill(base + GUARD + size, FENCE, GUARD)

    def poison(self) -> None:
        """Fence and poison every output again (before the next candidate's launch)."""
        for base, size, _, _ in self.outputs.values():
            self._poison(base, size)

    def read_raw(self) -> tuple[dict[str, bytes], list[str]]:
        """Each output's bytes, and one line per guard a launch wrote into."""
        got, fences = {}, []
        for name, (base, size, _, _) in self.outputs.items():
            raw = self.dev.download(base, size + 2 * GUARD)
            if raw[:GUARD] != bytes([FENCE]) * GUARD:
                fences.append(f"{name}: bytes before the output were written")
            if raw[GUARD + size :] != bytes([FENCE]) * GUARD:
                fences.append(f"{name}: bytes after the output were written")
            got[name] = raw[GUARD : GUARD + size]
        return got, fences

    def read(self) -> tuple[dict[str, Any], list[str]]:
        import numpy as np

        raw, fences = self.read_raw()
        got = {
            name: np.frombuffer(raw[name], dtype=dtype).reshape(shape)
            for name, (_, _, dtype, shape) in self.outputs.items()
        }
        return got, fences

    def free(self) -> None:
        for p in self.ptrs:
            self.dev.free(p)
        self.ptrs.clear()


def case_buffers(dev: Any, entry: tables.Entry, case: Any) -> Buffers:
    """One case's inputs uploaded and its outputs allocated, poisoned and fenced."""
    from netra.certify import conformance

    buf = Buffers(dev)
    try:
        for name, arr in case.inputs.items():
            buf.input(name, raw_bytes(arr))
        for name, (dtype, shape) in conformance.outputs(entry.op, entry.params, case.rows).items():
            buf.output(name, dtype, shape)
        buf.workspaces(entry.op, entry.params, case.rows)
    except BaseException:
        buf.free()
        raise
    return buf


def values(op: str, buf: Buffers, scalars: dict[str, Any], rows: int) -> dict[str, Any]:
    """A launch's kernel arguments by name: the buffers, the case's scalars and the dispatch value (rows,
    or what the family calls it: tokens)."""
    from netra.core.ops import FAMILIES

    return {**buf.args, **scalars, FAMILIES[op].dispatch: rows}


def launch(dev: Any, kernel: Any, buf: Buffers, case: Any, op: str) -> tuple[dict[str, bytes], list[str]]:
    """Run the kernel twice on a case's buffers (poisoned again before each); its outputs and the
    problems found: guards written, zeroed workspaces left non-zero, a second run whose bytes differ
    from the first (every certified kernel is bitwise deterministic)."""
    args = values(op, buf, case.scalars, case.rows)
    runs = []
    problems: list[str] = []
    for _ in range(2):
        buf.poison()
        dev.launch(kernel, case.rows, 0, args)
        dev.synchronize()
        raw, fences = buf.read_raw()
        problems += fences + buf.unreset()
        runs.append(raw)
    if runs[0] != runs[1]:
        differ = sorted(n for n in runs[0] if runs[0][n] != runs[1][n])
        problems.append(f"not deterministic: a second launch wrote different bytes to {', '.join(differ)}")
    return runs[0], sorted(set(problems))


Judged = tuple[bool, str, float | None, float, dict[str, int]]


def aggregate(verdicts: list[tuple[Any, Any, list[str]]]) -> Judged:
    """(passed, reason, worst deviation, tolerance, counts) over (case, verdict, fence problems) in
    case order: the first failing case is the reason; a non-finite deviation anywhere is None."""
    passed, reason = True, ""
    worst: float | None = 0.0
    tol = 0.0
    counts: dict[str, int] = {}
    for case, v, fences in verdicts:
        tol = max(tol, v.tolerance)
        for k, n in v.counts.items():
            counts[k] = counts.get(k, 0) + n
        if fences:
            counts["guard_violations"] = counts.get("guard_violations", 0) + len(fences)
        if worst is not None:
            worst = (
                None
                if v.max_rel_deviation is None or not math.isfinite(v.max_rel_deviation)
                else max(worst, v.max_rel_deviation)
            )
        if passed and (fences or not v.passed):
            passed = False
            reason = f"case {case.name} (rows {case.rows}): " + ("; ".join(fences) if fences else v.reason)
    return passed, reason[:600], worst, tol, counts


def correctness(
    dev: Any,
    kernel: Any,
    entry: tables.Entry,
    cases: list[Any],
    expected: dict[tuple[str, int], Any] | None = None,
) -> Judged:
    """Run every case on the device and judge it here; `expected` caches the float64 reference across
    tactics. (certify judges in worker processes instead: netra.certify.prepare; the GPU tests use this.)"""
    import os

    import numpy as np

    from netra.certify import conformance

    expected = {} if expected is None else expected
    bits = kernel.candidate.accumulator_bits  # its judge models its tensor core's accumulation
    out = []
    for case in cases:
        buf = case_buffers(dev, entry, case)
        try:
            raw, fences = launch(dev, kernel, buf, case, entry.op)
            got = {
                name: np.frombuffer(raw[name], dtype=dtype).reshape(shape)
                for name, (_, _, dtype, shape) in buf.outputs.items()
            }
        finally:
            buf.free()
        key = (case.name, case.rows)
        if key not in expected:
            expected[key] = conformance.expected(entry.op, entry.params, case, workers=os.cpu_count() or 1)
        verdict = conformance.judge(entry.op, entry.params, case, got, expected[key], accumulator_bits=bits)
        out.append((case, verdict, fences))
    return aggregate(out)


def timing_inputs(
    like: Any, rows: int, seed: int, op: str = "", params: dict[str, int] | None = None
) -> dict[str, Any]:
    """Random bf16 inputs of `rows` rows shaped like a conformance case's (activations: never zeros), as
    arrays by input name; a family whose inputs must mean something to be timed (a routed MoE's expert
    ids) makes its own (its numerics module's timing_inputs)."""
    import numpy as np

    from netra.certify import conformance

    if op and hasattr(conformance.numerics(op), "timing_inputs"):
        made: dict[str, Any] = conformance.numerics(op).timing_inputs(params, rows, seed)
        return made

    rng = np.random.default_rng(seed)
    out = {}
    for name, arr in sorted(like.inputs.items()):
        shape = (rows, *arr.shape[1:]) if arr.ndim == 2 else arr.shape
        n = math.prod(shape)
        base = min(n, 1 << 22)
        bits = (rng.standard_normal(base, dtype=np.float32).view(np.uint32) >> 16).astype(arr.dtype)
        reps = -(-n // base)
        out[name] = np.tile(bits, reps)[:n] if reps > 1 else bits
    return out


class TimingSets:
    """The buffer sets one row count of one contract is timed on, shared by its candidates."""

    def __init__(
        self, dev: Any, entry: tables.Entry, rows: int, l2_bytes: int, inputs: dict[str, Any]
    ) -> None:
        import numpy as np

        from netra.certify import conformance

        self.dev, self.entry, self.rows = dev, entry, rows
        outs = conformance.outputs(entry.op, entry.params, rows)
        self.moved = conformance.bytes_moved(entry.op, entry.params, rows, inputs)
        footprint = sum(int(a.nbytes) for a in inputs.values()) + sum(
            int(np.dtype(d).itemsize * math.prod(shape)) for d, shape in outs.values()
        )
        from netra.core.ops import FAMILIES

        if FAMILIES[entry.op].reads:  # weights read in part (the experts hit): rotate whatever the rows, by
            # the bytes a call reads, so that L2 never serves a replay what the previous one read
            self.count = max(2, min(8, -(-3 * l2_bytes // max(self.moved, 1))))
        else:
            self.count = (
                1 if rows < ROTATE_FROM_ROWS else max(1, min(8, -(-3 * l2_bytes // max(footprint, 1))))
            )
        self.sets: list[Buffers] = []
        try:
            for _ in range(self.count):
                b = Buffers(dev)
                self.sets.append(b)
                for name, arr in inputs.items():
                    b.input(name, raw_bytes(arr))
                for name, (dtype, shape) in outs.items():
                    b.output(name, dtype, shape)
                b.workspaces(entry.op, entry.params, rows)
        except BaseException:
            self.free()
            raise

    def time(self, kernel: Any, scalars: dict[str, float], replays: int) -> dict[str, Any]:
        dev, rows, sets = self.dev, self.rows, self.count
        stream = dev.stream()
        try:
            packed = [kernel.pack(**values(self.entry.op, b, scalars, rows)) for b in self.sets]
            est_us = self.moved / 3.0e6 + 2.0  # a guess at 3 TB/s plus launch cost, only to size the graph
            per_graph = max(4, min(200, math.ceil(TARGET_REPLAY_US / est_us)))
            per_graph = -(-per_graph // sets) * sets

            def body() -> None:
                for i in range(per_graph):
                    dev.launch(kernel, rows, stream, packed[i % sets])

            graph = dev.graph(stream, body)
            try:
                dev.replay_ms(graph, stream, WARMUP)
                ms = dev.replay_ms(graph, stream, replays)
            finally:
                dev.destroy_graph(graph)
        finally:
            dev.synchronize()
            dev.destroy_stream(stream)
        us = sorted(m * 1000.0 / per_graph for m in ms)
        med = statistics.median(us)
        return {
            "rows": rows,
            "median_us": round(med, 3),
            "p10_us": round(us[max(0, len(us) // 10)], 3),
            "p90_us": round(us[min(len(us) - 1, len(us) * 9 // 10)], 3),
            "runs": len(us) * per_graph,
            "bytes": self.moved,
            "tb_per_s": round(self.moved / (med * 1e-6) / 1e12, 4),
        }

    def free(self) -> None:
        for b in self.sets:
            b.free()
        self.sets.clear()


def l2_bytes(dev: Any) -> int:
    return int(dev.attribute(L2_ATTRIBUTE)) if hasattr(dev, "attribute") else 64 << 20
