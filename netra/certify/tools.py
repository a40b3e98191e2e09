"""The tools `netra certify` runs besides the judge and the timing: the vendor's memory checkers and
profiler, found and asked for their versions before anything runs (`find`), and what they say of one
candidate (`evidence`: its memory-checker and profile evidence, and the reason a finding rejects it).
A phase skipped by an option, or a tool the vendor does not have, is recorded as such, never as clean.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from netra.certify import profile as profiling
from netra.certify import sanitizer as sanitizing
from netra.certify.ranking import PREFILL_ROWS, Result
from netra.errors import CertificationError

if TYPE_CHECKING:
    from netra.targets.devtools import MemoryChecker, Profiler
    from netra.targets.vendor import Vendor


@dataclass
class Tools:
    """What a certification runs: each tool with its executable and version, and what it skips."""

    vendor: str  # the vendor's name
    every: list[MemoryChecker]  # the vendor's memory checkers, run or not (what a skipped result lists)
    skipped_sanitizer: bool
    skipped_profile: bool
    checkers: list[tuple[MemoryChecker, Path, str]] = field(default_factory=list)  # (checker, exe, version)
    profiler: tuple[Profiler, Path, str] | None = None


def find(vendor: Vendor, sanitize: bool, profile: bool) -> Tools:
    """The vendor's memory checkers and profiler, found and asked for their versions (or why not):
    `sanitize` / `profile` False records that phase as skipped and looks for nothing."""
    out = Tools(vendor.name, list(vendor.memory_checkers()), not sanitize, not profile)
    versions: dict[Path, str] = {}
    if sanitize:
        for c in out.every:
            exe = c.find()
            if exe is None:
                raise CertificationError(
                    f"{c.tool} ({c.check}, a memory checker `netra certify` runs for {vendor.name}) is not found "
                    f"(looked in {', '.join(c.searched())})",
                    f"{c.install_hint}; or pass --skip-sanitizer (recorded as skipped, and a candidate without "
                    "memory-checker evidence is at most verified)",
                )
            if exe not in versions:
                versions[exe] = c.version(exe)
            out.checkers.append((c, exe, versions[exe]))
    if profile:
        pr = vendor.profiler()
        if pr is not None:
            exe = pr.find()
            if exe is None:
                raise CertificationError(
                    f"{pr.tool} (the profiler `netra certify` runs for {vendor.name}) is not found (looked in "
                    f"{', '.join(pr.searched())})",
                    f"{pr.install_hint}; or pass --skip-profile (recorded as skipped)",
                )
            out.profiler = (pr, exe, pr.version(exe))
    return out


def evidence(
    r: Result, tools: Tools, checked: dict[str, dict[str, sanitizing.Checked]], profiled: dict[str, Any]
) -> None:
    """The memory-checker and profile evidence of one candidate, and the reason a finding rejects it."""
    cand = r.candidate
    if tools.skipped_sanitizer:
        r.sanitizer = sanitizing.evidence_skipped(tools.every, "skipped: certified with --skip-sanitizer")
    elif not tools.checkers:
        r.sanitizer = sanitizing.evidence_unavailable(tools.vendor)
    elif not r.passed:
        r.sanitizer = sanitizing.evidence_skipped(tools.every, "not run: the candidate failed conformance")
    else:
        runs = [(c, version, checked[c.check][cand.artifact]) for c, _, version in tools.checkers]
        r.sanitizer = sanitizing.evidence(cand.text_sha256, runs)
        if r.sanitizer["result"] == "findings":
            r.reason = sanitizing.reason(r.sanitizer)
    if tools.skipped_profile:
        r.profile = profiling.evidence_skipped("skipped: certified with --skip-profile")
    elif tools.profiler is None:
        r.profile = profiling.evidence_unavailable(tools.vendor)
    elif not r.passed:
        r.profile = profiling.evidence_skipped("not run: the candidate failed conformance")
    else:
        pr, _, version = tools.profiler
        loaded, prof = profiled[cand.artifact]
        # profiled at PREFILL_ROWS, or at the family's limit below it (run._prefill_of: 64 tokens for a routed MoE)
        top = min(PREFILL_ROWS, max((t["rows"] for t in r.timings), default=PREFILL_ROWS))
        r.profile = profiling.evidence(cand.text_sha256, loaded, pr.tool, version, top, prof)
