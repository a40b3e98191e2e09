"""What every family's numerics module shares: a test vector (Case), a judged case (Verdict), bf16 bit
construction, the deterministic generators, the FP8 midpoints, and how deviations make a verdict.

Imported by netra.certify.numerics.<op> (one module per op family) and netra.certify.conformance; numpy
is the certify extra's (netra.certify.conformance says so when it is missing).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from netra.certify import reference as ref
from netra.core.ops import FAMILIES
from netra.runtime.tables.model import FP32_ACCUMULATOR_BITS

U = 2.0**-24  # fp32 unit roundoff

U16 = npt.NDArray[np.uint16]

F64 = npt.NDArray[np.float64]


def accumulator_key(key: str, bits: int) -> str:
    """Where a reference keeps what the judge of a candidate accumulating with `bits` significant bits reads
    under `key`: the plain key for fp32, suffixed "@bits" otherwise (netra.certify.conformance.for_accumulator
    reads them)."""
    return key if bits == FP32_ACCUMULATOR_BITS else f"{key}@{bits}"


@dataclass(frozen=True)
class Case:
    """One test vector: inputs by kernel argument name (bf16 as uint16 bits) and runtime scalars."""

    name: str
    rows: int
    inputs: dict[str, np.ndarray]
    scalars: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    """A judged case. max_rel_deviation / tolerance are those of the output nearest its tolerance."""

    passed: bool
    max_rel_deviation: float
    tolerance: float
    counts: dict[str, int]
    reason: str
    deviations: dict[str, float] = field(default_factory=dict)


def bits_f32(a: npt.NDArray[np.float32]) -> U16:
    """bf16 bits of finite float32 values, round to nearest even (integer arithmetic: fast, exact)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    return ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def bits_exact(v: npt.ArrayLike) -> U16:
    """bf16 bits of values that must be exactly representable (constructed cases)."""
    v = np.asarray(v, dtype=np.float64)
    b = ref.f64_to_bf16_rne(v)
    if not np.array_equal(ref.bf16_to_f64(b), v):
        raise AssertionError("internal: a constructed value is not a bf16 value")
    return b


def generator(op: str, params: dict[str, int], name: str, seed: int) -> np.random.Generator:
    key = [seed, zlib.crc32(op.encode()), zlib.crc32(name.encode())]
    key += [int(params[p]) for p in FAMILIES[op].params]
    return np.random.default_rng(key)


SCALES = (1e-3, 1.0, 1e3)


def normal(rng: np.random.Generator, rows: int, n: int, scales: npt.ArrayLike) -> U16:
    """Normal values, one scale per row (cycled), as bf16 bits."""
    s = np.resize(np.asarray(scales, dtype=np.float32), rows)[:, None]
    return bits_f32(rng.standard_normal((rows, n), dtype=np.float32) * s)


def huge_per_group(rng: np.random.Generator, bits: U16, n: int, lo: float, hi: float) -> None:
    """Give each group of 128 one element of magnitude 10^[lo, hi): in place (saturation, tiny codes)."""
    rows = bits.shape[0]
    groups = n // 128
    pos = rng.integers(0, 128, size=(rows, groups)) + 128 * np.arange(groups)
    mag = 10.0 ** rng.uniform(lo, hi, size=(rows, groups))
    sign = np.where(rng.random((rows, groups)) < 0.5, -1.0, 1.0)
    np.put_along_axis(bits, pos, bits_f32((sign * mag).astype(np.float32)), axis=1)


# FP8 E4M3FN: every rounding midpoint between consecutive non-negative values up to 448 (5 significant
# bits at most, so exact in bf16 after any power-of-two scaling in range).
FP8_VALUES = ref.fp8_e4m3_decode(np.arange(0x7F, dtype=np.uint8))
FP8_MIDPOINTS = (FP8_VALUES[:-1] + FP8_VALUES[1:]) / 2


def midpoint_rows(rng: np.random.Generator, rows: int, n: int) -> tuple[F64, F64]:
    """Rows whose x / s is exactly an E4M3 midpoint (or value) for every element: per group a random
    power-of-two scale 2^k, one element +-448 * 2^k (amax, so s = 2^k exactly), the others +-m * 2^k
    with m a midpoint (3/4 of them) or a representable value. Returns (values, 2^k per element)."""
    groups = n // 128
    k = rng.integers(-24, 25, size=(rows, groups, 1)).astype(np.float64)
    m = rng.choice(FP8_MIDPOINTS, size=(rows, groups, 128))
    exact = rng.choice(FP8_VALUES[1:], size=(rows, groups, 128))
    m = np.where(rng.random((rows, groups, 128)) < 0.75, m, exact)
    m[:, :, 0] = ref.FP8_E4M3_MAX
    m = rng.permuted(m, axis=2)
    sign = np.where(rng.random(m.shape) < 0.5, -1.0, 1.0)
    return (sign * m).reshape(rows, n), np.broadcast_to(np.exp2(k), m.shape).reshape(rows, n)


def partial_rows(rpb: int) -> int:
    """A row count that is not a multiple of rows_per_block (5 when every count is)."""
    return 2 * rpb + 1 if rpb > 1 else 5


def ordinal16(bits: U16) -> npt.NDArray[np.int64]:
    mag = (bits & 0x7FFF).astype(np.int64)
    return np.where(bits & 0x8000, -mag, mag)


def first(mask: np.ndarray) -> str:
    idx = np.argwhere(mask)[0]
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def verdict(devs: dict[str, tuple[float, float]], counts: dict[str, int], failures: list[str]) -> Verdict:
    worst = max(devs, key=lambda k: devs[k][0] / devs[k][1] if devs[k][1] else math.inf)
    dev, tol = devs[worst]
    for name, (d, t) in devs.items():
        if not d <= t:  # NaN-safe
            failures.append(f"{name}: max_rel_deviation {d:.3e} > tolerance {t:.3e}")
    return Verdict(
        passed=not failures,
        max_rel_deviation=dev,
        tolerance=tol,
        counts=counts,
        reason="; ".join(failures) if failures else "ok",
        deviations={k: d for k, (d, _) in devs.items()},
    )
