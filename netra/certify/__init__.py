"""Certification: a class's table judged and timed on its hardware (`netra certify`, docs/certify.md).

run: the certification run itself (every candidate on the device, ranked, the table written);
conformance: the test vectors and the judge; reference: the float64 reference of every op family.
numpy (the certify extra) is imported by the functions that need it.
"""

from netra.certify.run import Result, certify, rank, rerank, write

__all__ = ["Result", "certify", "rank", "rerank", "write"]
