"""How fast the routed MoE's one-token bytes can be read, by access pattern (a diagnostic for issue 28).

At one token the served chain (g4r8 + d3) reads Qwen3-30B-A3B's 8 experts (25 MB of gate/up rows, 12.6
MB of down rows) at about 60% of the read limit. This script separates what the access pattern costs
from what the chain's structure (routing, hand-off, slot sums) costs: in one run, CUDA-graph replay,
buffers rotated past L2, it times reading exactly a call's bytes (8 experts, no routing, no arithmetic
beyond an XOR that keeps the loads alive) with

- lin: grid-stride 16-byte loads over each expert's rows, 8 in flight a thread (the read limit's way);
- frag1: the register path's tiles and lane map (a CTA per 16 gate + 16 up rows, or 32 down rows, of one
  expert; warps split k; lane (g, c) loads rows g and g + 8, bytes 32c .. 32c + 31 of each 128-byte
  block), one 128-byte sub-slice in flight a warp, as g4r8 and d3o multiply;
- fragall: the same lane map with the warp's whole k range requested at once;
- cp1, cpall: the same lane map by cp.async into shared memory (no register held per byte in flight: a
  sub-slice, or the warp's whole k range, requested at once before any is waited for);
- row: the same tiles, each warp reading whole rows, 512 contiguous bytes an instruction, 8 in flight;
- both stages' bytes in one kernel (lin and row), against the two stages' sum.

    python bench/probe_moe_reads.py [--contract Qwen3-30B-A3B] [--json OUT]

Needs CuPy and a CUDA GPU; prints one line per kernel (us per call, TB/s) and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _entry import run
from bench_moe import L2_DEFAULT, copies_past

CONTRACTS = {"Qwen3-30B-A3B": (2048, 768), "Qwen3-235B-A22B": (4096, 1536)}
TOPK = 8
KERNELS = (  # in the order they are timed
    "empty_k",
    "lin_gu",
    "gu_frag1",
    "gu_fragall",
    "gu_cp1",
    "gu_cpall",
    "gu_row",
    "lin_dn",
    "dn_frag1",
    "dn_fragall",
    "dn_cpall",
    "dn_row",
    "dn_row8w",
    "lin_both",
    "both_row",
)

SOURCE = r"""
typedef unsigned long long u64;
__device__ __forceinline__ uint4 ld16(const unsigned char* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned x4(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }
// Zero at run time (nothing writes it), but unknown to the compiler, and known only once `v` has arrived
__device__ unsigned netra_probe_zero;
__device__ __forceinline__ unsigned after(uint4 v) { return v.x & netra_probe_zero; }
// v's words each offset by z before they meet (+ does not distribute over ^), so that nothing consumes a
// load of a batch before its last one has been issued: every load of a batch is in flight at once, as a
// tile's weights are
__device__ __forceinline__ unsigned x4z(uint4 v, unsigned z) { return (v.x + z) ^ (v.y + z) ^ (v.z + z) ^ (v.w + z); }
// ASYNC: the 16 bytes requested by cp.async into one of this lane's 4 shared-memory units (overwritten
// freely: what is timed is the bytes' arrival, not their values), no register held while in flight;
// drain() waits for all of them and XORs the units.
__shared__ __align__(16) uint4 netra_probe_units[256 * 4];  // up to 256 threads
template <bool ASYNC>
__device__ __forceinline__ uint4 ldx(const unsigned char* p, int unit) {
  if (!ASYNC) return ld16(p);
  const unsigned dst = (unsigned)__cvta_generic_to_shared(&netra_probe_units[threadIdx.x * 4 + unit]);
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst), "l"(p) : "memory");
  return make_uint4(0u, 0u, 0u, 0u);
}
__device__ __forceinline__ unsigned drain() {
  asm volatile("cp.async.wait_all;" ::: "memory");
  unsigned acc = 0;
#pragma unroll
  for (int u = 0; u < 4; ++u) acc ^= x4(netra_probe_units[threadIdx.x * 4 + u]);
  return acc;
}
__device__ __forceinline__ void sink_if(unsigned acc, unsigned* sink) {
  if (acc == 0x9E3779B9u) sink[blockIdx.x] = acc;
}

// Tiles: rows [r0, r0 + 16) of tile a and of tile b (b = a + tile_b bytes), each KD bytes long.
// frag: lane (g, c) of warp w loads rows g and g + 8 of both tiles, bytes k0 + 32c .. + 31 of each
// 128-byte block of the warp's range [w * KW, (w + 1) * KW), SUB bytes at a time (SUB == KW: at once).
template <int KD, int WARPS, int SUB, bool ASYNC>
__device__ __forceinline__ unsigned frag_tile(const unsigned char* a, const unsigned char* b) {
  constexpr int KW = KD / WARPS;
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  unsigned acc = 0;
#pragma unroll 1
  for (int s = 0; s < KW; s += SUB) {
    uint4 v[SUB / 128][2][2][2];
#pragma unroll
    for (int kb = 0; kb < SUB / 128; ++kb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const size_t off = (size_t)(g + 8 * h) * KD + w * KW + s + kb * 128 + 32 * c;
        v[kb][h][0][0] = ldx<ASYNC>(a + off, 0);
        v[kb][h][0][1] = ldx<ASYNC>(a + off + 16, 1);
        v[kb][h][1][0] = ldx<ASYNC>(b + off, 2);
        v[kb][h][1][1] = ldx<ASYNC>(b + off + 16, 3);
      }
    if (ASYNC) {
      acc ^= drain();
      continue;
    }
    const unsigned z = after(v[SUB / 128 - 1][1][1][1]);
#pragma unroll
    for (int kb = 0; kb < SUB / 128; ++kb)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        acc ^= x4z(v[kb][h][0][0], z) ^ x4z(v[kb][h][0][1], z) ^ x4z(v[kb][h][1][0], z) ^ x4z(v[kb][h][1][1], z);
  }
  return acc;
}
// row: the warps take the tiles' 32 rows in turn; a row is read 512 contiguous bytes an instruction,
// U instructions in flight.
template <int KD, int U>
__device__ __forceinline__ unsigned row_tile(const unsigned char* a, const unsigned char* b) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  unsigned acc = 0;
  constexpr int kPer = KD / 512;  // instructions a row
  const int total = 32 * kPer;
  for (int i = w * U; i < total; i += nw * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = i + u < total ? i + u : i;
      const int row = j / kPer, part = j % kPer;
      const unsigned char* base = row < 16 ? a + (size_t)row * KD : b + (size_t)(row - 16) * KD;
      v[u] = ld16(base + part * 512 + lane * 16);
    }
    const unsigned z = after(v[U - 1]);
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= x4z(v[u], z);
  }
  return acc;
}

// gate/up: grid (I / 16, 8), CTA (x, y): gate rows 16x .. of expert ex[y] and the same up rows (w13 [E, 2I, H]).
#define GU(NAME, BODY)                                                                                   \
  extern "C" __global__ void __launch_bounds__(128) NAME(const unsigned char* __restrict__ w13,        \
                                                         const int* __restrict__ ex, unsigned* sink) { \
    const unsigned char* a = w13 + ((size_t)ex[blockIdx.y] * 2 * INTER + blockIdx.x * 16) * HIDDEN;     \
    const unsigned char* b = a + (size_t)INTER * HIDDEN;                                                 \
    sink_if(BODY, sink);                                                                                 \
  }
GU(gu_frag1, (frag_tile<HIDDEN, 4, 128, false>(a, b)))
GU(gu_fragall, (frag_tile<HIDDEN, 4, HIDDEN / 4, false>(a, b)))
GU(gu_cp1, (frag_tile<HIDDEN, 4, 128, true>(a, b)))
GU(gu_cpall, (frag_tile<HIDDEN, 4, HIDDEN / 4, true>(a, b)))
GU(gu_row, (row_tile<HIDDEN, 8>(a, b)))
// down: grid (H / 32, 8), CTA (x, y): rows 32x .. 32x + 31 of expert ex[y] (w2 [E, H, I]), 3 warps.
#define DN(NAME, THREADS, BODY)                                                                          \
  extern "C" __global__ void __launch_bounds__(THREADS) NAME(const unsigned char* __restrict__ w2,     \
                                                             const int* __restrict__ ex, unsigned* sink) { \
    const unsigned char* a = w2 + ((size_t)ex[blockIdx.y] * HIDDEN + blockIdx.x * 32) * INTER;          \
    const unsigned char* b = a + (size_t)16 * INTER;                                                     \
    sink_if(BODY, sink);                                                                                 \
  }
DN(dn_frag1, 96, (frag_tile<INTER, 3, 128, false>(a, b)))
DN(dn_fragall, 96, (frag_tile<INTER, 3, INTER / 3, false>(a, b)))
DN(dn_cpall, 96, (frag_tile<INTER, 3, INTER / 3, true>(a, b)))
DN(dn_row, 96, (row_tile<INTER, 8>(a, b)))
DN(dn_row8w, 256, (row_tile<INTER, 4>(a, b)))

// lin: grid-stride over the 8 experts' regions of w13 (2I x H each) and, with BOTH, of w2 (H x I each).
template <bool GATE, bool DOWN>
__device__ __forceinline__ void lin(const unsigned char* w13, const unsigned char* w2, const int* ex, unsigned* sink) {
  constexpr u64 r13 = (u64)2 * INTER * HIDDEN / 16, r2 = (u64)HIDDEN * INTER / 16;
  const u64 n = (GATE ? 8 * r13 : 0) + (DOWN ? 8 * r2 : 0);
  const u64 stride = (u64)gridDim.x * blockDim.x;
  __shared__ int se[8];  // the experts, read once
  if (threadIdx.x < 8) se[threadIdx.x] = ex[threadIdx.x];
  __syncthreads();
  unsigned acc = 0;
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 8 * stride) {
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      u64 j = i + u * stride;
      if (j >= n) j = i;
      const unsigned char* p;
      if (GATE && j < 8 * r13) p = w13 + ((u64)se[j / r13] * r13 + j % r13) * 16;
      else { const u64 k = j - (GATE ? 8 * r13 : 0); p = w2 + ((u64)se[k / r2] * r2 + k % r2) * 16; }
      v[u] = ld16(p);
    }
#pragma unroll
    for (int u = 0; u < 8; ++u) acc ^= x4(v[u]);
  }
  sink_if(acc, sink);
}
extern "C" __global__ void __launch_bounds__(512) lin_gu(const unsigned char* w13, const unsigned char* w2, const int* ex, unsigned* s) { lin<true, false>(w13, w2, ex, s); }
extern "C" __global__ void __launch_bounds__(512) lin_dn(const unsigned char* w13, const unsigned char* w2, const int* ex, unsigned* s) { lin<false, true>(w13, w2, ex, s); }
extern "C" __global__ void __launch_bounds__(512) lin_both(const unsigned char* w13, const unsigned char* w2, const int* ex, unsigned* s) { lin<true, true>(w13, w2, ex, s); }
// both stages' tiles in one grid: rows y < 8 of the grid are gate/up CTAs (x < I / 16), rows 8 .. 15 down CTAs.
extern "C" __global__ void __launch_bounds__(128) both_row(const unsigned char* __restrict__ w13,
                                                          const unsigned char* __restrict__ w2,
                                                          const int* __restrict__ ex, unsigned* sink) {
  unsigned acc;
  if (blockIdx.y < 8) {
    if (blockIdx.x >= INTER / 16) return;
    const unsigned char* a = w13 + ((size_t)ex[blockIdx.y] * 2 * INTER + blockIdx.x * 16) * HIDDEN;
    acc = row_tile<HIDDEN, 8>(a, a + (size_t)INTER * HIDDEN);
  } else {
    if (blockIdx.x >= HIDDEN / 32) return;
    const unsigned char* a = w2 + ((size_t)ex[blockIdx.y - 8] * HIDDEN + blockIdx.x * 32) * INTER;
    acc = row_tile<INTER, 8>(a, a + (size_t)16 * INTER);
  }
  sink_if(acc, sink);
}
extern "C" __global__ void empty_k(const unsigned char*, const int*, unsigned*) {}
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--contract", choices=sorted(CONTRACTS), default="Qwen3-30B-A3B")
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--calls", type=int, default=40, help="calls per graph replay")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="compile the kernels for sm_90a with the lock's nvcc at both contracts, time nothing",
    )
    return ap.parse_args(argv)


def smoke() -> None:
    """The kernels built by the lock's nvcc (netra.targets' discovery) at every contract: a source that no
    longer compiles fails here, on a machine without a GPU."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from netra import targets
    from netra.errors import NetraError

    try:
        tools = targets.get("sm_90").discover()
    except NetraError as e:  # no nvcc, or not the one named: its own one-line message and hint
        sys.exit(f"probe_moe_reads: {e}")
    with tempfile.TemporaryDirectory(prefix="netra-probe-") as tmp:
        src = Path(tmp) / "probe.cu"
        src.write_text(SOURCE)
        for name, (h, i) in sorted(CONTRACTS.items()):
            r = subprocess.run(
                [tools["nvcc"], "-arch=sm_90a", "-cubin", f"-DHIDDEN={h}", f"-DINTER={i}", "-o", "p.cubin", "probe.cu"],
                cwd=tmp, env={**os.environ, **tools.env}, capture_output=True, text=True, check=False,
            )  # fmt: skip
            if r.returncode != 0:
                last = (r.stderr.strip().splitlines() or ["no output"])[-1]
                sys.exit(f"probe_moe_reads: nvcc failed at {name}: {last}")
            print(f"{name}: {len(KERNELS)} kernels built for sm_90a ({tools.describe()})")


def main(argv: list[str] | None = None) -> None:
    a = parse(argv)
    if a.cpu_smoke:
        smoke()
        return
    try:
        import cupy as cp  # the device's image has CuPy
    except ImportError:
        sys.exit(
            "probe_moe_reads: needs CuPy and a CUDA GPU (the device image has both); --cpu-smoke builds only"
        )
    h, i = CONTRACTS[a.contract]
    mod = cp.RawModule(code=SOURCE, options=("-std=c++17", f"-DHIDDEN={h}", f"-DINTER={i}"))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    layer13, layer2 = a.experts * 2 * i * h, a.experts * h * i
    copies = copies_past(8 * 3 * h * i, L2_DEFAULT)  # layer copies: one pass reads >= 3x L2 of called bytes
    w13 = [cp.random.randint(0, 255, layer13, dtype=cp.uint8) for _ in range(copies)]
    w2 = [cp.random.randint(0, 255, layer2, dtype=cp.uint8) for _ in range(copies)]
    rng = cp.random.RandomState(7)
    exs = [rng.permutation(a.experts)[:TOPK].astype(cp.int32) for _ in range(copies)]
    sink = cp.zeros(4096, dtype=cp.uint32)
    gu_bytes, dn_bytes = 8 * 2 * i * h, 8 * h * i

    def launcher(name: str) -> tuple[Any, int]:
        k = mod.get_function(name)
        if name.startswith("gu_"):
            return (lambda c: k((i // 16, 8), (128,), (w13[c], exs[c], sink))), gu_bytes
        if name.startswith("dn_"):
            t = 256 if name.endswith("8w") else 96
            return (lambda c: k((h // 32, 8), (t,), (w2[c], exs[c], sink))), dn_bytes
        if name.startswith("lin_"):
            nb = {"lin_gu": gu_bytes, "lin_dn": dn_bytes, "lin_both": gu_bytes + dn_bytes}[name]
            return (lambda c: k((sms * 4,), (512,), (w13[c], w2[c], exs[c], sink))), nb
        if name == "both_row":
            return (
                lambda c: k((max(i // 16, h // 32), 16), (128,), (w13[c], w2[c], exs[c], sink))
            ), gu_bytes + dn_bytes
        return (lambda c: k((1,), (32,), (w13[c], exs[c], sink))), 0

    names = [*KERNELS]
    launchers = {n: launcher(n) for n in names}  # (launch one call on copy c, bytes it reads)
    stream = cp.cuda.Stream(non_blocking=True)
    graphs = {}
    with stream:
        for n in names:
            fn = launchers[n][0]
            for c in range(copies):
                fn(c)
            stream.synchronize()
            stream.begin_capture()
            for j in range(a.calls):
                fn(j % copies)
            graphs[n] = stream.end_capture()
        best: dict[str, float] = {}
        for _ in range(a.rounds):
            for n in names:
                s, e = cp.cuda.Event(), cp.cuda.Event()
                s.record(stream)
                graphs[n].launch(stream)
                e.record(stream)
                e.synchronize()
                us = cp.cuda.get_elapsed_time(s, e) * 1e3 / a.calls
                best[n] = min(best.get(n, us), us)
    out = {
        "contract": a.contract,
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "copies": copies,
        "calls": a.calls,
        "kernels": {},
    }
    for n in names:
        nb = launchers[n][1]
        tbs = nb / best[n] / 1e6 if nb else 0.0
        out["kernels"][n] = {"us": round(best[n], 2), "bytes": nb, "tb_s": round(tbs, 2)}
        print(f"{n:12s} {best[n]:8.2f} us  {tbs:5.2f} TB/s  ({nb / 1e6:.1f} MB)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    run(main)
