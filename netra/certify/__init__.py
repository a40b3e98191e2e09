"""Certification: a class's table judged, timed, memory-checked and profiled on its hardware (`netra
certify`, docs/certify.md).

run: the certification run (its phases); tools: the memory checkers and profiler it runs, found, and
what they say of a candidate; certified: the typed certified table the run makes and its two files;
reuse: the contracts carried from a certified table instead of run again (--reuse);
measure: launching and timing on the device;
prepare: the host work in worker processes (cases, references, judging); sanitizer and profile: the
vendor's memory checkers and profiler over every candidate, through the worker (worker, plan); ranking:
order, maturity and dispatch from the evidence; conformance: the test vectors and the judge;
reference: the float64 reference of every op family. numpy (the certify extra) is imported by the
functions that need it.
"""

from netra.certify.certified import carried, evidence_out, held, write
from netra.certify.ranking import Result, rank, rerank
from netra.certify.run import Options, certify

__all__ = ["Options", "Result", "carried", "certify", "evidence_out", "held", "rank", "rerank", "write"]
