"""The table format, declared once: a table file, a certified table and an evidence file, each record's
fields with their types, bounds and meaning (`table_format`, `evidence_format`), as the nodes of a
strict schema (netra.core.schema).

This declaration is the single source of the format: the readers check through it
(netra.runtime.tables.schema), the typed model (netra.runtime.tables.model) is what they make of it,
and the shipped JSON Schema files and the field tables of docs/tables.md are generated from it
(`python -m netra.runtime.tables.generated --write`; tests/test_table_format.py fails when a committed
one differs). Memory checkers (sanitizer) and profiler evidence are what certify ran besides the judge
and the timing: "skipped" (by an option, or not run because the candidate failed conformance) and
"unavailable" (the vendor has no such tool) are never "clean", so such a candidate is at most
`verified` (netra.certify.ranking).
"""

from __future__ import annotations

import re
from functools import cache

from netra.core import schema as s
from netra.core.types import CERTIFICATIONS, MATURITIES
from netra.runtime.tables.model import PROFILE_RESULTS, SANITIZER_RESULTS, SCHEMA

_NAME = re.compile(r"[a-z][a-z0-9_]*")
_SHA = s.sha256()
_US = s.Num(min=0, max=1e9)
_TOOL_NAME = s.Str(pattern=re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*"), max_len=64)
_ARTIFACT = s.Str(pattern=re.compile(r"netra_[a-z0-9_]+"), max_len=128)


def _targets(what: str) -> tuple[str, ...]:
    from netra import targets

    return {"vendor": targets.vendor_names, "loader": targets.loader_names}[what]()


def _families() -> tuple[str, ...]:
    from netra.core.ops import FAMILIES

    return tuple(sorted(FAMILIES))


_CLASS = s.Registered("class", s.Str(pattern=_NAME, max_len=32),
                      doc="a registered GPU class (netra.targets); netra.cli.schemas.load makes it their enum")  # fmt: skip
_TOOLCHAIN = s.Table(
    {
        "flavour": s.req(s.Str(max_len=32), "the toolchain's flavour"),
        "version": s.req(s.Str(max_len=64), "its version"),
    },
    name="toolchain",
)
_TIMING = s.Table(
    {
        "rows": s.Int(min=1, max=1 << 24),
        "median_us": _US,
        "p10_us": s.maybe(_US),
        "p90_us": s.maybe(_US),
        "runs": s.maybe(s.Int(min=1, max=1 << 24)),
        "bytes": s.maybe(s.Int(min=0, max=1 << 40)),
        "tb_per_s": s.maybe(s.Num(min=0, max=1e3)),
    },
    name="timing",
)
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
    name="check",
)
_SANITIZER = s.Table(
    {
        "result": s.Str(choices=SANITIZER_RESULTS),
        "note": s.Str(max_len=300, empty=True),
        "text_sha256": s.Nullable(_SHA),
        "checks": s.ListOf(_CHECK, max_len=16, unique="check"),
    },
    name="sanitizer",
    doc="The vendor's memory checkers over the candidate's conformance cases (docs/certify.md). skipped and "
    "unavailable are never clean: such a candidate is at most verified.",
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
    },
    name="profile",
    doc="The vendor's profiler over one launch at the prefill row count with the timing inputs "
    "(docs/certify.md).",
)
_BASELINE = s.Table(
    {"rows": s.Int(min=1, max=1 << 24), "impl": s.Str(max_len=64), "median_us": _US}, name="baseline"
)
_RUN_INDEX = s.req(s.Int(min=0, max=1000), "index into `certification.runs`")
_TEXT = s.req(
    _SHA, "the machine code this evidence was measured on: must equal the candidate's (and so the lock's)"
)
_PASSED = s.req(s.Bool(), "every case passed")
_REASON = s.req(
    s.Str(max_len=600, empty=True), "otherwise the first failure, one line (required when failed)"
)
_DEVIATION = s.req(
    s.Nullable(s.Num(min=0)), "the largest measured relative deviation (`null` when not finite)"
)
_TOLERANCE = s.req(s.Num(min=0, max=1), "the contract's bound (netra.certify.conformance.TOLERANCES)")
_RECORD = s.Table(
    {
        "run": _RUN_INDEX,
        "text_sha256": _TEXT,
        "passed": _PASSED,
        "reason": _REASON,
        "reference": s.req(s.Const("float64"), "compared with `netra/certify/reference.py`"),
        "max_rel_deviation": _DEVIATION,
        "tolerance": _TOLERANCE,
        "cases": s.req(s.Int(min=0, max=1 << 20), "cases run"),
        "counts": s.req(
            s.MapOf(s.Str(pattern=_NAME, max_len=64), s.Int(min=0, max=1 << 40), max_len=32),
            "counted rounding-boundary cases and checks (e.g. `fp8_one_step_at_midpoint`)",
        ),
        "timings": s.req(
            s.ListOf(_TIMING, max_len=64, unique="rows"),
            "per row count `{rows, median_us, p10_us, p90_us, runs, bytes, tb_per_s}` (CUDA-graph replay)",
        ),
        "baselines": s.maybe(
            s.ListOf(_BASELINE, max_len=64, unique=lambda b: (b["rows"], b["impl"])),
            "`{rows, impl, median_us}`",
        ),
        "sanitizer": s.req(
            _SANITIZER,
            "the vendor's memory checkers over the conformance cases (docs/certify.md): `result` (`clean`, "
            "`findings`, `skipped`, `unavailable`), `note` (why, for skipped and unavailable), `text_sha256` "
            "(the machine code the checkers ran: the candidate's; `null` when none ran) and per check "
            "`{check, tool, version, result, findings, first, launches}` (`first`: the first finding's "
            "one-line summary)",
        ),
        "profile": s.req(
            _PROFILE,
            "the vendor's profiler over one launch at the prefill row count with the timing inputs: "
            "`result` (`measured`, `skipped`, `unavailable`), `note`, `text_sha256`, `tool`, `version`, "
            "`rows`, `dram_throughput_pct` (% of peak sustained), `duration_us`, `dram_read_bytes`, "
            "`dram_write_bytes` (all `null` unless measured)",
        ),
    },
    name="hardware",
    doc="A candidate's whole hardware evidence record, as `netra certify` measured it (required for "
    "`accepted`).",
)
_SUMMARY = s.Table(
    {
        "run": _RUN_INDEX,
        "text_sha256": _TEXT,
        "passed": _PASSED,
        "reason": _REASON,
        "max_rel_deviation": _DEVIATION,
        "tolerance": _TOLERANCE,
        "sanitizer": s.req(s.Str(choices=SANITIZER_RESULTS), "the memory checkers' result"),
        "profile": s.req(s.Str(choices=PROFILE_RESULTS), "the profiler's result"),
    },
    name="summary",
    doc="What the candidate's maturity rests on: its hardware evidence record (evidence.schema.json), "
    "summarized; the record must say exactly this (netra.runtime.tables.read_certified).",
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
    name="kernarg_arg",
)
_AXIS = s.OneOf(
    (
        s.Int(min=1, max=1 << 31),
        s.Table({"rows_per_block": s.Int(min=1, max=1 << 16)}),
        s.Table({"rows": s.Str(max_len=200)}),
    ),
    'a positive integer, {"rows_per_block": n} or {"rows": "<expression of rows>"}',
)
_STATIC = s.Table(
    {
        "checks": s.ListOf(s.Str(pattern=_NAME, max_len=32), max_len=64),
        "toolchain": _TOOLCHAIN,
    }
)
_ACCEPTED = (  # what JSON Schema can say of an accepted candidate's summary (rule 1 of docs/tables.md)
    "allOf",
    [{
        "if": {"properties": {"maturity": {"const": "accepted"}}},
        "then": {"properties": {"evidence": {"properties": {"hardware": {
            "type": "object", "properties": {"passed": {"const": True}, "sanitizer": {"const": "clean"}},
        }}}}},
    }],
)  # fmt: skip
_STATIC_TABLE = (  # ... and of a static table: no runs, no hardware evidence, nothing accepted
    "allOf",
    [{
        "if": {"properties": {"certification": {"properties": {"kind": {"const": "static"}}}}},
        "then": {"properties": {
            "certification": {"properties": {"runs": {"maxItems": 0}}},
            "entries": {"items": {"properties": {"candidates": {"items": {"properties": {
                "maturity": {"not": {"const": "accepted"}},
                "evidence": {"properties": {"hardware": {"type": "null"}}},
            }}}}}},
        }},
    }],
)  # fmt: skip


@cache
def _candidate(form: str) -> s.Table:
    whole = form == "certified"
    hardware = _RECORD if whole else _SUMMARY
    return s.Table(
        {
            "tactic": s.req(s.Str(pattern=re.compile(r"[a-z0-9]+"), max_len=16),
                            "tactic name, unique within the entry (`b256`)"),
            "artifact": s.req(_ARTIFACT, "the lock's artifact name; the code object's identity"),
            "file": s.req(s.Str(pattern=re.compile(r"[a-z0-9_]+/netra_[a-z0-9_]+\.[a-z]+"), max_len=160),
                          "path of the code object relative to the package data, `<class>/<artifact>.<ext>`; "
                          "equals the lock's"),
            "symbol": s.req(s.Str(pattern=re.compile(r"[A-Za-z_][A-Za-z0-9_]*"), max_len=128),
                            "kernel symbol to look up in the loaded module"),
            "text_sha256": s.req(_SHA, "sha256 of the code object's `.text` (machine code); equals the lock's"),
            "launch": s.Table(
                {
                    "block": s.req(s.ListOf(s.Int(min=1, max=1024), min_len=3, max_len=3),
                                   "`[x, y, z]` threads per block"),
                    "grid": s.req(s.ListOf(_AXIS, min_len=3, max_len=3),
                                  'three axes, each a positive integer, `{"rows_per_block": n}` meaning '
                                  '`ceil(rows / n)` (axis 0 only), or `{"rows": "<expression>"}`, an '
                                  "expression of `rows` alone (netra/core/expr.py): the family record's grid "
                                  "with the contract bound, e.g. `min(128, rows * 8)` over a routed MoE's "
                                  "experts hit. `rows` is the call's dispatch value (the flattened token "
                                  "dimension; a routed MoE's tokens); `rows = 0` gives a zero-size grid"),
                    "dynamic_lds_bytes": s.req(s.Int(min=0, max=1 << 20),
                                               "dynamic LDS / shared memory to request at launch (0 for "
                                               "today's kernels)"),
                }
            ),
            "lds_bytes": s.req(s.Int(min=0, max=1 << 20), "static LDS the descriptor requests; equals the lock's"),
            "accumulator_bits": s.maybe(s.Int(min=8, max=24),
                                        "significant bits the kernel's tensor core keeps of each partial sum, "
                                        "where fewer than fp32's 24 (wgmma e4m3 on sm_90a: 14); absent: 24. "
                                        "Its judge's bounds are that accumulation's (its template manifest's "
                                        "`accumulator_bits`)"),
            "workspace_bytes": s.req(s.Int(min=0, max=1 << 40), "device scratch the caller must provide (0 today)"),
            "kernarg": s.Table(
                {
                    "size": s.req(s.Int(min=0, max=4096),
                                  "bytes of the kernel argument segment; equals the lock's `kernarg_bytes`"),
                    "args": s.req(s.ListOf(_KERNARG_ARG, max_len=64, unique="name"),
                                  "`{name, offset, size, kind, type}` in offset order. `kind`: "
                                  "`global_buffer` (an 8-byte device pointer, `type` ends in `*`, e.g. "
                                  "`bf16*`) or `by_value` (`type` one of `u8 u16 u32 u64 i8 i16 i32 i64 f16 "
                                  "f32 f64`, `size` to match). Offsets are naturally aligned and increasing; "
                                  "gaps are zero padding"),
                }
            ),
            "maturity": s.req(s.Str(choices=MATURITIES), "`rejected` < `experiment` < `verified` < `accepted`"),
            "evidence": s.Table(
                {
                    "static": s.req(s.Nullable(_STATIC),
                                    "the static gate's checks that passed and the toolchain that built the "
                                    "code object, or `null`"),
                    "hardware": s.req(s.Nullable(hardware),
                                      "`null`, or the candidate's whole hardware evidence record" if whole else
                                      "`null`, or the summary of the candidate's hardware evidence record: the "
                                      "record's fields of those names, `sanitizer` and `profile` being the "
                                      "memory checkers' and the profiler's `result`"),
                }
            ),
        },
        label="artifact",
        name="candidate",
        doc="One tactic: one code object, how to launch it, its maturity and the evidence it rests on.",
        json_rules=() if whole else (_ACCEPTED,),
    )  # fmt: skip


_RUN = s.Table(
    {
        "device": s.req(s.Str(max_len=128), "the device's name"),
        "driver": s.req(s.Str(max_len=64), "the driver's version"),
        "runtime": s.req(s.Str(max_len=64), "the vendor's runtime and its version"),
        "toolchain": s.req(_TOOLCHAIN, "`{flavour, version}` that built the code objects"),
        "clocks": s.req(
            s.Nullable(s.MapOf(s.Str(pattern=_NAME, max_len=32), s.Int(min=0, max=1 << 20), max_len=8)),
            "`{max_sm_mhz, max_mem_mhz}` when the vendor's tools report them, else `null`",
        ),
        "netra": s.req(s.Str(max_len=32), "the netra version that certified"),
        "seed": s.req(s.Int(min=0, max=2**32), "the seed of the test vectors"),
        "protocol": s.req(
            s.Table(
                {
                    "rows": s.ListOf(s.Int(min=1, max=1 << 24), min_len=1, max_len=64),
                    "warmup": s.Int(min=0, max=10_000),
                    "replays": s.Int(min=1, max=100_000),
                    "prefill_rows": s.Int(min=1, max=1 << 24),
                }
            ),
            "`{rows, warmup, replays, prefill_rows}`: the row counts timed and how",
        ),
    },
    name="run",
    doc="A certification run (`certification.runs[i]`): the machine and protocol the evidence was measured with.",
)
_FALLBACK = s.Table(
    {
        "model": s.Str(max_len=128),
        "op": s.Str(max_len=64),
        "use": s.Str(max_len=300, empty=True),
        "reason": s.Str(max_len=500),
        "gpu_class": s.opt(
            s.Registered("class", s.Str(max_len=64)),
            "",
            "with contract: this class does not build that contract",
        ),
        "contract": s.opt(s.Str(max_len=300), ""),
    },
    name="fallback",
    json_rules=(("dependentRequired", {"gpu_class": ["contract"], "contract": ["gpu_class"]}),),
)
_NOT_ADMITTED = s.Table(
    {
        "tactic": s.req(
            s.Str(pattern=re.compile(r"[a-z0-9]+"), max_len=16), "the tactic, of the class and the op"
        ),
        "requires": s.req(
            s.Str(max_len=200), "the first condition of the template's `[[requires]]` it fails"
        ),
        "why": s.req(s.Str(max_len=300), "what the template needs, in words (its static_assert's message)"),
    },
    label="tactic",
    name="not_admitted",
)
_DISPATCH = s.Table(
    {"max_rows": s.Nullable(s.Int(min=1, max=1 << 31)), "tactic": s.Str(max_len=16)}, name="dispatch_rule"
)


@cache
def _entry(form: str) -> s.Table:
    return s.Table(
        {
            "contract": s.Table(
                {
                    "op": s.req(s.Registered("family", s.Str(pattern=_NAME), _families,
                                             "an op family of this netra (netra.core.ops.FAMILIES); "
                                             "netra.cli.schemas.load makes them the enum"),
                                "op family (`netra/core/ops.py`)"),
                    "params": s.req(s.MapOf(s.Str(pattern=_NAME, max_len=32), s.Int(min=0, max=2**31 - 1)),
                                    "the family's integer parameters, all of them, nothing else"),
                    "dtypes": s.req(s.MapOf(s.Str(pattern=_NAME, max_len=32), s.Str(max_len=32)),
                                    "the family's fixed semantics, copied from `netra/core/ops.py` (as "
                                    "`layout` and `quant`); a reader refuses a table whose copy differs from "
                                    "its own (a table and a runtime that disagree on what `rmsnorm` means)"),
                    "layout": s.req(s.Str(max_len=300), "as `dtypes`"),
                    "quant": s.req(s.Str(max_len=300), "as `dtypes`"),
                }
            ),
            "key": s.req(s.Str(max_len=200),
                         "`op(name=value,...)` in the family's parameter order, e.g. "
                         "`rmsnorm(hidden=4096,weight_offset=0)`: the exact-match key"),
            "candidates": s.req(
                s.ListOf(_candidate(form), min_len=1, max_len=64, unique="tactic"),
                "ranked tactics, best first: the order of `manifests/<class>/tactics.toml` until "
                "certification ranks them (docs/certify.md)",
            ),
            "dispatch": s.req(
                s.Nullable(s.ListOf(_DISPATCH, min_len=1, max_len=16)),
                '`null`, or the certified row-count rules `[{"max_rows": n, "tactic": t}, ..., '
                '{"max_rows": null, "tactic": t}]`: `Catalog.select(key, rows=r)` serves the first rule with '
                "`r <= max_rows` (the last covers every larger count). Every rule names an accepted "
                "candidate; `max_rows` increases",
            ),
            "not_admitted": s.opt(
                s.ListOf(_NOT_ADMITTED, min_len=1, max_len=64, unique="tactic"),
                [],
                "absent, or the class's tactics of the op that are no candidate because the template does not "
                "admit the contract (`{tactic, requires, why}`: the first condition of its `[[requires]]` the "
                "pair fails; docs/authoring.md); none of them is a candidate",
            ),
        },
        label="key",
        name="entry",
        doc="One exact contract and its ranked candidates.",
    )  # fmt: skip


@cache
def table_format(form: str = "table") -> s.Table:
    """The format of a table file ("table": each hardware evidence record summarized) or of a certified
    table ("certified": the table with each summary replaced by its whole record, as `join` makes it
    and `netra certify` writes it before `split`)."""
    if form not in ("table", "certified"):
        raise ValueError(f"no table form {form!r}")
    return s.Table(
        {
            "schema": s.req(s.Const(SCHEMA), "format version (the evidence file's too); a reader refuses any "
                                             "other (and `netra lock` does not carry evidence from an older one)"),
            "gpu_class": s.req(_CLASS, "the GPU class: must equal the file name"),
            "vendor": s.req(s.Registered("vendor", s.Str(pattern=_NAME), lambda: _targets("vendor"),
                                         "a registered vendor (netra.targets); netra.cli.schemas.load makes "
                                         "it their enum"), "the class's vendor"),
            "loader": s.req(s.Registered("loader", s.Str(pattern=_NAME), lambda: _targets("loader"),
                                         "a registered vendor's loader (netra.targets); netra.cli.schemas.load "
                                         "makes it their enum"),
                            "which loader runs its code objects (`netra.loaders.<loader>`)"),
            "certification": s.req(
                s.Table(
                    {
                        "kind": s.Str(choices=CERTIFICATIONS),
                        "note": s.Str(max_len=1000),
                        "runs": s.ListOf(_RUN, max_len=1000),
                    }
                ),
                "`kind`: `static` (no hardware of the class ran the kernels) or `hardware` (certified on "
                "a device of the class); `note`: one human sentence saying what that means; `runs`: the "
                "certification runs the evidence refers to (empty for a static table, and for a hardware "
                "table nothing has been certified in yet)",
            ),
            "entries": s.req(s.ListOf(_entry(form), max_len=100_000, unique="key"),
                             "one per exact contract, sorted by key"),
            "fallbacks": s.req(
                s.ListOf(_FALLBACK, max_len=10_000),
                "ops a model needs that Netra does not serve, and why (from the model manifests): "
                "`{model, op, use, reason}`, and `gpu_class`, `contract` for a contract this class does "
                "not build; a class's table carries the per-class gaps that name it. The runtime quotes "
                "`reason` in its fallback answer (`not_built` for a per-class gap)",
            ),
        },
        name="table" if form == "table" else "",
        doc="Per GPU class: each exact contract mapped to its ranked candidate tactics, their launch data, "
        "their maturity and a summary of the hardware evidence it rests on (the evidence itself is the "
        "class's evidence file, evidence.schema.json, which serving never reads). Format: docs/tables.md. "
        "Rules that compare fields (deviation within tolerance, certified .text equal to the candidate's, "
        "the maturity the evidence gives, dispatch naming accepted tactics, candidates equal to the lock, "
        "each summary equal to its evidence record) are enforced by netra.runtime.tables.parse, "
        "netra.runtime.tables.read_certified and netra.runtime.tables.against_lock.",
        json_rules=(_STATIC_TABLE,),
    )  # fmt: skip


@cache
def evidence_format() -> s.Table:
    """The format of a class's evidence file: every whole hardware evidence record, by artifact."""
    return s.Table(
        {
            "schema": s.req(s.Const(SCHEMA), "format version (the table's)"),
            "gpu_class": s.req(_CLASS, "the GPU class: must be its table's"),
            "hardware": s.req(s.MapOf(_ARTIFACT, _RECORD, max_len=100_000),
                              "one record per candidate whose table entry summarizes one, by artifact"),
        },
        name="evidence",
        doc="Per GPU class certified on hardware: each candidate's whole hardware evidence record, by "
        "artifact, as `netra certify` measured it (conformance against the float64 reference, timings, "
        "memory checkers, profiler), bound to the machine code (.text sha256) it ran. The class's table "
        "(table.schema.json) summarizes each record; serving never reads this file. Format: "
        "docs/tables.md. Rules that compare fields (deviation within tolerance, the memory-checker result "
        "its checks give, the tools' .text equal to the record's, one record per summary and each equal "
        "to it) are enforced by netra.runtime.tables.read_certified.",
    )  # fmt: skip


def records() -> dict[str, s.Table]:
    """The records of the format docs/tables.md gives field by field, by the name of their block."""
    return {"table": table_format(), "entry": _entry("table"), "candidate": _candidate("table"), "run": _RUN,
            "evidence": evidence_format(), "record": _RECORD}  # fmt: skip
