"""The routed FP8 MoE at decode (issue 28) on the H200: nt.fp8_moe against the read limit and its peers.

Run it on the GPU machine with a python that has torch with CUDA, cupy and the netra wheel installed, and
vLLM's public code fetched for the run and never committed: an unpacked vLLM wheel, whose Triton kernel
is imported from there (docs/performance.md says how to make it and what its import needs):

    python bench/bench_moe.py --vllm-src /path/to/unpacked/vllm-wheel --json OUT.json

`python bench/bench_moe.py` puts bench/, not the tree, on sys.path: the installed netra is the one
measured (the first line printed says which install it is). On a machine without a GPU,

    python bench/bench_moe.py --cpu-smoke --json OUT.json

runs tiny shapes (experts 8, topk 2, hidden 256, inter 128; 1 to 3 tokens) through the data generation,
the composite, the correctness guard and the argument handling, times nothing, and writes the same JSON
structure (tests/test_bench_moe.py runs it).

In one run, per contract (Qwen3-30B-A3B: E 128, k 8, H 2048, I 768; Qwen3-235B-A22B: E 128, k 8,
H 4096, I 1536), per token count M (1, 2, 4, 8, 16, 32, 64) and per routing (uniform: distinct random
experts per token; same: every token on the same k experts), each row times, side by side:

- read_limit: the best of several 16-byte-load read kernels (streaming `__ldcs` and non-coherent
  `ld.global.nc.L1::no_allocate` loads, 4 or 8 in flight per thread, 2, 4 or 8 blocks of 512 threads
  per SM, grid-stride, XOR-reduced) over as many bytes as the call reads (the experts it hits x the bytes
  of one expert: w13, w2 and their f32 scales), rotated across enough copies that one pass is at least
  3x L2; compiled with cupy.RawKernel (torch.utils.cpp_extension.load_inline where cupy is absent);
- netra: nt.fp8_moe in strict mode, every launch included, at the first of --policy (accepted, then
  experiment) that serves it; the policy and each stage's tactic are printed. Not served: the row says
  why (nt.fallback_reasons()) and nothing is timed: the composite is never timed as Netra;
- vllm: vLLM's block-FP8 Triton fused_moe kernel imported from --vllm-src, with its tuned config for
  the GPU (configs/E=..,N=..,device_name=..,dtype=fp8_w8a8,block_shape=[128,128].json; its default
  block-FP8 config where there is none, said so), its two GEMMs fed the same FP8 activations and scales;
  vLLM's C++ ops are not built from source, so its alignment (sorted token ids per expert) is made
  before capture and not counted (as in issue 28's figures), and the SiLU-and-quant between the GEMMs
  and the sum over the k slots are torch.compile'd (one fused Triton kernel each); absent: skipped, said;
- eager, compile: the torch composite a user would write (dequantize, then matmul per expert:
  netra.torch.composite.fp8_moe, which dequantizes each routed expert), eagerly and torch.compile(dynamic=True).

--chains GATE+DOWN ... also times those chains of the table's tactics (each stage's, e.g. g8x8s3+d8x8s3,
accepted or experiment) through nt.fp8_moe under nt.set_tactics, in the same interleaved rounds, as a
row's `chains`: how a tactic not yet served would do at every M and routing, through the operator path.
Each gets netra's guard first (bitwise equal across two runs, within --bound of the composite), else it
is "failed" and not timed; whether its bits equal the served chain's is recorded (tactics with other warps
per CTA add their partial sums in another order, so they may differ in a few codes).

Timing: each implementation's G calls (--graph-calls, rounded up to the layer copies) are captured in one
CUDA graph, every call with its own routing and the weights rotated across layer copies (as a model's
layers are) so that the experts the calls read exceed 3x L2; the graphs are replayed in interleaved
rounds (--rounds), us per call = the median replay / G. % = read-limit time / time.

Correctness guard, before any timing: nt.fp8_moe's output equals itself bitwise across two runs, and
each of netra and vllm is within --bound (default 5%) of the composite's output, as the largest
|difference| in a row over the largest |composite| of that row; else the row's entry is "failed" and
not timed. 5% is loose on purpose: the kernels' fp32 sums round h to FP8 codes one step away from the
composite's now and then, and the output is bf16; the certified tolerances are docs/ops/fp8_moe.md's.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from _entry import run

CONTRACTS = {
    "Qwen3-30B-A3B": {"experts": 128, "topk": 8, "hidden": 2048, "inter": 768},
    "Qwen3-235B-A22B": {"experts": 128, "topk": 8, "hidden": 4096, "inter": 1536},
}
SMOKE = {"smoke": {"experts": 8, "topk": 2, "hidden": 256, "inter": 128}}
TOKENS = (1, 2, 4, 8, 16, 32, 64)
SMOKE_TOKENS = (1, 2, 3)
ROUTINGS = ("uniform", "same")
POLICIES = ("accepted", "experiment")
IMPLS = ("read_limit", "netra", "vllm", "eager", "compile")
BLOCK = 128  # the checkpoints' scale block (weights 128 x 128, activations 1 x 128)
L2_DEFAULT = 50 * 2**20
VLLM_MOE = Path("vllm/model_executor/layers/fused_moe")

READ_SOURCE = r"""
template <int MODE>
__device__ __forceinline__ uint4 netra_bench_load(const uint4* p) {
  uint4 v;
  if (MODE == 0) {
    v = __ldcs(p);
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  }
  return v;
}
// Reads n16 16-byte words once, U loads in flight per thread, grid-stride; one word written per block
// only if the XOR of everything read equals a constant, so that the loads cannot be dropped.
template <int U, int MODE>
__device__ __forceinline__ void netra_bench_read(const uint4* __restrict__ p, unsigned long long n16,
                                                 unsigned int* __restrict__ sink) {
  const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  unsigned int acc = 0;
  for (; i + (U - 1) * stride < n16; i += U * stride) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) v[u] = netra_bench_load<MODE>(p + i + u * stride);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = netra_bench_load<MODE>(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) sink[blockIdx.x] = acc;
}
#define NETRA_BENCH_READ(NAME, U, MODE)                                                          \
  extern "C" __global__ void __launch_bounds__(512)                                              \
      NAME(const uint4* __restrict__ p, unsigned long long n16, unsigned int* __restrict__ sink) { \
    netra_bench_read<U, MODE>(p, n16, sink);                                                     \
  }
NETRA_BENCH_READ(netra_bench_read_cs4, 4, 0)
NETRA_BENCH_READ(netra_bench_read_cs8, 8, 0)
NETRA_BENCH_READ(netra_bench_read_nc4, 4, 1)
NETRA_BENCH_READ(netra_bench_read_nc8, 8, 1)
"""
READ_KERNELS = (
    "netra_bench_read_cs4",
    "netra_bench_read_cs8",
    "netra_bench_read_nc4",
    "netra_bench_read_nc8",
)
READ_BLOCKS_PER_SM = (2, 4, 8)
READ_THREADS = 512
INLINE_LAUNCHER = r"""
#include <ATen/cuda/CUDAContext.h>
void read16(int64_t ptr, int64_t n16, int64_t blocks, int64_t which, int64_t sink) {
  using K = void (*)(const uint4*, unsigned long long, unsigned int*);
  const K kernels[4] = {netra_bench_read_cs4, netra_bench_read_cs8, netra_bench_read_nc4, netra_bench_read_nc8};
  kernels[which]<<<(unsigned)blocks, 512, 0, at::cuda::getCurrentCUDAStream()>>>(
      reinterpret_cast<const uint4*>(ptr), (unsigned long long)n16, reinterpret_cast<unsigned int*>(sink));
}
"""


# ---------------------------------------------------------------------------------------------------
# what a call reads, and the inputs


def expert_bytes(p: dict[str, int]) -> int:
    """One expert's bytes: w13 [2I, H] and w2 [H, I] FP8, and their f32 128 x 128 block scales."""
    h, i = p["hidden"], p["inter"]
    return 3 * h * i + 4 * (2 * i // BLOCK) * (h // BLOCK) + 4 * (h // BLOCK) * (i // BLOCK)


def copies_past(nbytes: int, l2: int) -> int:
    """Copies to rotate through so that one pass over them reads at least 3x L2 (never fewer than 2)."""
    return max(2, math.ceil(3 * l2 / max(nbytes, 1)))


def fp8_randn(torch: Any, shape: tuple[int, ...], g: Any, dev: Any) -> Any:
    """FP8 E4M3 codes of N(0, 64^2), clamped to +-448, made on `dev` in chunks from the generator `g`."""
    t = torch.empty(shape, dtype=torch.float8_e4m3fn, device=dev)
    flat, step = t.view(-1), 1 << 26
    for at in range(0, flat.numel(), step):
        n = min(step, flat.numel() - at)
        v = torch.randn(n, generator=g, device=dev) * 64
        flat[at : at + n] = v.clamp_(-448, 448).to(torch.float8_e4m3fn)
    return t


class Layers:
    """`count` copies of one MoE layer's expert weights, as the layers of a model are: w13, w13s, w2, w2s."""

    def __init__(self, torch: Any, p: dict[str, int], count: int, seed: int, dev: Any) -> None:
        e, h, i = p["experts"], p["hidden"], p["inter"]
        g = torch.Generator(device=dev).manual_seed(seed)
        self.copies = []
        for _ in range(count):
            w13 = fp8_randn(torch, (e, 2 * i, h), g, dev)
            w13s = torch.rand(e, 2 * i // BLOCK, h // BLOCK, generator=g, device=dev) * 2e-4 + 1e-4
            w2 = fp8_randn(torch, (e, h, i), g, dev)
            w2s = torch.rand(e, h // BLOCK, i // BLOCK, generator=g, device=dev) * 2e-4 + 1e-4
            self.copies.append((w13, w13s, w2, w2s))

    def __len__(self) -> int:
        return len(self.copies)


def routing(torch: Any, p: dict[str, int], m: int, mode: str, g: Any, dev: Any) -> tuple[Any, Any]:
    """ids i32 [m, k] and router weights f32 [m, k] (summing to 1 per token), drawn from `g` on `dev`."""
    e, k = p["experts"], p["topk"]
    if mode == "uniform":  # distinct random experts per token
        ids = torch.rand(m, e, generator=g, device=dev).topk(k, dim=1).indices
    else:  # every token on the same k experts
        ids = torch.randperm(e, generator=g, device=dev)[:k].expand(m, k)
    w = torch.rand(m, k, generator=g, device=dev) + 0.1
    return ids.int().contiguous(), (w / w.sum(1, keepdim=True)).float().contiguous()


class Row:
    """One (contract, M, routing): activations, a routing per call, the layer each call reads."""

    def __init__(self, torch: Any, composite: Any, p: dict[str, int], m: int, mode: str, calls: int,
                 layers: Layers, seed: int, dev: Any) -> None:  # fmt: skip
        g = torch.Generator(device=dev).manual_seed(seed)
        x = torch.randn(m, p["hidden"], generator=g, device=dev) * 2
        # FP8 codes and 1 x 128 scales, as fused_add_rmsnorm_fp8_group_quant writes them
        self.xq, self.xs = composite.fp8_group_quant(x, BLOCK)
        self.routes = [routing(torch, p, m, mode, g, dev) for _ in range(calls)]
        self.layers = layers
        self.hits = [int(ids.unique().numel()) for ids, _ in self.routes]

    def args(self, call: int) -> tuple[Any, ...]:
        """nt.fp8_moe's eight operands of call number `call`."""
        ids, w = self.routes[call % len(self.routes)]
        return (self.xq, self.xs, ids, w, *self.layers.copies[call % len(self.layers)])

    @property
    def experts_hit(self) -> float:
        return sum(self.hits) / len(self.hits)


# ---------------------------------------------------------------------------------------------------
# the correctness guard


def worst_rel(torch: Any, got: Any, ref: Any) -> float:
    """max over rows of max |got - ref| / max |ref|: how far `got` is from `ref`, relative to each row."""
    d = (got.float() - ref.float()).abs().amax(dim=1)
    scale = ref.float().abs().amax(dim=1).clamp_min(1e-30)
    return float((d / scale).max())


def guard(torch: Any, fn: Callable[[], Any], ref: Any, bound: float, bitwise: bool) -> dict[str, Any]:
    """Two runs of fn (bitwise equal, where asked) and their distance from the composite's `ref`."""
    a = fn()
    b = fn()
    same = bool(torch.equal(a.view(torch.int16), b.view(torch.int16)))
    rel = worst_rel(torch, a, ref)
    out: dict[str, Any] = {"deterministic": same, "rel_to_composite": rel, "bound": bound}
    if bitwise and not same:
        out["failed"] = "two runs of the same call differ bitwise"
    elif not rel <= bound:
        out["failed"] = f"{rel:.4g} of a row's largest value from the composite, over the bound {bound}"
    return out


# ---------------------------------------------------------------------------------------------------
# timing


class Graph:
    """`calls` captured in one CUDA graph after one eager run of each on the capturing stream (so what an
    operator makes once per stream, nt.fp8_moe's zeroed workspace, is made before, not captured);
    replay_us = device us per call."""

    def __init__(self, torch: Any, calls: list[Callable[[], Any]]) -> None:
        self.torch, self.n = torch, len(calls)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for c in calls:
                c()
        side.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=side):
            for c in calls:
                c()
        self.graph.replay()
        torch.cuda.synchronize()

    def replay_us(self) -> float:
        a = self.torch.cuda.Event(enable_timing=True)
        b = self.torch.cuda.Event(enable_timing=True)
        a.record()
        self.graph.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1e3 / self.n


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}"


# ---------------------------------------------------------------------------------------------------
# the read limit


class Reader:
    """The 16-byte-load read kernels, compiled with cupy.RawKernel, or load_inline where cupy is absent."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.sink = torch.zeros(8 * READ_BLOCKS_PER_SM[-1] * self.sms, dtype=torch.int32, device="cuda")
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            self.how = f"cupy {cupy.__version__} RawKernel"
            module = cupy.RawModule(code=READ_SOURCE, options=("-std=c++17",))
            kernels = [module.get_function(n) for n in READ_KERNELS]

            import numpy as np

            def launch(which: int, ptr: int, n16: int, blocks: int) -> None:
                stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
                with stream:
                    kernels[which](
                        (blocks,),
                        (READ_THREADS,),
                        (np.uint64(ptr), np.uint64(n16), np.uint64(self.sink.data_ptr())),
                    )

        else:
            from torch.utils.cpp_extension import load_inline

            self.how = "torch.utils.cpp_extension.load_inline (cupy is not installed)"
            ext = load_inline(
                name="netra_bench_read",
                cpp_sources="void read16(int64_t, int64_t, int64_t, int64_t, int64_t);",
                cuda_sources=READ_SOURCE + INLINE_LAUNCHER,
                functions=["read16"],
                extra_cuda_cflags=["-O3", "-arch=sm_90a"],
            )

            def launch(which: int, ptr: int, n16: int, blocks: int) -> None:
                ext.read16(ptr, n16, blocks, which, self.sink.data_ptr())

        self.launch = launch

    def variants(self) -> list[tuple[str, int, int]]:
        """(name, kernel index, blocks) of every launch shape tried."""
        return [
            (f"{name.removeprefix('netra_bench_read_')}/{per}xSM", k, per * self.sms)
            for k, name in enumerate(READ_KERNELS)
            for per in READ_BLOCKS_PER_SM
        ]

    def calls(self, buf: Any, nbytes: int, l2: int, count: int) -> dict[str, list[Callable[[], None]]]:
        """Per variant, `count` launches reading nbytes each, rotated over copies past L2 in `buf`."""
        n16 = nbytes // 16
        span = -(-n16 * 16 // 4096) * 4096
        copies = copies_past(n16 * 16, l2)
        assert copies * span <= buf.numel(), (copies, span, buf.numel())
        base = buf.data_ptr()
        out: dict[str, list[Callable[[], None]]] = {}
        for name, k, blocks in self.variants():
            out[name] = [
                functools.partial(self.launch, k, base + (c % copies) * span, n16, blocks)
                for c in range(count)
            ]
        return out


# ---------------------------------------------------------------------------------------------------
# vLLM's Triton fused_moe kernel


def align(torch: Any, ids: Any, experts: int, block_m: int) -> tuple[Any, Any, Any]:
    """What vLLM's moe_align_block_size (a C++ op, not built from source) makes for its Triton kernel: the
    flat (token, slot) indices sorted by expert, each expert's run padded to block_m with the invalid
    index M*k; the expert of each block (-1 past the last); the padded count. Made before capture (it
    synchronises with the host): not counted."""
    flat = ids.reshape(-1).long()
    numel = flat.numel()
    cap = numel + experts * (block_m - 1)
    if numel < experts:
        cap = min(numel * block_m, cap)
    sorted_ids = torch.full((cap,), numel, dtype=torch.int32, device=ids.device)
    expert_of = torch.full((-(-cap // block_m),), -1, dtype=torch.int32, device=ids.device)
    at = 0
    for e in sorted(set(flat.tolist())):
        idx = (flat == e).nonzero().flatten()
        sorted_ids[at : at + idx.numel()] = idx.int()
        blocks = -(-idx.numel() // block_m)
        expert_of[at // block_m : at // block_m + blocks] = e
        at += blocks * block_m
    return sorted_ids, expert_of, torch.tensor([at], dtype=torch.int32, device=ids.device)


def alignment_wrong(torch: Any, ids: Any, experts: int, block_m: int, sorted_ids: Any, expert_of: Any,
                    padded: Any) -> str | None:  # fmt: skip
    """None when align's output is what the kernel needs: every (token, slot) once, in a block of its
    own expert, padding elsewhere; else what is wrong."""
    flat = ids.reshape(-1).long().cpu()
    s, e, n = sorted_ids.long().cpu(), expert_of.long().cpu(), int(padded.item())
    if n % block_m or n > s.numel():
        return f"padded count {n} for {s.numel()} slots in blocks of {block_m}"
    real = s[:n][s[:n] < flat.numel()]
    if sorted(real.tolist()) != list(range(flat.numel())) or bool((s[n:] != flat.numel()).any()):
        return "not every (token, slot) exactly once"
    block_expert = e[: n // block_m].repeat_interleave(block_m)
    live = s[:n] < flat.numel()
    if bool((flat[s[:n][live]] != block_expert[live]).any()) or bool((e[n // block_m :] != -1).any()):
        return "a (token, slot) in another expert's block"
    return None


def slot_sum(c3: Any) -> Any:
    """vLLM's moe_sum: the k slots' bf16 rows (router weights already applied) summed in fp32, to bf16."""
    return c3.float().sum(dim=1).to(c3.dtype)


class Vllm:
    """vLLM's block-FP8 fused_moe Triton kernel from a source tree, driven as vLLM drives it at decode."""

    _keep: Any = None

    def __init__(self, torch: Any, src: Path) -> None:
        self.torch, self.src = torch, src
        sys.path.insert(0, str(src))
        self.absent = self.stand_in_for_absent_extensions(torch, src)
        self.module = importlib.import_module("vllm.model_executor.layers.fused_moe.fused_moe")
        import triton.language as tl

        self.compute_type = tl.bfloat16
        new, old = "invoke_fused_moe_triton_kernel", "invoke_fused_moe_kernel"  # its name now, and before
        self.invoke = getattr(self.module, new, None) or getattr(self.module, old)
        kernel = getattr(self.module, "fused_moe_kernel", None)
        if not callable(getattr(type(kernel), "__getitem__", None)):  # a JITFunction launches as kernel[grid]
            raise RuntimeError(
                "vLLM replaced its Triton kernels by placeholders (vllm.triton_utils.HAS_TRITON is False): "
                "it found no active Triton driver or no vllm distribution metadata beside vllm/"
            )
        self.version = metadata.version("vllm")
        from netra.torch import composite

        self.glue_how = "torch.compile (composite.silu_mul_fp8_quant; the slot sum in fp32)"
        self._silu_quant = torch.compile(composite.silu_mul_fp8_quant, dynamic=True)
        self._slot_sum = torch.compile(slot_sum, dynamic=True)
        self.params = self.parameters()

    @staticmethod
    def stand_in_for_absent_extensions(torch: Any, src: Path) -> str:
        """Let vLLM's Python import without its compiled extensions; say so, or "" when they are present.

        The bench drives only vLLM's Triton kernel (alignment and glue are its own, above), but vllm's CUDA
        platform imports `vllm._C_stable_libtorch` at module level and a quantization module asks it one
        capability question at import. The CUDA wheel's extensions are past what a device call carries and
        are built for a newer torch than the H200 image's, so where they are absent that import gets an
        empty module and the question the answer "no CUTLASS block-FP8 GEMM", which only steers vLLM's
        dense linear layers, never fused_moe. Nothing timed runs through either."""
        if any((src / "vllm").glob("_C_stable_libtorch*.so")):
            return ""
        import types

        sys.modules.setdefault("vllm._C_stable_libtorch", types.ModuleType("vllm._C_stable_libtorch"))
        lib = torch.library.Library("_C", "FRAGMENT")
        lib.define("cutlass_scaled_mm_supports_block_fp8(int cuda_device_capability) -> bool")
        lib.impl(
            "cutlass_scaled_mm_supports_block_fp8", lambda capability: False, "CompositeExplicitAutograd"
        )
        Vllm._keep = lib  # a Library unregisters its ops when collected
        return (
            "vLLM's compiled extensions absent from --vllm-src: an empty vllm._C_stable_libtorch and "
            "_C::cutlass_scaled_mm_supports_block_fp8 answering False stand in at import; only its Triton "
            "kernel is timed"
        )

    def commit(self) -> str | None:
        r = subprocess.run(["git", "-C", str(self.src), "rev-parse", "HEAD"], capture_output=True, text=True,
                           check=False)  # fmt: skip
        return r.stdout.strip() or None if r.returncode == 0 else None

    def config(self, p: dict[str, int], m: int) -> tuple[dict[str, int], str]:
        """vLLM's tuned config for (E, N=inter, this GPU, block FP8) at the nearest M, or its default."""
        name = self.torch.cuda.get_device_name(0).replace(" ", "_")
        fname = (
            f"E={p['experts']},N={p['inter']},device_name={name},dtype=fp8_w8a8,block_shape=[128,128].json"
        )
        path = self.src / VLLM_MOE / "configs" / fname
        if path.is_file():
            table = {int(k): v for k, v in json.loads(path.read_text()).items()}
            return dict(table[min(table, key=lambda k: abs(k - m))]), f"configs/{fname}"
        default = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32,
                   "num_warps": 4, "num_stages": 3}  # fmt: skip
        return default, f"vLLM's default block-FP8 config (no configs/{fname})"

    def call(self, p: dict[str, int], row: Row, index: int) -> tuple[Callable[[], Any], str]:
        """fn() -> bf16 [M, H] for call `index` of the row, and which config it runs."""
        torch = self.torch
        xq, xs, ids, w, w13, w13s, w2, w2s = row.args(index)
        m, k, h, i = xq.shape[0], p["topk"], p["hidden"], p["inter"]
        cfg, cfg_from = self.config(p, m)
        sorted_ids, expert_of, padded = align(torch, ids, p["experts"], cfg["BLOCK_SIZE_M"])
        wrong = alignment_wrong(torch, ids, p["experts"], cfg["BLOCK_SIZE_M"], sorted_ids, expert_of, padded)
        if wrong:
            raise AssertionError(f"the alignment made for vLLM's kernel is wrong: {wrong}")
        c1 = torch.empty(m, k, 2 * i, dtype=torch.bfloat16, device=xq.device)
        c3 = torch.empty(m, k, h, dtype=torch.bfloat16, device=xq.device)
        invoke = self.invoke

        def gemm(a: Any, a_s: Any, b: Any, b_s: Any, c: Any, mul: bool, top_k: int) -> None:
            given = {
                "A": a, "B": b, "C": c, "A_scale": a_s, "B_scale": b_s, "B_zp": None, "B_bias": None,
                "topk_weights": w, "sorted_token_ids": sorted_ids, "expert_ids": expert_of,
                "num_tokens_post_padded": padded, "mul_routed_weight": mul, "top_k": top_k, "config": cfg,
                "compute_type": self.compute_type, "use_fp8_w8a8": True, "use_int8_w8a8": False,
                "use_int8_w8a16": False, "use_int4_w4a16": False, "per_channel_quant": False,
                "block_shape": [BLOCK, BLOCK],
            }  # fmt: skip
            invoke(**{n: given[n] for n in self.params if n in given})

        def fn() -> Any:
            gemm(xq, xs, w13, w13s, c1, False, k)
            hq, hs = self._silu_quant(c1.view(m * k, 2 * i), BLOCK)
            gemm(hq, hs, w2, w2s, c3, True, 1)
            return self._slot_sum(c3)

        return fn, cfg_from

    def parameters(self) -> list[str]:
        """The kernel launcher's parameters; one this bench cannot fill is an error naming it."""
        import inspect

        sig = inspect.signature(self.invoke)
        known = {"A", "B", "C", "A_scale", "B_scale", "B_zp", "B_bias", "topk_weights", "sorted_token_ids",
                 "expert_ids", "num_tokens_post_padded", "mul_routed_weight", "top_k", "config",
                 "compute_type", "use_fp8_w8a8", "use_int8_w8a8", "use_int8_w8a16", "use_int4_w4a16",
                 "per_channel_quant", "block_shape"}  # fmt: skip
        unknown = [n for n, q in sig.parameters.items() if n not in known and q.default is q.empty]
        if unknown:
            raise TypeError(
                f"{self.invoke.__name__} takes {', '.join(unknown)}, which this bench does not fill"
            )
        return list(sig.parameters)


# ---------------------------------------------------------------------------------------------------
# Netra


def netra_served(torch: Any, nt: Any, args: tuple[Any, ...], policies: list[str]) -> dict[str, Any]:
    """Which policy serves nt.fp8_moe for these operands in strict mode, with each stage's tactic; or
    why nothing does, from nt.fallback_reasons() after one call outside strict mode."""
    from netra.core.ops import CHAINS, contract_key

    tried = []
    for pol in policies:
        if nt.policy() != pol:
            nt.set_policy(pol)  # rebuilds netra.torch's plans: only when it changes
        try:
            with nt.strict():
                nt.fp8_moe(*args)
        except nt.StrictModeError as e:
            tried.append(f"{pol}: {e.code}")
            continue
        params = {"experts": args[4].shape[0], "topk": args[2].shape[1], "hidden": args[4].shape[2],
                  "inter": args[4].shape[1] // 2}  # fmt: skip
        tactics = {}
        for stage in CHAINS["fp8_moe"].stages:
            kern = nt.kernel_for(contract_key(stage, params), rows=args[0].shape[0])
            tactics[stage] = getattr(kern, "tactic", None) or f"fallback {kern.code}"
        return {"served": True, "policy": pol, "policies_tried": tried, "tactics": tactics}
    nt.reset_stats()
    nt.fp8_moe(*args)
    reasons = nt.fallback_reasons()
    nt.reset_stats()
    why = "; ".join(f"{code}: {r}" for c in reasons.values() for code, rs in c.items() for r in rs)
    return {"served": False, "policies_tried": tried, "fallback_reasons": reasons, "why": why or "unknown"}


def pinned(p: dict[str, int], chain: str) -> dict[str, str]:
    """nt.set_tactics's mapping for a --chains entry: each stage's contract -> its tactic."""
    from netra.core.ops import CHAINS, contract_key

    return {
        contract_key(stage, p): t for stage, t in zip(CHAINS["fp8_moe"].stages, chain.split("+"), strict=True)
    }


def smoke_chains(nt: Any, p: dict[str, int], chains: list[str]) -> dict[str, dict[str, Any]]:
    """--cpu-smoke: each chain's mapping is one nt.set_tactics accepts (restored after); nothing timed."""
    out = {}
    for chain in chains:
        mapping = pinned(p, chain)
        nt.set_tactics(nt.set_tactics(mapping))  # accepted (a malformed one raises), then restored
        out[chain] = entry("skipped", "cpu smoke: no device to time on", tactics=mapping)
    return out


def time_chains(torch: Any, nt: Any, p: dict[str, int], row: Row, chains: list[str], served: Any, ref: Any,
                bound: float, calls: int, capture: Callable[..., None]) -> dict[str, dict[str, Any]]:  # fmt: skip
    """--chains: per chain, under nt.set_tactics (restored after each), the guard netra's chain gets (strict
    mode, bitwise equal across two runs, within `bound` of the composite's `ref`), then its graph captured as
    `tactics:CHAIN`. Whether its bits are the served chain's (`served`, the served chain's output) is
    recorded, not required: tactics with other warps per CTA add their warps' partial sums in another order."""
    out: dict[str, dict[str, Any]] = {}
    for chain in chains:
        prev = nt.set_tactics(pinned(p, chain))
        try:
            with nt.strict():
                checked = guard(torch, lambda: nt.fp8_moe(*row.args(0)), ref, bound, bitwise=True)
                if "failed" in checked:
                    out[chain] = entry("failed", checked["failed"], guard=checked)
                    continue
                got = nt.fp8_moe(*row.args(0))
                same = bool(torch.equal(got.view(torch.int16), served.view(torch.int16)))
                capture(
                    f"tactics:{chain}", [functools.partial(nt.fp8_moe, *row.args(c)) for c in range(calls)]
                )
                out[chain] = entry("timed", None, guard=checked, same_bits_as_served=same)
        except nt.StrictModeError as e:  # the table does not serve this tactic here: said, not timed
            out[chain] = entry("skipped", f"not served: {e.code}: {e.reason}")
        finally:
            nt.set_tactics(prev)
    return out


# ---------------------------------------------------------------------------------------------------
# the run


def environment(torch: Any, gpu: bool) -> dict[str, Any]:
    import netra

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "torch_cuda": torch.version.cuda, "netra": netra.__version__}  # fmt: skip
    for dist in ("triton", "cupy", "cupy-cuda12x", "cupy-cuda13x"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            env[dist] = metadata.version(dist)
    try:
        from netra.runtime import installed

        inst = installed.locate()
        env["netra_install"] = {"kind": inst.kind, "root": str(inst.root)}
    except Exception as e:  # an install this netra cannot place is reported, not fatal to a bench
        env["netra_install"] = {"error": one_line(e)}
    here = Path(__file__).resolve().parent
    r = subprocess.run(
        ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    env["commit"] = r.stdout.strip() if r.returncode == 0 else None
    if env["commit"]:
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"], capture_output=True, text=True,
                               check=False).stdout.strip()  # fmt: skip
        env["commit_dirty"] = bool(dirty)
    if gpu:
        prop = torch.cuda.get_device_properties(0)
        env.update({"gpu": torch.cuda.get_device_name(0), "capability": list(torch.cuda.get_device_capability(0)),
                    "sms": prop.multi_processor_count, "l2_bytes": getattr(prop, "L2_cache_size", None)})  # fmt: skip
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, check=False)  # fmt: skip
        env["driver"] = q.stdout.strip().splitlines()[0] if q.returncode == 0 and q.stdout.strip() else None
        try:
            from netra.loaders.cuda import Cuda

            env["driver_cuda"] = Cuda().driver_version()
        except Exception as e:  # reported, not fatal
            env["driver_cuda"] = one_line(e)
    else:
        env["gpu"] = None
    return env


def entry(status: str, reason: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"status": status, "reason": reason, **extra}


def smoke_row(torch: Any, nt: Any, composite: Any, p: dict[str, int], row: Row, args: argparse.Namespace,
              vllm_why: str) -> dict[str, dict[str, Any]]:  # fmt: skip
    """--cpu-smoke: the composite and the guard on CPU, Netra's fallback reason; nothing timed."""
    ops = row.args(0)
    ref = composite.fp8_moe(*ops)
    if tuple(ref.shape) != (row.xq.shape[0], p["hidden"]) or not bool(torch.isfinite(ref.float()).all()):
        raise SystemExit(f"bench_moe: the composite's output is {list(ref.shape)} or not finite")
    checked = guard(torch, lambda: composite.fp8_moe(*ops), ref, args.bound, bitwise=True)
    net = netra_served(torch, nt, ops, args.policy)
    wrong = [
        f"block {b}: {w}"
        for b in (16, 64)
        for ids, _ in row.routes
        for w in [alignment_wrong(torch, ids, p["experts"], b, *align(torch, ids, p["experts"], b))]
        if w
    ]
    if wrong:
        raise SystemExit(f"bench_moe: the alignment made for vLLM's kernel is wrong: {wrong[0]}")
    return {
        "read_limit": entry("skipped", "cpu smoke: no device to time on"),
        "netra": entry("skipped", f"not served: {net.get('why', '')}", served=net)
        if not net["served"]
        else entry("checked", None, served=net),
        "vllm": entry("skipped", vllm_why, alignment="checked: blocks of 16 and 64, every call's routing"),
        "eager": entry(
            "checked", "cpu smoke: the composite ran and its guard held, not timed", guard=checked
        ),
        "compile": entry("skipped", "cpu smoke: torch.compile is not run"),
    }


def timed_row(torch: Any, nt: Any, composite: Any, p: dict[str, int], row: Row, args: argparse.Namespace,
              reader: Reader, buf: Any, l2: int, vllm: Vllm | None, vllm_why: str, compiled: Any,
              compile_why: str, calls: int) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:  # fmt: skip
    """One row on the GPU: guards first, then every implementation's graph, replayed in interleaved rounds.
    Returns the implementations' entries and --chains' (chain -> entry)."""
    out: dict[str, dict[str, Any]] = {}
    graphs: dict[str, Graph] = {}
    nbytes = int(row.experts_hit * expert_bytes(p))
    ref = composite.fp8_moe(*row.args(0))

    def capture(name: str, fns: list[Callable[[], Any]], **extra: Any) -> None:
        """The implementation's graph, or its entry "failed" with the one-line reason (the row goes on)."""
        try:
            graphs[name] = Graph(torch, fns)
            out[name] = entry("timed", None, calls_per_graph=len(fns), **extra)
        except Exception as e:  # a capture that fails is this row's finding, not the end of the run
            out[name] = entry("failed", one_line(e), **extra)

    for name, fns in reader.calls(buf, nbytes, l2, calls).items():
        graphs[f"read:{name}"] = Graph(torch, fns)  # no read limit, no row: this one may fail the run
    # netra: strict mode throughout, so a fallback raises instead of timing the composite
    net = netra_served(torch, nt, row.args(0), args.policy)
    if not net["served"]:
        out["netra"] = entry("skipped", f"not served: {net['why']}", served=net)
    else:
        with nt.strict():
            checked = guard(torch, lambda: nt.fp8_moe(*row.args(0)), ref, args.bound, bitwise=True)
            if "failed" in checked:
                out["netra"] = entry("failed", checked["failed"], served=net, guard=checked)
            else:
                nt.reset_stats()
                fns = [functools.partial(nt.fp8_moe, *row.args(c)) for c in range(calls)]
                capture("netra", fns, served=net, guard=checked)
    # --chains: each pinned chain's graph, beside the served one
    chains: dict[str, dict[str, Any]] = {}
    if args.chains and "netra" not in graphs:
        chains = {c: entry("skipped", "the served chain was not timed: nothing to compare its bits with")
                  for c in args.chains}  # fmt: skip
    elif args.chains:
        with nt.strict():
            served_bits = nt.fp8_moe(*row.args(0))
        chains = time_chains(torch, nt, p, row, args.chains, served_bits, ref, args.bound, calls, capture)
    # vllm
    if vllm is None:
        out["vllm"] = entry("skipped", vllm_why)
    else:
        try:
            made = [vllm.call(p, row, c) for c in range(calls)]
            checked = guard(torch, made[0][0], ref, args.bound, bitwise=False)
        except Exception as e:  # a peer's failure is that row's finding, never the end of the run
            out["vllm"] = entry("failed", one_line(e))
        else:
            more = {"guard": checked, "config": made[0][1], "glue": vllm.glue_how,
                    "alignment": "made before capture, not counted"}  # fmt: skip
            if "failed" in checked:
                out["vllm"] = entry("failed", checked["failed"], **more)
            else:
                capture("vllm", [fn for fn, _ in made], **more)
    # the composite, eager and compiled: slow (it dequantizes each routed expert), so as few calls as the
    # rotation needs
    few = len(row.layers)
    capture("eager", [functools.partial(composite.fp8_moe, *row.args(c)) for c in range(few)])
    if compiled is None:
        out["compile"] = entry("skipped" if args.no_compile else "failed", compile_why)
    else:
        capture("compile", [functools.partial(compiled, *row.args(c)) for c in range(few)])
    # interleaved rounds
    samples: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(args.rounds):
        for name, gr in graphs.items():
            samples[name].append(gr.replay_us())
    graphs.clear()  # free the graphs (and their memory pools) before the next row
    torch.cuda.synchronize()
    if "netra" in samples:
        st = nt.stats()
        paths = {k: v for k, v in st.items() if k.startswith("fp8_moe(") and set(v) != {"certified"}}
        if paths:
            raise SystemExit(f"bench_moe: nt.fp8_moe took a fallback while timed: {paths}")
    reads = {
        n.removeprefix("read:"): statistics.median(v) for n, v in samples.items() if n.startswith("read:")
    }
    best = min(reads, key=lambda n: reads[n])
    limit = reads[best]
    out["read_limit"] = entry("timed", None, us=limit, of_read_limit=1.0, best=best, variants_us=reads,
                              how=reader.how, copies=copies_past(nbytes, l2))  # fmt: skip
    for name in ("netra", "vllm", "eager", "compile"):
        if name in samples:
            us = statistics.median(samples[name])
            out[name].update(us=us, samples_us=samples[name], of_read_limit=limit / us)
    for chain, e in chains.items():
        name = f"tactics:{chain}"
        if name in samples:
            us = statistics.median(samples[name])
            e.update(out[name], us=us, samples_us=samples[name], of_read_limit=limit / us)
        elif name in out:  # its capture failed
            e.update(out[name])
    return {n: out[n] for n in IMPLS}, chains


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--contracts", nargs="+", choices=sorted(CONTRACTS), default=list(CONTRACTS))
    ap.add_argument("--tokens", nargs="+", type=int, default=None, help=f"M values (default {TOKENS})")
    ap.add_argument("--routing", nargs="+", choices=ROUTINGS, default=list(ROUTINGS))
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds per row (median)")
    ap.add_argument(
        "--graph-calls", type=int, default=16, help="calls per CUDA graph (rounded up to the layers)"
    )
    ap.add_argument("--bound", type=float, default=0.05, help="the guard's bound against the composite")
    ap.add_argument("--policy", nargs="+", choices=POLICIES, default=list(POLICIES),
                    help="netra.torch policies tried in order; the first serving nt.fp8_moe is timed")  # fmt: skip
    ap.add_argument(
        "--vllm-src", type=Path, default=None, help="an unpacked vLLM wheel (fetched for the run)"
    )
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile of the composite")
    ap.add_argument(
        "--chains",
        nargs="+",
        default=[],
        metavar="GATE+DOWN",
        help="also time these chains (a gate/up tactic + a down tactic of the table) through nt.fp8_moe "
        "with nt.set_tactics, each after netra's guard",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write every row and the environment here")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny shapes on CPU, nothing timed")
    args = ap.parse_args(argv)
    tokens = args.tokens or list(SMOKE_TOKENS if args.cpu_smoke else TOKENS)
    if any(m < 1 or m > 64 for m in tokens):
        ap.error(f"--tokens {' '.join(map(str, tokens))}: each M must be 1 to 64 (the chain's decode range)")
    args.tokens = tokens
    bad = [c for c in args.chains if len(c.split("+")) != 2 or not all(c.split("+"))]
    if bad:
        ap.error(f"--chains {bad[0]}: name a gate/up tactic and a down tactic, e.g. g4r8+d3")
    if args.rounds < 1 or args.graph_calls < 1:
        ap.error("--rounds and --graph-calls must be at least 1")
    if not 0 < args.bound < 1:
        ap.error(f"--bound {args.bound}: a fraction of a row's largest value, between 0 and 1")
    if args.vllm_src is not None:
        if not (args.vllm_src / VLLM_MOE / "fused_moe.py").is_file():
            ap.error(
                f"--vllm-src {args.vllm_src}: no {VLLM_MOE}/fused_moe.py under it; pass an unpacked vLLM wheel"
            )
        if not any(args.vllm_src.glob("vllm-*.dist-info/METADATA")):
            ap.error(f"--vllm-src {args.vllm_src}: no vllm-*.dist-info beside vllm/ (vLLM disables its Triton "
                     "kernels without it); pass an unpacked vLLM wheel (docs/performance.md)")  # fmt: skip
    if args.json is not None and not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: its folder does not exist")
    return args


def start(name: str, cpu_smoke: bool) -> tuple[Any, Any, bool, dict[str, Any]]:
    """A GPU bench's opening, shared by the bench scripts that measure an install: torch and netra.torch
    imported (else one line naming the install to make), a CUDA device required unless `cpu_smoke`, the
    environment read and printed. Returns (torch, netra.torch, gpu, environment)."""
    try:
        import torch

        import netra
        import netra.torch as nt
    except ImportError as e:  # the bench measures an install: netra-kernel[torch] must be importable
        sys.exit(f"{name}: {e.msg}; install the wheel with torch (pip install 'netra_kernel-*.whl[torch]'), "
                 "or run it with PYTHONPATH at a source tree")  # fmt: skip
    gpu = not cpu_smoke
    if gpu and not torch.cuda.is_available():
        sys.exit(f"{name}: no CUDA device visible to torch (--cpu-smoke runs the CPU check)")
    env = environment(torch, gpu)
    print(f"netra {netra.__version__} ({env['netra_install']}); torch {torch.__version__}; "
          f"{env.get('gpu') or 'cpu smoke'}; commit {env['commit']}; python {env['python']}")  # fmt: skip
    return torch, nt, gpu, env


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch, nt, gpu, env = start("bench_moe", args.cpu_smoke)
    from netra.torch import composite

    dev = torch.device("cuda" if gpu else "cpu")
    contracts = SMOKE if args.cpu_smoke else {n: CONTRACTS[n] for n in args.contracts}

    vllm: Vllm | None = None
    if args.vllm_src is None:
        vllm_why = "--vllm-src not given: vLLM's fused_moe is not timed"
    elif not gpu:
        vllm_why = "cpu smoke: vLLM's Triton kernel needs the GPU"
    else:
        try:
            vllm = Vllm(torch, args.vllm_src)
            vllm_why = ""
            if vllm.absent:
                print(f"vllm: {vllm.absent}")
            env["vllm"] = {
                "src": str(args.vllm_src),
                "version": vllm.version,
                "commit": vllm.commit(),
                "extensions": vllm.absent or "present",
            }
        except Exception as e:  # its import needs what its source needs: say what failed, time the rest
            vllm_why = f"importing fused_moe from {args.vllm_src} failed: {one_line(e)}"
    if vllm_why:
        print(f"vllm: skipped: {vllm_why}")
    print(f"guard before timing: nt.fp8_moe bitwise equal across two runs; netra and vllm within {args.bound:g} of "
          "the composite (largest difference in a row / largest composite value in it)")  # fmt: skip

    reader = None
    if gpu:
        try:
            reader = Reader(torch)
        except Exception as e:  # no read limit, no percentages: nothing worth timing
            sys.exit(
                f"bench_moe: the read kernels could not be built ({one_line(e)}); install cupy for this CUDA"
            )
    l2 = (
        (getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or L2_DEFAULT)
        if gpu
        else L2_DEFAULT
    )
    rows: list[dict[str, Any]] = []
    for ci, (name, p) in enumerate(contracts.items()):
        per_expert = expert_bytes(p)
        layer_count = copies_past(p["topk"] * per_expert, l2) if gpu else 2
        calls = -(-args.graph_calls // layer_count) * layer_count
        layers = Layers(torch, p, layer_count, args.seed + 1000 * ci, dev)
        buf = compiled = None
        compile_s = None
        compile_why = "--no-compile" if args.no_compile else "cpu smoke: torch.compile is not run"
        if gpu:
            most = p["experts"] * per_expert
            buf = torch.ones(max(2 * most, 3 * l2 + most) + 8192, dtype=torch.uint8, device=dev)
            if not args.no_compile:
                torch._dynamo.reset()
                compiled = torch.compile(composite.fp8_moe, dynamic=True)
                t0 = time.perf_counter()
                try:
                    for m in (1, 2):  # dynamo specializes M=1; M=2 makes the graph every other M runs
                        compiled(*Row(torch, composite, p, m, "uniform", 1, layers, 7, dev).args(0))
                    torch.cuda.synchronize()
                    compile_s = time.perf_counter() - t0
                except Exception as e:  # the compile row's finding, reported in every row
                    compiled, compile_why = None, f"torch.compile failed: {one_line(e)}"
        print(f"\n{name} {p}: {per_expert / 1e6:.2f} MB per expert, {layer_count} layer copies, {calls} calls "
              f"per graph" + (f", torch.compile {compile_s:.0f} s" if compile_s is not None else ""))  # fmt: skip
        for m in args.tokens:
            for mode in args.routing:
                row = Row(
                    torch, composite, p, m, mode, calls, layers, args.seed + 17 * m + (mode == "same"), dev
                )
                nbytes = int(row.experts_hit * per_expert)
                if gpu:
                    assert reader is not None
                    impls, chains = timed_row(torch, nt, composite, p, row, args, reader, buf, l2, vllm,
                                              vllm_why, compiled, compile_why, calls)  # fmt: skip
                else:
                    impls = smoke_row(torch, nt, composite, p, row, args, vllm_why)
                    chains = smoke_chains(nt, p, args.chains)
                rec = {"contract": name, "params": p, "tokens": m, "routing": mode, "experts_hit": row.experts_hit,
                       "bytes_read": nbytes, "layer_copies": len(layers), "bytes_per_rotation": nbytes * len(layers),
                       "calls_per_graph": calls, "impls": impls, "chains": chains}  # fmt: skip
                rows.append(rec)
                print(line(rec))
                if args.json:  # after every row: a run stopped part way keeps what it measured
                    write_json(args, env, rows)
                if gpu:
                    torch.cuda.empty_cache()
        del layers, buf, compiled
        if gpu:
            torch.cuda.empty_cache()
    if args.json:
        write_json(args, env, rows, done=True)
        print(f"wrote {args.json}")


def write_json(
    args: argparse.Namespace, env: dict[str, Any], rows: list[dict[str, Any]], done: bool = False
) -> None:
    """The document so far, replaced whole (written beside, then renamed): `complete` once every row ran."""
    doc = {"bench": "bench_moe", "mode": "cpu-smoke" if args.cpu_smoke else "gpu", "environment": env,
           "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "impls": list(IMPLS), "rows": rows, "complete": done}  # fmt: skip
    part = args.json.with_name(args.json.name + ".part")
    part.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    part.replace(args.json)


def line(rec: dict[str, Any]) -> str:
    """One printed row: us per call and % of the read limit, or what happened instead."""
    cells = []
    for name in IMPLS:
        e = rec["impls"][name]
        if e.get("us") is not None:
            served = e.get("served") or {}
            extra = f", {served['policy']}: {'/'.join(served['tactics'].values())}" if served else ""
            cells.append(f"{name} {e['us']:.1f} us ({100 * e['of_read_limit']:.0f}%{extra})")
        else:
            cells.append(f"{name} {e['status']}" + (f" ({e['reason']})" if e["reason"] else ""))
    for chain, e in rec.get("chains", {}).items():
        if e.get("us") is not None:
            cells.append(f"{chain} {e['us']:.1f} us ({100 * e['of_read_limit']:.0f}%)")
        else:
            cells.append(f"{chain} {e['status']}" + (f" ({e['reason']})" if e["reason"] else ""))
    head = f"  M={rec['tokens']:<3d} {rec['routing']:8s} {rec['experts_hit']:6.1f} experts {rec['bytes_read'] / 1e6:8.1f} MB"
    return head + " | " + " | ".join(cells)


if __name__ == "__main__":
    run(main)
