"""Netra's certified sm_90 kernels against what a user would otherwise run, on the H200, side by side.

Run on the GPU machine with python3 that has torch and the netra wheel installed (tools/gpu-session):

    python bench/bench_sm90.py --json OUT.json --plot bandwidth.png

Per contract of the installed sm_90 table, at each row count: the kernel the runtime serves
(`open_catalog("sm_90").select(key, rows=rows)`: the certified dispatch), launched through netra.loaders.cuda;
the torch composite a user would write (F.rms_norm; amax/scale/clamp/to(float8); softmax + topk), in
eager mode and compiled with torch.compile(dynamic=False); and the elementwise-copy limit measured in
the same run (a bf16 copy kernel built here with nvcc, 16-byte accesses; not `copy_`, which a CUDA
graph turns into a copy-engine memcpy). Every time is device time per call from CUDA-graph replay
(warm-up, then the median of several replays), inputs rotating through enough buffers to exceed L2
where one set would fit. Effective bandwidth = the bytes the op must move / time
(netra.certify.conformance.bytes_moved). Ratios are Netra's speed over the baseline's.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROWS = (1, 16, 64, 512, 8192, 32768)
EAGER_ROWS = (1, 16, 8192)
COMPILE_ROWS = (16, 8192)  # each row count is one more compile (dynamic=False): a few seconds each
REPLAYS = 9
COPY_SOURCE = r"""
#include <stdint.h>
extern "C" __global__ void __launch_bounds__(256) netra_bench_copy(uint4* __restrict__ dst,
                                                                   const uint4* __restrict__ src,
                                                                   unsigned long long n16) {
  const unsigned long long base = (blockIdx.x * 256ull) * 4 + threadIdx.x;
  uint4 v[4];
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (base + 256ull * k < n16) v[k] = __ldcs(src + base + 256ull * k);
#pragma unroll
  for (int k = 0; k < 4; ++k)
    if (base + 256ull * k < n16) __stcs(dst + base + 256ull * k, v[k]);
}
"""


def graph_us(torch: Any, launch: Any, per_graph: int, replays: int = REPLAYS) -> float:
    """Median device microseconds per call: `per_graph` calls captured in one graph, replayed."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(min(per_graph, 3)):
            launch(i)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(per_graph):
            launch(i)
    for _ in range(2):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / per_graph)
    del g
    return statistics.median(times)


def calls_per_graph(nbytes: int, sets: int) -> int:
    est_us = max(2.0, nbytes / 3.5e6)
    n = int(min(400, max(sets, 2000.0 / est_us)))
    return max(sets, n // sets * sets)


def rotation(nbytes: int, rows: int, l2: int) -> int:
    if rows < 512:
        return 1  # decode sizes: the activations were just written by the previous kernel
    return int(min(16, max(1, math.ceil(3 * l2 / max(nbytes, 1)))))


def copy_limit(torch: Any, cu: Any) -> dict[str, Any]:
    """The bf16 copy kernel over 2 GiB: bytes read + written per second."""
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "copy.cu").write_text(COPY_SOURCE)
        subprocess.run(
            [nvcc, "-cubin", "-arch=sm_90a", "-O3", "-o", "copy.cubin", "copy.cu"], cwd=tmp, check=True
        )
        image = (Path(tmp) / "copy.cubin").read_bytes()
    cu.context()
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    cu.check(cu.lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData(copy)")
    cu.check(cu.lib.cuModuleGetFunction(ctypes.byref(fn), module, b"netra_bench_copy"), "cuModuleGetFunction")
    nbytes = 2 << 30
    src = torch.randn(nbytes // 2, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    n16 = nbytes // 16
    args = [ctypes.c_uint64(dst.data_ptr()), ctypes.c_uint64(src.data_ptr()), ctypes.c_uint64(n16)]
    ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(a) for a in args])
    grid = math.ceil(n16 / 1024)

    def launch(_: int) -> None:
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or None)
        cu.check(
            cu.lib.cuLaunchKernel(fn, grid, 1, 1, 256, 1, 1, 0, stream, ptrs, None), "cuLaunchKernel(copy)"
        )

    us = graph_us(torch, launch, 4)
    ok = bool(torch.equal(dst, src))
    del src, dst
    torch.cuda.empty_cache()
    return {
        "bytes": 2 * nbytes,
        "us": round(us, 2),
        "tb_per_s": round(2 * nbytes / us / 1e6, 3),
        "copied": ok,
    }


def composite(torch: Any, op: str, p: dict[str, int]) -> tuple[Any, Any]:
    """The torch code a user would otherwise run, and a maker of its inputs for `rows` rows."""
    import torch.nn.functional as F

    def rnd(*shape: int) -> Any:
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    if op == "rmsnorm":
        h = p["hidden"]
        w = (rnd(h) * 0.1 + 1).to(torch.bfloat16)  # Gemma's 1 + w is folded into the weight once, as usual
        return (lambda x: F.rms_norm(x, (h,), w, 1e-6)), (lambda rows: (rnd(rows, h),))

    def quant(v: Any, n: int) -> tuple[Any, Any]:
        g = v.view(v.shape[0], n // 128, 128)
        s = g.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
        q = (g / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q.view(v.shape[0], n), s.squeeze(-1)

    if op == "fp8_group_quant":
        h = p["hidden"]
        return (lambda x: quant(x.float(), h)), (lambda rows: (rnd(rows, h),))
    if op == "silu_mul_fp8_quant":
        i = p["inter"]

        def fs(x: Any) -> Any:
            g, u = x.float().split(i, dim=-1)
            return quant(F.silu(g) * u, i)

        return fs, (lambda rows: (rnd(rows, 2 * i),))
    e, k = p["experts"], p["topk"]

    def fm(lg: Any) -> Any:
        pr = torch.softmax(lg.float(), dim=-1)
        wt, ids = torch.topk(pr, k, dim=-1)
        return ids.to(torch.int32), wt / wt.sum(-1, keepdim=True)

    return fm, (lambda rows: (rnd(rows, e),))


def netra_us(
    torch: Any, cu: Any, cat: Any, key: str, entry: Any, rows: int, l2: int
) -> tuple[str, float, int]:
    """The served kernel at `rows`: its tactic, device time per call and the bytes it must move."""
    from netra.certify import conformance

    k = cat.select(key, rows=rows)
    assert k, f"{key}: {k}"
    nbytes = conformance.bytes_moved(entry.op, entry.params, rows)
    sets = rotation(nbytes, rows, l2)
    outs = conformance.outputs(entry.op, entry.params, rows)
    p = entry.params
    if entry.op == "rmsnorm":
        ins = {"x": (rows, p["hidden"]), "w": (p["hidden"],)}
    elif entry.op == "moe_topk_softmax":
        ins = {"logits": (rows, p["experts"])}
    else:
        ins = {"x": (rows, p["hidden"] if entry.op == "fp8_group_quant" else 2 * p["inter"])}
    keep = []
    packed = []
    for _ in range(sets):
        args: dict[str, Any] = {}
        for name, shape in ins.items():
            t = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
            keep.append(t)
            args[name] = t.data_ptr()
        for name, (dtype, shape) in outs.items():
            t = torch.empty(math.prod(shape) * dtype.itemsize, device="cuda", dtype=torch.uint8)
            keep.append(t)
            args[name] = t.data_ptr()
        if entry.op == "rmsnorm":
            args["eps"] = 1e-6
        packed.append(k.pack(**args, rows=rows))
    us = graph_us(torch, lambda i: cu.launch(k, rows, None, packed[i % sets]), calls_per_graph(nbytes, sets))
    del keep
    return k.tactic, us, nbytes


def baseline_us(torch: Any, fn: Any, make: Any, rows: int, nbytes: int, l2: int) -> float:
    sets = rotation(nbytes, rows, l2)
    inputs = [make(rows) for _ in range(sets)]
    return graph_us(
        torch, lambda i: fn(*inputs[i % sets]), calls_per_graph(nbytes, sets) if rows >= 512 else 50
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--plot", help="write a PNG of achieved bandwidth per kernel and row count here")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    args = ap.parse_args()

    import torch

    from netra.loaders.cuda import Cuda
    from netra.runtime import open_catalog

    cat = open_catalog("sm_90")
    cu = Cuda()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "copy": copy_limit(torch, cu),
        "contracts": {},
    }
    limit = result["copy"]["tb_per_s"]
    print(f"copy limit: {limit:.3f} TB/s ({result['copy']['us']} us for 4 GiB moved)", flush=True)
    for key in sorted(cat.contracts()):
        entry = cat.table.entries[key]
        fn, make = composite(torch, entry.op, entry.params)
        compiled = None if args.no_compile else torch.compile(fn, dynamic=False)
        rows_out = []
        for rows in ROWS:
            tactic, us, nbytes = netra_us(torch, cu, cat, key, entry, rows, l2)
            row = {"rows": rows, "tactic": tactic, "netra_us": round(us, 3), "bytes": nbytes,
                   "netra_tb_per_s": round(nbytes / us / 1e6, 4)}  # fmt: skip
            if rows in EAGER_ROWS:
                row["eager_us"] = round(baseline_us(torch, fn, make, rows, nbytes, l2), 3)
            if rows in COMPILE_ROWS and compiled is not None:
                row["compile_us"] = round(baseline_us(torch, compiled, make, rows, nbytes, l2), 3)
            rows_out.append(row)
            extra = "".join(
                f", {name} {row[name + '_us']:.2f} us ({row[name + '_us'] / us:.2f}x)"
                for name in ("eager", "compile")
                if name + "_us" in row
            )
            print(f"{key} rows {rows}: {tactic} {us:.2f} us, {row['netra_tb_per_s']:.2f} TB/s"
                  f" ({row['netra_tb_per_s'] / limit:.0%} of copy){extra}", flush=True)  # fmt: skip
        result["contracts"][key] = rows_out
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if args.plot:
        plot(result, Path(args.plot))
    print(summary(result))
    return 0


def summary(result: dict[str, Any]) -> str:
    limit = result["copy"]["tb_per_s"]
    lines = [
        f"{'contract':44} {'8192 rows':>10} {'TB/s':>6} {'%copy':>6} {'vs eager':>9} {'vs compile':>10} {'1 row':>7} {'16 rows':>8}"
    ]
    for key, rows in result["contracts"].items():
        by = {r["rows"]: r for r in rows}
        p = by[8192]
        ce = p.get("compile_us")
        lines.append(
            f"{key:44} {p['netra_us']:>8.2f}us {p['netra_tb_per_s']:>6.2f} {p['netra_tb_per_s'] / limit:>6.0%} "
            f"{p['eager_us'] / p['netra_us']:>8.2f}x {(ce / p['netra_us']) if ce else float('nan'):>9.2f}x "
            f"{by[1]['netra_us']:>5.2f}us {by[16]['netra_us']:>6.2f}us"
        )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    limit = result["copy"]["tb_per_s"]
    fig, ax = plt.subplots(figsize=(11, 6.5))
    for key, rows in result["contracts"].items():
        ax.plot([r["rows"] for r in rows], [r["netra_tb_per_s"] for r in rows], marker="o", label=key)
    ax.axhline(limit, color="black", linestyle="--", label=f"bf16 copy limit ({limit:.2f} TB/s)")
    ax.axhline(0.9 * limit, color="grey", linestyle=":", label="90% of the copy limit")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows (tokens)")
    ax.set_ylabel("effective bandwidth, TB/s (bytes the op must move / time)")
    ax.set_title(f"Netra sm_90 certified kernels on {result['device']} (CUDA-graph replay)")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
