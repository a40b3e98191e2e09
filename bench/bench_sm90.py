"""Netra's sm_90 kernels against the copy limit and every peer a serving engineer could pick, on the H200.

Run on the GPU machine with a python that has torch and the netra wheel installed (tools/gpu-session):

    python bench/bench_sm90.py --json OUT.json --plot bandwidth.png

In one run, per contract of the installed sm_90 table and per row count (1, 16, 256, 8192, 32768):

- copy: the copy limit, the best of several copy kernels over 2 GiB (16-byte vector copies with 4 and 8
  accesses in flight per thread in 256-thread blocks, a streaming-hint copy, torch's elementwise shape
  of one or two 16-byte vectors per thread in 128-thread blocks with plain, read-only-path and
  streaming loads, a grid-stride copy, and torch's own elementwise kernel,
  `torch.mul(src, 1, out=dst)`), and the same copy kernels moving the op's own byte count (half read,
  half written), the fairest yardstick for a short kernel, which pays the same fixed start as a short copy;
- netra: the kernel the runtime serves (`select(key, rows=rows)`: the certified dispatch), launched
  through netra.loaders.cuda; with --all-tactics every candidate of the entry (policy `experiment`);
- eager / compile: the torch composite a user would write, eagerly and through
  torch.compile(dynamic=False) (compiled once per row count; --compile-workers processes fill inductor's
  cache first, so that the measured process only loads what they built);
- liger: Liger-kernel's Triton RMSNorm (and fused add-RMSNorm) where the op matches, when installed;
- chain (the fused families: fused_add_rmsnorm, rmsnorm_fp8_group_quant,
  fused_add_rmsnorm_fp8_group_quant): the same result from Netra's unfused kernels, torch's bf16 add
  then netra.torch's rmsnorm and fp8_group_quant (each served at --policy), in the same graph replay.

Every time is device time per call from CUDA-graph replay (warm-up, then the median of several replays),
inputs rotating through enough buffer sets that one replay streams well past L2 from 256 rows up (the
activations of a decode step are in L2 anyway, so small row counts do not rotate). Effective bandwidth =
the bytes the op must move (netra.certify.conformance.bytes_moved) / time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROWS = (1, 16, 256, 8192, 32768)
ROTATE_FROM_ROWS = 256
REPLAYS = 9
TARGET_REPLAY_US = 2000.0
COPY_BYTES = 1 << 30  # each way: 2 GiB moved per call
COPY_SOURCE = r"""
#include <stdint.h>
// 16-byte vector copies of n16 16-byte words; block b of 256 threads copies 256 * N words.
#define COPY(NAME, N, LD, ST)                                                                     \
  extern "C" __global__ void __launch_bounds__(256) NAME(uint4* __restrict__ dst,                 \
                                                         const uint4* __restrict__ src,           \
                                                         unsigned long long n16) {                \
    const unsigned long long base = (blockIdx.x * 256ull) * N + threadIdx.x;                      \
    uint4 v[N];                                                                                   \
    _Pragma("unroll") for (int k = 0; k < N; ++k) if (base + 256ull * k < n16) v[k] = LD(src + base + 256ull * k); \
    _Pragma("unroll") for (int k = 0; k < N; ++k) if (base + 256ull * k < n16) ST(dst + base + 256ull * k, v[k]);  \
  }
__device__ __forceinline__ uint4 ld_plain(const uint4* p) { return *p; }
__device__ __forceinline__ void st_plain(uint4* p, uint4 v) { *p = v; }
__device__ __forceinline__ uint4 ld_nc(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint4 ld_weak(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
COPY(netra_bench_copy_v16x4, 4, ld_plain, st_plain)
COPY(netra_bench_copy_v16x8, 8, ld_plain, st_plain)
COPY(netra_bench_copy_v16x4_cs, 4, __ldcs, __stcs)
// torch's elementwise shape: 128-thread blocks, one 16-byte vector per thread (X1) or two (X2)
#define COPY128(NAME, N, LD, ST)                                                                  \
  extern "C" __global__ void __launch_bounds__(128) NAME(uint4* dst, const uint4* src,            \
                                                         unsigned long long n16) {                \
    const unsigned long long base = (blockIdx.x * 128ull) * N + threadIdx.x;                      \
    uint4 v[N];                                                                                   \
    _Pragma("unroll") for (int k = 0; k < N; ++k) if (base + 128ull * k < n16) v[k] = LD(src + base + 128ull * k); \
    _Pragma("unroll") for (int k = 0; k < N; ++k) if (base + 128ull * k < n16) ST(dst + base + 128ull * k, v[k]);  \
  }
COPY128(netra_bench_copy_v16x1, 1, ld_weak, st_plain)
COPY128(netra_bench_copy_v16x1_nc, 1, ld_nc, st_plain)
COPY128(netra_bench_copy_v16x1_cs, 1, __ldcs, __stcs)
COPY128(netra_bench_copy_v16x2, 2, ld_weak, st_plain)
// grid-stride: a fixed grid of resident blocks walks the whole buffer, 4 words in flight per thread
extern "C" __global__ void __launch_bounds__(256) netra_bench_copy_v16_gs(uint4* __restrict__ dst,
                                                                          const uint4* __restrict__ src,
                                                                          unsigned long long n16) {
  const unsigned long long stride = gridDim.x * 256ull;
  for (unsigned long long i = blockIdx.x * 256ull + threadIdx.x; i < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) if (i + k * stride < n16) v[k] = src[i + k * stride];
#pragma unroll
    for (int k = 0; k < 4; ++k) if (i + k * stride < n16) dst[i + k * stride] = v[k];
  }
}
"""
COPY_KERNELS = {  # symbol -> (16-byte words per block (None: grid-stride, 8 blocks per SM), threads)
    "netra_bench_copy_v16x4": (1024, 256),
    "netra_bench_copy_v16x8": (2048, 256),
    "netra_bench_copy_v16x4_cs": (1024, 256),
    "netra_bench_copy_v16x1": (128, 128),
    "netra_bench_copy_v16x1_nc": (128, 128),
    "netra_bench_copy_v16x1_cs": (128, 128),
    "netra_bench_copy_v16x2": (256, 128),
    "netra_bench_copy_v16_gs": (None, 256),
}


# ---------------------------------------------------------------------------------------------------
# timing


def graph_us(torch: Any, launch: Callable[[int], None], per_graph: int, replays: int = REPLAYS) -> float:
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


def sets_for(footprint: int, rows: int, l2: int) -> int:
    """Buffer sets to rotate through so that one pass over them is at least 3x L2 (from 256 rows up)."""
    if rows < ROTATE_FROM_ROWS:
        return 1
    return int(min(32, max(1, math.ceil(3 * l2 / max(footprint, 1)))))


def per_graph(nbytes: int, sets: int) -> int:
    est_us = max(2.0, nbytes / 3.5e6)
    n = int(min(800, max(sets, TARGET_REPLAY_US / est_us)))
    return max(sets, -(-n // sets) * sets)


# ---------------------------------------------------------------------------------------------------
# the copy kernels


class Copies:
    """The copy kernels, built here with the machine's nvcc and launched through the CUDA driver."""

    def __init__(self, torch: Any, cu: Any) -> None:
        self.torch, self.cu = torch, cu
        nvcc = os.environ.get("NETRA_NVCC") or shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "copy.cu").write_text(COPY_SOURCE)
            subprocess.run(
                [nvcc, "-cubin", "-arch=sm_90a", "-O3", "-o", "copy.cubin", "copy.cu"], cwd=tmp, check=True
            )
            image = (Path(tmp) / "copy.cubin").read_bytes()
        cu.context()
        self.module = ctypes.c_void_p()
        cu.check(cu.lib.cuModuleLoadData(ctypes.byref(self.module), image), "cuModuleLoadData(copy)")
        self.fns = {}
        for name in COPY_KERNELS:
            fn = ctypes.c_void_p()
            cu.check(cu.lib.cuModuleGetFunction(ctypes.byref(fn), self.module, name.encode()), name)
            self.fns[name] = fn
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count

    def launcher(self, name: str, dst: Any, src: Any, n16: int) -> Callable[[int], None]:
        args = [ctypes.c_uint64(dst.data_ptr()), ctypes.c_uint64(src.data_ptr()), ctypes.c_uint64(n16)]
        ptrs = (ctypes.c_void_p * 3)(*[ctypes.addressof(a) for a in args])
        words, threads = COPY_KERNELS[name]
        grid = self.sms * 8 if words is None else max(1, math.ceil(n16 / words))
        fn, cu, torch = self.fns[name], self.cu, self.torch

        def launch(_: int) -> None:
            keep = (args, ptrs)  # noqa: F841  (the argument buffers live as long as the launcher)
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream or None)
            cu.check(cu.lib.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, stream, ptrs, None), name)

        return launch

    def time(self, nbytes_each_way: int, rows: int, l2: int) -> dict[str, float]:
        """Every copy kernel (and torch.mul) moving `nbytes_each_way` read + as many written, in us."""
        torch = self.torch
        n = max(16, -(-nbytes_each_way // 16) * 16)
        sets = sets_for(2 * n, rows, l2)
        srcs = [torch.randn(n // 2, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]
        dsts = [torch.empty_like(s) for s in srcs]
        out: dict[str, float] = {}
        count = per_graph(2 * n, sets)
        for name in COPY_KERNELS:
            ls = [self.launcher(name, d, s, n // 16) for d, s in zip(dsts, srcs, strict=True)]
            out[name] = round(graph_us(torch, lambda i, ls=ls: ls[i % sets](i), count), 3)
            if not torch.equal(dsts[0], srcs[0]):
                raise SystemExit(f"copy kernel {name} did not copy")
            for d in dsts:
                d.zero_()

        def mul(i: int, srcs: list[Any] = srcs, dsts: list[Any] = dsts) -> None:
            torch.mul(srcs[i % sets], 1.0, out=dsts[i % sets])

        out["torch_mul"] = round(graph_us(torch, mul, count), 3)
        return out


# ---------------------------------------------------------------------------------------------------
# what each op family reads, and what a user would otherwise run


def input_shapes(op: str, p: dict[str, int], rows: int) -> dict[str, tuple[int, ...]]:
    """The bf16 inputs of one launch, by kernel argument name."""
    if op == "rmsnorm":
        return {"x": (rows, p["hidden"]), "w": (p["hidden"],)}
    if op == "fp8_group_quant":
        return {"x": (rows, p["hidden"])}
    if op == "silu_mul_fp8_quant":
        return {"x": (rows, 2 * p["inter"])}
    if op == "moe_topk_softmax":
        return {"logits": (rows, p["experts"])}
    if op in ("fused_add_rmsnorm", "fused_add_rmsnorm_fp8_group_quant"):
        return {"x": (rows, p["hidden"]), "residual": (rows, p["hidden"]), "w": (p["hidden"],)}
    if op == "rmsnorm_fp8_group_quant":
        return {"x": (rows, p["hidden"]), "w": (p["hidden"],)}
    raise SystemExit(f"bench_sm90: no input shapes for op {op!r}; add them to input_shapes()")


def _quant(torch: Any, v: Any, n: int) -> tuple[Any, Any]:
    g = v.view(v.shape[0], n // 128, 128)
    s = g.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
    q = (g / s).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.view(v.shape[0], n), s.squeeze(-1)


def composite(torch: Any, op: str, p: dict[str, int]) -> Callable[..., Any]:
    """The torch code a user would otherwise write, taking the inputs of input_shapes() in order."""
    import torch.nn.functional as F

    if op == "rmsnorm":
        h = p["hidden"]  # Gemma's (1 + w) is folded into the weight once, as engines do
        return lambda x, w: F.rms_norm(x, (h,), w, 1e-6)
    if op == "fp8_group_quant":
        return lambda x: _quant(torch, x.float(), p["hidden"])
    if op == "silu_mul_fp8_quant":
        i = p["inter"]

        def fs(x: Any) -> Any:
            g, u = x.float().split(i, dim=-1)
            return _quant(torch, F.silu(g) * u, i)

        return fs
    if op == "moe_topk_softmax":
        k = p["topk"]

        def fm(lg: Any) -> Any:
            pr = torch.softmax(lg.float(), dim=-1)
            wt, ids = torch.topk(pr, k, dim=-1)
            return ids.to(torch.int32), wt / wt.sum(-1, keepdim=True)

        return fm
    if op in FUSED:
        h = p["hidden"]

        def ff(*t: Any) -> Any:
            x, w = t[0], t[-1]
            r = x + t[1] if len(t) == 3 else None  # the residual add, bf16
            y = F.rms_norm(r if r is not None else x, (h,), w, 1e-6)
            if op == "fused_add_rmsnorm":
                return y, r
            q, s = _quant(torch, y.float(), h)
            return (q, s) if r is None else (q, s, r)

        return ff
    raise SystemExit(f"bench_sm90: no torch composite for op {op!r}; add it to composite()")


def liger(op: str, p: dict[str, int]) -> Callable[..., Any] | None:
    """Liger-kernel's forward for this op, taking the inputs of input_shapes(), or None: its RMSNorm for
    rmsnorm, its fused add-RMSNorm for fused_add_rmsnorm (the quantizing families have no Liger match)."""
    if op not in ("rmsnorm", "fused_add_rmsnorm"):
        return None
    try:
        if op == "rmsnorm":
            from liger_kernel.ops.rms_norm import rms_norm_forward
        else:
            from liger_kernel.ops.fused_add_rms_norm import fused_add_rms_norm_forward
    except Exception as e:  # not installed, or not importable beside this torch/triton
        print(f"liger-kernel: not used for {op} ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    off = float(p["weight_offset"])
    mode = "gemma" if off else "llama"
    if op == "fused_add_rmsnorm":
        return lambda x, r, w: fused_add_rms_norm_forward(x, r, w, 1e-6, off, mode)[:2]
    return lambda x, w: rms_norm_forward(x, w, 1e-6, off, mode, None)[0]


FUSED = ("fused_add_rmsnorm", "rmsnorm_fp8_group_quant", "fused_add_rmsnorm_fp8_group_quant")


def chain(op: str, p: dict[str, int], policy: str) -> Callable[..., Any]:
    """The fused family's result from Netra's unfused kernels: torch's bf16 add (no Netra kernel adds),
    then netra.torch's rmsnorm and fp8_group_quant, each served at `policy` (else their composite)."""
    import netra.torch as nt

    nt.set_policy(policy)
    wo = p["weight_offset"]

    def run(*t: Any) -> Any:
        x, w = t[0], t[-1]
        r = x + t[1] if len(t) == 3 else None
        y = nt.rmsnorm(r if r is not None else x, w, 1e-6, wo)
        if op == "fused_add_rmsnorm":
            return y, r
        q, s = nt.fp8_group_quant(y)
        return (q, s) if r is None else (q, s, r)

    return run


# ---------------------------------------------------------------------------------------------------
# measuring one contract


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        from netra.loaders.cuda import Cuda
        from netra.runtime import open_catalog

        self.args, self.torch = args, torch
        self.cat = open_catalog("sm_90")
        self.cu = Cuda()
        self.l2 = torch.cuda.get_device_properties(0).L2_cache_size
        self.copies = Copies(torch, self.cu)
        self.copy_cache: dict[int, dict[str, float]] = {}
        self.evidence = None  # artifact -> its evidence record, from the evidence file certify wrote beside
        if args.table:
            ev = Path(args.table).with_name(Path(args.table).stem + ".evidence.json")
            self.evidence = json.loads(ev.read_text())["hardware"]

    def inputs(self, op: str, p: dict[str, int], rows: int, sets: int) -> list[list[Any]]:
        torch = self.torch
        return [
            [
                torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
                for shape in input_shapes(op, p, rows).values()
            ]
            for _ in range(sets)
        ]

    def footprint(self, op: str, p: dict[str, int], rows: int) -> int:
        from netra.certify import conformance

        outs = sum(math.prod(s) * d.itemsize for d, s in conformance.outputs(op, p, rows).values())
        return outs + sum(2 * math.prod(s) for s in input_shapes(op, p, rows).values())

    def netra_us(self, key: str, entry: Any, rows: int, tactic: str | None) -> tuple[str, float]:
        from netra.certify import conformance

        torch, p = self.torch, entry.params
        if tactic is None:
            k = self.cat.select(key, self.args.policy, rows=rows)
        else:
            k = self.cat.select(key, "experiment", tactic=tactic)
        if not k:
            raise SystemExit(f"{key}: {k}")
        sets = sets_for(self.footprint(entry.op, p, rows), rows, self.l2)
        names = list(input_shapes(entry.op, p, rows))
        keep, packed = [], []
        for ins in self.inputs(entry.op, p, rows, sets):
            args: dict[str, Any] = {n: t.data_ptr() for n, t in zip(names, ins, strict=True)}
            keep.append(ins)
            for name, (dtype, shape) in conformance.outputs(entry.op, p, rows).items():
                t = torch.empty(max(1, math.prod(shape) * dtype.itemsize), device="cuda", dtype=torch.uint8)
                keep.append(t)
                args[name] = t.data_ptr()
            if entry.op in ("rmsnorm", *FUSED):
                args["eps"] = 1e-6
            packed.append(k.pack(**args, rows=rows))
        nbytes = conformance.bytes_moved(entry.op, p, rows)
        us = graph_us(
            torch, lambda i: self.cu.launch(k, rows, None, packed[i % sets]), per_graph(nbytes, sets)
        )
        del keep
        return k.tactic, us

    def certified_winner(self, key: str, rows: int) -> str | None:
        """With --table: the passing candidate of a certify output that was fastest at the certified row
        count nearest `rows` (what a table certified from that run would serve); else None."""
        if self.evidence is None:
            return None
        entry = self.cat.table.entries.get(key)
        best: tuple[float, str] | None = None
        for c in entry.candidates if entry else ():
            hw = self.evidence.get(c.artifact)
            if not hw or not hw["passed"] or not hw["timings"]:
                continue
            near = min(hw["timings"], key=lambda t: abs(math.log(t["rows"] / rows)))
            if best is None or near["median_us"] < best[0]:
                best = (near["median_us"], c.tactic)
        return best[1] if best else None

    def peer_us(self, fn: Callable[..., Any], op: str, p: dict[str, int], rows: int, nbytes: int) -> float:
        sets = sets_for(self.footprint(op, p, rows), rows, self.l2)
        ins = self.inputs(op, p, rows, sets)
        return graph_us(self.torch, lambda i: fn(*ins[i % sets]), per_graph(nbytes, sets))

    def copy_us(self, nbytes: int, rows: int) -> dict[str, float]:
        each = -(-nbytes // 32) * 16  # half read, half written, in whole 16-byte words
        if each not in self.copy_cache:
            self.copy_cache[each] = self.copies.time(each, rows, self.l2)
        return self.copy_cache[each]

    def contract(self, key: str, compiled: dict[int, Any]) -> list[dict[str, Any]]:
        from netra.certify import conformance

        entry = self.cat.table.entries[key]
        op, p = entry.op, entry.params
        fn = composite(self.torch, op, p)
        lg = None if self.args.no_liger else liger(op, p)
        tactics = [c.tactic for c in entry.candidates] if self.args.all_tactics else []
        out = []
        for rows in self.args.rows:
            nbytes = conformance.bytes_moved(op, p, rows)
            tactic, us = self.netra_us(key, entry, rows, self.certified_winner(key, rows))
            copies = self.copy_us(nbytes, rows)
            row: dict[str, Any] = {
                "rows": rows, "bytes": nbytes, "tactic": tactic, "netra_us": round(us, 3),
                "netra_tb_per_s": round(nbytes / us / 1e6, 4), "copy_us": copies,
                "copy_best_us": min(copies.values()),
            }  # fmt: skip
            if tactics:
                row["tactics_us"] = {t: round(self.netra_us(key, entry, rows, t)[1], 3) for t in tactics}
            if not self.args.no_eager:
                row["eager_us"] = round(self.peer_us(fn, op, p, rows, nbytes), 3)
            if rows in compiled:
                row["compile_us"] = round(self.peer_us(compiled[rows], op, p, rows, nbytes), 3)
            if lg is not None:
                row["liger_us"] = round(self.peer_us(lg, op, p, rows, nbytes), 3)
            if op in FUSED:
                row["chain_us"] = round(self.peer_us(chain(op, p, self.args.policy), op, p, rows, nbytes), 3)
                unfused = nt_stats_after()
                if unfused:
                    row["chain_paths"] = unfused
            out.append(row)
            peers = "".join(
                f", {n} {row[n + '_us']:.2f} us ({row[n + '_us'] / us:.2f}x)"
                for n in ("chain", "eager", "compile", "liger") if n + "_us" in row
            )  # fmt: skip
            print(f"{key} rows {rows}: {tactic} {us:.2f} us, {row['netra_tb_per_s']:.2f} TB/s, "
                  f"{us / row['copy_best_us']:.2f}x the same-bytes copy{peers}", flush=True)  # fmt: skip
        return out


def nt_stats_after() -> dict[str, dict[str, int]]:
    """Which path each unfused op of the chain took (kernel or composite), then the counters reset."""
    import netra.torch as nt

    st = nt.stats()
    nt.reset_stats()
    return st


# ---------------------------------------------------------------------------------------------------
# torch.compile, with inductor's cache filled by worker processes first


def fresh_dynamo(torch: Any) -> None:
    """Forget what dynamo compiled before, and refuse to fall back to eager silently.

    Every contract of a family compiles the same composite code (a closure over its constants), and
    dynamo gives one code object `recompile_limit` (8) graphs: past that it runs the function eagerly
    with a warning, so later contracts' "compile" rows would time eager code. Reset before each
    contract (its row counts are its graphs) and make hitting the limit an error where torch can."""
    torch._dynamo.reset()
    cfg = torch._dynamo.config
    if hasattr(cfg, "fail_on_recompile_limit_hit"):
        cfg.fail_on_recompile_limit_hit = True


def compile_one(key: str, rows: int) -> Any:
    """torch.compile(dynamic=False) of the contract's composite, run once at `rows` (compiles it)."""
    import torch

    from netra.runtime import Contract

    c = Contract.parse(key)
    fn = torch.compile(composite(torch, c.op, c.params), dynamic=False)
    ins = [
        torch.randn(*s, device="cuda", dtype=torch.bfloat16)
        for s in input_shapes(c.op, c.params, rows).values()
    ]
    fn(*ins)
    torch.cuda.synchronize()
    return fn


def warm_compile_cache(jobs: list[tuple[str, int]], workers: int) -> None:
    """Fill inductor's on-disk caches in `workers` processes (compiling is CPU work; the GPU is idle)."""
    if workers <= 1 or not jobs:
        return
    procs = []
    for w in range(workers):
        mine = jobs[w::workers]
        if mine:
            spec = json.dumps(mine)
            procs.append(subprocess.Popen([sys.executable, __file__, "--warm-compile", spec]))
    for pr in procs:
        pr.wait()


# ---------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--plot", help="write a PNG of achieved bandwidth per kernel and row count here")
    ap.add_argument(
        "--rows", default=",".join(map(str, ROWS)), help="row counts, comma-separated (default: %(default)s)"
    )
    ap.add_argument("--only", help="only contracts whose key matches this regular expression")
    ap.add_argument(
        "--policy",
        default="accepted",
        help="the policy Netra's kernels are selected with (default: %(default)s)",
    )
    ap.add_argument("--all-tactics", action="store_true", help="also time every candidate of each entry")
    ap.add_argument(
        "--table",
        help="serve each row count with the fastest passing candidate of this `netra certify` "
        "output (its evidence file beside it is read; an uncertified install cannot serve by policy)",
    )
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile baselines")
    ap.add_argument("--no-eager", action="store_true", help="skip the torch eager baselines")
    ap.add_argument("--no-liger", action="store_true", help="skip Liger-kernel even when it is installed")
    ap.add_argument(
        "--compile-workers",
        type=int,
        default=8,
        help="processes that fill inductor's cache first (default: %(default)s)",
    )
    ap.add_argument("--warm-compile", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        args.rows = tuple(int(r) for r in args.rows.split(","))
        if any(r < 1 for r in args.rows):
            raise ValueError
    except ValueError:
        ap.error(f"--rows: {args.rows!r} is not a comma-separated list of positive integers")
    if args.compile_workers < 1:
        ap.error("--compile-workers must be at least 1")
    if args.warm_compile:
        import torch

        last = None
        for key, rows in json.loads(args.warm_compile):
            if key != last:
                fresh_dynamo(torch)
                last = key
            compile_one(key, rows)
        return 0

    b = Bench(args)
    torch = b.torch
    keys = [k for k in sorted(b.cat.contracts()) if not args.only or re.search(args.only, k)]
    if not keys:
        ap.error(f"--only {args.only!r} matches no contract of the installed sm_90 table")
    copy = b.copies.time(COPY_BYTES, 1 << 20, b.l2)
    limit_us = min(copy.values())
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "liger": _version("liger-kernel"),
        "copy": {
            "bytes": 2 * COPY_BYTES,
            "us": copy,
            "best": min(copy, key=copy.__getitem__),
            "tb_per_s": round(2 * COPY_BYTES / limit_us / 1e6, 3),
        },
        "contracts": {},
    }
    print(f"copy limit: {result['copy']['tb_per_s']:.3f} TB/s ({result['copy']['best']}; "
          + ", ".join(f"{k} {2 * COPY_BYTES / v / 1e6:.3f}" for k, v in copy.items()) + ")", flush=True)  # fmt: skip
    jobs = [] if args.no_compile else [(k, r) for k in keys for r in args.rows]
    warm_compile_cache(jobs, args.compile_workers)
    for key in keys:
        if not args.no_compile:
            fresh_dynamo(torch)
        compiled = {} if args.no_compile else {r: compile_one(key, r) for r in args.rows}
        result["contracts"][key] = b.contract(key, compiled)
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if args.plot:
        plot(result, Path(args.plot))
    print(summary(result))
    return 0


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def summary(result: dict[str, Any]) -> str:
    """Per contract and row count: us, % of the copy limit, x the same-bytes copy, and each peer / Netra."""
    limit = result["copy"]["tb_per_s"]
    head = (
        f"{'contract':72} {'rows':>6} {'tactic':>7} {'us':>8} {'%copy':>6} {'xcopy':>6} {'chain':>7} "
        f"{'eager':>7} {'compile':>7} {'liger':>7}"
    )
    lines = [head]
    for key, rows in result["contracts"].items():
        for r in rows:

            def ratio(name: str, r: dict[str, Any] = r) -> str:
                v = r.get(name + "_us")
                return f"{v / r['netra_us']:>6.2f}x" if v else f"{'-':>7}"

            lines.append(
                f"{key:72} {r['rows']:>6} {r['tactic']:>7} {r['netra_us']:>8.2f} {r['netra_tb_per_s'] / limit:>6.0%} "
                f"{r['netra_us'] / r['copy_best_us']:>6.2f} {ratio('chain')} {ratio('eager')} {ratio('compile')} "
                f"{ratio('liger')}"
            )
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    limit = result["copy"]["tb_per_s"]
    fig, ax = plt.subplots(figsize=(12, 7))
    for key, rows in result["contracts"].items():
        ax.plot([r["rows"] for r in rows], [r["netra_tb_per_s"] for r in rows], marker="o", label=key)
    ax.axhline(
        limit,
        color="black",
        linestyle="--",
        label=f"copy limit ({limit:.2f} TB/s, best of {len(result['copy']['us'])})",
    )
    ax.axhline(0.95 * limit, color="grey", linestyle=":", label="95% of the copy limit")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("rows (tokens)")
    ax.set_ylabel("effective bandwidth, TB/s (bytes the op must move / time)")
    ax.set_title(f"Netra sm_90 kernels on {result['device']} (CUDA-graph replay, inputs rotated past L2)")
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
