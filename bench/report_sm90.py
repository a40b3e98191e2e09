"""The tables docs/performance.md shows, made from one bench/bench_sm90.py --json output.

Every figure is a ratio within that one run (the copy limit, the same-bytes copy and each peer were
measured side by side with Netra's kernel), so the tables carry no number measured elsewhere.

    python bench/report_sm90.py docs/gpu-runs/<run>/bench_sm90.json > table.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# Peers a row may carry (bench_sm90.py's keys), as the table's columns name them; a column is shown
# only when some row of the run measured it.
PEERS = (
    ("chain_us", "Netra unfused chain"),
    ("eager_us", "torch eager"),
    ("compile_us", "torch.compile"),
    ("liger_us", "Liger"),
)


def _ratio(peer: float | None, ours: float) -> str:
    return f"{peer / ours:.2f}x" if peer else "-"


def render(run: dict[str, Any]) -> str:
    limit = float(run["copy"]["tb_per_s"])
    rows_all = [r for rs in run["contracts"].values() for r in rs]
    peers = [(k, name) for k, name in PEERS if any(r.get(k) for r in rows_all)]
    head = ["contract", "rows", "tactic", "us", "of the copy limit", "x same-bytes copy"]
    head += [f"vs {name}" for _, name in peers]
    out = [
        f"Copy limit {limit:.3f} TB/s ({run['copy']['best']}, best of {len(run['copy']['us'])} copy kernels "
        f"over {run['copy']['bytes'] >> 20} MiB); {run.get('device', '?')}, torch {run.get('torch', '?')}, "
        f"Liger {run.get('liger') or 'not installed'}. `vs X` is X's time over Netra's (above 1: Netra is faster).",
        "",
        "| " + " | ".join(head) + " |",
        "| " + " | ".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + " |",
    ]
    for key in sorted(run["contracts"]):
        for r in run["contracts"][key]:
            us = float(r["netra_us"])
            cells = [
                f"`{key}`",
                str(r["rows"]),
                str(r.get("tactic", "-")),
                f"{us:.2f}",
                f"{100 * float(r['netra_tb_per_s']) / limit:.0f}%",
                f"{us / float(r['copy_best_us']):.2f}",
            ]
            cells += [_ratio(r.get(k), us) for k, _ in peers]
            out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path, help="a bench/bench_sm90.py --json output")
    args = ap.parse_args(argv)
    try:
        run = json.loads(args.json.read_text())
        text = render(run)
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: {args.json}: not a bench_sm90.py --json output ({e})", file=sys.stderr)
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
