"""Conformance: the test vectors every kernel of an op family is run on, and how its outputs are judged.

Target-independent and framework-free (numpy only), so that `netra certify` can use it on any GPU
class: a harness allocates `outputs(...)`, runs the kernel on each `cases(...)` entry, and hands what
came back to `judge(...)`. The float64 reference (netra.certify.reference) defines every expected value;
the allowances below are the only places where a kernel may differ from it, each one derived in a
comment. Inputs are bf16 bit patterns (uint16), deterministic functions of (op, params, seed).

Each family's numerics are one module of their own, netra/certify/numerics/<op>.py (its tolerances,
test vectors, reference over a row span and judge); this module is what a harness calls, the same for
every family: outputs and bytes moved come from the family's record (netra/core/families/), the rest
from its numerics module, found by the family's name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

try:
    import numpy as np

except ModuleNotFoundError as _e:  # numpy is the certify extra's, not a dependency of netra-kernel
    raise ModuleNotFoundError(
        "netra.certify.conformance needs numpy, which is not installed: pip install 'netra-kernel[certify]'",
        name=_e.name,
    ) from None

import importlib
from types import ModuleType
from typing import Any

from netra.certify import reference as ref
from netra.certify.numerics import common
from netra.certify.numerics.common import Case, Verdict
from netra.certify.numerics.fused import FUSED, FUSED_QUANT, WITH_RESIDUAL
from netra.certify.numerics.quant import GATE_TERM
from netra.core import interrupts
from netra.core.ops import FAMILIES
from netra.runtime.tables.model import FP32_ACCUMULATOR_BITS

__all__ = [
    "FUSED",
    "FUSED_QUANT",
    "GATE_TERM",
    "MIDPOINT_WINDOW",
    "OPS",
    "TOLERANCES",
    "WITH_RESIDUAL",
    "Case",
    "Verdict",
    "bytes_moved",
    "cases",
    "expected",
    "expected_rows",
    "judge",
    "numerics",
    "outputs",
]

OPS = tuple(FAMILIES)
_NUMERICS: dict[str, ModuleType] = {op: importlib.import_module(f"netra.certify.numerics.{op}") for op in OPS}
# Tolerances on max_rel_deviation = reference.relative_max_error(kernel, float64 reference), per op and
# output (each derived in its family's numerics module); for scales the same bound applies elementwise.
TOLERANCES: dict[str, dict[str, float]] = {op: m.TOLERANCES for op, m in _NUMERICS.items()}
# How close (relative) the exact value must be to a rounding midpoint for a one-step difference to be a
# rounding effect, for the families whose output is rounded from an fp32 value (their modules say why).
MIDPOINT_WINDOW: dict[str, float] = {
    op: m.MIDPOINT_WINDOW for op, m in _NUMERICS.items() if hasattr(m, "MIDPOINT_WINDOW")
}
# How a harness holds each tensor dtype of a family's record: bf16 as uint16 bits, FP8 as uint8 codes.
_HOLD = {"bf16": np.uint16, "fp8_e4m3fn": np.uint8, "f32": np.float32, "i32": np.int32}


def numerics(op: str) -> ModuleType:
    """The family's numerics module (netra/certify/numerics/<op>.py)."""
    return _NUMERICS[op]


def _check(op: str, params: dict[str, int]) -> None:
    if op not in FAMILIES:
        raise ValueError(f"unknown op {op!r}; one of {', '.join(OPS)}")
    missing = [p for p in FAMILIES[op].params if p not in params]
    if missing:
        raise ValueError(f"{op}: missing parameters {missing}")
    if op in ("fp8_group_quant", "silu_mul_fp8_quant", *FUSED_QUANT) and params["group"] != ref.FP8_GROUP:
        raise ValueError(f"{op}: group must be {ref.FP8_GROUP}")


# --------------------------------------------------------------------------------------------
# Sizes
# --------------------------------------------------------------------------------------------


def outputs(op: str, params: dict[str, int], rows: int) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """What a harness allocates for a kernel's outputs, by argument name in ABI order (bf16 as uint16,
    FP8 as uint8): the family's record (netra/core/families/) at these parameters and rows."""
    _check(op, params)
    fam = FAMILIES[op]
    env = fam.env(params, rows)
    return {o.name: (np.dtype(_HOLD[o.dtype]), o.dims(env)) for o in fam.kernel_outputs}


def bytes_moved(op: str, params: dict[str, int], rows: int, inputs: Mapping[str, Any] | None = None) -> int:
    """The fewest bytes the op must move: each input read once, each output written once (the record's).
    With `inputs`, the record's derived names (a routed MoE's experts hit) are those of these inputs, as
    the family's numerics count them (`derived`), not the record's bound for any input."""
    _check(op, params)
    mod = numerics(op)
    given = mod.derived(params, inputs) if inputs is not None and hasattr(mod, "derived") else None
    return FAMILIES[op].bytes_moved(params, rows, given)


# --------------------------------------------------------------------------------------------
# Test vectors, expected values, judging
# --------------------------------------------------------------------------------------------


def cases(
    op: str, params: dict[str, int], *, rows_per_block: int, large_rows: int = 8192, seed: int = 0
) -> list[Case]:
    """Every test vector for one contract: 1 row, 3 rows, a count that is not a multiple of
    rows_per_block, large_rows; values at scales 1e-3, 1 and 1e3, zeros, one huge value per group,
    exact FP8 midpoints (quantizers), tied logits (router). Deterministic in (op, params, seed)."""
    _check(op, params)
    if rows_per_block < 0 or large_rows < 1:
        raise ValueError("rows_per_block must be >= 0 (0: the grid does not read it) and large_rows positive")
    rows_per_block = max(rows_per_block, 1)
    result: list[Case] = _NUMERICS[op].cases(params, rows_per_block, large_rows, seed)
    return result


_CHUNK_ROWS = 256  # the reference runs in row chunks: rows are independent, and memory stays bounded


def _by_rows(
    fn: Callable[[int, int], dict[str, np.ndarray]], rows: int, workers: int
) -> dict[str, np.ndarray]:
    spans = [(a, min(a + _CHUNK_ROWS, rows)) for a in range(0, rows, _CHUNK_ROWS)]
    if workers > 1 and len(spans) > 1:
        # numpy releases the GIL inside its array loops, so threads over row chunks run in parallel
        with ThreadPoolExecutor(max_workers=workers) as ex:
            parts = interrupts.pool_map(ex, lambda ab: fn(*ab), spans)
    else:
        parts = [fn(a, b) for a, b in spans]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def expected(op: str, params: dict[str, int], case: Case, *, workers: int = 1) -> dict[str, np.ndarray]:
    """The float64 reference for a case, plus what judging needs (computed once, shared by tactics).

    workers > 1 computes row chunks in that many threads; the result does not depend on it."""
    _check(op, params)
    mod = _NUMERICS[op]
    return _by_rows(lambda a, b: mod.expected(params, case, a, b), case.rows, workers)


def expected_rows(op: str, params: dict[str, int], case: Case, a: int, b: int) -> dict[str, np.ndarray]:
    """The reference of dispatch rows a..b of a whole case (one worker's span): the family's numerics
    index the inputs themselves (a routed MoE's experts are not rows), and an output indexed by pair has
    topk rows per token."""
    _check(op, params)
    result: dict[str, np.ndarray] = _NUMERICS[op].expected(params, case, a, b)
    return result


def _shape_errors(op: str, params: dict[str, int], case: Case, got: dict[str, np.ndarray]) -> list[str]:
    errs = []
    for name, (dt, shape) in outputs(op, params, case.rows).items():
        a = got.get(name)
        if a is None:
            errs.append(f"output {name} missing")
        elif a.dtype != dt or a.shape != shape:
            errs.append(f"output {name} is {a.dtype}{list(a.shape)}, expected {dt}{list(shape)}")
    return errs


def judge(
    op: str,
    params: dict[str, int],
    case: Case,
    got: dict[str, np.ndarray],
    exp: dict[str, np.ndarray] | None = None,
    *,
    accumulator_bits: int = FP32_ACCUMULATOR_BITS,
) -> Verdict:
    """Judge a kernel's outputs for one case; exp is expected(op, params, case) if already computed.

    accumulator_bits: the significant bits the candidate's tensor core keeps of each instruction's sum (its
    table entry's; fp32 unless it says less). A reference carries the bounds of another accumulation under
    keys suffixed "@bits"; those replace the plain keys for such a candidate."""
    _check(op, params)
    errs = _shape_errors(op, params, case, got)
    if errs:
        return Verdict(False, math.inf, 0.0, {}, "; ".join(errs))
    if exp is None:
        exp = expected(op, params, case)
    verdict: Verdict = _NUMERICS[op].judge(params, for_accumulator(op, exp, accumulator_bits), got)
    return verdict


def for_accumulator(op: str, exp: dict[str, np.ndarray], bits: int) -> dict[str, np.ndarray]:
    """The reference's keys as the judge of a candidate accumulating with `bits` significant bits reads
    them: the plain keys (fp32), those suffixed "@bits" in their place; a family whose reference has no
    bounds for `bits` is refused by name."""
    plain = {k: v for k, v in exp.items() if "@" not in k}
    if bits == FP32_ACCUMULATOR_BITS:
        return plain
    model = {k: exp[common.accumulator_key(k, bits)] for k in plain if common.accumulator_key(k, bits) in exp}
    if not model:
        raise ValueError(f"{op}: the reference has no bounds for accumulator_bits {bits} (its numerics module "
                         "derives them for the accumulations its templates declare)")  # fmt: skip
    return {**plain, **model}


bits_f32 = common.bits_f32  # bf16 bits of float32 values (what the tests build inputs with)
