"""Second exploration call: the candidates the first call's certify did not reach, and the CACHE = 2
twins added after it. Per candidate, with netra.certify's own buffers, guard bytes, judge and timing:

- a candidate with a twin of the same numerics (tactics that differ only in CACHE, or silu tactics,
  whose mapping changes no value) is launched on every conformance case next to the twin, and its
  outputs must equal the twin's byte for byte (and the guards stay intact);
- the others (and each twin) are judged against the float64 reference on every conformance case,
  with the large case at LARGE rows instead of certify's 8192 (to fit the call's time);
- every candidate is timed by netra.certify._time at certify's row counts.
Results are appended to OUT/finish.jsonl as they are measured."""

import json
import sys
import time
from pathlib import Path

from netra import certify, conformance, runtime

LARGE = 1024
out = Path(sys.argv[1])
log = (out / "finish.jsonl").open("a", buffering=1)
TODO = {  # contract prefix -> [(tactic, twin or None)]
    "rmsnorm(hidden=4096": [("t256s", "t256"), ("t512", None), ("t512p", "t512"), ("t512s", "t512"), ("q16", None),
                            ("t128s", "t128"), ("w2s", "w2"), ("q16s", "q16")],
    "rmsnorm(": [("t128s", "t128"), ("w2s", "w2"), ("q16s", "q16")],
    "fp8_group_quant(": [("r1s", "r1"), ("r2s", "r2")],
    "silu_mul_fp8_quant(": [("r4", None), ("r2", "r4"), ("s8", "r4"), ("u192", "r4"), ("s16", "r4"),
                            ("r4s", "r4"), ("s8s", "r4")],
}
t0 = time.time()
cat = runtime.open_catalog("sm_90")
dev = certify._loader(cat.table)
cat.verify()
l2 = dev.attribute(38)


def run_case(kernel, entry, case):
    buf = certify._Buffers(dev)
    try:
        for name, arr in case.inputs.items():
            buf.input(name, arr.tobytes())
        for name, (dt, shape) in conformance.outputs(entry.op, entry.params, case.rows).items():
            buf.output(name, dt, shape)
        dev.launch(kernel, case.rows, 0, {**buf.args, **case.scalars, "rows": case.rows})
        dev.synchronize()
        return buf.read()
    finally:
        buf.free()


for key, entry in sorted(cat.table.entries.items()):
    todo = next((v for k, v in TODO.items() if key.startswith(k)), [])
    by = {c.tactic: c for c in entry.candidates}
    expected, timing_inputs = {}, {}
    for tactic, twin in todo:
        cand = by[tactic]
        kernel = cat.kernel(cand)
        cases = conformance.cases(entry.op, entry.params, rows_per_block=cand.launch.rows_per_block, large_rows=LARGE)
        rec = {"t": round(time.time() - t0, 1), "artifact": cand.artifact, "twin": twin}
        if twin is None:
            ok, reason, worst, tol, counts = certify._correctness(dev, kernel, entry, cases, expected)
            rec.update(passed=ok, reason=reason, max_rel_deviation=worst, counts=counts, judged="float64")
        else:
            tk = cat.kernel(by[twin])
            diffs = []
            for case in cases:
                a, fa = run_case(kernel, entry, case)
                b, _ = run_case(tk, entry, case)
                bad = [n for n in a if a[n].tobytes() != b[n].tobytes()]
                if fa or bad:
                    diffs.append(f"{case.name}: {'; '.join(fa)} {' '.join(bad)} differ from {twin}")
            rec.update(passed=not diffs, reason="; ".join(diffs)[:400], judged=f"bit-equal to {twin}")
        log.write(json.dumps(rec) + "\n")
        print(f"{rec['t']:6.1f}s {cand.artifact}: {rec['judged']} {'ok' if rec['passed'] else rec['reason']}", flush=True)
        if not rec["passed"]:
            continue
        for r in certify.ROWS:
            if r not in timing_inputs:
                timing_inputs[r] = certify._timing_bytes(cases[0], r, 0)
            tm = certify._time(dev, kernel, entry, cases[0], r, l2, timing_inputs[r], certify.REPLAYS)
            log.write(json.dumps({"artifact": cand.artifact, "rows": r, "median_us": tm["median_us"],
                                  "p10_us": tm["p10_us"], "p90_us": tm["p90_us"]}) + "\n")
print(f"finished in {time.time() - t0:.0f}s")
