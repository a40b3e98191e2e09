"""The rules the runtime relies on beyond the format: what compares fields within a candidate, an
entry and the table (evidence against maturity, tools' evidence against the machine code, dispatch,
kernarg layouts), applied to data the schema read or a vouched build wrote."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netra.core import schema as s
from netra.core.ops import FAMILIES, contract_key
from netra.core.types import ModelFallback
from netra.errors import TableError
from netra.runtime.kernarg import BY_VALUE_TYPES, KernargArg, KernargLayout
from netra.runtime.tables.model import (
    FP32_ACCUMULATOR_BITS,
    HINT,
    PROFILE_RESULTS,
    SANITIZER_RESULTS,
    Candidate,
    Dispatch,
    Entry,
    HardwareEvidence,
    Launch,
    NotAdmitted,
    Table,
)


def _kernarg_layout(
    raw: dict[str, Any], at: str, p: s.Problems, seen: dict[Any, KernargLayout]
) -> KernargLayout | None:
    """The candidate's kernarg layout; `seen` holds the layouts already read in this table by their
    content (the candidates of one op share theirs), so each is built and checked once."""
    key = (raw["size"], tuple((a["name"], a["offset"], a["size"], a["kind"], a["type"]) for a in raw["args"]))
    got = seen.get(key)
    if got is not None:
        return got
    args: list[KernargArg] = []
    end = 0
    for i, a in enumerate(raw["args"]):
        name, off, size, kind, typ = a["name"], a["offset"], a["size"], a["kind"], a["type"]
        wrong = None
        if size not in (1, 2, 4, 8) or off % size or off < end:
            wrong = f"offset {off} / size {size} must be aligned and after the previous argument"
        elif kind == "global_buffer" and (size != 8 or not typ.endswith("*")):
            wrong = f"a global_buffer is an 8-byte pointer with a type ending in '*', got {typ!r}"
        elif kind == "by_value" and (typ not in BY_VALUE_TYPES or BY_VALUE_TYPES[typ][1] != size):
            wrong = f"by_value type {typ!r} of size {size} is not one of {', '.join(BY_VALUE_TYPES)}"
        if wrong is not None:
            p.add(f"{at}.args[{i}] ({name})", wrong)
            return None
        args.append(KernargArg(name=name, offset=off, size=size, kind=kind, type=typ))
        end = off + size
    if end > raw["size"]:
        p.add(at, f"args end at byte {end}, past size {raw['size']}")
        return None
    layout = seen[key] = KernargLayout(size=raw["size"], args=tuple(args))
    return layout


def sanitizer_result(checks: list[dict[str, Any]]) -> str | None:
    """The memory-checker result of a candidate from its checks' (None when it lists none): any finding
    is "findings"; "clean" only when every check ran and was clean; else "skipped", else "unavailable"."""
    results = [c["result"] for c in checks]
    if not results:
        return None
    if "findings" in results:
        return "findings"
    if all(r == "clean" for r in results):
        return "clean"
    return "skipped" if "skipped" in results else "unavailable"


def maturity_of(passed: bool, sanitizer: str) -> str:
    """The maturity hardware evidence gives: failed conformance or a memory-checker finding rejects; only
    memory checkers that all ran and were clean make a passing candidate `accepted` (what the default
    policy serves); skipped or unavailable ones leave it `verified` (served only to a caller who opts in)."""
    if not passed or sanitizer == "findings":
        return "rejected"
    return "accepted" if sanitizer == "clean" else "verified"


def _sanitizer_rules(sz: dict[str, Any], text: str, at: str, p: s.Problems) -> None:
    ran = False
    for c in sz["checks"]:
        cat = f"{at}.checks ({c['check']})"
        r = c["result"]
        if r in ("clean", "findings"):
            ran = True
            if c["tool"] is None or c["version"] is None or c["launches"] < 1:
                p.add(cat, f"a {r!r} result names its tool and version and ran at least one launch")
        if r == "findings":
            if c["findings"] < 1 or not c["first"]:
                p.add(cat, "'findings' counts at least one and gives the first one's summary")
        elif c["findings"] or c["first"]:
            p.add(cat, f"a {r!r} result has no findings")
    derived = sanitizer_result(sz["checks"])
    if derived is None and sz["result"] not in ("skipped", "unavailable"):
        p.add(at, f"result {sz['result']!r} with no checks (only 'skipped' or 'unavailable' lists none)")
    elif derived is not None and sz["result"] != derived:
        p.add(at, f"result {sz['result']!r} but its checks give {derived!r}")
    if sz["result"] in ("skipped", "unavailable") and not sz["note"]:
        p.add(at, f"a {sz['result']!r} result says why (note)")
    _bound(sz["text_sha256"], ran, text, at, p)


def _profile_rules(pr: dict[str, Any], text: str, at: str, p: s.Problems) -> None:
    numbers = ("tool", "version", "rows", "dram_throughput_pct", "duration_us", "dram_read_bytes",
               "dram_write_bytes")  # fmt: skip
    if pr["result"] == "measured":
        missing = [k for k in numbers if pr[k] is None]
        if missing:
            p.add(at, f"a 'measured' profile lacks {', '.join(missing)}")
    else:
        given = [k for k in numbers if pr[k] is not None]
        if given:
            p.add(at, f"a {pr['result']!r} profile measured nothing, yet has {', '.join(given)}")
        if not pr["note"]:
            p.add(at, f"a {pr['result']!r} profile says why (note)")
    _bound(pr["text_sha256"], pr["result"] == "measured", text, at, p)


def _bound(sha: str | None, ran: bool, text: str, at: str, p: s.Problems) -> None:
    """Tool evidence names the machine code it ran, which must be the candidate's."""
    if ran and sha is None:
        p.add(at, "ran but does not name the machine code it ran (text_sha256)")
    elif sha is not None and sha != text:
        p.add(
            at,
            "was measured on other machine code (.text sha256) than this candidate's: the evidence is void",
        )


def _candidate(
    raw: dict[str, Any],
    at: str,
    cls: str,
    kind: str,
    nruns: int,
    p: s.Problems,
    seen: dict[Any, KernargLayout],
    whole: bool,
) -> Candidate | None:
    before = len(p.items)
    f = raw["file"]
    if not f.startswith(cls + "/"):
        p.add(at, f"file {f!r} must be under {cls}/")
    ev = raw["evidence"]
    hw_raw = ev["hardware"]
    hw = None
    if hw_raw is not None:
        sz, pr = hw_raw["sanitizer"], hw_raw["profile"]
        if not whole and (sz not in SANITIZER_RESULTS or pr not in PROFILE_RESULTS):
            raise ValueError("not a summary")  # only unread (vouched) data gets here: the full read names it
        hw = HardwareEvidence.of(hw_raw) if whole else HardwareEvidence(
            run=hw_raw["run"], text_sha256=hw_raw["text_sha256"], passed=hw_raw["passed"],
            reason=hw_raw["reason"], max_rel_deviation=hw_raw["max_rel_deviation"],
            tolerance=hw_raw["tolerance"], sanitizer=sz, profile=pr,
        )  # fmt: skip
        if kind != "hardware":
            p.add(at, f"hardware evidence in a table certified {kind!r}")
        if hw.run >= nruns:
            p.add(at, f"evidence.hardware.run {hw.run} names no entry of certification.runs")
        if hw.text_sha256 != raw["text_sha256"]:
            p.add(at, "evidence.hardware was certified with other machine code (.text sha256) than this "
                      "candidate's: the certification is void")  # fmt: skip
        deviation_ok = hw.max_rel_deviation is not None and hw.max_rel_deviation <= hw.tolerance
        if hw.passed and not deviation_ok:
            p.add(at, f"passed with max_rel_deviation {hw.max_rel_deviation} above tolerance {hw.tolerance}")
        if not hw.passed and not hw.reason:
            p.add(at, "a failed certification must say why (evidence.hardware.reason)")
        if whole:
            # The tools' evidence is bound to the same machine code; when the whole evidence names other
            # code, that one problem says it.
            text = hw.text_sha256
            _sanitizer_rules(sz, text, f"{at}.evidence.hardware.sanitizer", p)
            _profile_rules(pr, text, f"{at}.evidence.hardware.profile", p)
        if hw.sanitizer == "findings" and not hw.reason:
            p.add(at, "a memory-checker finding rejects the candidate and says so (evidence.hardware.reason)")
    m = raw["maturity"]
    if m == "accepted":
        if kind != "hardware":
            p.add(at, f"claims 'accepted' in a table certified {kind!r}, not on hardware")
        elif hw is None:
            p.add(at, "claims 'accepted' without hardware evidence")
        elif not hw.passed:
            p.add(at, "claims 'accepted' but its hardware evidence failed")
        elif whole and not hw_raw["timings"]:
            p.add(at, "claims 'accepted' without timings")
        elif hw.sanitizer != "clean":
            p.add(at, f"claims 'accepted' but its memory-checker evidence is {hw.sanitizer!r}, not 'clean': "
                      "a candidate the memory checkers did not pass is at most 'verified'")  # fmt: skip
    elif kind == "hardware" and hw is not None:
        if m != maturity_of(hw.passed, hw.sanitizer):
            p.add(at, f"maturity {m!r} but its hardware evidence gives {maturity_of(hw.passed, hw.sanitizer)!r} "
                      f"(passed {hw.passed}, memory checkers {hw.sanitizer!r})")  # fmt: skip
    elif m == "verified" and kind == "hardware":
        p.add(at, "'verified' in a hardware-certified class is a candidate that passed on the device but "
                  "whose memory-checker evidence is skipped or unavailable; this one has no hardware evidence")  # fmt: skip
    launch = raw["launch"]
    axes: list[int | tuple[str, int] | tuple[str, str]] = []
    for a in launch["grid"]:
        if isinstance(a, int):
            axes.append(a)
        elif "rows_per_block" in a:
            axes.append(("rows", a["rows_per_block"]))
        else:
            axes.append(("expr", a["rows"]))
            problem = _rows_expression(a["rows"])
            if problem:
                p.add(f"{at}.launch.grid", problem)
    per_block = [i for i, a in enumerate(axes) if isinstance(a, tuple) and a[0] == "rows"]
    if not any(isinstance(a, tuple) for a in axes) or per_block not in ([], [0]):
        p.add(
            f"{at}.launch.grid",
            'some axis must depend on rows: {"rows_per_block": n} (axis 0 only) or {"rows": "<expression>"}',
        )
    kernarg = _kernarg_layout(raw["kernarg"], f"{at}.kernarg", p, seen)
    if len(p.items) != before or kernarg is None:
        return None
    b = launch["block"]
    return Candidate(
        tactic=raw["tactic"], artifact=raw["artifact"], file=f, symbol=raw["symbol"],
        text_sha256=raw["text_sha256"], maturity=m,
        launch=Launch((b[0], b[1], b[2]), tuple(axes), launch["dynamic_lds_bytes"]),
        lds_bytes=raw["lds_bytes"], workspace_bytes=raw["workspace_bytes"], kernarg=kernarg,
        evidence=ev, hardware=hw, accumulator_bits=raw.get("accumulator_bits", FP32_ACCUMULATOR_BITS),
    )  # fmt: skip


def _unique(data: dict[str, Any]) -> bool:
    """Every entry's key once, and every tactic once in its entry (the format's `unique` lists)."""
    keys = [e["key"] for e in data["entries"]]
    if len(set(keys)) != len(keys):
        return False
    for e in data["entries"]:
        tactics = [c["tactic"] for c in e["candidates"]]
        if len(set(tactics)) != len(tactics):
            return False
    return True


def _rules(d: Any, where: str, gpu_class: str | None, *, whole: bool) -> Table:
    """The table's rules over data in the format (read by the schema, or vouched for by hash); `whole`:
    a certified table, whose candidates carry whole evidence records (their rules are checked too)."""
    p = s.Problems(where)
    cls, kind, nruns = _header(d, gpu_class, p)
    entries: dict[str, Entry] = {}
    artifacts: set[str] = set()
    layouts: dict[Any, KernargLayout] = {}
    for i, e in enumerate(d["entries"]):
        entry = _entry(e, f"entries[{i}] ({e['key']})", cls, kind, nruns, p, layouts, whole, artifacts)
        if entry is not None:
            entries[entry.key] = entry
    p.raise_as(TableError, HINT)
    return _table(d, entries)


def _header(d: Any, gpu_class: str | None, p: s.Problems) -> tuple[str, str, int]:
    """The table-wide rules: its class, vendor and loader, its kind of certification and its runs."""
    from netra import targets

    cls = d["gpu_class"]
    if gpu_class is not None and cls != gpu_class:
        p.add("gpu_class", f"{cls!r} but the file is the table of {gpu_class!r}")
    if targets.known(cls):
        v = targets.get(cls).vendor
        if (v.name, v.loader) != (d["vendor"], d["loader"]):
            p.add("vendor", f"{cls} is vendor/loader {v.name}/{v.loader}, not {d['vendor']}/{d['loader']}")
    kind = d["certification"]["kind"]
    runs = d["certification"]["runs"]
    if kind == "static" and runs:
        p.add("certification.runs", "a static table has no hardware runs")
    return cls, kind, len(runs)


def _entry(
    e: dict[str, Any],
    at: str,
    cls: str,
    kind: str,
    nruns: int,
    p: s.Problems,
    layouts: dict[Any, KernargLayout],
    whole: bool,
    artifacts: set[str] | None,
) -> Entry | None:
    """One entry held to the rules (None when its contract is not the family's); `artifacts`: the
    names of the entries read before it (None: the caller checks that no artifact is in two entries)."""
    c = e["contract"]
    fam = FAMILIES[c["op"]]
    if set(c["params"]) != set(fam.params):
        p.add(at, f"{c['op']} params must be exactly {', '.join(fam.params)}")
        return None
    if (c["dtypes"], c["layout"], c["quant"]) != (fam.dtypes, fam.layout, fam.quant):
        p.add(at, f"{c['op']} dtypes/layout/quant differ from this netra's definition of the family")
    key = contract_key(c["op"], c["params"])
    if e["key"] != key:
        p.add(at, f"key {e['key']!r} is not the contract's key {key!r}")
    cands = []
    for j, r in enumerate(e["candidates"]):
        cat = f"{at}.candidates[{j}] ({r['artifact']})"
        if artifacts is not None:
            if r["artifact"] in artifacts:
                p.add(cat, f"artifact {r['artifact']} appears in more than one entry")
            artifacts.add(r["artifact"])
        cand = _candidate(r, cat, cls, kind, nruns, p, layouts, whole)
        if cand is not None:
            cands.append(cand)
    dispatch = tuple(Dispatch(x["max_rows"], x["tactic"]) for x in (e["dispatch"] or []))
    _check_dispatch(dispatch, cands, at, p)
    absent = tuple(NotAdmitted(x["tactic"], x["requires"], x["why"]) for x in e.get("not_admitted", []))
    both = sorted({x.tactic for x in absent} & {r["tactic"] for r in e["candidates"]})
    if both:
        p.add(at, f"tactic {both[0]} is both a candidate and not admitted")
    return Entry(key, c["op"], dict(c["params"]), tuple(cands), dispatch, absent)


def _table(d: Any, entries: Mapping[str, Entry]) -> Table:
    return Table(
        gpu_class=d["gpu_class"], vendor=d["vendor"], loader=d["loader"],
        certification=d["certification"]["kind"], note=d["certification"]["note"],
        runs=tuple(d["certification"]["runs"]), entries=entries,
        fallbacks=tuple(ModelFallback(**f) for f in d["fallbacks"]),
    )  # fmt: skip


def _check_dispatch(dispatch: tuple[Dispatch, ...], cands: list[Candidate], at: str, p: s.Problems) -> None:
    if not dispatch:
        return
    accepted = {c.tactic for c in cands if c.maturity == "accepted"}
    last = 0
    for i, d in enumerate(dispatch):
        if d.tactic not in accepted:
            p.add(f"{at}.dispatch[{i}]", f"tactic {d.tactic!r} is not an accepted candidate of this entry")
        if d.max_rows is None:
            if i != len(dispatch) - 1:
                p.add(f"{at}.dispatch[{i}]", "only the last rule may have max_rows null")
        elif d.max_rows <= last:
            p.add(f"{at}.dispatch[{i}]", "max_rows must increase")
        else:
            last = d.max_rows
    if dispatch[-1].max_rows is not None:
        p.add(f"{at}.dispatch", "the last rule must have max_rows null (every larger row count)")


def _rows_expression(text: str) -> str | None:
    """Why a grid axis's expression is not one of rows alone (netra.core.expr), or None."""
    from netra.core import expr
    from netra.errors import LaunchError

    try:
        names = expr.names(text)
    except LaunchError as e:
        return e.message
    return (
        None
        if names <= {"rows"}
        else f"the expression {text!r} may name rows only, not {sorted(names - {'rows'})}"
    )
