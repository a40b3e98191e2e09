"""`netra certify --gpu-class sm_90 --out OUT/sm_90.json`, through the same API the command calls
(netra.certify.certify, then write), with each candidate's verdict and timings also appended to
OUT/certify.jsonl as it is measured, so that a run cut short by the device's time limit keeps what it
measured. Used for the kernel exploration run only (the committed table comes from `netra certify`)."""

import json
import sys
import time
from pathlib import Path

from netra import certify

out = Path(sys.argv[1])
log = (out / "certify.jsonl").open("a", buffering=1)
_corr, _time, t0 = certify._correctness, certify._time, time.time()
state: dict = {}


def correctness(dev, kernel, entry, cases, expected=None):
    r = _corr(dev, kernel, entry, cases, expected)
    state["name"] = getattr(kernel, "name", None) or getattr(kernel, "artifact", None) or str(kernel)
    log.write(json.dumps({"t": round(time.time() - t0, 1), "artifact": state["name"], "passed": r[0],
                          "reason": r[1], "max_rel_deviation": r[2], "counts": r[4]}) + "\n")
    return r


def timed(dev, kernel, entry, like, rows, l2, inputs, replays):
    r = _time(dev, kernel, entry, like, rows, l2, inputs, replays)
    log.write(json.dumps({"artifact": state.get("name"), "rows": rows, "median_us": r["median_us"],
                          "p10_us": r["p10_us"], "p90_us": r["p90_us"]}) + "\n")
    return r


certify._correctness, certify._time = correctness, timed
table = certify.certify("sm_90", progress=lambda m: print(f"{time.time() - t0:6.1f}s {m}", flush=True))
certify.write(table, out / "sm_90.json")
print(f"certified in {time.time() - t0:.0f}s")
