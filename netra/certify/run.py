"""`netra certify`: run every candidate of a GPU class's table on that GPU, judge it against the float64
reference, time it, rank it, and write the hardware-certified table.

It runs from an installed wheel: the kernels are the install's verified code objects (the runtime's
integrity checks run first), the loader is the class's vendor's (netra.loaders.cuda for sm_90,
netra.loaders.hip for gfx950), and nothing but numpy is needed besides. Per candidate:

- correctness: every netra.certify.conformance case (row counts 1, a few, not a multiple of the block's rows,
  large; several value scales, zeros, saturation, FP8 midpoints, tied router logits), outputs
  poisoned before the launch and fenced by guard bytes on both sides that must come back untouched;
  judged by netra.certify.conformance against netra.certify.reference (float64);
- timing: CUDA events around CUDA-graph replays (what a serving engine runs), warm-up first, the median
  of many, at decode and prefill row counts; inputs rotate through several buffer sets where one set
  would fit in L2; effective bandwidth = the bytes the op must move / time.

Ranking (given the measurements, deterministic): candidates that pass every case are `accepted`,
ordered by their median at the prefill row count; the others are `rejected` with the first failing
case as the reason. Where different accepted tactics are fastest at different row counts, the entry
gets a `dispatch`: per measured row count the fastest, keeping the previous winner unless another is
faster by more than HYSTERESIS, merged into row ranges. The table holds no timestamps and no paths.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netra import __version__, targets
from netra.errors import CertificationError, NetraError
from netra.runtime import tables

ROWS = (1, 16, 64, 512, 8192, 32768)
PREFILL_ROWS = 8192
ROTATE_FROM_ROWS = 512  # from here up inputs rotate through buffer sets larger than L2
WARMUP = 3
REPLAYS = 25
TARGET_REPLAY_US = 500.0  # launches per graph so that one replay lasts about this long
HYSTERESIS = 0.03
GUARD = 256  # bytes fenced on each side of every output
POISON = 0xFF  # NaN in bf16/f32/FP8, -1 as an expert id: an unwritten output fails the judge
FENCE = 0xA5
Progress = Callable[[str], None]


@dataclass
class Result:
    candidate: tables.Candidate
    passed: bool
    reason: str
    max_rel_deviation: float | None
    tolerance: float
    cases: int
    counts: dict[str, int]
    timings: list[dict[str, Any]] = field(default_factory=list)


def _loader(table: tables.Table) -> Any:
    """A new instance of the class's vendor's loader (netra.loaders.<loader>)."""
    return targets.get(table.gpu_class).vendor.open_loader()


class _Buffers:
    """Device allocations of one launch: inputs uploaded, outputs poisoned and fenced."""

    def __init__(self, dev: Any) -> None:
        self.dev = dev
        self.ptrs: list[int] = []
        # name -> (base, size, dtype, shape)
        self.outputs: dict[str, tuple[int, int, Any, tuple[int, ...]]] = {}
        self.args: dict[str, Any] = {}

    def input(self, name: str, data: bytes) -> None:
        p = self.dev.alloc(len(data))
        self.ptrs.append(p)
        self.dev.upload(p, data)
        self.args[name] = p

    def output(self, name: str, dtype: Any, shape: tuple[int, ...]) -> None:
        import numpy as np

        size = int(np.dtype(dtype).itemsize * math.prod(shape))
        base = self.dev.alloc(size + 2 * GUARD)
        self.ptrs.append(base)
        self.dev.fill(base, FENCE, GUARD)
        self.dev.fill(base + GUARD, POISON, size)
        self.dev.fill(base + GUARD + size, FENCE, GUARD)
        self.outputs[name] = (base, size, dtype, shape)
        self.args[name] = base + GUARD

    def read(self) -> tuple[dict[str, Any], list[str]]:
        import numpy as np

        got, fences = {}, []
        for name, (base, size, dtype, shape) in self.outputs.items():
            raw = self.dev.download(base, size + 2 * GUARD)
            if raw[:GUARD] != bytes([FENCE]) * GUARD:
                fences.append(f"{name}: bytes before the output were written")
            if raw[GUARD + size :] != bytes([FENCE]) * GUARD:
                fences.append(f"{name}: bytes after the output were written")
            got[name] = np.frombuffer(raw[GUARD : GUARD + size], dtype=dtype).reshape(shape)
        return got, fences

    def free(self) -> None:
        for p in self.ptrs:
            self.dev.free(p)
        self.ptrs.clear()


def _correctness(
    dev: Any,
    kernel: Any,
    entry: tables.Entry,
    cases: list[Any],
    expected: dict[tuple[str, int], Any] | None = None,
) -> tuple[bool, str, float | None, float, dict[str, int]]:
    """Run every case on the device and judge it; `expected` caches the float64 reference across tactics."""
    import os

    from netra.certify import conformance

    expected = {} if expected is None else expected
    passed, reason = True, ""
    worst: float | None = 0.0
    tol = 0.0
    counts: dict[str, int] = {}
    for case in cases:
        buf = _Buffers(dev)
        try:
            for name, arr in case.inputs.items():
                buf.input(name, arr.tobytes())
            for name, (dtype, shape) in conformance.outputs(entry.op, entry.params, case.rows).items():
                buf.output(name, dtype, shape)
            args = {**buf.args, **case.scalars, "rows": case.rows}
            dev.launch(kernel, case.rows, 0, args)
            dev.synchronize()
            got, fences = buf.read()
        finally:
            buf.free()
        key = (case.name, case.rows)
        if key not in expected:
            expected[key] = conformance.expected(entry.op, entry.params, case, workers=os.cpu_count() or 1)
        v = conformance.judge(entry.op, entry.params, case, got, expected[key])
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


def _timing_bytes(like: Any, rows: int, seed: int) -> dict[str, bytes]:
    """Random bf16 inputs of `rows` rows shaped like a conformance case's (activations: never zeros)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = {}
    for name, arr in sorted(like.inputs.items()):
        shape = (rows, *arr.shape[1:]) if arr.ndim == 2 else arr.shape
        n = math.prod(shape)
        base = min(n, 1 << 22)
        bits = (rng.standard_normal(base, dtype=np.float32).view(np.uint32) >> 16).astype(arr.dtype)
        reps = -(-n // base)
        out[name] = np.tile(bits, reps)[:n].tobytes() if reps > 1 else bits.tobytes()
    return out


def _time(
    dev: Any,
    kernel: Any,
    entry: tables.Entry,
    like: Any,
    rows: int,
    l2_bytes: int,
    inputs: dict[str, bytes],
    replays: int,
) -> dict[str, Any]:
    import numpy as np

    from netra.certify import conformance

    outs = conformance.outputs(entry.op, entry.params, rows)
    moved = conformance.bytes_moved(entry.op, entry.params, rows)
    footprint = sum(len(b) for b in inputs.values()) + sum(
        int(np.dtype(d).itemsize * math.prod(shape)) for d, shape in outs.values()
    )
    sets = 1 if rows < ROTATE_FROM_ROWS else max(1, min(8, -(-3 * l2_bytes // max(footprint, 1))))
    bufs = []
    stream = dev.stream()
    try:
        for _ in range(sets):
            b = _Buffers(dev)
            for name, data in inputs.items():
                b.input(name, data)
            for name, (dtype, shape) in outs.items():
                b.output(name, dtype, shape)
            bufs.append(b)
        packed = [kernel.pack(**b.args, **like.scalars, rows=rows) for b in bufs]
        est_us = moved / 3.0e6 + 2.0  # a guess at 3 TB/s plus launch cost, only to size the graph
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
        for b in bufs:
            b.free()
        dev.destroy_stream(stream)
    us = sorted(m * 1000.0 / per_graph for m in ms)
    med = statistics.median(us)
    return {
        "rows": rows,
        "median_us": round(med, 3),
        "p10_us": round(us[max(0, len(us) // 10)], 3),
        "p90_us": round(us[min(len(us) - 1, len(us) * 9 // 10)], 3),
        "runs": len(us) * per_graph,
        "bytes": moved,
        "tb_per_s": round(moved / (med * 1e-6) / 1e12, 4),
    }


def _run_info(
    dev: Any, table: tables.Table, lock: Any, rows: tuple[int, ...], replays: int, seed: int
) -> dict[str, Any]:
    tc = lock.toolchains[table.gpu_class]
    vendor = targets.get(table.gpu_class).vendor
    return {
        "device": dev.device_name(),
        "driver": vendor.driver(),
        "runtime": f"{vendor.runtime} {dev.driver_version()}",
        "toolchain": {"flavour": tc.flavour, "version": tc.version},
        "clocks": vendor.clocks(),
        "netra": __version__,
        "seed": seed,
        "protocol": {"rows": list(rows), "warmup": WARMUP, "replays": replays, "prefill_rows": PREFILL_ROWS},
    }


def rank(results: list[Result]) -> tuple[list[Result], list[dict[str, Any]] | None]:
    """The entry's candidate order and row dispatch, from the measurements alone.

    Per measured row count the fastest passing candidate wins, except that the previous row count's
    winner stays while it is within HYSTERESIS of the fastest (noise must not flip tactics); runs of
    one winner become row ranges. The candidate serving the prefill row count comes first (it is
    what select() serves when the caller gives no row count), then the other passing candidates by
    their prefill median, then the rejected ones; ties by tactic name.
    """
    ok = [r for r in results if r.passed]
    bad = sorted((r for r in results if not r.passed), key=lambda r: r.candidate.tactic)

    def median(r: Result, rows: int) -> float:
        return next((t["median_us"] for t in r.timings if t["rows"] == rows), math.inf)

    ok.sort(key=lambda r: (median(r, PREFILL_ROWS), r.candidate.tactic))
    if len(ok) < 2:
        return ok + bad, None
    measured = sorted({t["rows"] for r in ok for t in r.timings})
    winners: list[tuple[int, str]] = []
    current: str | None = None
    for rows in measured:
        best = min(ok, key=lambda r: (median(r, rows), r.candidate.tactic))
        keep = next((r for r in ok if r.candidate.tactic == current), None)
        if keep is not None and median(keep, rows) <= median(best, rows) * (1 + HYSTERESIS):
            best = keep
        current = best.candidate.tactic
        winners.append((rows, current))
    rules: list[dict[str, Any]] = []
    for i, (rows, tactic) in enumerate(winners):
        if i + 1 < len(winners) and winners[i + 1][1] == tactic:
            continue
        rules.append({"max_rows": rows, "tactic": tactic})
    rules[-1]["max_rows"] = None
    prefill = next((t for rows, t in winners if rows >= PREFILL_ROWS), winners[-1][1])
    ok.sort(key=lambda r: r.candidate.tactic != prefill)  # stable: the others keep their prefill order
    return ok + bad, (rules if len(rules) > 1 else None)


def rerank(table: dict[str, Any]) -> dict[str, Any]:
    """The table's order, maturity and dispatch recomputed from the measurements it records: the same
    table when it came from `certify` (ranking is a function of the measurements)."""
    out = json.loads(json.dumps(table))
    for entry in out["entries"]:
        cands = entry["candidates"]
        results = []
        for c in cands:
            hw = c["evidence"]["hardware"]
            if hw is None:
                raise CertificationError(
                    f"{c['artifact']}: has no hardware evidence to rank", "certify the class first"
                )
            cand = type("Measured", (), {"tactic": c["tactic"]})()
            results.append(Result(cand, hw["passed"], hw["reason"], hw["max_rel_deviation"], hw["tolerance"],
                                  hw["cases"], hw["counts"], hw["timings"]))  # fmt: skip
        ranked, dispatch = rank(results)
        by_tactic = {c["tactic"]: c for c in cands}
        entry["candidates"] = [dict(by_tactic[r.candidate.tactic], maturity="accepted" if r.passed else "rejected")
                               for r in ranked]  # fmt: skip
        entry["dispatch"] = dispatch
    return out


def certify(
    gpu_class: str,
    *,
    install: Any = None,
    rows: tuple[int, ...] = ROWS,
    replays: int = REPLAYS,
    seed: int = 0,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The certified table of `gpu_class` for this install, measured on this host's GPU."""
    from netra import runtime
    from netra.certify import conformance

    cat = runtime.open_catalog(gpu_class, install=install)
    table = cat.table
    if table.certification != "hardware":
        raise CertificationError(
            f"the {gpu_class} table of this install is certified {table.certification!r}: its catalog "
            f'declares certification = "static" for {gpu_class}',
            f'set certification = "hardware" in manifests/{gpu_class}/tactics.toml, `netra lock`, rebuild, '
            "then certify from that wheel",
        )
    dev = _loader(table)
    have = dev.gpu_class()
    if have != gpu_class:
        raise CertificationError(
            f"this host's GPU is {have} ({dev.device_name()}); certifying {gpu_class} needs an {gpu_class} GPU",
            f"run `netra certify --gpu-class {gpu_class}` on a host with that GPU",
        )
    cat.verify()  # every code object against the lock before anything runs
    l2 = dev.attribute(38) if hasattr(dev, "attribute") else 64 << 20
    results_by_entry: dict[str, list[Result]] = {}
    total = sum(len(e.candidates) for e in table.entries.values())
    done = 0
    for key, entry in sorted(table.entries.items()):
        per_entry: list[Result] = []
        expected: dict[tuple[str, int], Any] = {}  # the float64 reference of each case, shared by tactics
        timing_inputs: dict[int, dict[str, bytes]] = {}
        for cand in entry.candidates:
            done += 1
            if progress:
                progress(f"[{done}/{total}] {cand.artifact}")
            kernel = cat.kernel(cand)
            cases = conformance.cases(
                entry.op, entry.params, rows_per_block=cand.launch.rows_per_block, seed=seed
            )
            try:
                ok, reason, dev_max, tol, counts = _correctness(dev, kernel, entry, cases, expected)
                timings = []
                for r in rows if ok else ():
                    if r not in timing_inputs:  # the same random inputs for every tactic of the entry
                        timing_inputs[r] = _timing_bytes(cases[0], r, seed)
                    timings.append(_time(dev, kernel, entry, cases[0], r, l2, timing_inputs[r], replays))
            except NetraError as e:
                raise CertificationError(
                    f"{cand.artifact}: the GPU failed while certifying it ({e.message})",
                    "a kernel that faults the device cannot be certified; fix it (or mark the tactic rejected) "
                    "and certify again",
                ) from None
            per_entry.append(Result(cand, ok, reason, dev_max, tol, len(cases), counts, timings))
        results_by_entry[key] = per_entry
    return _table(cat, dev, results_by_entry, rows, replays, seed)


def _table(
    cat: Any, dev: Any, results: dict[str, list[Result]], rows: tuple[int, ...], replays: int, seed: int
) -> dict[str, Any]:
    """The installed table with this run's evidence, order, maturity and dispatch; checked before returned."""
    inst, table = cat.install, cat.table
    raw = json.loads(inst.tracked(tables.table_path(table.gpu_class)).read_bytes())
    run = _run_info(dev, table, cat.lock, rows, replays, seed)
    for entry in raw["entries"]:
        ranked, dispatch = rank(results[entry["key"]])
        by_tactic = {c["tactic"]: c for c in entry["candidates"]}
        cands = []
        for r in ranked:
            c = dict(by_tactic[r.candidate.tactic])
            c["maturity"] = "accepted" if r.passed else "rejected"
            c["evidence"] = {
                **c["evidence"],
                "hardware": {
                    "run": 0,
                    "text_sha256": r.candidate.text_sha256,
                    "passed": r.passed,
                    "reason": r.reason,
                    "reference": "float64",
                    "max_rel_deviation": r.max_rel_deviation,
                    "tolerance": r.tolerance,
                    "cases": r.cases,
                    "counts": dict(sorted(r.counts.items())),
                    "timings": r.timings,
                },
            }
            cands.append(c)
        entry["candidates"] = cands
        entry["dispatch"] = dispatch
    raw["certification"] = {
        "kind": "hardware",
        "note": tables.HARDWARE_NOTE.format(target=table.gpu_class),
        "runs": [run],
    }
    where = f"certified {table.gpu_class} table"
    parsed = tables.parse(raw, where, table.gpu_class)
    wrong = tables.against_lock(parsed, cat.lock)
    if wrong:
        raise CertificationError(
            f"{where}: disagrees with the install's lock ({wrong[0]})", "reinstall and certify again"
        )
    return raw


def write(table: dict[str, Any], out: Path) -> None:
    from netra.core import files

    files.atomic_write(out, tables.dumps(table).encode())
