"""What netra.torch's operator layer costs per call, against the raw runtime launch, on an H200.

Per op (one certified contract each, --contracts to change) at 1, 16 and 8192 rows, side by side and
interleaved over --rounds rounds, medians:

  eager, host time per call: N calls back to back, torch.cuda.synchronize() at the end, wall time / N
    op        netra.torch.<op>(...)               (the Python entry point: calls the implementation)
    op.out    netra.torch.<op>(..., out=...)      (the same, into outputs allocated once, as raw)
    op.disp   torch.ops.netra.<op>.default(...)   (through the dispatcher, as compiled code calls it)
    raw       Cuda().launch(kernel, rows, None, packed) with the kernarg bytes packed once
    floor     cuLaunchKernel through ctypes with everything prepared (function, grid, `extra` array):
              only the stream is looked up per call; no Python layer can be cheaper
    raw+alloc raw, plus torch.empty of the outputs each call (the work a functional op must do)
    torch     the PyTorch composite (netra.torch.composite), eager
    compile   torch.compile(composite, dynamic=False)
  graph, device time per call: G calls captured in one CUDA graph, replayed R times, CUDA events
    op, op.out, raw, torch, compile   as above, inside the graph
(above 256 rows, N, G and R are scaled down: the calls are device-bound there.)

The operator layer's overhead is op.out - raw (eager: the same work, outputs allocated once) and op -
raw (graph); the issue's target is <= 1 us per call in eager mode and 0 inside a graph. op - raw+alloc
is the functional op's overhead over a raw launch that allocates what the op returns. Every number printed is measured here; nothing is assumed.
Before timing, each op call is checked to take the certified kernel (strict mode), and its output is
checked to equal the raw launch's byte for byte.

Run it with the python of an environment where the netra wheel (certified sm_90 table) and torch with
CUDA are installed; `python bench/bench_torch_ops.py` puts bench/, not the tree, on sys.path, so the
installed netra is the one measured (the first line printed says which install it is):

    /path/to/venv/bin/python bench/bench_torch_ops.py --json /tmp/bench_torch_ops.json
    /path/to/venv/bin/python bench/bench_torch_ops.py --rows 1 16 8192 --rounds 7 --calls 2000
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

DEFAULT_CONTRACTS = [
    "rmsnorm(hidden=4096,weight_offset=0)",
    "fp8_group_quant(hidden=4096,group=128)",
    "silu_mul_fp8_quant(inter=14336,group=128)",
    "moe_topk_softmax(experts=128,topk=8)",
]


def make_inputs(torch: Any, op: str, p: dict[str, int], rows: int) -> dict[str, Any]:
    g = torch.Generator(device="cuda").manual_seed(rows)
    if op == "rmsnorm":
        h = p["hidden"]
        return {
            "x": torch.randn(rows, h, device="cuda", generator=g).bfloat16(),
            "w": (1 + 0.1 * torch.randn(h, device="cuda", generator=g)).bfloat16(),
            "eps": 1e-6,
            "weight_offset": p["weight_offset"],
        }
    if op == "fp8_group_quant":
        return {
            "x": torch.randn(rows, p["hidden"], device="cuda", generator=g).bfloat16(),
            "group": p["group"],
        }
    if op == "silu_mul_fp8_quant":
        return {
            "x": torch.randn(rows, 2 * p["inter"], device="cuda", generator=g).bfloat16(),
            "group": p["group"],
        }
    return {
        "logits": torch.randn(rows, p["experts"], device="cuda", generator=g).bfloat16(),
        "topk": p["topk"],
    }


def out_specs(torch: Any, op: str, p: dict[str, int], rows: int) -> dict[str, tuple[tuple[int, ...], Any]]:
    if op == "rmsnorm":
        return {"y": ((rows, p["hidden"]), torch.bfloat16)}
    if op in ("fp8_group_quant", "silu_mul_fp8_quant"):
        n = p["hidden"] if op == "fp8_group_quant" else p["inter"]
        return {"q": ((rows, n), torch.float8_e4m3fn), "scales": ((rows, n // p["group"]), torch.float32)}
    return {"ids": ((rows, p["topk"]), torch.int32), "weights": ((rows, p["topk"]), torch.float32)}


def host_us(torch: Any, fn: Callable[[], Any], calls: int) -> float:
    """Wall time per call of `calls` calls back to back, synchronized once at the end."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def graph_us(torch: Any, fn: Callable[[], Any], per_graph: int, replays: int) -> tuple[float, Any]:
    """Device time per call from replaying a graph of `per_graph` calls `replays` times (CUDA events)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / (replays * per_graph), graph


def bytes_of(torch: Any, t: Any) -> Any:
    return t.contiguous().view(torch.uint8)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contracts", nargs="+", default=DEFAULT_CONTRACTS)
    ap.add_argument("--rows", nargs="+", type=int, default=[1, 16, 8192])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per measurement (median)")
    ap.add_argument("--calls", type=int, default=2000, help="eager calls per round (fewer at large rows)")
    ap.add_argument("--graph-calls", type=int, default=20, help="calls captured in one graph")
    ap.add_argument("--replays", type=int, default=50, help="graph replays per round")
    ap.add_argument("--json", type=str, default=None, help="write the results here")
    ap.add_argument(
        "--no-compile", action="store_true", help="skip torch.compile (its compiles take minutes)"
    )
    args = ap.parse_args()

    import torch

    import netra
    import netra.torch as nt
    from netra.loaders.cuda import Cuda, Extra
    from netra.runtime import Contract, installed, open_catalog
    from netra.torch import composite

    if not torch.cuda.is_available():
        sys.exit("bench_torch_ops: no CUDA device visible to torch")
    inst = installed.locate()
    cat = open_catalog("sm_90")
    print(
        f"netra {netra.__version__} ({inst.kind} at {inst.root}); torch {torch.__version__}; "
        f"{torch.cuda.get_device_name(0)}; sm_90 table certification: {cat.table.certification}; "
        f"python {platform.python_version()}"
    )
    cu = Cuda()
    results: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []

    for key in args.contracts:
        c = Contract.parse(key)
        op, p = c.op, dict(c.params)
        entry = getattr(nt, op)
        disp = getattr(torch.ops.netra, op).default
        comp = getattr(composite, op)
        compiled = None if args.no_compile else torch.compile(comp, dynamic=False)
        for rows in args.rows:
            inp = make_inputs(torch, op, p, rows)
            vals = list(inp.values())
            kernel = nt.kernel_for(key, rows)
            if not kernel:
                sys.exit(f"bench_torch_ops: {key} at {rows} rows is not certified here: {kernel.reason}")
            specs = out_specs(torch, op, p, rows)
            outs = {n: torch.empty(s, dtype=d, device="cuda") for n, (s, d) in specs.items()}
            tensors = {n: v for n, v in inp.items() if isinstance(v, torch.Tensor)}
            scalars = {"eps": inp["eps"]} if op == "rmsnorm" else {}
            packed = kernel.pack(
                **{n: t.data_ptr() for n, t in {**outs, **tensors}.items()}, rows=rows, **scalars
            )

            def op_call(entry: Any = entry, vals: list[Any] = vals) -> Any:
                return entry(*vals)

            into = outs["y"] if op == "rmsnorm" else tuple(outs.values())
            mine = {n: torch.empty_like(t) for n, t in outs.items()}  # op.out's own, so that the
            mine_out = mine["y"] if op == "rmsnorm" else tuple(mine.values())  # check below compares

            def out_call(entry: Any = entry, vals: list[Any] = vals, into: Any = into) -> Any:
                return entry(*vals, out=into)

            def disp_call(disp: Any = disp, vals: list[Any] = vals) -> Any:
                return disp(*vals)

            def raw_call(kernel: Any = kernel, rows: int = rows, packed: bytes = packed) -> None:
                cu.launch(kernel, rows, None, packed)

            def raw_alloc_call(
                kernel: Any = kernel, rows: int = rows, packed: bytes = packed, specs: Any = specs
            ) -> None:
                for s, d in specs.values():
                    torch.empty(s, dtype=d, device="cuda")
                cu.launch(kernel, rows, None, packed)

            launch_args = (
                cu.lib.cuLaunchKernel, cu.function(kernel), kernel.grid(rows), kernel.block,
                kernel.dynamic_lds_bytes, Extra(packed), torch._C._cuda_getCurrentRawStream,
            )  # fmt: skip

            def floor_call(a: tuple[Any, ...] = launch_args) -> None:
                launch, fn, grid, block, shared, extra, stream = a
                rc = launch(fn, *grid, *block, shared, stream(0), None, extra.array)
                if rc:
                    cu.check(rc, "cuLaunchKernel")

            def torch_call(comp: Any = comp, vals: list[Any] = vals) -> Any:
                return comp(*vals)

            def compile_call(compiled: Any = compiled, vals: list[Any] = vals) -> Any:
                return compiled(*vals)

            # the op takes the certified kernel and writes what the raw launch writes
            nt.reset_stats()
            with nt.strict():
                got = op_call()
                entry(*vals, out=mine_out)
            raw_call()
            torch.cuda.synchronize()
            got = got if isinstance(got, tuple) else (got,)
            same = all(
                torch.equal(bytes_of(torch, a), bytes_of(torch, outs[n]))
                for a, n in zip(got, specs, strict=True)
            )
            same_out = all(torch.equal(bytes_of(torch, mine[n]), bytes_of(torch, outs[n])) for n in specs)
            checks.append({"contract": key, "rows": rows, "tactic": kernel.tactic, "op_equals_raw": same,
                           "op_out_equals_raw": same_out})  # fmt: skip
            if not (same and same_out):
                sys.exit(
                    f"bench_torch_ops: {key} at {rows} rows: the op's output differs from the raw launch"
                )
            small = rows <= 256
            calls = max(20, args.calls if small else args.calls // 10)
            per_graph = args.graph_calls if small else max(2, args.graph_calls // 4)
            replays = args.replays if small else max(5, args.replays // 5)
            eager = {"op": op_call, "op.out": out_call, "op.disp": disp_call, "raw": raw_call, "raw+alloc": raw_alloc_call,
                     "floor": floor_call, "torch": torch_call, "compile": compile_call}  # fmt: skip
            graphed = {
                "op": op_call,
                "op.out": out_call,
                "raw": raw_call,
                "floor": floor_call,
                "torch": torch_call,
                "compile": compile_call,
            }
            if compiled is None:
                del eager["compile"], graphed["compile"]
            else:
                compile_call()  # compile outside the timed rounds
            samples: dict[tuple[str, str], list[float]] = {}
            for fn in eager.values():  # warm-up
                host_us(torch, fn, 20)
            for _ in range(args.rounds):
                for name, fn in eager.items():
                    samples.setdefault(("eager", name), []).append(host_us(torch, fn, calls))
            for name, fn in graphed.items():
                per = []
                for _ in range(args.rounds):
                    us, g = graph_us(torch, fn, per_graph, replays)
                    per.append(us)
                    del g
                samples[("graph", name)] = per
            torch.cuda.synchronize()
            st = nt.stats()
            fallbacks = {k: v for k, v in st.items() if set(v) != {"certified"}}
            if fallbacks:
                sys.exit(f"bench_torch_ops: fallbacks while timing: {fallbacks}")
            for (mode, name), ts in samples.items():
                results.append({
                    "contract": key, "op": op, "rows": rows, "tactic": kernel.tactic, "mode": mode, "impl": name,
                    "us_per_call": statistics.median(ts), "samples_us": ts,
                    "measures": "host wall time per call" if mode == "eager" else "device time per call (graph replay)",
                })  # fmt: skip
            torch.cuda.empty_cache()

    # -- the table --------------------------------------------------------------------------------------
    def med(key: str, rows: int, mode: str, impl: str) -> float:
        return next(
            (
                r["us_per_call"]
                for r in results
                if (r["contract"], r["rows"], r["mode"], r["impl"]) == (key, rows, mode, impl)
            ),
            float("nan"),
        )

    cols = ["op", "op.out", "op.disp", "raw", "raw+alloc", "floor", "torch", "compile"]
    gcols = ["op", "op.out", "raw", "floor", "torch", "compile"]
    print()
    print("eager: host wall time per call (us), N calls then one synchronize")
    print("graph: device time per call (us), from CUDA-graph replays")
    print(f"{'contract':44s} {'rows':>5s} {'tactic':>7s} | eager " + " ".join(f"{c:>9s}" for c in cols)
          + " | graph " + " ".join(f"{c:>8s}" for c in gcols) + f" | {'out-raw':>9s} {'graph':>9s}")  # fmt: skip
    overhead = []
    for key in args.contracts:
        for rows in args.rows:
            tactic = next(r["tactic"] for r in results if r["contract"] == key and r["rows"] == rows)
            e = {c: med(key, rows, "eager", c) for c in cols}
            g = {c: med(key, rows, "graph", c) for c in gcols}
            oe, og = e["op.out"] - e["raw"], g["op"] - g["raw"]
            overhead.append({
                "contract": key, "rows": rows, "eager_op_out_minus_raw_us": oe, "graph_op_minus_raw_us": og,
                "eager_op_minus_raw_us": e["op"] - e["raw"], "graph_op_out_minus_raw_us": g["op.out"] - g["raw"],
                "eager_op_minus_raw_alloc_us": e["op"] - e["raw+alloc"], "eager_op_minus_floor_us": e["op"] - e["floor"],
            })  # fmt: skip
            print(f"{key:44s} {rows:5d} {tactic:>7s} |       " + " ".join(f"{e[c]:9.2f}" for c in cols)
                  + " |       " + " ".join(f"{g[c]:8.2f}" for c in gcols) + f" | {oe:+9.2f} {og:+9.2f}")  # fmt: skip
    eager_ok = all(o["eager_op_out_minus_raw_us"] <= 1.0 for o in overhead)
    worst_graph = max(
        max(abs(o["graph_op_minus_raw_us"]), abs(o["graph_op_out_minus_raw_us"])) for o in overhead
    )
    print()
    print(f"target eager overhead (op.out - raw) <= 1 us per call: {'met' if eager_ok else 'NOT met'} "
          f"(worst {max(o['eager_op_out_minus_raw_us'] for o in overhead):+.2f} us); functional op - raw: worst "
          f"{max(o['eager_op_minus_raw_us'] for o in overhead):+.2f} us")  # fmt: skip
    print(
        f"graph overhead (op and op.out - raw, device time): worst |difference| {worst_graph:.3f} us per call"
    )
    print(
        "eager op - raw+alloc (same work as a functional op): worst "
        f"{max(o['eager_op_minus_raw_alloc_us'] for o in overhead):+.2f} us; op - floor: worst "
        f"{max(o['eager_op_minus_floor_us'] for o in overhead):+.2f} us"
    )
    if args.json:
        doc = {
            "netra": netra.__version__, "install": inst.kind, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0), "driver": cu.driver_version(),
            "certification": cat.table.certification, "args": vars(args),
            "checks": checks, "results": results, "overhead": overhead,
        }  # fmt: skip
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
