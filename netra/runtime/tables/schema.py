"""The strict schemas of a table file, a certified table and an evidence file, and their readers."""

from __future__ import annotations

import re

from netra.core import schema as s
from netra.core.ops import FAMILIES
from netra.core.types import CERTIFICATIONS, MATURITIES
from netra.errors import TableError
from netra.runtime.tables.model import HINT, SCHEMA

_SHA = s.sha256()
_NAME = re.compile(r"[a-z][a-z0-9_]*")
_US = s.Num(min=0, max=1e9)
_TOOLCHAIN = s.Table({"flavour": s.Str(max_len=32), "version": s.Str(max_len=64)})
_TIMING = s.Table(
    {
        "rows": s.Int(min=1, max=1 << 24),
        "median_us": _US,
        "p10_us": s.maybe(_US),
        "p90_us": s.maybe(_US),
        "runs": s.maybe(s.Int(min=1, max=1 << 24)),
        "bytes": s.maybe(s.Int(min=0, max=1 << 40)),
        "tb_per_s": s.maybe(s.Num(min=0, max=1e3)),
    }
)
# Memory checkers (sanitizer) and profiler evidence: what certify ran besides the judge and the timing.
# "skipped" (by an option, or not run because the candidate failed conformance) and "unavailable" (the
# vendor has no such tool) are never "clean": such a candidate is at most `verified` (netra.certify.ranking).
SANITIZER_RESULTS = ("clean", "findings", "skipped", "unavailable")
PROFILE_RESULTS = ("measured", "skipped", "unavailable")
_TOOL_NAME = s.Str(pattern=re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*"), max_len=64)
_CHECK = s.Table(
    {
        "check": s.Str(pattern=_NAME, max_len=32),
        "tool": s.Nullable(_TOOL_NAME),
        "version": s.Nullable(s.Str(max_len=64)),
        "result": s.Str(choices=SANITIZER_RESULTS),
        "findings": s.Int(min=0, max=1 << 40),
        "first": s.Str(max_len=300, empty=True),
        "launches": s.Int(min=0, max=1 << 20),
    },
    label="check",
)
_SANITIZER = s.Table(
    {
        "result": s.Str(choices=SANITIZER_RESULTS),
        "note": s.Str(max_len=300, empty=True),
        "text_sha256": s.Nullable(_SHA),
        "checks": s.ListOf(_CHECK, max_len=16, unique="check"),
    }
)
_PROFILE = s.Table(
    {
        "result": s.Str(choices=PROFILE_RESULTS),
        "note": s.Str(max_len=300, empty=True),
        "text_sha256": s.Nullable(_SHA),
        "tool": s.Nullable(_TOOL_NAME),
        "version": s.Nullable(s.Str(max_len=64)),
        "rows": s.Nullable(s.Int(min=1, max=1 << 24)),
        "dram_throughput_pct": s.Nullable(s.Num(min=0, max=1000)),
        "duration_us": s.Nullable(_US),
        "dram_read_bytes": s.Nullable(s.Int(min=0, max=1 << 50)),
        "dram_write_bytes": s.Nullable(s.Int(min=0, max=1 << 50)),
    }
)
_BASELINE = s.Table({"rows": s.Int(min=1, max=1 << 24), "impl": s.Str(max_len=64), "median_us": _US})
_HARDWARE = s.Table(
    {
        "run": s.Int(min=0, max=1000),
        "text_sha256": _SHA,
        "passed": s.Bool(),
        "reason": s.Str(max_len=600, empty=True),
        "reference": s.Const("float64"),
        "max_rel_deviation": s.Nullable(s.Num(min=0)),
        "tolerance": s.Num(min=0, max=1),
        "cases": s.Int(min=0, max=1 << 20),
        "counts": s.MapOf(s.Str(pattern=_NAME, max_len=64), s.Int(min=0, max=1 << 40), max_len=32),
        "timings": s.ListOf(_TIMING, max_len=64, unique="rows"),
        "baselines": s.maybe(s.ListOf(_BASELINE, max_len=64, unique=lambda b: (b["rows"], b["impl"]))),
        "sanitizer": _SANITIZER,
        "profile": _PROFILE,
    }
)
# The table's summary of a candidate's hardware evidence record: what its maturity rests on.
SUMMARY_FIELDS = ("run", "text_sha256", "passed", "reason", "max_rel_deviation", "tolerance")
_SUMMARY = s.Table(
    {
        "run": s.Int(min=0, max=1000),
        "text_sha256": _SHA,
        "passed": s.Bool(),
        "reason": s.Str(max_len=600, empty=True),
        "max_rel_deviation": s.Nullable(s.Num(min=0)),
        "tolerance": s.Num(min=0, max=1),
        "sanitizer": s.Str(choices=SANITIZER_RESULTS),
        "profile": s.Str(choices=PROFILE_RESULTS),
    }
)
_KERNARG_ARG = s.Table(
    {
        "name": s.Str(pattern=re.compile(r"[A-Za-z_][A-Za-z0-9_]*"), max_len=64),
        "offset": s.Int(min=0, max=4096),
        "size": s.Int(min=1, max=8),
        "kind": s.Str(choices=("by_value", "global_buffer")),
        "type": s.Str(max_len=16),
    },
    label="name",
)
_AXIS = s.OneOf(
    (
        s.Int(min=1, max=1 << 31),
        s.Table({"rows_per_block": s.Int(min=1, max=1 << 16)}),
        s.Table({"rows": s.Str()}),
    ),
    'a positive integer, {"rows_per_block": n} or {"rows": "<expression of rows>"}',
)


def _candidate_schema(hardware: s.Table) -> s.Table:
    return s.Table(
        {
            "tactic": s.Str(pattern=re.compile(r"[a-z0-9]+"), max_len=16),
            "artifact": s.Str(pattern=re.compile(r"netra_[a-z0-9_]+"), max_len=128),
            "file": s.Str(pattern=re.compile(r"[a-z0-9_]+/netra_[a-z0-9_]+\.[a-z]+"), max_len=160),
            "symbol": s.Str(pattern=re.compile(r"[A-Za-z_][A-Za-z0-9_]*"), max_len=128),
            "text_sha256": _SHA,
            "launch": s.Table(
                {
                    "block": s.ListOf(s.Int(min=1, max=1024), min_len=3, max_len=3),
                    "grid": s.ListOf(_AXIS, min_len=3, max_len=3),
                    "dynamic_lds_bytes": s.Int(min=0, max=1 << 20),
                }
            ),
            "lds_bytes": s.Int(min=0, max=1 << 20),
            "workspace_bytes": s.Int(min=0, max=1 << 40),
            "kernarg": s.Table(
                {"size": s.Int(min=0, max=4096), "args": s.ListOf(_KERNARG_ARG, max_len=64, unique="name")}
            ),
            "maturity": s.Str(choices=MATURITIES),
            "evidence": s.Table(
                {
                    "static": s.Nullable(
                        s.Table(
                            {
                                "checks": s.ListOf(s.Str(pattern=_NAME, max_len=32), max_len=64),
                                "toolchain": _TOOLCHAIN,
                            }
                        )
                    ),
                    "hardware": s.Nullable(hardware),
                }
            ),
        },
        label="artifact",
    )


_RUN = s.Table(
    {
        "device": s.Str(max_len=128),
        "driver": s.Str(max_len=64),
        "runtime": s.Str(max_len=64),
        "toolchain": _TOOLCHAIN,
        "clocks": s.Nullable(s.MapOf(s.Str(pattern=_NAME, max_len=32), s.Int(min=0, max=1 << 20), max_len=8)),
        "netra": s.Str(max_len=32),
        "seed": s.Int(min=0, max=2**32),
        "protocol": s.Table(
            {
                "rows": s.ListOf(s.Int(min=1, max=1 << 24), min_len=1, max_len=64),
                "warmup": s.Int(min=0, max=10_000),
                "replays": s.Int(min=1, max=100_000),
                "prefill_rows": s.Int(min=1, max=1 << 24),
            }
        ),
    }
)
_FALLBACK = s.Table(
    {
        "model": s.Str(max_len=128),
        "op": s.Str(max_len=64),
        "use": s.Str(max_len=300, empty=True),
        "reason": s.Str(max_len=500),
        "gpu_class": s.opt(s.Str(max_len=64), ""),  # with contract: a contract this class does not build
        "contract": s.opt(s.Str(max_len=300), ""),
    }
)


def _schema(hardware: s.Table) -> s.Table:
    """The table's format; `hardware`: the summary (the file) or the whole record (a certified table)."""
    from netra import targets

    return s.Table(
        {
            "schema": s.Const(SCHEMA),
            "gpu_class": s.Str(pattern=_NAME, max_len=32),
            "vendor": s.Str(choices=targets.vendor_names()),
            "loader": s.Str(choices=targets.loader_names()),
            "certification": s.Table(
                {
                    "kind": s.Str(choices=CERTIFICATIONS),
                    "note": s.Str(max_len=1000),
                    "runs": s.ListOf(_RUN, max_len=1000),
                }
            ),
            "entries": s.ListOf(
                s.Table(
                    {
                        "contract": s.Table(
                            {
                                "op": s.Str(choices=tuple(sorted(FAMILIES))),
                                "params": s.MapOf(
                                    s.Str(pattern=_NAME, max_len=32), s.Int(min=0, max=2**31 - 1)
                                ),
                                "dtypes": s.MapOf(s.Str(pattern=_NAME, max_len=32), s.Str(max_len=32)),
                                "layout": s.Str(max_len=300),
                                "quant": s.Str(max_len=300),
                            }
                        ),
                        "key": s.Str(max_len=200),
                        "candidates": s.ListOf(
                            _candidate_schema(hardware), min_len=1, max_len=64, unique="tactic"
                        ),
                        "dispatch": s.Nullable(
                            s.ListOf(
                                s.Table(
                                    {
                                        "max_rows": s.Nullable(s.Int(min=1, max=1 << 31)),
                                        "tactic": s.Str(max_len=16),
                                    }
                                ),
                                min_len=1,
                                max_len=16,
                            )
                        ),
                    },
                    label="key",
                ),
                max_len=100_000,
                unique="key",
            ),
            "fallbacks": s.ListOf(_FALLBACK, max_len=10_000),
        }
    )


_EVIDENCE = s.Table(
    {
        "schema": s.Const(SCHEMA),
        "gpu_class": s.Str(pattern=_NAME, max_len=32),
        "hardware": s.MapOf(
            s.Str(pattern=re.compile(r"netra_[a-z0-9_]+"), max_len=128), _HARDWARE, max_len=100_000
        ),
    }
)
_readers: dict[str, s.Reader] = {}


def reader(form: str = "table") -> s.Reader:
    """The schema reader of a table file ("table"), a certified table ("certified": the table with each
    summary replaced by its whole evidence record) or an evidence file ("evidence"), made on first use
    (vendors and loaders come from the registry)."""
    got = _readers.get(form)
    if got is None:
        shape = {"table": lambda: _schema(_SUMMARY), "certified": lambda: _schema(_HARDWARE),
                 "evidence": lambda: _EVIDENCE}[form]()  # fmt: skip
        got = _readers[form] = s.Reader(shape, TableError, HINT)
    return got
