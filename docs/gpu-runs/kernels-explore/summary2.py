"""Compact summary of the second exploration call (finish.jsonl, fused2.json)."""

import json
import sys
from collections import defaultdict
from pathlib import Path

out = Path(sys.argv[1])
lines = []
per, verdict = defaultdict(dict), {}
if (out / "finish.jsonl").exists():
    for ln in (out / "finish.jsonl").read_text().splitlines():
        r = json.loads(ln)
        if "passed" in r:
            verdict[r["artifact"]] = r
        else:
            per[r["artifact"]][r["rows"]] = r["median_us"]
bad = [v for v in verdict.values() if not v["passed"]]
lines.append(f"finish: {len(verdict) - len(bad)} of {len(verdict)} candidates ok")
for v in bad:
    lines.append(f"  FAIL {v['artifact']}: {v['reason'][:200]}")
for a in sorted(per):
    lines.append(f"{a[6:]:40} " + " ".join(f"{r}:{per[a][r]:.2f}" for r in sorted(per[a])))
if (out / "fused2.json").exists():
    f = json.loads((out / "fused2.json").read_text())
    badf = [c for c in f["checks"] if c["failures"]]
    lines.append(f"fused checks: {len(f['checks']) - len(badf)} of {len(f['checks'])} ok")
    for c in badf[:6]:
        lines.append(f"  FAIL {c['op']} h{c['hidden']} {c['tactic']}: {'; '.join(c['failures'])[:160]}")
    by = defaultdict(dict)
    for r in f["timings"]:
        by[(r["op"], r["hidden"], r["rows"])][r["tactic"]] = r["us"]
    for (op, h, rows), d in sorted(by.items()):
        add = next((r["add_us"] for r in f["timings"] if (r["op"], r["hidden"], r["rows"]) == (op, h, rows)), None)
        lines.append(f"{op[:30]:30} h{h} {rows:>6} " + " ".join(f"{t}:{u:.2f}" for t, u in sorted(d.items()))
                     + (f" add:{add:.2f}" if add else ""))
text = "\n".join(lines)
(out / "summary2.txt").write_text(text + "\n")
print(text)
