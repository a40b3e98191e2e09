// netra template fp8_moe_down_tc (sm_90a / Hopper, CUDA C++ compiled ahead of time to a cubin): the
// second stage of the routed FP8 MoE (docs/ops/fp8_moe.md) as a grouped GEMM on the warpgroup tensor
// cores, both operands in shared memory. The same op and ABI as fp8_moe_down.cu (its header has the
// definition); this template is another build path for it, chosen by the tactic.
//
//   for each pair p = t * TOPK + s with e = ids[t, s]:
//     y[p, n] = sum_b  w2s[e, n/128, b] * hs[p, b] * sum_{k in block b} w2[e, n, k] * hq[p, k]
//   out[t, n] = bf16_rn( fma(weights[t, TOPK-1], y[t*TOPK+TOPK-1, n], ... fma(weights[t, 0], y[t*TOPK, n], 0)) )
//   (the slots summed in slot order, fp32 fma, one rounding to bf16; a slot naming no expert skipped)
//
// Kernel arguments: fp8_moe_down.cu's (out, hq, hs, ids, weights, w2, w2s, y32, counts, tokens).
// Contract constants: EXPERTS, TOPK, HIDDEN, INTER (multiples of 128). Tactic constants: COLUMNS (64 or
// 128: the output columns of a CTA, a warpgroup per 64), TILE_PAIRS (8, 16, 32 or 64: the pairs of a chunk, the N of every
// wgmma), STAGES (2 to 8: k blocks in flight), MAX_TOKENS, MIN_BLOCKS (1), GRID_EXPERTS (EXPERTS or
// more: a row of CTAs per hit expert; fewer: row y takes hit experts y, y + gridDim.y, ... in turn, so a
// call whose tokens hit few experts launches no CTA that only routes and exits, each one holding its ring's
// shared memory while it does). Grid: (HIDDEN / COLUMNS, min(EXPERTS, tokens * TOPK, GRID_EXPERTS)), 2 x
// COLUMNS threads, dynamic shared memory STAGES x (COLUMNS x 128 + TILE_PAIRS x 128) + the chunk's h
// scales + 1 KB.
//
// OVERLAP 1 takes the k blocks in pairs, block kb + 1's wgmma running while block kb's partial is promoted
// (one group in flight, retired before the next pair: ptxas serializes a group carried across the loop's
// back edge); SPREAD 1 makes the rows chunk-parallel (netra_moe::route_chunk: row y takes the items (hit
// expert, chunk) y, y + gridDim.y, ..., each one chunk). SLOT_SUM 1 gathers the tokens whose sums the CTA
// writes (a bit mask of their slots naming an expert, per token, in shared memory) and each warp sums one
// token at a time with every router weight and y32 value of it requested before the fmas, where SLOT_SUM 0
// sums each last pair's token slot by slot, a load, then an fma, in turn. None changes a pair's arithmetic
// or a sum's.
//
// Mapping: CTA (x, y) takes the y-th hit expert (include/netra_moe_sm90.cuh: route) and output columns
// n0 = COLUMNS x .. + COLUMNS - 1 (rows of w2[e]), for all n of its pairs in chunks of TILE_PAIRS (one chunk
// while TILE_PAIRS >= tokens). Warpgroup j owns columns n0 + 64j .. + 63: per 128-byte k block of INTER
// four wgmma m64n(TILE_PAIRS)k32 e4m3, A (64 weight rows x 128 bytes) and B (the chunk's hq rows) from
// shared memory (K-major, 128-byte swizzle, as fp8_moe_gate_up_tc.cu), streamed by cp.async through a
// ring of STAGES slots. The weights of the first STAGES - 1 blocks are requested before
// griddepcontrol.wait (they do not depend on the gate/up stage: under programmatic dependent launch they
// stream while it finishes), the hq rows and hs after it. Then each pair's 128 values go to y32, and the
// slot sum as fp8_moe_down.cu's: one counter per (token, COLUMNS-column group) (counts[t, n0 / 32]); the
// CTA whose pair arrives last (the token's count of slots naming an expert) sums the token's slots in
// slot order from y32 and writes bf16, and resets the counter. No atomics on the output.
//
// Numerics (u = 2^-24): the dot products as fp8_moe_gate_up_tc.cu (products exact, the tensor core's
// partial per 128-byte block with 13 fraction bits kept: accumulator_bits 14; one fma per block by
// RN(w_scale * h_scale), blocks in ascending k order, one accumulator over the whole INTER); the slot sum
// as fp8_moe_down.cu's: TOPK fp32 fmas in slot order, then cvt.rn.bf16. docs/ops/fp8_moe.md derives the
// bound conformance judges with, against the float64 reference fed with these hq, hs.
// Batch invariance: as fp8_moe_gate_up_tc.cu's, and a token's slot sum reads only its own pairs' rows.
//
// Bytes: each hit expert's HIDDEN*INTER weight bytes and scales once per chunk (once while TILE_PAIRS >=
// tokens). hq, hs, ids, weights (L2); y32 4*HIDDEN per pair; out 2*HIDDEN per token. No local memory.

#include "include/netra_moe_sm90.cuh"
#include "include/netra_sm90.cuh"
#include "include/netra_tc_sm90.cuh"
#include "include/netra_trace.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK)
#error "fp8_moe_down_tc: the instantiation must define NETRA_SYMBOL and NETRA_BLOCK"
#endif
#if !defined(EXPERTS) || !defined(TOPK) || !defined(HIDDEN) || !defined(INTER)
#error "fp8_moe_down_tc: contract constants EXPERTS, TOPK, HIDDEN and INTER must be defined"
#endif
#if !defined(COLUMNS) || !defined(TILE_PAIRS) || !defined(STAGES) || !defined(OVERLAP) || !defined(SPREAD) || \
    !defined(SLOT_SUM) || !defined(MAX_TOKENS) || !defined(MIN_BLOCKS) || !defined(GRID_EXPERTS)
#error "fp8_moe_down_tc: tactic constants COLUMNS, TILE_PAIRS, STAGES, OVERLAP, SPREAD, SLOT_SUM, MAX_TOKENS, MIN_BLOCKS and GRID_EXPERTS must be defined"
#endif

namespace fp8_moe_down_tc_sm90 {
constexpr int kE = EXPERTS, kK = TOPK, kH = HIDDEN, kI = INTER;
constexpr int kNT = TILE_PAIRS;
constexpr int kS = STAGES;
constexpr int kKB = kI / 128;                  // k blocks of INTER
constexpr int kMaxPairs = MAX_TOKENS * kK;
constexpr int kTile = 64 * 128;                // one 64-row A tile of a k block (8 KB)
constexpr int kC = COLUMNS;                    // output columns of a CTA: 64 per warpgroup
constexpr int kW = (kC / 64) * kTile;          // a stage's weights: each warpgroup's tile
constexpr int kStage = kW + ((kNT * 128 + 1023) / 1024) * 1024;
static_assert(kE >= 1 && kE <= 1024, "fp8_moe_down_tc: EXPERTS must be in [1, 1024]");
static_assert(kK >= 1 && kK <= 32 && kK <= kE, "fp8_moe_down_tc: TOPK must be in [1, min(32, EXPERTS)]");
static_assert(kH % 128 == 0 && kI % 128 == 0 && kH <= 16384 && kI <= 16384,
              "fp8_moe_down_tc: HIDDEN and INTER must be multiples of 128, at most 16384");
static_assert(COLUMNS == 64 || COLUMNS == 128, "fp8_moe_down_tc: COLUMNS must be 64 or 128");
static_assert(NETRA_BLOCK == 2 * COLUMNS, "fp8_moe_down_tc: NETRA_BLOCK must be 2 x COLUMNS (a warpgroup per 64 columns)");
static_assert(kNT == 8 || kNT == 16 || kNT == 32 || kNT == 64, "fp8_moe_down_tc: TILE_PAIRS must be 8, 16, 32 or 64");
static_assert(kS >= 2 && kS <= 8, "fp8_moe_down_tc: STAGES must be in [2, 8]");
static_assert(MAX_TOKENS >= 1 && MAX_TOKENS <= 256, "fp8_moe_down_tc: MAX_TOKENS must be in [1, 256]");
static_assert(MIN_BLOCKS >= 1 && MIN_BLOCKS <= 4, "fp8_moe_down_tc: MIN_BLOCKS must be in [1, 4]");
static_assert(OVERLAP == 0 || OVERLAP == 1, "fp8_moe_down_tc: OVERLAP must be 0 or 1");
static_assert(SPREAD == 0 || SPREAD == 1, "fp8_moe_down_tc: SPREAD must be 0 or 1");
static_assert(SLOT_SUM == 0 || SLOT_SUM == 1, "fp8_moe_down_tc: SLOT_SUM must be 0 or 1");
static_assert(kS >= 2 + OVERLAP, "fp8_moe_down_tc: STAGES must be at least 2 + OVERLAP (with OVERLAP the ring runs STAGES - 2 blocks ahead)");
static_assert(GRID_EXPERTS >= 1 && GRID_EXPERTS <= 1024, "fp8_moe_down_tc: GRID_EXPERTS must be in [1, 1024]");
static_assert(kS * kStage + kNT * kKB * 4 + 1024 <= 228352,
              "fp8_moe_down_tc: the ring and the chunk's scales must fit the 223 KB of dynamic shared memory");
static_assert(kMaxPairs * 5 + kKB * 4 + (SPREAD * kE + (1 - SPREAD) * ((kE + 31) / 32)) * 4 <= 4096,
              "fp8_moe_down_tc: the pair list, the weight scales and the hit mask (the expert counts with SPREAD) must fit 4 KB of static shared memory");

__device__ __forceinline__ bool valid(int e) { return e >= 0 && e < kE; }
}  // namespace fp8_moe_down_tc_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, MIN_BLOCKS)
    NETRA_SYMBOL(__nv_bfloat16* __restrict__ out, const uint8_t* __restrict__ hq, const float* __restrict__ hs,
                 const int* __restrict__ ids, const float* __restrict__ weights, const uint8_t* __restrict__ w2,
                 const float* __restrict__ w2s, float* __restrict__ y32, uint32_t* __restrict__ counts,
                 uint32_t tokens NETRA_TRACE_PARAM) {
  using namespace fp8_moe_down_tc_sm90;
  namespace tc = netra_tc;
  __shared__ int list[kMaxPairs];
#if SLOT_SUM  // (the SLOT_SUM 0 tactics compile exactly the source they were measured with)
  __shared__ uint32_t sums[MAX_TOKENS];  // per token: its slots naming an expert, where this CTA sums it; else 0
#else
  __shared__ bool last[kMaxPairs];
#endif
  __shared__ float wscale[kKB];  // the CTA's 128 rows' weight scale of each k block
  extern __shared__ uint8_t netra_dyn[];
  NETRA_TRACE_MARK(0);  // phase marks: include/netra_trace.cuh (nothing in a release build)
  if (tokens > MAX_TOKENS) return;  // never launched so (the contract's limit)
#ifdef NETRA_TRACE
  bool traced_first = false;  // mark 7 at the CTA's first block
#endif
  bool waited = false;  // griddepcontrol.wait before the CTA's first hq and hs
  for (int item = blockIdx.y;; item += gridDim.y) {  // the row's items (netra_moe::work)
  const netra_moe::Work r = netra_moe::work<kE, kMaxPairs, kNT, SPREAD, (GRID_EXPERTS < EXPERTS)>(ids, (int)tokens * kK, list, item);
  if (r.expert < 0) break;  // the same for every thread
  NETRA_TRACE_MARK(1);  // (the last item's routing, with SPREAD)

  const uint32_t dyn = netra_moe::smem_addr(netra_dyn);
  const uint32_t ring = (dyn + 1023u) & ~1023u;
  float* hscale = reinterpret_cast<float*>(netra_dyn + (ring - dyn) + kS * kStage);  // [pair][k block]

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, c = lane & 3;
  const int wg = warp >> 2;
  const int n0 = blockIdx.x * kC;
  const uint8_t* rows = w2 + ((size_t)r.expert * kH + n0) * kI;
  const float* srow = w2s + ((size_t)r.expert * (kH / 128) + n0 / 128) * kKB;
  for (int t = tid; t < kKB; t += NETRA_BLOCK) wscale[t] = srow[t];

  const auto request_w = [&](int kb) {
    const uint32_t slot = ring + (uint32_t)((kb % kS) * kStage);
#pragma unroll
    for (int u = tid; u < kW / 16; u += NETRA_BLOCK) {
      const int row = u >> 3, cc = u & 7;  // row 0 .. COLUMNS - 1: tile row >> 6
      netra_moe::cp_weight16(slot + (uint32_t)((row >> 6) * kTile) + tc::sw128(row & 63, cc), rows + (size_t)row * kI + kb * 128 + cc * 16);
    }
  };
  for (int ch = r.c0; ch < r.c1; ++ch) {
    const auto request_a = [&](int kb) {
      const uint32_t slot = ring + (uint32_t)((kb % kS) * kStage);
      for (int u = tid; u < kNT * 8; u += NETRA_BLOCK) {
        const int row = u >> 3, cc = u & 7, i = ch * kNT + row;
        const uint32_t dst = slot + (uint32_t)kW + tc::sw128(row, cc);
        if (i < r.n)
          netra_moe::cp_act16(dst, hq + (size_t)list[i] * kI + kb * 128 + cc * 16);
        else
          tc::cp_zero16(dst, hq);
      }
    };
    // The ring runs kAhead blocks ahead: STAGES - 1, or STAGES - 2 with OVERLAP, whose blocks go in pairs
    // as fp8_moe_gate_up_tc.cu's (block kb + 1's wgmma runs while block kb's partial is promoted). Two
    // groups ahead of the loop: the first kAhead blocks' weights (before the wait for gate/up on the CTA's
    // first chunk), then their hq rows.
    constexpr int kAhead = kS - 1 - OVERLAP;
#pragma unroll 1
    for (int s = 0; s < kAhead && s < kKB; ++s) request_w(s);
    netra_moe::cp_commit();
    if (!waited) {
      netra_moe::wait_previous();  // hq and hs are the gate/up stage's
      NETRA_TRACE_MARK(2);
      waited = true;
    }
    for (int t = tid; t < kNT * kKB; t += NETRA_BLOCK) {
      const int i = ch * kNT + t / kKB;
      hscale[t] = i < r.n ? hs[(size_t)list[i] * kKB + t % kKB] : 0.f;
    }
#pragma unroll 1
    for (int s = 0; s < kAhead && s < kKB; ++s) request_a(s);
    netra_moe::cp_commit();
    float acc[kNT / 2] = {};
    // Block kb's partial times RN(w_scale * h_scale), one fma each into acc (after its wait).
    const auto promote = [&](int kb, float (&d)[kNT / 2]) {
#pragma unroll
      for (int j = 0; j < kNT / 2; ++j) asm volatile("" : "+f"(d[j])::"memory");  // after the wait
      const float ws = wscale[kb];
#pragma unroll
      for (int i = 0; i < kNT / 8; ++i) {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const float x = hscale[(8 * i + 2 * c + (v & 1)) * kKB + kb];
          acc[4 * i + v] = __fmaf_rn(d[4 * i + v], __fmul_rn(ws, x), acc[4 * i + v]);
        }
      }
    };
    // Block kb's copies landed, the next block requested, block kb's wgmma issued into d (not waited).
    const auto issue = [&](int kb, float (&d)[kNT / 2]) {
      // Block kb's group: the two ahead of the loop for kb < kAhead, else the one step kb - kAhead
      // committed; at most min(kb, kAhead - 1) of this thread's later groups may still be in flight.
      tc::cp_wait_upto(kb < kAhead - 1 ? kb : kAhead - 1);
      netra_moe::fence_proxy_shared();
      __syncthreads();  // every thread's copies; every wgmma of the slot about to be refilled has completed
#ifdef NETRA_TRACE
      if (!traced_first) NETRA_TRACE_MARK(7);  // the CTA's first block landed
      traced_first = true;
#endif
      if (kb + kAhead < kKB) {
        request_w(kb + kAhead);
        request_a(kb + kAhead);
      }
      netra_moe::cp_commit();
      const uint32_t slot = ring + (uint32_t)((kb % kS) * kStage);
      const uint32_t a = slot + (uint32_t)(wg * kTile), b = slot + (uint32_t)kW;
      netra_moe::wg_fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) tc::mma_ss<kNT>(d, tc::sw128_desc(a + 32 * s), tc::sw128_desc(b + 32 * s), s);
      netra_moe::wg_commit();
    };
    float d0[kNT / 2];
#if OVERLAP
    float d1[kNT / 2];
#pragma unroll 1
    for (int kb = 0; kb < kKB; kb += 2) {
      issue(kb, d0);
      if (kb + 1 < kKB) {
        issue(kb + 1, d1);
        tc::wg_wait_upto1();  // block kb's wgmma has completed (kb + 1's may still run)
        promote(kb, d0);
        netra_moe::wg_wait_all();
        promote(kb + 1, d1);
      } else {
        netra_moe::wg_wait_all();
        promote(kb, d0);
      }
    }
#else
#pragma unroll 1
    for (int kb = 0; kb < kKB; ++kb) {
      issue(kb, d0);
      netra_moe::wg_wait_all();
      promote(kb, d0);
    }
#endif
    {  // each pair's column of this chunk to y32
      const int g = lane >> 2, row0 = n0 + 64 * wg + 16 * (warp & 3) + g;
#pragma unroll
      for (int i = 0; i < kNT / 8; ++i) {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const int k = ch * kNT + 8 * i + 2 * c + (v & 1);
          if (k < r.n) y32[(size_t)list[k] * kH + row0 + 8 * (v >> 1)] = acc[4 * i + v];
        }
      }
    }
    netra_moe::cp_wait<0>();
    __syncthreads();  // the next chunk's copies overwrite what this one read
  }
  NETRA_TRACE_MARK(3);
  // One counter per (token, COLUMNS-column group): the pair that arrives last sums the token's slots.
  __threadfence();
#if SLOT_SUM
  for (int t = tid; t < (int)tokens; t += NETRA_BLOCK) sums[t] = 0u;
#endif
  __syncthreads();
  const int i0 = r.c0 * kNT, i1 = min(r.n, r.c1 * kNT);  // the pairs of the CTA's chunks
  for (int i = i0 + tid; i < i1; i += NETRA_BLOCK) {
    const int t = list[i] / kK;
#if SLOT_SUM
    uint32_t v = 0;  // the token's slots that name an expert: each arrives once per group
    for (int s = 0; s < kK; ++s) v |= (uint32_t)valid(ids[t * kK + s]) << s;
    const uint32_t arriving = __popc(v);
#else
    uint32_t arriving = 0;  // the token's pairs that name an expert: each arrives once per group
    for (int s = 0; s < kK; ++s) arriving += valid(ids[t * kK + s]);
#endif
    uint32_t* cnt = &counts[t * (kH / 32) + n0 / 32];
    const uint32_t old = atomicAdd(cnt, 1u);
#if SLOT_SUM
    if (old == arriving - 1) {  // (a token's pairs are in one CTA's list at most once per column group)
      sums[t] = v;
      *cnt = 0u;  // ready for the next call
    }
#else
    last[i] = old == arriving - 1;
    if (last[i]) *cnt = 0u;  // ready for the next call
#endif
  }
  __syncthreads();
  NETRA_TRACE_MARK(4);
  __threadfence();
#if SLOT_SUM
  // Warp w sums tokens w, w + warps, ... that this CTA owes: every router weight and y32 value of the
  // token requested at once (one wait), then its fmas in slot order, a slot naming no expert skipped (its
  // loads predicated off): the same sums as the slot-by-slot loop below.
  for (int t = warp; t < (int)tokens; t += NETRA_BLOCK / 32) {
    const uint32_t v = sums[t];
    if (v == 0u) continue;  // the same for every lane
    float wv[kK], yv[kK][kC / 32];
#pragma unroll
    for (int s = 0; s < kK; ++s) {
      const bool on = (v >> s) & 1u;
      wv[s] = on ? __ldcg(weights + t * kK + s) : 0.f;
#pragma unroll
      for (int q = 0; q < kC / 32; ++q)
        yv[s][q] = on ? __ldcg(y32 + ((size_t)t * kK + s) * kH + n0 + 32 * q + lane) : 0.f;
    }
#pragma unroll
    for (int q = 0; q < kC / 32; ++q) {
      float acc = 0.f;
#pragma unroll
      for (int s = 0; s < kK; ++s) {
        if ((v >> s) & 1u) acc = __fmaf_rn(wv[s], yv[s][q], acc);
      }
      out[(size_t)t * kH + n0 + 32 * q + lane] = __float2bfloat16_rn(acc);
    }
  }
#else
  for (int i = i0 + warp; i < i1; i += NETRA_BLOCK / 32) {
    if (!last[i]) continue;
    const int t = list[i] / kK;
#pragma unroll
    for (int q = 0; q < kC / 32; ++q) {
      const int n = n0 + 32 * q + lane;
      float acc = 0.f;
#pragma unroll
      for (int s = 0; s < kK; ++s) {
        if (valid(ids[t * kK + s]))  // a slot naming no expert here contributes nothing
          acc = __fmaf_rn(__ldcg(weights + t * kK + s), __ldcg(y32 + ((size_t)t * kK + s) * kH + n), acc);
      }
      out[(size_t)t * kH + n] = __float2bfloat16_rn(acc);
    }
  }
#endif
  if (!SPREAD && GRID_EXPERTS >= EXPERTS) break;  // a row per hit expert: its one item
  }
  NETRA_TRACE_SYNC();
  NETRA_TRACE_MARK(5);
}
