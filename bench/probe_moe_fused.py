"""What the routed FP8 MoE of one token costs as ONE kernel (a diagnostic for issue 28's M = 1 target).

At one token the fastest Netra chain (g4o + d8sh) takes 1.5x the read limit on an H100 and 1.75x on the
H200 (docs/performance.md): its two stages run one after the other, and the chain's structure (the
hand-off between the grids, the down stage's weights requested only after gate/up, routing twice) costs
about as much as the bytes beyond the limit. bench/probe_moe_fused.cu is the routed MoE of one token as one kernel (its header says how: a
cluster per (slot, 128 columns of h), every byte of a CTA requested at entry, the down weights into shared
memory while gate/up multiplies, h quantized inside the cluster, the slot sums by the last CTA of a row
range). It is a probe: not locked, not certified, not served. This script

- builds its variants (VARIANTS: cluster size, CTAs an SM, bytes in flight) with the lock's nvcc (`--build
  DIR`, on any machine; the device has no nvcc), each also with phase marks;
- on a GPU (`--cubins DIR`): says how many of each variant's clusters can be resident at once
  (cuOccupancyMaxActiveClusters), judges each on every one-token conformance case of fp8_moe_gate_up with certify's
  own judges (h's codes and scales; then out, by fp8_moe_down's judge fed the kernel's own codes), twice,
  bitwise equal; then times it beside the read limit, nt.fp8_moe as served and the chains given
  (--chains), in CUDA graphs, weights rotated past L2, interleaved rounds (bench_moe's machinery).

    python bench/probe_moe_fused.py --build DIR
    python bench/probe_moe_fused.py --cubins DIR [--chains g4o+d8sh] [--trace 10] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import bench_moe as bm
from _entry import run
from trace_moe import L2_FLUSH_BYTES, TraceError, summarize

CONTRACT = "Qwen3-30B-A3B"
KERNEL = "netra_probe_moe_fused"
SOURCE = Path(__file__).with_name("probe_moe_fused.cu")
# The builds compared: SPLIT CTAs a cluster (the unit's k split), WARPS a CTA, MIN_BLOCKS CTAs an SM (the
# register budget), PHASES (1: every gate/up byte of a CTA requested at entry; 2: a tile pair at a time)
VARIANTS = {
    "s8b3p1": {"SPLIT": 8, "WARPS": 4, "MIN_BLOCKS": 3, "PHASES": 1},
    "s8b4p2": {"SPLIT": 8, "WARPS": 4, "MIN_BLOCKS": 4, "PHASES": 2},
}


def defines(p: dict[str, int], v: dict[str, int]) -> list[str]:
    return [
        f"-DEXPERTS={p['experts']}", f"-DTOPK={p['topk']}", f"-DHIDDEN={p['hidden']}", f"-DINTER={p['inter']}",
        *(f"-D{k}={x}" for k, x in sorted(v.items())),
    ]  # fmt: skip


def build(folder: Path) -> None:
    """Every variant's cubin, and its build with phase marks (include/netra_trace.cuh), by the lock's nvcc
    (netra.targets' discovery) into `folder`; refused if any spills."""
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from netra import targets
    from netra.errors import NetraError

    try:
        tools = targets.get("sm_90").discover()
    except NetraError as e:  # no nvcc, or not the one named: its own one-line message and hint
        sys.exit(f"probe_moe_fused: {e}")
    folder.mkdir(parents=True, exist_ok=True)
    for name, v in VARIANTS.items():
        for suffix, extra in ((".cubin", []), (".trace.cubin", ["-DNETRA_TRACE"])):
            out = folder / f"{name}{suffix}"
            cmd = [
                tools["nvcc"], "-arch=sm_90a", "-cubin", "-std=c++17", "-O3", f"-I{root / 'kernels/cuda'}",
                "-Xptxas=-v,-warn-spills,-warn-lmem-usage,-Werror", *defines(bm.CONTRACTS[CONTRACT], v), *extra,
                "-o", str(out), str(SOURCE),
            ]  # fmt: skip
            r = subprocess.run(
                cmd, env={**os.environ, **tools.env}, capture_output=True, text=True, check=False
            )
            if r.returncode != 0:
                lines = r.stderr.strip().splitlines() or ["no output"]
                why = next((ln for ln in lines if "error" in ln.lower()), lines[-1])  # not ptxas's -v lines
                sys.exit(f"probe_moe_fused: nvcc failed for {out.name}: {why.strip()}")
            used = [ln.split(":", 1)[-1].strip() for ln in r.stderr.splitlines() if "registers" in ln]
            print(f"{out}: {'; '.join(used)} ({tools.describe()})")


class Fused:
    """The probe kernel as a call with nt.fp8_moe's eight operands; its workspace made once."""

    def __init__(
        self, torch: Any, cubin: Path, p: dict[str, int], v: dict[str, int], trace: Any = None
    ) -> None:
        import cupy
        import numpy as np

        self.torch, self.cupy, self.np, self.p, self.v = torch, cupy, np, p, v
        self.fn = cupy.RawModule(path=str(cubin)).get_function(KERNEL)
        k, h, i = p["topk"], p["hidden"], p["inter"]
        self.groups = i // bm.BLOCK
        dev = "cuda"
        self.part = torch.empty(k * self.groups * h, dtype=torch.float32, device=dev)
        self.counters = torch.zeros(v["SPLIT"], dtype=torch.int32, device=dev)
        self.hq = torch.zeros(k, i, dtype=torch.uint8, device=dev)
        self.hs = torch.zeros(k, self.groups, dtype=torch.float32, device=dev)
        self.trace = trace  # u64 [CTAs, 8] for the build with phase marks
        self.grid = (v["SPLIT"] * self.groups, k)
        self.smem = h // v["SPLIT"] * 128  # the down tile, dynamic shared memory
        if self.smem > 48 << 10:
            self.fn.max_dynamic_shared_size_bytes = self.smem

    def max_active_clusters(self) -> int | str:
        """cuOccupancyMaxActiveClusters for this launch: how many of its clusters can be resident at once
        (fewer than the grid's: a second wave)."""
        import ctypes

        u = ctypes.c_uint

        class Config(ctypes.Structure):
            _fields_ = [("gx", u), ("gy", u), ("gz", u), ("bx", u), ("by", u), ("bz", u), ("smem", u),
                        ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("nattrs", u)]  # fmt: skip

        cfg = Config(self.grid[0], self.grid[1], 1, self.v["WARPS"] * 32, 1, 1, self.smem, None, None, 0)
        n = ctypes.c_int(0)
        try:  # RawKernel's CUfunction: its .kernel, a cupy.cuda.Function
            fn = ctypes.c_void_p(self.fn.kernel.ptr)
        except AttributeError as e:  # a record, not the end of the probe (the H100's run of 2026-12-08)
            return f"no CUfunction from cupy: {e}"
        rc = ctypes.CDLL("libcuda.so.1").cuOccupancyMaxActiveClusters(ctypes.byref(n), fn, ctypes.byref(cfg))
        return n.value if rc == 0 else f"CUresult {rc}"

    def __call__(self, xq: Any, xs: Any, ids: Any, w: Any, w13: Any, w13s: Any, w2: Any, w2s: Any) -> Any:
        assert xq.shape[0] == 1, "the probe is one token"
        out = self.torch.empty(1, self.p["hidden"], dtype=self.torch.bfloat16, device=xq.device)
        ptrs = (xq, xs, ids, w, w13, w13s, w2, w2s, out, self.hq, self.hs, self.part, self.counters)
        ptrs += (self.trace,) if self.trace is not None else ()
        stream = self.cupy.cuda.ExternalStream(self.torch.cuda.current_stream().cuda_stream)
        with stream:
            self.fn(
                self.grid,
                (self.v["WARPS"] * 32,),
                tuple(self.np.uint64(t.data_ptr()) for t in ptrs),
                shared_mem=self.smem,
            )
        return out


def judged(torch: Any, name: str, fused: Fused, p: dict[str, int]) -> list[dict[str, Any]]:
    """Every one-token conformance case of fp8_moe_gate_up through the probe, judged by certify's judges:
    hq and hs by fp8_moe_gate_up's, out by fp8_moe_down's on the probe's own codes (router weights drawn
    here); each case run twice and required bitwise equal."""
    import numpy as np

    from netra.certify import conformance
    from netra.certify.numerics import moe
    from netra.certify.numerics.common import Case

    h, i = p["hidden"], p["inter"]
    results = []
    cases = [c for c in conformance.cases("fp8_moe_gate_up", p, rows_per_block=0, seed=0) if c.rows == 1]
    hit = {int(e) for c in cases for e in c.inputs["ids"].reshape(-1) if 0 <= int(e) < p["experts"]}
    w2, w2s = moe.weights(p, "w2", (h, i), hit, 0)
    d_w2, d_w2s = torch.from_numpy(w2).cuda(), torch.from_numpy(w2s).cuda()
    rng = np.random.default_rng(11)
    for case in cases:
        t = {n: torch.from_numpy(np.ascontiguousarray(a)).cuda() for n, a in case.inputs.items()}
        wts = rng.random((1, p["topk"])) + 0.1
        wts = (wts / wts.sum()).astype(np.float32)
        args = (t["xq"], t["xs"], t["ids"], torch.from_numpy(wts).cuda(), t["w13"], t["w13s"], d_w2, d_w2s)
        runs = []
        for _ in range(2):
            fused.hq.fill_(0xFF)
            out = fused(*args)
            torch.cuda.synchronize()
            runs.append((fused.hq.cpu().numpy().copy(), fused.hs.cpu().numpy().copy(),
                         out.view(torch.int16).cpu().numpy().view(np.uint16).copy()))  # fmt: skip
        same = all(np.array_equal(a, b) for a, b in zip(runs[0], runs[1], strict=True))
        hq, hs, out = runs[0]
        valid = (case.inputs["ids"][0] >= 0) & (case.inputs["ids"][0] < p["experts"])
        exp = conformance.expected("fp8_moe_gate_up", p, case, workers=os.cpu_count() or 1)
        # a slot naming no expert has no h (the contract leaves it unwritten): judged as the reference's
        hq_j = np.where(valid[:, None], hq, exp["hq"])
        hs_j = np.where(valid[:, None], hs, exp["hs"]).astype(np.float32)
        vg = conformance.judge("fp8_moe_gate_up", p, case, {"hq": hq_j, "hs": hs_j}, exp)
        down = Case(case.name, 1, {"hq": hq_j, "hs": hs_j.astype(np.float32), "ids": case.inputs["ids"],
                                   "weights": wts, "w2": w2, "w2s": w2s})  # fmt: skip
        vd = conformance.judge("fp8_moe_down", p, down, {"out": out.reshape(1, h)})
        results.append({
            "case": case.name, "bitwise_equal_twice": same,
            "gate_up": {"passed": vg.passed, "reason": vg.reason, "max_rel": vg.max_rel_deviation},
            "down": {"passed": vd.passed, "reason": vd.reason, "max_rel": vd.max_rel_deviation},
        })  # fmt: skip
        print(f"judged {name} {case.name}: gate_up {'pass' if vg.passed else 'FAIL ' + str(vg.reason)}; down "
              f"{'pass' if vd.passed else 'FAIL ' + str(vd.reason)}; twice equal {same}")  # fmt: skip
    return results


def timed(
    torch: Any, nt: Any, fuseds: dict[str, Fused], p: dict[str, int], a: argparse.Namespace
) -> list[dict[str, Any]]:
    """Per routing: the read limit, nt.fp8_moe as served, each --chains chain and the probe, one graph each,
    replayed in interleaved rounds (median us per call)."""
    from netra.torch import composite

    dev = torch.device("cuda")
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or bm.L2_DEFAULT
    per = bm.expert_bytes(p)
    count = bm.copies_past(p["topk"] * per, l2)
    calls = -(-a.graph_calls // count) * count
    layers = bm.Layers(torch, p, count, a.seed, dev)
    reader = bm.Reader(torch)
    buf = torch.ones(
        max(2 * p["experts"] * per, 3 * l2 + p["experts"] * per) + 8192, dtype=torch.uint8, device=dev
    )
    rows = []
    for mode in a.routing:
        row = bm.Row(torch, composite, p, 1, mode, calls, layers, a.seed + 17 + (mode == "same"), dev)
        nbytes = int(row.experts_hit * per)
        ref = composite.fp8_moe(*row.args(0))
        graphs: dict[str, bm.Graph] = {}
        for name, fns in reader.calls(buf, nbytes, l2, calls).items():
            graphs[f"read:{name}"] = bm.Graph(torch, fns)
        guards: dict[str, Any] = {}
        with nt.strict():
            served = nt.fp8_moe(*row.args(0))
            guards["netra"] = bm.guard(
                torch, functools.partial(nt.fp8_moe, *row.args(0)), ref, a.bound, bitwise=True
            )
            graphs["netra"] = bm.Graph(
                torch, [functools.partial(nt.fp8_moe, *row.args(c)) for c in range(calls)]
            )
            for chain in a.chains:
                prev = nt.set_tactics(bm.pinned(p, chain))
                try:
                    guards[chain] = bm.guard(
                        torch, functools.partial(nt.fp8_moe, *row.args(0)), ref, a.bound, bitwise=True
                    )
                    graphs[chain] = bm.Graph(
                        torch, [functools.partial(nt.fp8_moe, *row.args(c)) for c in range(calls)]
                    )
                finally:
                    nt.set_tactics(prev)
        for name, fused in fuseds.items():
            g = bm.guard(torch, functools.partial(fused, *row.args(0)), ref, a.bound, bitwise=True)
            guards[f"fused:{name}"] = {**g, "rel_to_served": bm.worst_rel(torch, fused(*row.args(0)), served)}
        failed = {n: g["failed"] for n, g in guards.items() if "failed" in g}
        if failed:
            sys.exit(f"probe_moe_fused: guard failed before timing ({mode}): {failed}")
        for name, fused in fuseds.items():
            graphs[f"fused:{name}"] = bm.Graph(
                torch, [functools.partial(fused, *row.args(c)) for c in range(calls)]
            )
        samples: dict[str, list[float]] = {n: [] for n in graphs}
        for _ in range(a.rounds):
            for n, gr in graphs.items():
                samples[n].append(gr.replay_us())
        med = {n: statistics.median(v) for n, v in samples.items()}
        reads = {n.removeprefix("read:"): v for n, v in med.items() if n.startswith("read:")}
        limit = min(reads.values())
        impl = {n: {"us": v, "of_read_limit": limit / v, "samples_us": samples[n]}
                for n, v in med.items() if not n.startswith("read:")}  # fmt: skip
        rows.append({"routing": mode, "bytes_read": nbytes, "read_limit_us": limit, "read_variants_us": reads,
                     "impls": impl, "guards": guards, "calls_per_graph": calls, "layer_copies": count})  # fmt: skip
        print(f"M=1 {mode}: read limit {limit:.2f} us; " +
              "; ".join(f"{n} {v['us']:.2f} us ({v['us'] / limit:.2f}x)" for n, v in impl.items()))  # fmt: skip
        graphs.clear()
        torch.cuda.synchronize()
    return rows


MARKS = ("entry", "gate/up summed", "cluster barrier passed", "down tile and codes ready", "down stored",
         "counter taken", "exit")  # fmt: skip


def traced(torch: Any, name: str, cubin: Path, v: dict[str, int], p: dict[str, int], a: argparse.Namespace
           ) -> dict[str, Any]:  # fmt: skip
    """The build with phase marks, called `calls` times eagerly, each after L2 is refilled by a read (as
    bench/trace_moe.py does, whose summarize reads the marks): per mark the earliest, median and latest CTA
    (us from the call's first entry), medians over the calls; and how the CTAs lay on the SMs (slot 7:
    %smid)."""
    from netra.torch import composite

    dev = torch.device("cuda")
    k, i = p["topk"], p["inter"]
    ctas = v["SPLIT"] * (i // bm.BLOCK) * k
    buf = torch.zeros(ctas, 8, dtype=torch.int64, device=dev)
    fused = Fused(torch, cubin, p, v, trace=buf)
    layers = bm.Layers(torch, p, 1, a.seed, dev)
    row = bm.Row(torch, composite, p, 1, "uniform", a.trace, layers, a.seed + 17, dev)
    flush = torch.ones(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=dev)
    per_call: list[dict[str, list[float]]] = []
    last: Any = None
    for c in range(a.trace):
        flush.sum()  # L2 refilled by a read (a write would leave dirty lines behind)
        buf.zero_()
        fused(*row.args(c))
        torch.cuda.synchronize()
        last = buf.cpu()
        per_call.append(summarize(f"probe {name}", last, MARKS, int(last[:, 0].min())))
    out: dict[str, Any] = {"calls": a.trace, "marks": {}}
    for mark in MARKS:  # us: the median over the calls of each call's first, median and last CTA
        first, med, end = (statistics.median(call[mark][j] for call in per_call) / 1e3 for j in range(3))
        out["marks"][mark] = {"first": first, "median": med, "last": end}
        print(f"trace {name} {mark:26s} first {first:6.2f}  median {med:6.2f}  last {end:6.2f} us")
    sms = last[:, 7].tolist()  # the last call's
    load = {s: sms.count(s) for s in set(sms)}
    out["sms_used"], out["ctas_per_sm"] = len(load), sorted(set(load.values()))
    out["entries_after_2us"] = int(((last[:, 0] - last[:, 0].min()) > 2000).sum())
    print(f"trace {name}: {ctas} CTAs on {len(load)} SMs, {out['ctas_per_sm']} a SM; "
          f"{out['entries_after_2us']} entered more than 2 us after the first")  # fmt: skip
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--build", type=Path, metavar="DIR", help="build every variant with the lock's nvcc into DIR"
    )
    what.add_argument(
        "--cubins", type=Path, metavar="DIR", help="judge and time the variants built in DIR (a GPU)"
    )
    ap.add_argument("--chains", nargs="+", default=[], metavar="GATE+DOWN", help="also time these chains")
    ap.add_argument("--routing", nargs="+", choices=("uniform", "same"), default=["uniform", "same"])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--graph-calls", type=int, default=20)
    ap.add_argument("--bound", type=float, default=0.05, help="the guard's bound against the composite")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-judge", action="store_true", help="skip the conformance cases")
    ap.add_argument("--trace", type=int, default=0, metavar="CALLS",
                    help="also run each variant's build with phase marks this many calls")  # fmt: skip
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    if a.cubins is not None:
        missing = [n for n in VARIANTS if not (a.cubins / f"{n}.cubin").is_file()]
        if missing:
            ap.error(f"--cubins {a.cubins}: no {missing[0]}.cubin there (build it with --build {a.cubins})")
    return a


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    warnings.filterwarnings("ignore", message="ExternalStream is deprecated")
    if a.build is not None:
        build(a.build)
        return
    torch, nt, _, env = bm.start("probe_moe_fused", False)
    p = bm.CONTRACTS[CONTRACT]
    fuseds = {n: Fused(torch, a.cubins / f"{n}.cubin", p, v) for n, v in VARIANTS.items()}
    rec: dict[str, Any] = {"contract": CONTRACT, "params": p, "environment": env, "variants": {}}
    for n, f in fuseds.items():
        rec["variants"][n] = {**VARIANTS[n], "grid": f.grid, "max_active_clusters": f.max_active_clusters()}
        print(
            f"{n}: {VARIANTS[n]}, grid {f.grid}, clusters resident at once: {rec['variants'][n]['max_active_clusters']}"
        )
    if not a.no_judge:
        rec["judged"] = {}
        for n, f in list(fuseds.items()):
            try:
                rec["judged"][n] = judged(torch, n, f, p)
            except Exception as e:  # a variant that cannot run is this run's finding, not its end
                rec["variants"][n]["failed"] = bm.one_line(e)
                print(f"{n}: failed: {bm.one_line(e)}; not timed")
                del fuseds[n]
                torch.cuda.synchronize()
        bad = [f"{n} {r['case']}" for n, rs in rec["judged"].items() for r in rs
               if not (r["gate_up"]["passed"] and r["down"]["passed"] and r["bitwise_equal_twice"])]  # fmt: skip
        if bad:
            print(f"probe_moe_fused: failed its judges: {bad}; timed all the same, not a result")
    if a.trace:
        try:
            rec["trace"] = {
                n: traced(torch, n, a.cubins / f"{n}.trace.cubin", VARIANTS[n], p, a) for n in fuseds
            }
        except TraceError as e:  # a mark a CTA never wrote: the trace build's fault, said in one line
            sys.exit(f"probe_moe_fused: {e}")
    rec["rows"] = timed(torch, nt, fuseds, p, a)
    if a.json:
        a.json.write_text(json.dumps(rec, indent=1, sort_keys=True))
        print(f"wrote {a.json}")


if __name__ == "__main__":
    run(main)
