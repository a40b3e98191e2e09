"""Compact summary of the exploration run (certify table or its .jsonl, bench_sm90 and bench_fused JSON)."""

import json
import sys
from collections import defaultdict
from pathlib import Path

out = Path(sys.argv[1])
lines = []
p = lambda s="": lines.append(s)  # noqa: E731
# certify: per contract and row count the fastest passing candidate
per = defaultdict(dict)  # key -> tactic -> {rows: us}
fails = []
if (out / "sm_90.json").exists():
    t = json.loads((out / "sm_90.json").read_text())
    for e in t["entries"]:
        for c in e["candidates"]:
            hw = c["evidence"]["hardware"]
            if not hw["passed"]:
                fails.append(f"{c['artifact']}: {hw['reason'][:160]}")
                continue
            per[e["key"]][c["tactic"]] = {x["rows"]: x["median_us"] for x in hw["timings"]}
        p(f"{e['key']}: dispatch {e['dispatch']}")
elif (out / "certify.jsonl").exists():
    cur = None
    for ln in (out / "certify.jsonl").read_text().splitlines():
        r = json.loads(ln)
        if "passed" in r:
            cur = r["artifact"]
            if not r["passed"]:
                fails.append(f"{cur}: {r['reason'][:160]}")
        else:
            key, tac = cur.rsplit("_", 1)
            per[key][tac] = per[key].get(tac, {}) | {r["rows"]: r["median_us"]}
p(f"certify: {sum(len(v) for v in per.values())} passing candidates timed, {len(fails)} failing")
for f in fails:
    p("  FAIL " + f)
for key in sorted(per):
    rows = sorted({r for v in per[key].values() for r in v})
    cells = []
    for r in rows:
        ranked = sorted((v[r], tac) for tac, v in per[key].items() if r in v)
        cells.append(f"{r}:{ranked[0][1]} {ranked[0][0]:.2f}" + (f" ({ranked[1][1]} {ranked[1][0]:.2f})" if len(ranked) > 1 else ""))
    p(f"{key[:44]:44} " + " | ".join(cells))
if (out / "bench.json").exists():
    b = json.loads((out / "bench.json").read_text())
    lim = b["copy"]["tb_per_s"]
    p(f"copy limit {lim} TB/s ({b['copy']['best']}): " + ", ".join(f"{k[17:] or k} {2 * b['copy']['bytes'] / 2 / v / 1e6:.3f}" for k, v in b["copy"]["us"].items()))
    for key, rows in b["contracts"].items():
        cells = []
        for r in rows:
            liger = f" L{r['liger_us'] / r['netra_us']:.2f}" if "liger_us" in r else ""
            cells.append(f"{r['rows']}:{r['tactic']} {r['netra_us']:.2f} {r['netra_tb_per_s'] / lim:.0%} x{r['netra_us'] / r['copy_best_us']:.2f}{liger}")
        p(f"{key[:44]:44} " + " | ".join(cells))
if (out / "fused.json").exists():
    f = json.loads((out / "fused.json").read_text())
    bad = [c for c in f["checks"] if c["failures"]]
    p(f"fused checks: {len(f['checks']) - len(bad)} of {len(f['checks'])} ok")
    for c in bad[:8]:
        p(f"  FAIL {c['op']} h{c['hidden']} {c['tactic']} rows {c['rows']}: {'; '.join(c['failures'])[:200]}")
    best = {}
    for r in f["timings"]:
        k = (r["op"], r["hidden"], r["rows"])
        if k not in best or r["us"] < best[k]["us"]:
            best[k] = r
    for (op, h, rows), r in sorted(best.items()):
        ch = f" chain {r['chain_us']:.2f} ({r['chain_us'] / r['us']:.2f}x)" if r["chain_us"] else ""
        p(f"{op[:34]:34} h{h} {rows:>6} {r['tactic']} {r['us']:.2f} us x copy {r['us'] / r['copy_best_us']:.2f}{ch}")
text = "\n".join(lines)
(out / "summary.txt").write_text(text + "\n")
print(text)
