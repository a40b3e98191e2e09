// netra template fp8_moe_gate_up (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin): the
// first stage of the routed FP8 MoE at decode (docs/ops/fp8_moe.md; the second is fp8_moe_down.cu).
//
//   for each pair p = t * TOPK + s with e = ids[t, s]:
//     gate[j] = sum_b  w13s[e, j/128, b] * xs[t, b] * sum_{k in block b} w13[e, j, k] * xq[t, k]
//     up[j]   = the same over rows INTER + j
//     h[p, j] = silu(gate[j]) * up[j]  (fp32, silu_mul_fp8_quant's instruction sequence)
//     hq[p, :], hs[p, :] = h[p, :] quantized per 128 columns exactly as fp8_group_quant
//   xq: E4M3FN [tokens, HIDDEN], xs: f32 [tokens, HIDDEN/128]; ids: i32 [tokens, TOPK];
//   A pair whose id is outside [0, EXPERTS) is skipped (its hq, hs are not written; fp8_moe_down skips it).
//   w13: E4M3FN [EXPERTS, 2*INTER, HIDDEN] (gate rows, then up rows), w13s: f32 [EXPERTS, 2*INTER/128,
//   HIDDEN/128]; hq: E4M3FN [tokens*TOPK, INTER], hs: f32 [tokens*TOPK, INTER/128].
//   Workspaces: h32 f32 [tokens*TOPK, INTER] (h before quantization), counts u32 [EXPERTS, INTER/128]
//   (zero when the chain first runs; every counter is back to zero when the kernel ends).
//
// Kernel arguments (in order, 76 bytes): hq u8*, hs f32*, xq u8*, xs f32*, ids i32*, w13 u8*, w13s f32*,
// h32 f32*, counts u32*, tokens u32. Contract constants: EXPERTS, TOPK, HIDDEN, INTER (multiples of
// 128). Tactic constants: MIN_BLOCKS (resident CTAs per SM the register budget is cut for),
// MAX_TOKENS (the most tokens a launch may carry: the pair list lives in shared memory), K_SLICE (bytes
// of a warp's k range held in registers at once), RESIDENT_CHUNKS (chunks of 8 pairs whose
// accumulators stay in registers while each weight sub-slice is loaded once), PREFETCH (1: the next
// sub-slice requested into a second register buffer before this one is multiplied), STAGES (2 to 4:
// that many sub-slices per warp staged in shared memory by cp.async; below), WGMMA (8 to 64: chunks
// of that many pairs multiplied by the warpgroup tensor cores; below), ROUTE (1: the hit experts'
// mask by warp reductions, include/netra_moe_sm90.cuh's route; the same Route) and GRID_EXPERTS (the
// most CTA rows: below EXPERTS, CTA row y takes hit experts y, y + gridDim.y, ... in turn, the mask
// built once, instead of one row per expert that every CTA past the hit experts also routes) and
// ACT_STAGE (1, on the register path: per sub-slice every chunk of the round has its activations and
// their scales requested into shared memory by cp.async before the weights, and the warp waits once,
// not once per chunk; include/netra_moe_sm90.cuh's stage_acts and staged_acts_tile). Grid:
// (INTER/16, min(EXPERTS, tokens*TOPK, GRID_EXPERTS)), NETRA_BLOCK threads (NETRA_BLOCK/32 warps split
// HIDDEN).
//
// Mapping: CTA (x, y) computes gate rows 16x .. 16x+15 and the matching up rows of the y-th hit expert
// (and, with GRID_EXPERTS, of the (y + gridDim.y)-th and so on, one after another)
// (include/netra_moe_sm90.cuh: routing, tile) for all of its n pairs, 8 pairs per chunk (chunks =
// ceil(n/8)); warp w covers bytes [w*KW, (w+1)*KW) of k, KW = HIDDEN / warps, in register-held
// sub-slices of KS = min(KW, K_SLICE) bytes. The chunks are taken in rounds of RESIDENT_CHUNKS: per
// round, sub-slice outer, chunk inner: a sub-slice's weights are loaded, then every chunk of the round
// multiplies them into its own accumulators (acc[rc], fully unrolled, so they stay in registers: the
// build refuses local memory). With PREFETCH = 1 (an even number of sub-slices) sub-slice s + 1 is
// requested into a second register buffer before sub-slice s is multiplied, so a warp has two
// sub-slices of weights in flight: at decode a CTA is bound by the latency of its weight loads, not by
// the bus (ncu, 2026-12-05: no eligible warp in 84% of cycles at one token), and this overlaps them;
// every sub-slice is still loaded once per round. With STAGES = S (PREFETCH 0, at least two
// sub-slices per warp) the registers hold no weights in flight: each lane requests by cp.async the bytes
// it will multiply (its weight fragments and their scales, its B column and its C columns' scales for the
// round's chunks) into a ring of S slots per warp in shared memory (include/netra_moe_sm90.cuh: Slot),
// S sub-slices ahead, and waits only on its own groups; the ring then holds the warps' partial sums.
// Loaded once per round like the register path (never kept across rounds). With WGMMA = NT (whole
// warpgroups; PREFETCH and STAGES 0) the pairs go in chunks of NT and each 32 bytes of k is one wgmma
// m64n(2NT)k32 e4m3 per warpgroup, whose FP8 operands the tensor core takes as they are (mma.sync e4m3
// is F2FP conversions and f16 HMMA on sm_90a): A, 64 rows, from registers (load_rows' fragments, one
// 16-row tile per warp), B, the chunk's activations, from dynamic shared memory, staged once per chunk
// by the whole CTA (include/netra_moe_sm90.cuh: stage_b, w_subslice). An instruction's 64 rows are 4
// warps' tiles, so the k range is split in parts, two per warpgroup: warp wi holds the gate (wi even)
// or up (wi odd) rows n0 .. n0 + 15 of its warpgroup's part wi / 2, and B holds part 0's activations in
// columns 0 .. NT - 1 and part 1's in NT .. 2NT - 1: each warp keeps the columns of its own part (a
// block-diagonal product; the other half of the instruction's work is discarded, no byte is read twice).
// Per 128-byte block the four instructions' sum is promoted as mma.sync's: one fma with RN(w_scale *
// x_scale) into the warp's fp32 accumulators, blocks in k order; the parts' sums meet in shared memory,
// added in ascending order, then silu * up. A part of one sub-slice keeps its weights in registers for
// every chunk; longer parts stream them through two register buffers as PREFETCH. A round's chunks then each meet
// in shared memory as before: warp partial sums added in warp order (deterministic), one chunk at a time. The last of the 8 CTAs of a
// 128-column group (a counter per expert and group; that CTA resets it) quantizes the group for every
// pair of the expert from h32.
//
// Numerics (u = 2^-24): each product of two E4M3FN values is exact in fp32; the tensor core sums the
// 32 products of an instruction and the accumulator (its internal order and rounding are not
// specified by PTX; wgmma e4m3 keeps 13 fraction bits of that partial, the template manifest's
// accumulator_bits 14, which the judge's bound models); per 128-byte block that sum times RN(w_scale * x_scale) is added with one fma,
// blocks in ascending k order within a warp, warps in order. h = silu(gate) * up: t = RN(g * RN(-log2
// e)), ex2.approx, RN(1 + e), rcp.approx, two RN multiplies (silu_mul_fp8_quant.cu's header: within
// about (|g| + 10) u of silu(g) * up for the fp32 g it is given). Quantization: fp8_group_quant.cu's
// sequence (scale RN(max(amax, 1e-10) / 448), quotient within 1 ulp, clamp, cvt.rn.satfinite.e4m3x2).
// So an FP8 code differs from the reference's quantization of the exact h only where h / s lies
// within the dot products' accumulation error (propagated through silu * up) of a rounding midpoint,
// and then by one step: docs/ops/fp8_moe.md derives the bound conformance judges with.
//
// Batch invariance (a token's bits do not depend on M or on the other tokens): a pair's accumulator
// starts at zero in its own registers and receives the same fmas in the same order (sub-slices, then
// blocks, ascending k within the warp) whichever chunk it falls in, whichever round that chunk is in
// and however many chunks there are: RESIDENT_CHUNKS changes only how often the weights are loaded,
// never which products meet or in what order; the warps' partials are added in warp order per chunk.
//
// Bytes: each hit expert's 2*INTER*HIDDEN weight bytes and scales once per round: ceil(chunks /
// RESIDENT_CHUNKS) times for an expert with n pairs (chunks = ceil(n/8)); once whatever n when a warp's
// k range is one sub-slice (KW <= K_SLICE: the registers keep it across rounds); with WGMMA once per
// chunk of NT pairs, once whatever n where a part is one sub-slice. xq, xs and ids per CTA (L2). No
// atomics on an output; no local memory; dynamic shared memory only with WGMMA (a chunk's activations
// and their scales).

#include "include/netra_moe_sm90.cuh"
#include "include/netra_sm90.cuh"
#include "include/netra_trace.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK)
#error "fp8_moe_gate_up: the instantiation must define NETRA_SYMBOL and NETRA_BLOCK"
#endif
#if !defined(EXPERTS) || !defined(TOPK) || !defined(HIDDEN) || !defined(INTER)
#error "fp8_moe_gate_up: contract constants EXPERTS, TOPK, HIDDEN and INTER must be defined"
#endif
#if !defined(MIN_BLOCKS) || !defined(MAX_TOKENS) || !defined(K_SLICE) || !defined(RESIDENT_CHUNKS) || \
    !defined(PREFETCH) || !defined(STAGES) || !defined(WGMMA) || !defined(ROUTE) || !defined(GRID_EXPERTS) ||   \
    !defined(ACT_STAGE)
#error "fp8_moe_gate_up: tactic constants MIN_BLOCKS, MAX_TOKENS, K_SLICE, RESIDENT_CHUNKS, PREFETCH, STAGES, WGMMA, ROUTE, GRID_EXPERTS and ACT_STAGE must be defined"
#endif
#if GRID_EXPERTS < EXPERTS  // (the other tactics compile exactly the source they were certified with)
#define NEXT_EXPERT continue  // a CTA row takes hit experts y, y + gridDim.y, ...
#else
#define NEXT_EXPERT return  // a CTA row per hit expert
#endif

namespace fp8_moe_gate_up_sm90 {
constexpr int kE = EXPERTS, kK = TOPK, kH = HIDDEN, kI = INTER;
constexpr int kWarps = NETRA_BLOCK / 32;
constexpr int kKW = kH / kWarps;            // bytes of k per warp
constexpr int kKS = kKW < K_SLICE ? kKW : K_SLICE;  // bytes of k held in registers at once
constexpr int kRC = RESIDENT_CHUNKS;             // chunks of 8 pairs per load of the weights
constexpr int kMaxPairs = MAX_TOKENS * kK;
static_assert(kE >= 1 && kE <= 1024, "fp8_moe_gate_up: EXPERTS must be in [1, 1024]");
static_assert(kK >= 1 && kK <= 32 && kK <= kE, "fp8_moe_gate_up: TOPK must be in [1, min(32, EXPERTS)]");
static_assert(kH % 128 == 0 && kI % 128 == 0 && kH <= 16384 && kI <= 16384,
              "fp8_moe_gate_up: HIDDEN and INTER must be multiples of 128, at most 16384");
static_assert(NETRA_BLOCK % 32 == 0 && NETRA_BLOCK >= 64 && NETRA_BLOCK <= 1024,
              "fp8_moe_gate_up: NETRA_BLOCK must be a multiple of 32 in [64, 1024]");
static_assert(kH % (kWarps * 128) == 0, "fp8_moe_gate_up: HIDDEN must split into whole 128-byte blocks per warp");
static_assert(kKW % kKS == 0, "fp8_moe_gate_up: a warp's k range must split into sub-slices of K_SLICE bytes");
static_assert(K_SLICE == 128 || K_SLICE == 256 || K_SLICE == 512, "fp8_moe_gate_up: K_SLICE must be 128, 256 or 512");
static_assert(MAX_TOKENS >= 1 && MAX_TOKENS <= 256, "fp8_moe_gate_up: MAX_TOKENS must be in [1, 256]");
static_assert(MIN_BLOCKS >= 1 && MIN_BLOCKS <= 8, "fp8_moe_gate_up: MIN_BLOCKS must be in [1, 8]");
static_assert(kRC == 1 || kRC == 2 || kRC == 4 || kRC == 8, "fp8_moe_gate_up: RESIDENT_CHUNKS must be 1, 2, 4 or 8");
static_assert(ROUTE == 0 || ROUTE == 1, "fp8_moe_gate_up: ROUTE must be 0 or 1");
static_assert(GRID_EXPERTS >= 1 && GRID_EXPERTS <= 1024, "fp8_moe_gate_up: GRID_EXPERTS must be in [1, 1024]");
static_assert(ACT_STAGE == 0 || (ACT_STAGE == 1 && PREFETCH + STAGES + WGMMA == 0),
              "fp8_moe_gate_up: ACT_STAGE must be 0, or 1 with PREFETCH, STAGES and WGMMA 0");
#if ACT_STAGE  // (the other tactics compile exactly the source they were certified with)
using ActSlot = netra_moe::Slot<kKS, kRC, false>;  // a warp's round of activations for one sub-slice
#endif
#if PREFETCH  // (the PREFETCH 0 tactics compile exactly the source they were certified with)
constexpr int kNS = kKW / kKS;  // sub-slices of a warp's k range
static_assert(PREFETCH == 1 && kNS % 2 == 0, "fp8_moe_gate_up: PREFETCH must be 0, or 1 where a warp's k range has an even number of sub-slices");
#endif
#if STAGES  // (as PREFETCH: the STAGES 0 tactics compile exactly the source they were certified with)
constexpr int kNS = kKW / kKS;  // sub-slices of a warp's k range
using Slot = netra_moe::Slot<kKS, kRC>;
static_assert(STAGES >= 2 && STAGES <= 4 && PREFETCH == 0, "fp8_moe_gate_up: STAGES must be 0, or 2 to 4 with PREFETCH 0");
static_assert(kNS >= 2, "fp8_moe_gate_up: STAGES needs a warp's k range of at least two sub-slices of K_SLICE bytes");
static_assert(STAGES * Slot::kBytes >= 32 * 8 * 4, "fp8_moe_gate_up: the ring must hold a warp's partial sums");
#endif
#if WGMMA  // (as PREFETCH: the WGMMA 0 tactics compile exactly the source they were certified with)
constexpr int kNT = WGMMA;                        // pairs per chunk: the columns of each of a warpgroup's parts
constexpr int kParts = NETRA_BLOCK / 64;          // two k parts per warpgroup
constexpr int kKP = kH / kParts;                  // bytes of k per part
constexpr int kKSw = kKP < K_SLICE ? kKP : K_SLICE;  // bytes of a part held in registers at once
constexpr int kNSw = kKP / kKSw;                  // sub-slices of a part
static_assert((WGMMA == 8 || WGMMA == 16 || WGMMA == 32 || WGMMA == 64) && PREFETCH == 0 && STAGES == 0 &&
                  NETRA_BLOCK % 128 == 0,
              "fp8_moe_gate_up: WGMMA must be 0, or 8 to 64 pairs with whole warpgroups and PREFETCH and STAGES 0");
static_assert(kKP % kKSw == 0, "fp8_moe_gate_up: WGMMA needs a part's k range in whole sub-slices of K_SLICE bytes");
// (so kNSw is 1 or even: a part is two warps' k ranges, each whole sub-slices or less than one)
static_assert(WGMMA * kH <= 131072, "fp8_moe_gate_up: WGMMA needs the chunk's activations (WGMMA x HIDDEN bytes) in 128 KB");
#endif

}  // namespace fp8_moe_gate_up_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, MIN_BLOCKS)
    NETRA_SYMBOL(uint8_t* __restrict__ hq, float* __restrict__ hs, const uint8_t* __restrict__ xq,
                 const float* __restrict__ xs, const int* __restrict__ ids, const uint8_t* __restrict__ w13,
                 const float* __restrict__ w13s, float* __restrict__ h32, uint32_t* __restrict__ counts,
                 uint32_t tokens NETRA_TRACE_PARAM) {
  using namespace fp8_moe_gate_up_sm90;
  __shared__ int list[kMaxPairs];
#if STAGES
  // Each warp's STAGES slots (a ring); once a round's sub-slices are multiplied, the warps' partial sums.
  __shared__ __align__(16) uint8_t ring[STAGES][kWarps][Slot::kBytes];
  float(*red)[32][8] = reinterpret_cast<float(*)[32][8]>(&ring[0][0][0]);
#else
  __shared__ float red[kWarps][32][8];
#endif
#if WGMMA
  // a chunk's activations as the warpgroups' B tiles, then their scales (netra_moe::stage_b)
  extern __shared__ __align__(128) uint8_t netra_dyn[];
#endif
#if ACT_STAGE
  __shared__ __align__(16) uint8_t acts[kWarps][ActSlot::kBytes];
#endif
  __shared__ bool last;
  NETRA_TRACE_MARK(0);  // phase marks: include/netra_trace.cuh (nothing in a release build)
  netra_moe::launch_dependents();  // the down stage may start routing and loading its weights now
  if (tokens > MAX_TOKENS) return;  // never launched so (the contract's limit); no write past list
#if GRID_EXPERTS < EXPERTS
  // The hit experts' mask once; then this CTA row's experts one after another (the grid's y axis is
  // min(EXPERTS, tokens * TOPK, GRID_EXPERTS)), each with the same arithmetic as a CTA of its own.
  for (int slot = blockIdx.y;; slot += gridDim.y) {
  const netra_moe::Route r = netra_moe::route_nth<kE, kMaxPairs, ROUTE != 0>(ids, (int)tokens * kK, list, slot);
#else
  const netra_moe::Route r = netra_moe::route<kE, kMaxPairs, ROUTE != 0>(ids, (int)tokens * kK, list);
#endif
  NETRA_TRACE_MARK(1);
  if (r.expert < 0) {
    NETRA_TRACE_MARK(5);
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int n0 = blockIdx.x * 16;  // h columns n0 .. n0 + 15
  const uint8_t* we = w13 + (size_t)r.expert * 2 * kI * kH;
  const float* se = w13s + (size_t)r.expert * (2 * kI / 128) * (kH / 128);
  const int chunks = (r.n + 7) / 8;
  uint4 wg[kKS / 128][2][2], wu[kKS / 128][2][2];
  float sg[kKS / 128], su[kKS / 128];
#if WGMMA
  {
    // Chunks of kNT pairs. Warp wi of warpgroup j holds 16 rows: gate (wi even) or up (wi odd) rows n0 ..
    // n0 + 15 of part 2j + wi / 2; its wgmma's columns 0 .. kNT - 1 are part 2j's pairs, kNT .. 2kNT - 1
    // part 2j + 1's, and each warp keeps the columns of its own part (the header's block-diagonal product).
    uint8_t* btile = netra_dyn;
    float* bscale = reinterpret_cast<float*>(netra_dyn + (size_t)kNT * kH);
    const int wi = warp & 3, part = 2 * (warp >> 2) + (wi >> 1), role = wi & 1;
    const uint8_t* wrows = we + (size_t)(role * kI + n0) * kH;
    const float* wsc = se + ((role * kI + n0) / 128) * (kH / 128);
    const uint32_t btile_wg = netra_moe::smem_addr(btile) + (uint32_t)((warp >> 2) * (kKP / 32) * (kNT * 64));
    uint4 wbuf[2][kKSw / 128][2][2];
    const int wchunks = (r.n + kNT - 1) / kNT;
    for (int ch = 0; ch < wchunks; ++ch) {
      // The chunk's first sub-slice of weights is requested before its activations are staged (they do
      // not depend on each other): one sub-slice stays in registers for every chunk.
      if (kNSw > 1 || ch == 0) netra_moe::load_rows<kKSw, kH>(wbuf[0], wrows, part * kKP);
      if (ch > 0) __syncthreads();  // the previous chunk's sums have been read from the tile
      netra_moe::stage_b<kNT, kH, kKP, kK>(btile, bscale, xq, xs, list, r.n, ch);
      netra_moe::fence_proxy_shared();
      __syncthreads();
      float acc[kNT / 2] = {};
      netra_moe::w_part<kNT, kKSw, kNSw, kH>(wbuf, wrows, part * kKP, btile_wg, wsc, bscale, (wi >> 1) != 0, acc);
      // The parts' partial sums meet in the tile (every wgmma has completed: w_subslice waits on each
      // block), then h = silu(gate) * up per (row, pair), the parts added in ascending order.
      __syncthreads();
      float* sums = reinterpret_cast<float*>(netra_dyn);  // [kParts][2][16][kNT]
      netra_moe::w_store<kNT>(sums, part * 2 + role, acc);
      __syncthreads();
      for (int e = threadIdx.x; e < 16 * kNT; e += NETRA_BLOCK) {
        const int row = e / kNT, col = e % kNT, i = ch * kNT + col;
        if (i >= r.n) continue;
        float tg = sums[(0 * 16 + row) * kNT + col], tu = sums[(1 * 16 + row) * kNT + col];
        for (int pp = 1; pp < kParts; ++pp) {
          tg = __fadd_rn(tg, sums[((pp * 2 + 0) * 16 + row) * kNT + col]);
          tu = __fadd_rn(tu, sums[((pp * 2 + 1) * 16 + row) * kNT + col]);
        }
        h32[(size_t)list[i] * kI + n0 + row] = netra::silu_mul(tg, tu);
      }
    }
  }
#else
  // Rounds of kRC chunks: each sub-slice's weights are loaded once per round and used by every chunk
  // of it; the chunks' accumulators stay in registers (acc[rc] indexed at compile time).
  for (int c0 = 0; c0 < chunks; c0 += kRC) {
    float acc[kRC][8] = {};  // every chunk's accumulators start at zero
#if STAGES
    {
      // The ring (netra_moe::staged_round): sub-slice s in slot s % STAGES, with its weights, this round's
      // activations and their scales.
      const auto slot = [&](int sub) { return &ring[sub % STAGES][warp][0]; };
      const auto request = [&](int sub) {
        const int k0 = warp * kKW + sub * kKS;
        netra_moe::stage_weights<kKS, kH, kRC>(slot(sub), we + (size_t)n0 * kH, we + (size_t)(kI + n0) * kH, k0,
                                               se + (n0 / 128) * (kH / 128) + (k0 >> 7),
                                               se + ((kI + n0) / 128) * (kH / 128) + (k0 >> 7));
        netra_moe::stage_acts<kKS, kH, kK, kRC>(slot(sub), xq, xs, list, r.n, c0, chunks, k0);
      };
      netra_moe::staged_round<STAGES, kKS, kRC>(kNS, false, r.n, c0, chunks, slot, request, acc);
    }
#elif PREFETCH
    {
      // Two register buffers: sub-slice s + 1 is requested into one before sub-slice s, in the other, is
      // multiplied, so a warp keeps two sub-slices in flight instead of one. The loop steps by two (not
      // unrolled: the addresses of every sub-slice would stay live); the buffers are named at compile
      // time inside it. The same fmas in the same order.
      uint4 pg[2][kKS / 128][2][2], pu[2][kKS / 128][2][2];
      float psg[2][kKS / 128], psu[2][kKS / 128];
      const auto request = [&](int s, uint4 (&wg_)[kKS / 128][2][2], uint4 (&wu_)[kKS / 128][2][2], float* sg_,
                               float* su_) {
        const int k0 = warp * kKW + s * kKS;
        netra_moe::load_rows<kKS, kH>(wg_, we + (size_t)n0 * kH, k0);
        netra_moe::load_rows<kKS, kH>(wu_, we + (size_t)(kI + n0) * kH, k0);
#pragma unroll
        for (int kb = 0; kb < kKS / 128; ++kb) {
          sg_[kb] = se[(n0 / 128) * (kH / 128) + (k0 >> 7) + kb];
          su_[kb] = se[((kI + n0) / 128) * (kH / 128) + (k0 >> 7) + kb];
        }
      };
      const auto multiply = [&](int s, const uint4 (&wg_)[kKS / 128][2][2], const uint4 (&wu_)[kKS / 128][2][2],
                                const float* sg_, const float* su_) {
        const int k0 = warp * kKW + s * kKS;
#pragma unroll
        for (int rc = 0; rc < kRC; ++rc) {
          const int ch = kRC > 1 ? netra_moe::opaque(c0 + rc) : c0 + rc;  // see netra_moe::opaque
          if (ch < chunks)  // the same for every thread of the CTA
            netra_moe::warp_tile<kKS, kH, kK>(wg_, wu_, xq, xs, list, r.n, ch, k0, sg_, su_, acc[rc]);
        }
      };
      request(0, pg[0], pu[0], psg[0], psu[0]);
#pragma unroll 1
      for (int sub = 0; sub < kNS; sub += 2) {
        request(sub + 1, pg[1], pu[1], psg[1], psu[1]);
        multiply(sub, pg[0], pu[0], psg[0], psu[0]);
        if (sub + 2 < kNS) request(sub + 2, pg[0], pu[0], psg[0], psu[0]);
        multiply(sub + 1, pg[1], pu[1], psg[1], psu[1]);
      }
    }
#else
#pragma unroll 1
    for (int sub = 0; sub < kKW / kKS; ++sub) {
      const int k0 = warp * kKW + sub * kKS;
#if ACT_STAGE
      // The round's activations of this sub-slice requested (cp.async, no register held) before its
      // weights: one wait for both, instead of one per chunk.
      __syncwarp();  // this lane has read the previous sub-slice's activations from its units
      netra_moe::stage_acts<kKS, kH, kK, kRC, false>(&acts[warp][0], xq, xs, list, r.n, c0, chunks, k0);
      netra_moe::cp_commit();
#endif
      if (c0 == 0 || kKW != kKS) {  // one sub-slice: its weights stay in registers for every round
        netra_moe::load_rows<kKS, kH>(wg, we + (size_t)n0 * kH, k0);
        netra_moe::load_rows<kKS, kH>(wu, we + (size_t)(kI + n0) * kH, k0);
#pragma unroll
        for (int kb = 0; kb < kKS / 128; ++kb) {
          sg[kb] = se[(n0 / 128) * (kH / 128) + (k0 >> 7) + kb];
          su[kb] = se[((kI + n0) / 128) * (kH / 128) + (k0 >> 7) + kb];
        }
      }
#if ACT_STAGE
      netra_moe::cp_wait<0>();
#endif
#pragma unroll
      for (int rc = 0; rc < kRC; ++rc) {
        const int ch = kRC > 1 ? netra_moe::opaque(c0 + rc) : c0 + rc;  // see netra_moe::opaque
        if (ch < chunks)  // the same for every thread of the CTA
#if ACT_STAGE
          netra_moe::staged_acts_tile<kKS, kRC>(wg, wu, &acts[warp][0], r.n, ch, rc, sg, su, acc[rc]);
#else
          netra_moe::warp_tile<kKS, kH, kK>(wg, wu, xq, xs, list, r.n, ch, k0, sg, su, acc[rc]);
#endif
      }
    }
#endif
#pragma unroll
    for (int rc = 0; rc < kRC; ++rc) {
      const int ch = c0 + rc;
      if (ch >= chunks) break;  // the same for every thread of the CTA
#pragma unroll
      for (int j = 0; j < 8; ++j) red[warp][lane][j] = acc[rc][j];
      __syncthreads();
      if (warp == 0) {
        float t[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) t[j] = red[0][lane][j];
        for (int w = 1; w < kWarps; ++w) {
#pragma unroll
          for (int j = 0; j < 8; ++j) t[j] = __fadd_rn(t[j], red[w][lane][j]);
        }
        // t[0..3]: gate rows g, g + 8 for pairs 2c, 2c + 1 of the chunk; t[4..7]: the same up rows
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int row = g + 8 * (j >> 1), i = ch * 8 + 2 * c + (j & 1);
          if (i < r.n) h32[(size_t)list[i] * kI + n0 + row] = netra::silu_mul(t[j], t[4 + j]);
        }
      }
      __syncthreads();
    }
  }
#endif
  // The last of the 8 CTAs of this 128-column group quantizes it for every pair of the expert.
  NETRA_TRACE_MARK(2);
  __threadfence();
  __syncthreads();
  NETRA_TRACE_MARK(3);
  const int grp = n0 / 128;
  if (threadIdx.x == 0) {
    const uint32_t old = atomicAdd(&counts[r.expert * (kI / 128) + grp], 1u);
    last = old == 128 / 16 - 1;
    if (last) counts[r.expert * (kI / 128) + grp] = 0u;  // ready for the next call
  }
  __syncthreads();
  NETRA_TRACE_MARK(4);
  NETRA_TRACE_FLAG(6, last);
  if (!last) {
    NETRA_TRACE_MARK(5);
    NEXT_EXPERT;
  }
  __threadfence();
  for (int i = warp; i < r.n; i += kWarps) {
    const size_t p = list[i];
    const float4 v = __ldcg(reinterpret_cast<const float4*>(h32 + p * kI + grp * 128) + lane);
    float s;
    reinterpret_cast<uint32_t*>(hq + p * kI + grp * 128)[lane] = netra::quant_group128_warp(v, s);
    if (lane == 0) hs[p * (kI / 128) + grp] = s;
  }
  NETRA_TRACE_SYNC();
  NETRA_TRACE_MARK(5);
#if GRID_EXPERTS < EXPERTS
  }
#endif
}
