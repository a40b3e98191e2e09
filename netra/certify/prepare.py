"""Certification's host work, done in worker processes while the GPU runs.

The judge and the float64 reference cost far more than the launches they check (on the H200's host a
judged 8192-row case takes seconds; its launch, microseconds), so certify keeps them off the GPU's path:

- `cases` (one task per contract): the conformance cases of every rows-per-block its tactics use, each
  distinct case once, written to a scratch folder as .npy files; and, per case, the files its float64
  reference will fill (their shapes from a one-row probe);
- `timing` (one task per contract): the timing inputs of every measured row count, .npy files;
- `expected` (one task per span of SPAN_ROWS rows of a case): the reference of those rows, written into
  the case's reference files (rows are independent: netra.certify.conformance computes them in chunks);
- `judge` (one task per candidate): the outputs certify downloaded after each launch, read from their
  files and judged against the reference files by netra.certify.conformance.judge, case by case, with
  the guard problems certify found; the verdict aggregated as netra.certify.measure.aggregate does.

Nothing here changes what is computed or how it is judged: the same functions run on the same arrays,
in another process. Files are written whole under a temporary name and renamed, so a reader never sees
a partial one. The memory checkers and the profiler launch from the same case and timing files
(netra.certify.plan).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from netra.certify import conformance, measure
from netra.runtime.tables.model import FP32_ACCUMULATOR_BITS

SPAN_ROWS = 1024
_SAFE = re.compile(r"[^A-Za-z0-9_.@-]")

Array = tuple[str, str, tuple[int, ...]]  # (.npy file, dtype, shape)


@dataclass(frozen=True)
class CaseFiles:
    """One conformance case on disk: its inputs and the files of its float64 reference."""

    key: str  # "<name>@<rows>": unique in a contract (a case's values depend only on its name and rows)
    name: str
    rows: int
    scalars: dict[str, float]
    inputs: dict[str, Array]
    expected: dict[str, Array]

    def stub(self) -> conformance.Case:
        """The case without its inputs: what judging needs (its name and rows)."""
        return conformance.Case(self.name, self.rows, {}, dict(self.scalars))

    def load(self) -> conformance.Case:
        """The case with its inputs (read-only views of the files)."""
        return conformance.Case(
            self.name, self.rows, {k: load(a) for k, a in self.inputs.items()}, dict(self.scalars)
        )


@dataclass(frozen=True)
class Cases:
    """A contract's cases: each distinct one once, and which of them each rows-per-block runs, in order."""

    cases: dict[str, CaseFiles]
    by_rows_per_block: dict[int, tuple[str, ...]]


def save(path: Path, arr: Any) -> Array:
    """An array as a .npy file, written whole (temporary name, then rename)."""
    a = np.ascontiguousarray(arr)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as f:
        np.save(f, a, allow_pickle=False)
    os.replace(tmp, path)
    return str(path), a.dtype.name, tuple(int(x) for x in a.shape)


def load(a: Array) -> np.ndarray:
    arr = np.load(a[0], mmap_mode="r", allow_pickle=False)
    if arr.dtype.name != a[1] or tuple(arr.shape) != tuple(a[2]):
        raise ValueError(f"{a[0]}: {arr.dtype.name}{list(arr.shape)}, expected {a[1]}{list(a[2])}")
    return arr


def cases(op: str, params: dict[str, int], rows_per_block: list[int], seed: int, folder: str) -> Cases:
    """Every case of every rows-per-block, each distinct case written once; its reference files made.

    An array the cases share (a routed MoE's experts: one object for every case of the contract) is
    written once too. A reference file has the probe's rows per dispatch row (a pair-indexed output:
    topk per token)."""
    out: dict[str, CaseFiles] = {}
    order: dict[int, tuple[str, ...]] = {}
    base = Path(folder)
    for rpb in sorted(set(rows_per_block)):
        keys = []
        cases = conformance.cases(op, params, rows_per_block=rpb, seed=seed)
        shared: dict[int, Array] = {}  # by id(): every array stays alive in `cases` meanwhile
        for c in cases:
            key = f"{c.name}@{c.rows}"
            keys.append(key)
            if key in out:
                continue
            d = base / _SAFE.sub("_", key)
            inputs = {}
            for k, v in sorted(c.inputs.items()):
                if sum(v is x.inputs.get(k) for x in cases) > 1:
                    if id(v) not in shared:
                        shared[id(v)] = save(base / f"shared.{rpb}.{len(shared)}.{k}.npy", v)
                    inputs[k] = shared[id(v)]
                else:
                    inputs[k] = save(d / f"in.{k}.npy", v)
            probe = conformance.expected_rows(op, params, c, 0, 1)
            expected: dict[str, Array] = {}
            for k, v in sorted(probe.items()):
                path = d / f"exp.{k}.npy"
                shape = (c.rows * v.shape[0], *v.shape[1:])
                np.lib.format.open_memmap(path, mode="w+", dtype=v.dtype, shape=shape).flush()
                expected[k] = (str(path), v.dtype.name, tuple(int(x) for x in shape))
            out[key] = CaseFiles(key, c.name, c.rows, dict(c.scalars), inputs, expected)
        order[rpb] = tuple(keys)
    return Cases(out, order)


def spans(c: CaseFiles) -> list[tuple[int, int]]:
    return [(a, min(a + SPAN_ROWS, c.rows)) for a in range(0, c.rows, SPAN_ROWS)]


def expected(op: str, params: dict[str, int], c: CaseFiles, a: int, b: int) -> None:
    """The float64 reference of rows a..b of a case, written into its reference files."""
    e = conformance.expected_rows(op, params, c.load(), a, b)
    for k, (path, dtype, shape) in c.expected.items():
        m = shape[0] // c.rows  # reference rows per dispatch row
        mm = np.load(path, mmap_mode="r+", allow_pickle=False)
        if (
            mm.dtype.name != dtype
            or tuple(mm.shape) != tuple(shape)
            or e[k].shape != ((b - a) * m, *shape[1:])
        ):
            raise ValueError(f"{path}: the reference of rows {a}..{b} does not fit {dtype}{list(shape)}")
        mm[a * m : b * m] = e[k]
        mm.flush()
        del mm


def timing(
    op: str, params: dict[str, int], rows: list[int], seed: int, folder: str
) -> dict[int, dict[str, Array]]:
    """The timing inputs of every row count (shaped like the first case), as files."""
    like = conformance.cases(op, params, rows_per_block=1, large_rows=1, seed=seed)[0]
    out: dict[int, dict[str, Array]] = {}
    for r in rows:
        arrays = measure.timing_inputs(like, r, seed, op, params)
        out[r] = {k: save(Path(folder) / f"timing.{r}.{k}.npy", v) for k, v in arrays.items()}
    return out


def judge(
    op: str,
    params: dict[str, int],
    case_files: list[CaseFiles],
    outputs: list[dict[str, Array]],
    fences: list[list[str]],
    accumulator_bits: int = FP32_ACCUMULATOR_BITS,
) -> measure.Judged:
    """One candidate's verdict: each case's outputs (raw files) judged against its reference files, by the
    bounds of its accumulation (its table entry's accumulator_bits)."""
    verdicts = []
    for c, outs, fence in zip(case_files, outputs, fences, strict=True):
        got = {k: np.fromfile(f, dtype=dt).reshape(sh) for k, (f, dt, sh) in outs.items()}
        exp = {k: load(a) for k, a in c.expected.items()}
        verdict = conformance.judge(op, params, c.stub(), got, exp, accumulator_bits=accumulator_bits)
        verdicts.append((c.stub(), verdict, fence))
    return measure.aggregate(verdicts)
