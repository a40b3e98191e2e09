"""Why netra.torch's functional path makes the same kernel slower than out= (issue 31), on the H200.

Per certified contract (--contracts, keys as `netra catalog` prints them; the default is the contracts of
issue 31's figures) and per row count (--rows, default 8192 and 32768), every variant below is captured
in one CUDA graph of G calls (--graph-calls, rounded up to the input copies), each call on the next of
C input copies, C chosen so that one pass over the copies (inputs and outputs) is more than 3x L2; the
graphs are replayed in interleaved rounds (--rounds) and each row is the median replay / G:

  functional        nt.<op>(...): new outputs per call (the graph's pool; the outputs are dropped at
                    once, so the pool may hand every call the same buffer)
  functional-kept   the same calls, every call's outputs kept alive while captured (the pool must give
                    each call its own buffer)
  out               nt.<op>(..., out=...) into outputs allocated once per input copy
  out-reused        out= into one set of outputs for every call (what the pool gives functional when
                    each call's outputs are dropped): is it the one buffer, not the allocation?
  out@OFFSET        out=, each output placed OFFSET bytes past a 2 MiB-aligned base (0, 256, 4096,
                    65536, 2 MiB + 512): does where the output sits change the kernel's time?
  raw               the runtime's launch of the kernel nt.kernel_for names (Cuda().launch with the
                    kernarg bytes packed once), into outputs of its own per copy
  copy              the best of the 16-byte load/store copy kernels (streaming and plain, 2, 4 or 8
                    blocks of 512 threads per SM) moving the call's bytes: half of what the call reads
                    plus writes, read, and the same written; % = copy / variant
  record            certify's median for the contract, rows and tactic, from the install's certified
                    table and its evidence (what `netra catalog` shows), with the device certify ran on
                    (flagged "not comparable" where it is not this run's GPU); "no record" where certify
                    did not time that row count

Guards before any timing, else the run stops with one line: strict mode serves every nt call (the
certified kernel, no fallback); every variant's outputs equal the raw launch's byte for byte, once
eagerly per copy and once more from the graph itself (its outputs are filled with 0xFF bytes, the
graph replayed, then compared). Each out@ buffer is checked to sit at its offset. The JSON also has, per
graph, where its outputs sit (address mod 2 MiB, and from x).

Run it with the python of an environment where the netra wheel and torch with CUDA are installed (cupy
for the copy kernels; torch.utils.cpp_extension.load_inline where cupy is absent):

    python bench/bench_operator_path.py --json OUT.json

`python bench/bench_operator_path.py` puts bench/, not the tree, on sys.path: the installed netra is the
one measured (the first line printed says which install it is). On a machine without a GPU,

    python bench/bench_operator_path.py --cpu-smoke --json OUT.json

runs the same contracts at 1 and 16 rows on CPU, where netra.torch falls back to its composite: the
variants are built the same way (the same out= and placed buffers), strict mode must refuse every call,
and every variant's outputs must equal the composite's byte for byte; nothing is timed
(tests/test_bench_operator_path.py runs it).
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _entry import run
from bench_moe import L2_DEFAULT, Graph, copies_past, one_line, start

DEFAULT_CONTRACTS = [
    "rmsnorm(hidden=2048,weight_offset=0)",
    "rmsnorm(hidden=3584,weight_offset=1)",
    "rmsnorm(hidden=4096,weight_offset=0)",
    "fp8_group_quant(hidden=4096,group=128)",
    "silu_mul_fp8_quant(inter=14336,group=128)",
    "fused_add_rmsnorm(hidden=4096,weight_offset=0)",
]
ROWS = (8192, 32768)
SMOKE_ROWS = (1, 16)
MIB = 2**20
ALIGN = 2 * MIB
OFFSETS = (0, 256, 4096, 65536, 2 * MIB + 512)
EPS = 1e-6
POISON = 0xFF
# each op's positional arguments, as netra.torch and netra.torch.contracts take them
CALL = {
    "rmsnorm": ("x", "w", "eps", "weight_offset"),
    "fp8_group_quant": ("x", "group"),
    "silu_mul_fp8_quant": ("x", "group"),
    "moe_topk_softmax": ("logits", "topk"),
    "fused_add_rmsnorm": ("x", "residual", "w", "eps", "weight_offset"),
    "rmsnorm_fp8_group_quant": ("x", "w", "eps", "weight_offset", "group"),
    "fused_add_rmsnorm_fp8_group_quant": ("x", "residual", "w", "eps", "weight_offset", "group"),
}
VARIANTS = ("functional", "functional-kept", "out", "out-reused", *(f"out@{o}" for o in OFFSETS), "raw")

COPY_SOURCE = r"""
template <int MODE>
__device__ __forceinline__ void netra_bench_copy(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                                 unsigned long long n16) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n16; i += 4 * stride) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = MODE == 0 ? __ldcs(src + i + u * stride) : src[i + u * stride];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (MODE == 0) __stcs(dst + i + u * stride, v[u]); else dst[i + u * stride] = v[u];
    }
  }
  for (; i < n16; i += stride) {
    if (MODE == 0) __stcs(dst + i, __ldcs(src + i)); else dst[i] = src[i];
  }
}
extern "C" __global__ void __launch_bounds__(512)
    netra_bench_copy_cs(const uint4* __restrict__ s, uint4* __restrict__ d, unsigned long long n16) {
  netra_bench_copy<0>(s, d, n16);
}
extern "C" __global__ void __launch_bounds__(512)
    netra_bench_copy_plain(const uint4* __restrict__ s, uint4* __restrict__ d, unsigned long long n16) {
  netra_bench_copy<1>(s, d, n16);
}
"""
COPY_KERNELS = ("netra_bench_copy_cs", "netra_bench_copy_plain")
COPY_BLOCKS_PER_SM = (2, 4, 8)
COPY_LAUNCHER = r"""
#include <ATen/cuda/CUDAContext.h>
void copy16(int64_t src, int64_t dst, int64_t n16, int64_t blocks, int64_t which) {
  using K = void (*)(const uint4*, uint4*, unsigned long long);
  const K kernels[2] = {netra_bench_copy_cs, netra_bench_copy_plain};
  kernels[which]<<<(unsigned)blocks, 512, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst), (unsigned long long)n16);
}
"""


class BenchError(SystemExit):
    """The run stops here: one line on stderr, exit status 1."""

    def __init__(self, what: str) -> None:
        super().__init__(f"bench_operator_path: {what}")


# ---------------------------------------------------------------------------------------------------
# one contract's calls: inputs per copy, outputs placed, the variants


def make_inputs(torch: Any, op: str, p: dict[str, int], rows: int, g: Any, dev: Any) -> tuple[Any, ...]:
    """One copy's positional arguments of nt.<op> (CALL[op]), drawn from the generator `g` on `dev`."""
    bf16 = torch.bfloat16

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, generator=g, device=dev).to(bf16)

    width = {"silu_mul_fp8_quant": 2 * p.get("inter", 0), "moe_topk_softmax": p.get("experts", 0)}
    n = width.get(op) or p["hidden"]
    vals: dict[str, Any] = {
        "eps": EPS,
        **{k: v for k, v in p.items() if k in ("weight_offset", "group", "topk")},
    }
    vals["x"] = vals["logits"] = rand(rows, n)
    if "residual" in CALL[op]:
        vals["residual"] = rand(rows, n)
    if "w" in CALL[op]:
        vals["w"] = (1 + 0.1 * torch.randn(n, generator=g, device=dev)).to(bf16)
    return tuple(vals[a] for a in CALL[op])


def out_layout(torch: Any, op: str, args: tuple[Any, ...]) -> list[tuple[tuple[int, ...], Any]]:
    """(shape, dtype) of each output in netra.torch's order, from netra.torch.contracts (the op's record)."""
    from netra.torch import contracts

    shape = getattr(contracts, op)(*args)
    return list(zip(shape.out, contracts.out_dtypes(op, args[0]), strict=True))


def placed(torch: Any, layout: list[tuple[tuple[int, ...], Any]], offset: int, dev: Any) -> tuple[Any, ...]:
    """Outputs each in its own buffer, `offset` bytes past a 2 MiB-aligned base in it; checked."""
    outs = []
    for shape, dtype in layout:
        nbytes = math.prod(shape) * torch.empty((), dtype=dtype).element_size()
        buf = torch.empty(nbytes + offset + 2 * ALIGN, dtype=torch.uint8, device=dev)
        base = -buf.data_ptr() % ALIGN
        t = buf[base + offset : base + offset + nbytes].view(dtype).view(shape)
        if (t.data_ptr() - offset) % ALIGN or not t.is_contiguous() or t.nbytes != nbytes:
            raise BenchError(f"an out@{offset} buffer is not at its offset from a 2 MiB base")
        outs.append(t)
    return tuple(outs)


def as_tuple(got: Any) -> tuple[Any, ...]:
    return got if isinstance(got, tuple) else (got,)


def out_arg(outs: tuple[Any, ...]) -> Any:
    """out= as netra.torch takes it: the tensor for one output, the tuple for several."""
    return outs[0] if len(outs) == 1 else outs


class Case:
    """One (contract, rows): C input copies, and per variant its outputs per copy and its G calls."""

    def __init__(self, torch: Any, nt: Any, key: str, rows: int, copies: int, calls: int, seed: int,
                 dev: Any) -> None:  # fmt: skip
        from netra.runtime import Contract

        c = Contract.parse(key)
        self.torch, self.key, self.op, self.rows, self.dev = torch, key, c.op, rows, dev
        if self.op not in CALL:
            raise BenchError(f"{key}: not an operator this bench times (one of {', '.join(CALL)})")
        self.p = dict(c.params)
        self.fn = getattr(nt, self.op)
        g = torch.Generator(device=dev).manual_seed(seed)
        self.args = [make_inputs(torch, self.op, self.p, rows, g, dev) for _ in range(copies)]
        self.layout = out_layout(torch, self.op, self.args[0])
        tensors = [a for a in self.args[0] if isinstance(a, torch.Tensor)]
        self.read_bytes = sum(t.nbytes for t in tensors)
        self.fixed_bytes = sum(t.nbytes for t in tensors if t.dim() == 1)  # the weight: the same every row
        self.write_bytes = sum(math.prod(s) * torch.empty((), dtype=d).element_size() for s, d in self.layout)
        self.calls = calls
        self.outs: dict[str, list[tuple[Any, ...]]] = {
            "out": [
                tuple(torch.empty(s, dtype=d, device=dev) for s, d in self.layout) for _ in range(copies)
            ],
            "raw": [
                tuple(torch.empty(s, dtype=d, device=dev) for s, d in self.layout) for _ in range(copies)
            ],
        }
        self.outs["out-reused"] = [
            tuple(torch.empty(s, dtype=d, device=dev) for s, d in self.layout)
        ] * copies
        for o in OFFSETS:
            self.outs[f"out@{o}"] = [placed(torch, self.layout, o, dev) for _ in range(copies)]
        self.kept: list[tuple[Any, ...]] = []  # functional-kept's outputs
        self.last: list[tuple[Any, ...]] = []  # functional's last output (dropped at once otherwise)
        self.ptrs: dict[str, list[tuple[int, ...]]] = {"functional": [], "functional-kept": []}

    @property
    def copies(self) -> int:
        return len(self.args)

    def call(self, variant: str, i: int, launch: Callable[[int, tuple[Any, ...]], None] | None = None) -> Any:
        """Variant `variant`'s call number i (on copy i % C); returns its outputs."""
        c = i % self.copies
        if variant == "raw":
            assert launch is not None
            launch(c, self.outs["raw"][c])
            return self.outs["raw"][c]
        if variant.startswith("out"):
            return as_tuple(self.fn(*self.args[c], out=out_arg(self.outs[variant][c])))
        got = as_tuple(self.fn(*self.args[c]))
        self.ptrs[variant].append(tuple(t.data_ptr() for t in got))
        if variant == "functional-kept":
            self.kept.append(got)
        return got

    def fns(
        self, variant: str, launch: Callable[[int, tuple[Any, ...]], None] | None = None
    ) -> list[Callable[[], Any]]:
        """The G calls of a graph: outputs dropped at once, except functional's last (for the guard)."""

        def one(i: int) -> None:
            got = self.call(variant, i, launch)
            if variant == "functional" and i == self.calls - 1:
                self.last[:] = [got]

        return [functools.partial(one, i) for i in range(self.calls)]

    def graph_outputs(self, variant: str) -> list[tuple[int, tuple[Any, ...]]]:
        """(copy, outputs) that a replay of the variant's graph writes and the guard can read after it."""
        if variant == "functional":
            return [((self.calls - 1) % self.copies, self.last[0])]
        if variant == "out-reused":  # the last call's outputs are what it holds
            return [((self.calls - 1) % self.copies, self.outs[variant][0])]
        if variant == "functional-kept":
            got = self.kept[-self.calls :]  # the captured calls' (the warm-up's came first)
            return [(i % self.copies, t) for i, t in enumerate(got)]
        return list(enumerate(self.outs[variant]))


def same_bytes(torch: Any, a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Every output has the same shape, dtype and bytes."""
    return len(a) == len(b) and all(
        x.shape == y.shape
        and x.dtype == y.dtype
        and bool(torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)))
        for x, y in zip(a, b, strict=True)
    )


def poison(torch: Any, t: Any) -> None:
    """Fill an output with 0xFF bytes, so that only a call that writes it can pass the guard."""
    t.view(-1).view(torch.uint8).fill_(POISON)


def corrupt(torch: Any, outs: tuple[Any, ...]) -> None:
    """--corrupt: flip the first byte of a variant's first output (the guard must then stop the run)."""
    flat = outs[0].view(-1).view(torch.uint8)
    flat[0] ^= 1


# ---------------------------------------------------------------------------------------------------
# the record and the copy limit


def certified_entries(keys: list[str]) -> tuple[dict[str, Any], tuple[dict[str, Any], ...]]:
    """Each key's entry of the install's certified sm_90 table, with its evidence records (read as
    `netra catalog` reads them: the table and its evidence file, held to the lock), and the table's
    certify runs (an evidence record's `run` indexes them: the device it was timed on)."""
    from netra.cli import inventory
    from netra.runtime import installed

    table = inventory.load(installed.locate()).certified.get("sm_90")
    out = {}
    for key in keys:
        entry = table.entries.get(key) if table is not None else None
        if entry is None:
            raise BenchError(
                f"{key}: not in the install's certified sm_90 table (`netra catalog` lists its keys)"
            )
        out[key] = entry
    return out, (table.runs if table is not None else ())


def record(
    entry: Any, tactic: str | None, rows: int, runs: tuple[dict[str, Any], ...], here: str | None
) -> dict[str, Any]:
    """certify's timing of `tactic` at `rows` (median_us and the rest of its record), or why none; with
    the device certify timed it on and whether that is this run's (`here`): a record from another card
    is no yardstick for this one."""
    cand = next((c for c in entry.candidates if c.tactic == tactic), None)
    if cand is None:
        return {"status": "no record", "reason": f"tactic {tactic} is not a candidate of {entry.key}"}
    hardware = cand.evidence.get("hardware") or {}
    timings = hardware.get("timings") or []
    hit = next((t for t in timings if t["rows"] == rows), None)
    if hit is None:
        measured = ", ".join(str(t["rows"]) for t in timings) or "none"
        return {
            "status": "no record",
            "reason": f"certify timed {tactic} at rows {measured}",
            "tactic": tactic,
        }
    run = hardware.get("run")
    device = runs[run].get("device") if isinstance(run, int) and 0 <= run < len(runs) else None
    return {"status": "recorded", "tactic": tactic, "us": hit["median_us"], "timing": dict(hit),
            "device": device, "same_device": device is not None and device == here}  # fmt: skip


class Copier:
    """The 16-byte load/store copy kernels: cupy.RawKernel, or load_inline where cupy is absent."""

    def __init__(self, torch: Any) -> None:
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            import numpy as np

            self.how = f"cupy {cupy.__version__} RawKernel"
            module = cupy.RawModule(code=COPY_SOURCE, options=("-std=c++17",))
            kernels = [module.get_function(n) for n in COPY_KERNELS]

            def launch(which: int, src: int, dst: int, n16: int, blocks: int) -> None:
                with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                    kernels[which]((blocks,), (512,), (np.uint64(src), np.uint64(dst), np.uint64(n16)))

        else:
            from torch.utils.cpp_extension import load_inline

            self.how = "torch.utils.cpp_extension.load_inline (cupy is not installed)"
            ext = load_inline(name="netra_bench_copy", cpp_sources="void copy16(int64_t, int64_t, int64_t, int64_t, int64_t);",
                              cuda_sources=COPY_SOURCE + COPY_LAUNCHER, functions=["copy16"],
                              extra_cuda_cflags=["-O3", "-arch=sm_90a"])  # fmt: skip

            def launch(which: int, src: int, dst: int, n16: int, blocks: int) -> None:
                ext.copy16(src, dst, n16, blocks, which)

        self.launch = launch

    def graphs(self, torch: Any, nbytes: int, l2: int, calls: int) -> tuple[dict[str, Graph], int, Any]:
        """Per launch shape, a graph of `calls` copies of nbytes each, rotated over copies past L2;
        checked once to copy what it reads."""
        n16 = max(1, nbytes // 16)
        span = -(-n16 * 16 // 4096) * 4096
        copies = copies_past(2 * n16 * 16, l2)
        buf = torch.randint(0, 255, (2 * copies * span,), dtype=torch.uint8, device="cuda")
        base = buf.data_ptr()
        self.launch(0, base, base + copies * span, n16, self.sms)
        torch.cuda.synchronize()
        if not torch.equal(buf[: n16 * 16], buf[copies * span : copies * span + n16 * 16]):
            raise BenchError("the copy kernel does not copy: no copy limit to compare with")
        out = {}
        for k, name in enumerate(COPY_KERNELS):
            for per in COPY_BLOCKS_PER_SM:
                fns: list[Callable[[], Any]] = [
                    functools.partial(self.launch, k, base + (c % copies) * span,
                                      base + (copies + c % copies) * span, n16, per * self.sms)
                    for c in range(calls)
                ]  # fmt: skip
                out[f"{name.removeprefix('netra_bench_copy_')}/{per}xSM"] = Graph(torch, fns)
        return out, copies, buf


# ---------------------------------------------------------------------------------------------------
# a row


def strict_check(torch: Any, nt: Any, case: Case, gpu: bool) -> dict[str, Any]:
    """GPU: every nt variant served in strict mode. CPU: strict mode must refuse (its fallback's code)."""
    try:
        with nt.strict():
            case.fn(*case.args[0])
    except nt.StrictModeError as e:
        if gpu:
            raise BenchError(
                f"{case.key} at {case.rows} rows: strict mode refused the call ({e.code})"
            ) from None
        return {"strict": "refused", "code": e.code}
    if not gpu:
        raise BenchError(f"{case.key}: strict mode served a CPU call: it would time a fallback as Netra")
    return {"strict": "served"}


def guard_eager(torch: Any, case: Case, ref: list[tuple[Any, ...]], against: str, launch: Any,
                corrupt_variant: str | None, ctx: Any) -> None:  # fmt: skip
    """Every variant, once per copy, outside a graph: its outputs equal `ref` (`against`'s) byte for byte;
    a variant with buffers of its own (out=, raw) must return them, filled with 0xFF bytes before the call."""
    for variant in VARIANTS:
        if variant == "raw" and launch is None:
            continue
        for c in range(case.copies):
            mine = case.outs.get(variant, [None] * case.copies)[c]
            for t in mine or ():
                poison(torch, t)
            with ctx():
                got = case.call(variant, c, launch)
            if variant == corrupt_variant:
                corrupt(torch, got)
            if mine is not None and [t.data_ptr() for t in got] != [t.data_ptr() for t in mine]:
                raise BenchError(
                    f"{case.key} at {case.rows} rows: {variant} returned other tensors than its out="
                )
            if not same_bytes(torch, got, ref[c]):
                raise BenchError(f"{case.key} at {case.rows} rows: {variant}'s outputs (copy {c}) differ from "
                                 f"the {against}'s")  # fmt: skip
    case.kept.clear()
    case.ptrs = {k: [] for k in case.ptrs}


def placement(case: Case, variant: str) -> dict[str, Any]:
    """Where the graph's first call's outputs sit: address mod 2 MiB, and from that call's x."""
    x = case.args[0][0].data_ptr()
    if variant in case.ptrs:
        outs = case.ptrs[variant][-case.calls]
        distinct = len({p for ps in case.ptrs[variant][-case.calls :] for p in ps})
    else:
        outs = tuple(t.data_ptr() for t in case.outs[variant][0])
        distinct = len({t.data_ptr() for ts in case.outs[variant] for t in ts})
    return {"x_mod_2mib": x % ALIGN, "outs_mod_2mib": [p % ALIGN for p in outs],
            "outs_minus_x": [p - x for p in outs], "distinct_output_addresses": distinct}  # fmt: skip


def timed_row(torch: Any, nt: Any, case: Case, args: argparse.Namespace, copier: Copier, l2: int,
              corrupt_variant: str | None) -> dict[str, Any]:  # fmt: skip
    """Guards, then every variant's graph and the copy limit's, replayed in interleaved rounds."""
    from netra.core.ops import FAMILIES
    from netra.loaders.cuda import Cuda

    kernel = nt.kernel_for(case.key, case.rows)
    if not kernel:
        raise BenchError(f"{case.key} at {case.rows} rows is not served here: {kernel.reason}")
    served = strict_check(torch, nt, case, gpu=True)
    cu = Cuda()
    out_names = FAMILIES[case.op].out_names
    packed = []
    for c in range(case.copies):  # the kernel's arguments by name (its family's record), per copy
        vals = dict(zip(CALL[case.op], case.args[c], strict=True))
        ptrs = {n: t.data_ptr() for n, t in zip(out_names, case.outs["raw"][c], strict=True)}
        ptrs.update((n, v.data_ptr()) for n, v in vals.items() if isinstance(v, torch.Tensor))
        scalars = {"eps": vals["eps"]} if "eps" in vals else {}
        packed.append(kernel.pack(**ptrs, rows=case.rows, **scalars))

    def launch(c: int, outs: tuple[Any, ...]) -> None:
        cu.launch(kernel, case.rows, None, packed[c])

    for c in range(case.copies):
        launch(c, case.outs["raw"][c])
    torch.cuda.synchronize()
    ref = [tuple(t.clone() for t in case.outs["raw"][c]) for c in range(case.copies)]
    nt.reset_stats()
    guard_eager(torch, case, ref, "raw launch", launch, corrupt_variant, nt.strict)
    graphs: dict[str, Graph] = {}
    for variant in VARIANTS:
        with nt.strict():
            graphs[variant] = Graph(torch, case.fns(variant, None if variant != "raw" else launch))
    case.kept[:] = case.kept[-case.calls :]  # the captured calls' (the warm-up's came first)
    # the graph guard: poison what each graph writes, replay it, compare
    for variant, gr in graphs.items():
        for _, outs in case.graph_outputs(variant):
            for t in outs:
                poison(torch, t)
        gr.graph.replay()
        torch.cuda.synchronize()
        for c, outs in case.graph_outputs(variant):
            if not same_bytes(torch, outs, ref[c]):
                raise BenchError(f"{case.key} at {case.rows} rows: {variant}'s graph writes other bytes "
                                 "than the raw launch")  # fmt: skip
    where = {v: placement(case, v) for v in VARIANTS}
    copy_graphs, copy_copies, copy_buf = copier.graphs(
        torch, (case.read_bytes + case.write_bytes) // 2, l2, case.calls
    )
    everything = {**graphs, **{f"copy:{n}": g for n, g in copy_graphs.items()}}
    for gr in everything.values():
        gr.replay_us()  # warm
    samples: dict[str, list[float]] = {n: [] for n in everything}
    for _ in range(args.rounds):
        for name, gr in everything.items():
            samples[name].append(gr.replay_us())
    torch.cuda.synchronize()
    st = nt.stats()
    if set(st) != {case.key} or set(st[case.key]) != {"certified"}:
        raise BenchError(f"{case.key} at {case.rows} rows: calls other than the certified kernel's: {st}")
    del everything, graphs, copy_graphs, copy_buf
    copies = {
        n.removeprefix("copy:"): statistics.median(v) for n, v in samples.items() if n.startswith("copy:")
    }
    best = min(copies, key=lambda n: copies[n])
    limit = copies[best]
    out: dict[str, Any] = {
        "copy": {"status": "timed", "us": limit, "best": best, "variants_us": copies, "how": copier.how,
                 "copies": copy_copies, "bytes_copied": (case.read_bytes + case.write_bytes) // 2 // 16 * 16},
    }  # fmt: skip
    for v in VARIANTS:
        us = statistics.median(samples[v])
        out[v] = {"status": "timed", "us": us, "samples_us": samples[v], "of_copy_limit": limit / us,
                  "placement": where[v]}  # fmt: skip
    return {"tactic": kernel.tactic, **served, "reference": "raw launch", "impls": out}


def smoke_row(torch: Any, nt: Any, case: Case, corrupt_variant: str | None) -> dict[str, Any]:
    """--cpu-smoke: strict mode refuses; every variant's outputs equal the composite's; nothing timed."""
    import contextlib

    from netra.torch import composite

    served = strict_check(torch, nt, case, gpu=False)
    # the unfused families' composites; a fused family's fallback is the chain of the unfused operators,
    # which is what its functional call runs here: that call, made before any variant, is the reference
    made = getattr(composite, case.op, None)
    ref = [as_tuple(made(*a) if made else case.fn(*a)) for a in case.args]
    reference = "composite" if made else "functional call"
    guard_eager(torch, case, ref, reference, None, corrupt_variant, contextlib.nullcontext)
    why = f"cpu smoke: equal to the {reference}'s outputs byte for byte, not timed"
    impls: dict[str, Any] = {v: {"status": "checked", "reason": why} for v in VARIANTS if v != "raw"}
    impls["raw"] = {"status": "skipped", "reason": "cpu smoke: no device to launch on"}
    impls["copy"] = {"status": "skipped", "reason": "cpu smoke: no device to time on"}
    return {"tactic": None, **served, "reference": reference, "impls": impls}


# ---------------------------------------------------------------------------------------------------
# the run


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument(
        "--contracts", nargs="+", default=DEFAULT_CONTRACTS, help="keys as `netra catalog` prints them"
    )
    ap.add_argument("--rows", nargs="+", type=int, default=None, help=f"row counts (default {ROWS})")
    ap.add_argument("--rounds", type=int, default=15, help="interleaved rounds (median)")
    ap.add_argument(
        "--graph-calls", type=int, default=8, help="calls per CUDA graph (rounded up to the copies)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write every row and the environment here")
    ap.add_argument("--cpu-smoke", action="store_true", help="CPU: the variants and the guard, nothing timed")
    ap.add_argument(
        "--corrupt", choices=VARIANTS, default=None, help=argparse.SUPPRESS
    )  # the guard's own test
    args = ap.parse_args(argv)
    args.rows = args.rows or list(SMOKE_ROWS if args.cpu_smoke else ROWS)
    if any(r < 1 for r in args.rows):
        ap.error(f"--rows {' '.join(map(str, args.rows))}: each must be at least 1")
    if args.rounds < 1 or args.graph_calls < 1:
        ap.error("--rounds and --graph-calls must be at least 1")
    try:
        from netra.errors import NetraError
        from netra.runtime import Contract
    except ImportError:  # main says what to install
        return args

    for key in args.contracts:
        try:
            op = Contract.parse(key).op
        except NetraError as e:
            ap.error(f"--contracts {key}: {e.message}")
        if op not in CALL:
            ap.error(
                f"--contracts {key}: {op} is not an operator this bench times (one of {', '.join(CALL)})"
            )
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: its folder does not exist")
    return args


def line(rec: dict[str, Any]) -> list[str]:
    """The printed rows of one (contract, rows): one per variant, then copy and record."""
    head = f"{rec['contract']:44s} {rec['rows']:>6d}"
    im, lines = rec["impls"], []
    base = im["out"].get("us")
    for v in (*VARIANTS, "copy"):
        e = im[v]
        if e.get("us") is None:
            lines.append(f"{head} {v:16s} {e['status']}: {e['reason']}")
            continue
        pct = f" {100 * e['of_copy_limit']:5.1f}% of copy" if "of_copy_limit" in e else f" ({e['best']})"
        vs = f" {100 * (e['us'] / base - 1):+6.1f}% vs out" if base and v not in ("out", "copy") else ""
        lines.append(f"{head} {v:16s} {e['us']:10.2f} us{pct}{vs}")
    r = rec["record"]
    if r["status"] != "recorded":
        lines.append(f"{head} {'record':16s} no record ({r['reason']})")
    else:
        copy = im["copy"].get("us")
        if not r["same_device"]:
            other = f"; on {r['device'] or 'an unnamed device'}, not this one: not comparable"
        elif copy:
            # a record faster than this run's copy limit was timed on another card or day (the H200 of
            # 2026-12-07 copied 9% slower than the one certify ran on): only fractions of each run's limit compare
            other = f", {100 * copy / r['us']:.1f}% of this run's copy" + (
                ": faster than it, so timed on another card or day" if r["us"] < copy else ""
            )
        else:
            other = ""
        lines.append(f"{head} {'record':16s} {r['us']:10.2f} us (certify, tactic {r['tactic']}{other})")
    return lines


def write_json(args: argparse.Namespace, env: dict[str, Any], rows: list[dict[str, Any]], done: bool) -> None:
    """The document so far, replaced whole (written beside, then renamed): `complete` once every row ran."""
    doc = {"bench": "bench_operator_path", "mode": "cpu-smoke" if args.cpu_smoke else "gpu", "environment": env,
           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "variants": [*VARIANTS, "copy", "record"], "rows": rows, "complete": done}  # fmt: skip
    part = args.json.with_name(args.json.name + ".part")
    part.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    part.replace(args.json)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch, nt, gpu, env = start("bench_operator_path", args.cpu_smoke)
    dev = torch.device("cuda" if gpu else "cpu")
    l2 = (
        (getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or L2_DEFAULT)
        if gpu
        else L2_DEFAULT
    )
    copier = None
    if gpu:
        try:
            copier = Copier(torch)
        except Exception as e:  # no copy limit, no percentages: nothing worth timing
            sys.exit(
                f"bench_operator_path: the copy kernels could not be built ({one_line(e)}); install cupy"
            )
    rows_out: list[dict[str, Any]] = []
    entries, runs = certified_entries(args.contracts)
    for ci, key in enumerate(args.contracts):
        entry = entries[key]
        probe = Case(torch, nt, key, 1, 1, 1, 0, dev)
        per_row = probe.read_bytes + probe.write_bytes - probe.fixed_bytes  # what a row reads and writes
        del probe
        for rows in args.rows:
            copies = copies_past(per_row * rows, l2) if gpu else 2
            calls = -(-args.graph_calls // copies) * copies
            case = Case(torch, nt, key, rows, copies, calls, args.seed + 1000 * ci + rows, dev)
            if gpu:
                assert copier is not None
                row = timed_row(torch, nt, case, args, copier, l2, args.corrupt)
                tactic = row["tactic"]
            else:
                row = smoke_row(torch, nt, case, args.corrupt)
                tactic = entry.tactic_for(rows) or entry.candidates[0].tactic
            rec = {"contract": key, "rows": rows, "copies": copies, "calls_per_graph": calls,
                   "bytes_read": case.read_bytes, "bytes_written": case.write_bytes,
                   "bytes_per_rotation": (case.read_bytes + case.write_bytes) * copies,
                   "record": record(entry, tactic, rows, runs, env.get("gpu")), **row}  # fmt: skip
            rows_out.append(rec)
            for text in line(rec):
                print(text)
            if args.json:  # after every row: a run stopped part way keeps what it measured
                write_json(args, env, rows_out, done=False)
            del case
            if gpu:
                torch.cuda.empty_cache()
    if args.json:
        write_json(args, env, rows_out, done=True)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    run(main)
