"""Synthetic hardware evidence for the CPU tests of the table rules (device "test-device": no GPU ran it).

The shapes are netra/schemas/table.schema.json's; the values are made up, only the rules between them
matter here (the same .text sha256 everywhere, results consistent with their checks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHECKS = ("memcheck", "racecheck", "initcheck", "synccheck")


def sanitizer(
    text: str, result: str = "clean", *, first: str = "Invalid __global__ write of size 4 bytes"
) -> dict[str, Any]:
    """Memory-checker evidence: all four checks clean, or the first with one finding, or all skipped."""
    if result == "skipped":
        return {"result": "skipped", "note": "skipped: certified with --skip-sanitizer", "text_sha256": None,
                "checks": [{"check": c, "tool": "compute-sanitizer", "version": None, "result": "skipped",
                            "findings": 0, "first": "", "launches": 0} for c in CHECKS]}  # fmt: skip
    if result == "unavailable":
        return {"result": "unavailable", "note": "no memory checker is available for this vendor",
                "text_sha256": None, "checks": []}  # fmt: skip
    checks = [{"check": c, "tool": "compute-sanitizer", "version": "2025.3.1.0", "result": "clean", "findings": 0,
               "first": "", "launches": 7} for c in CHECKS]  # fmt: skip
    if result == "findings":
        checks[0].update(result="findings", findings=1, first=first)
    return {"result": result, "note": "", "text_sha256": text, "checks": checks}


def profile(text: str, result: str = "measured") -> dict[str, Any]:
    if result != "measured":
        return {"result": result, "note": f"{result} here", "text_sha256": None, "tool": None, "version": None,
                "rows": None, "dram_throughput_pct": None, "duration_us": None, "dram_read_bytes": None,
                "dram_write_bytes": None}  # fmt: skip
    return {"result": "measured", "note": "", "text_sha256": text, "tool": "ncu", "version": "2025.3.1.0",
            "rows": 8192, "dram_throughput_pct": 91.5, "duration_us": 34.2, "dram_read_bytes": 67_100_000,
            "dram_write_bytes": 67_200_000}  # fmt: skip


def hardware(text: str, *, memory: str = "clean", passed: bool = True, **over: Any) -> dict[str, Any]:
    """evidence.hardware of one candidate certified with machine code `text`."""
    hw = {
        "run": 0, "text_sha256": text, "passed": passed, "reason": "" if passed else "case x (rows 1): wrong",
        "reference": "float64", "max_rel_deviation": 2.1e-3, "tolerance": 3.91e-3, "cases": 7, "counts": {},
        "timings": [{"rows": 8192, "median_us": 21.6, "runs": 200}],
        "sanitizer": sanitizer(text, memory), "profile": profile(text),
    }  # fmt: skip
    if memory == "findings":
        hw["reason"] = (
            "compute-sanitizer memcheck: 1 finding; first: Invalid __global__ write of size 4 bytes"
        )
    hw.update(over)
    return hw


def run_info() -> dict[str, Any]:
    """A certification run's record (certified.run_info's shape) on the made-up device."""
    return {
        "device": "test-device", "driver": "0", "runtime": "CUDA 13.0", "toolchain": {"flavour": "nvcc", "version": "13.0.88"},
        "clocks": None, "netra": "0.1.0", "seed": 0,
        "protocol": {"rows": [1, 8192], "warmup": 1, "replays": 1, "prefill_rows": 8192},
    }  # fmt: skip


def read_certified(root: Path, gpu_class: str = "sm_90") -> dict[str, Any]:
    """The class's table in the tree with its evidence file's records in place of the summaries (the
    certified form the rules, `netra certify` and `netra lock` work on)."""
    from netra.runtime import tables

    ev = root / tables.evidence_path(gpu_class)
    return tables.join(
        (root / tables.table_path(gpu_class)).read_bytes(),
        ev.read_bytes() if ev.exists() else None,
        tables.table_path(gpu_class),
        tables.evidence_path(gpu_class),
        gpu_class,
    )


def write_certified(root: Path, certified: dict[str, Any]) -> None:
    """A certified table written to the tree as its two files (the table, the evidence file)."""
    from netra.runtime import tables

    table, evidence = tables.split(certified)
    cls = certified["gpu_class"]
    (root / tables.table_path(cls)).write_text(tables.dumps(table))
    if evidence is not None:
        (root / tables.evidence_path(cls)).parent.mkdir(parents=True, exist_ok=True)
        (root / tables.evidence_path(cls)).write_text(tables.dumps(evidence))
