// netra template fp8_moe_down (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin): the second
// stage of the routed FP8 MoE at decode (docs/ops/fp8_moe.md; the first is fp8_moe_gate_up.cu).
//
//   for each pair p = t * TOPK + s with e = ids[t, s]:
//     y[p, n] = sum_b  w2s[e, n/128, b] * hs[p, b] * sum_{k in block b} w2[e, n, k] * hq[p, k]
//   out[t, n] = bf16_rn( fma(weights[t, TOPK-1], y[t*TOPK+TOPK-1, n], ... fma(weights[t, 0], y[t*TOPK, n], 0)) )
//   (the slots summed in slot order, fp32 fma, one rounding to bf16). A slot whose id is outside
//   [0, EXPERTS) (an expert another rank holds, as expert parallelism marks it with -1) contributes
//   nothing; a token none of whose slots names an expert gets zeros.
//   hq: E4M3FN [tokens*TOPK, INTER], hs: f32 [tokens*TOPK, INTER/128]; ids: i32 and weights: f32
//   [tokens, TOPK]; w2: E4M3FN [EXPERTS, HIDDEN, INTER], w2s: f32 [EXPERTS, HIDDEN/128, INTER/128];
//   out: bf16 [tokens, HIDDEN]. Workspaces: y32 f32 [tokens*TOPK, HIDDEN], counts u32 [tokens,
//   HIDDEN/32] (zero when the chain first runs; back to zero when the kernel ends).
//
// Kernel arguments (in order, 76 bytes): out bf16*, hq u8*, hs f32*, ids i32*, weights f32*, w2 u8*,
// w2s f32*, y32 f32*, counts u32*, tokens u32. Contract constants: EXPERTS, TOPK, HIDDEN, INTER.
// Tactic constants: MIN_BLOCKS, MAX_TOKENS, K_SLICE, RESIDENT_CHUNKS, PREFETCH, STAGES, WGMMA, L2_AHEAD (as fp8_moe_gate_up.cu;
// with L2_AHEAD 1 thread 0 requests the CTA's whole weight tile, 32 rows of INTER bytes, contiguous, into L2
// by one bulk prefetch before the wait, so that what is loaded after it comes from L2; with ROUTE 1 the
// hit experts' mask by warp reductions (include/netra_moe_sm90.cuh, route), the same Route;
// with PREFETCH 1 the first sub-slice is requested before the wait, the next before each is multiplied;
// with STAGES = S the weights of the first S sub-slices are requested before the wait, their hq and hs
// after it, each later sub-slice S ahead into the ring of shared-memory slots; with WGMMA = NT chunks of NT
// pairs by the warpgroup tensor cores, fp8_moe_gate_up.cu's block-diagonal product: warp wi holds rows
// n0 + 16 (wi & 1) .. + 15 of its warpgroup's part wi / 2 of INTER, its first sub-slice requested before
// the wait, the chunk's hq rows staged after it; GRID_EXPERTS as fp8_moe_gate_up.cu's: below EXPERTS,
// CTA row y takes hit experts y, y + gridDim.y, ... in turn, the mask built once; ACT_STAGE as
// fp8_moe_gate_up.cu's, after the wait: the round's hq rows and scales of a sub-slice staged, one wait;
// SLOT_SUM 1: the tokens whose sums the CTA writes gathered in shared memory, and each warp sums two at a
// time with all their router weights and y32 values requested before the fmas); EARLY 1: the wait
// predicated on every word of the weights loaded before it (include/netra_moe_sm90.cuh,
// wait_previous_after), since ptxas otherwise sinks those loads below it; SLOT_TILE 1 (below). Grid:
// (HIDDEN/32, min(EXPERTS, tokens*TOPK, GRID_EXPERTS)), NETRA_BLOCK threads (NETRA_BLOCK/32 warps split INTER);
// with SLOT_TILE (HIDDEN/16, 1): CTA x computes output columns 16x .. 16x + 15 of every pair, warp w the
// hit experts w, w + warps, ... each with a pair's whole INTER, into shared memory, then each token's
// slots summed there in slot order (no y32, counter or atomic; y32 and counts are not touched).
//
// Mapping: CTA (x, y) computes output columns 32x .. 32x+31 of the y-th hit expert (and, with
// GRID_EXPERTS, of the (y + gridDim.y)-th and so on, one after another) for all its n
// pairs (two 16-row tiles, include/netra_moe_sm90.cuh), 8 pairs per chunk; warp w covers bytes
// [w*KW, (w+1)*KW) of INTER, KW = INTER / warps, in sub-slices of KS = min(KW, K_SLICE) bytes. As in
// fp8_moe_gate_up.cu the chunks are taken in rounds of RESIDENT_CHUNKS, sub-slice outer and chunk
// inner, each chunk's accumulators in registers; then per chunk the warp partials are added in warp
// order and each pair's row goes to y32. One counter per (token, 32-column tile): the CTA whose pair arrives last (the TOPK-th) sums
// the token's slots in slot order from y32 and writes bf16, and resets the counter. No atomics on the
// output. The weights and scales are loaded before griddepcontrol.wait, so under programmatic
// dependent launch they stream while the gate/up stage finishes; hq and hs are read after it.
//
// Numerics (u = 2^-24): the dot products as fp8_moe_gate_up.cu (products exact, tensor-core sums per
// 32, RN(w_scale * h_scale) per 128-block, one fma per block, blocks in k order, warps in order; with
// WGMMA, partials of 14 significant bits and the parts added in order); the
// slot sum: TOPK fp32 fmas in slot order, then cvt.rn.bf16 (half a bf16 ulp). docs/ops/fp8_moe.md
// derives the bound conformance judges with, against the float64 reference fed with these hq, hs.
// Batch invariance: as fp8_moe_gate_up.cu's (a pair's fmas and their order do not depend on its chunk,
// its round or the number of chunks), and a token's slot sum reads only its own pairs' rows of y32.
//
// Bytes: each hit expert's HIDDEN*INTER weight bytes and scales once per round: ceil(chunks /
// RESIDENT_CHUNKS) times for an expert with n pairs (chunks = ceil(n/8)); once whatever n when a warp's
// k range is one sub-slice (KW <= K_SLICE); with WGMMA once per chunk of NT pairs, once whatever n where
// a part is one sub-slice. hq, hs, ids, weights (L2); out 2*HIDDEN per token. No local memory; dynamic
// shared memory only with WGMMA (a chunk's hq rows and their scales).

#include "include/netra_moe_sm90.cuh"
#include "include/netra_sm90.cuh"
#include "include/netra_trace.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK)
#error "fp8_moe_down: the instantiation must define NETRA_SYMBOL and NETRA_BLOCK"
#endif
#if !defined(EXPERTS) || !defined(TOPK) || !defined(HIDDEN) || !defined(INTER)
#error "fp8_moe_down: contract constants EXPERTS, TOPK, HIDDEN and INTER must be defined"
#endif
#if !defined(MIN_BLOCKS) || !defined(MAX_TOKENS) || !defined(K_SLICE) || !defined(RESIDENT_CHUNKS) || \
    !defined(PREFETCH) || !defined(STAGES) || !defined(WGMMA) || !defined(L2_AHEAD) || !defined(ROUTE) ||   \
    !defined(GRID_EXPERTS) || !defined(ACT_STAGE) || !defined(SLOT_SUM) || !defined(EARLY) || !defined(SLOT_TILE) || \
    !defined(COLUMNS)
#error "fp8_moe_down: tactic constants MIN_BLOCKS, MAX_TOKENS, K_SLICE, RESIDENT_CHUNKS, PREFETCH, STAGES, WGMMA, L2_AHEAD, ROUTE, GRID_EXPERTS, ACT_STAGE, SLOT_SUM, EARLY, SLOT_TILE and COLUMNS must be defined"
#endif

namespace fp8_moe_down_sm90 {
constexpr int kE = EXPERTS, kK = TOPK, kH = HIDDEN, kI = INTER;
constexpr int kWarps = NETRA_BLOCK / 32;
constexpr int kSplit = SLOT_TILE ? 1 : kWarps;  // warps that split a pair's k range (SLOT_TILE: a warp has all of it)
constexpr int kKW = kI / kSplit;            // bytes of k (INTER) per warp
constexpr int kKS = kKW < K_SLICE ? kKW : K_SLICE;  // bytes of k held in registers at once
constexpr int kRC = RESIDENT_CHUNKS;             // chunks of 8 pairs per load of the weights
constexpr int kMaxPairs = MAX_TOKENS * kK;
static_assert(kE >= 1 && kE <= 1024, "fp8_moe_down: EXPERTS must be in [1, 1024]");
static_assert(kK >= 1 && kK <= 32 && kK <= kE, "fp8_moe_down: TOPK must be in [1, min(32, EXPERTS)]");
static_assert(kH % 128 == 0 && kI % 128 == 0 && kH <= 16384 && kI <= 16384,
              "fp8_moe_down: HIDDEN and INTER must be multiples of 128, at most 16384");
static_assert(NETRA_BLOCK % 32 == 0 && NETRA_BLOCK >= 32 && NETRA_BLOCK <= 1024,
              "fp8_moe_down: NETRA_BLOCK must be a multiple of 32 in [32, 1024]");
static_assert(kI % (kSplit / (WGMMA ? 2 : 1) * 128) == 0,
              "fp8_moe_down: INTER must split into whole 128-byte blocks per warp (per warp pair with WGMMA)");
static_assert(kKW % kKS == 0, "fp8_moe_down: a warp's k range must split into sub-slices of K_SLICE bytes");
static_assert(K_SLICE == 128 || K_SLICE == 256 || K_SLICE == 512 || K_SLICE == 768,
              "fp8_moe_down: K_SLICE must be 128, 256, 512 or 768");
static_assert(MAX_TOKENS >= 1 && MAX_TOKENS <= 256, "fp8_moe_down: MAX_TOKENS must be in [1, 256]");
static_assert(MIN_BLOCKS >= 1 && MIN_BLOCKS <= 8, "fp8_moe_down: MIN_BLOCKS must be in [1, 8]");
static_assert(COLUMNS == 32 - 16 * SLOT_TILE, "fp8_moe_down: COLUMNS must be 32, or 16 with SLOT_TILE");
static_assert(kRC == 1 || kRC == 2 || kRC == 4 || kRC == 8, "fp8_moe_down: RESIDENT_CHUNKS must be 1, 2, 4 or 8");
static_assert(L2_AHEAD == 0 || (L2_AHEAD == 1 && WGMMA == 0), "fp8_moe_down: L2_AHEAD must be 0, or 1 with WGMMA 0");
static_assert(ROUTE == 0 || ROUTE == 1, "fp8_moe_down: ROUTE must be 0 or 1");
static_assert(GRID_EXPERTS >= 1 && GRID_EXPERTS <= 1024, "fp8_moe_down: GRID_EXPERTS must be in [1, 1024]");
static_assert(ACT_STAGE == 0 || (ACT_STAGE == 1 && PREFETCH + STAGES + WGMMA == 0),
              "fp8_moe_down: ACT_STAGE must be 0, or 1 with PREFETCH, STAGES and WGMMA 0");
static_assert(SLOT_SUM == 0 || SLOT_SUM == 1, "fp8_moe_down: SLOT_SUM must be 0 or 1");
static_assert(EARLY == 0 || (EARLY == 1 && PREFETCH + STAGES + WGMMA == 0),
              "fp8_moe_down: EARLY must be 0, or 1 on the plain register path (PREFETCH, STAGES and WGMMA 0)");
static_assert(SLOT_TILE == 0 || (SLOT_TILE == 1 && PREFETCH + STAGES + WGMMA + L2_AHEAD + ACT_STAGE + SLOT_SUM == 0),
              "fp8_moe_down: SLOT_TILE must be 0, or 1 with PREFETCH, STAGES, WGMMA, L2_AHEAD, ACT_STAGE and SLOT_SUM 0");
static_assert(SLOT_TILE == 0 || GRID_EXPERTS == 1, "fp8_moe_down: SLOT_TILE needs one grid row (GRID_EXPERTS 1)");
#if SLOT_SUM  // (the other tactics compile exactly the source they were certified with)
constexpr int kSumAtOnce = 2;  // tokens a warp sums at once, every load of them issued before the fmas
#endif
#if ACT_STAGE  // (the other tactics compile exactly the source they were certified with)
using ActSlot = netra_moe::Slot<kKS, kRC, false>;  // a warp's round of hq rows and scales for one sub-slice
#endif
#if PREFETCH  // (the PREFETCH 0 tactics compile exactly the source they were certified with)
constexpr int kNS = kKW / kKS;  // sub-slices of a warp's k range
static_assert(PREFETCH == 1 && kNS % 2 == 0, "fp8_moe_down: PREFETCH must be 0, or 1 where a warp's k range has an even number of sub-slices");
#endif
#if STAGES  // (as PREFETCH: the STAGES 0 tactics compile exactly the source they were certified with)
constexpr int kNS = kKW / kKS;  // sub-slices of a warp's k range
using Slot = netra_moe::Slot<kKS, kRC>;
static_assert(STAGES >= 2 && STAGES <= 4 && PREFETCH == 0, "fp8_moe_down: STAGES must be 0, or 2 to 4 with PREFETCH 0");
static_assert(kNS >= 2, "fp8_moe_down: STAGES needs a warp's k range of at least two sub-slices of K_SLICE bytes");
static_assert(STAGES * Slot::kBytes >= 32 * 8 * 4, "fp8_moe_down: the ring must hold a warp's partial sums");
#endif
#if WGMMA  // (as PREFETCH: the WGMMA 0 tactics compile exactly the source they were certified with)
constexpr int kNT = WGMMA;                           // pairs per chunk (fp8_moe_gate_up.cu's WGMMA)
constexpr int kParts = NETRA_BLOCK / 64;             // two k parts per warpgroup
constexpr int kKP = kI / kParts;                     // bytes of INTER per part
constexpr int kKSw = kKP < K_SLICE ? kKP : K_SLICE;  // bytes of a part held in registers at once
constexpr int kNSw = kKP / kKSw;                     // sub-slices of a part (1 or even, as gate/up's)
static_assert((WGMMA == 8 || WGMMA == 16 || WGMMA == 32 || WGMMA == 64) && PREFETCH == 0 && STAGES == 0 &&
                  NETRA_BLOCK % 128 == 0,
              "fp8_moe_down: WGMMA must be 0, or 8 to 64 pairs with whole warpgroups and PREFETCH and STAGES 0");
static_assert(kKP % kKSw == 0, "fp8_moe_down: WGMMA needs a part's k range in whole sub-slices of K_SLICE bytes");
static_assert(WGMMA * kI <= 131072, "fp8_moe_down: WGMMA needs the chunk's activations (WGMMA x INTER bytes) in 128 KB");
#endif

__device__ __forceinline__ bool valid(int e) { return e >= 0 && e < kE; }
}  // namespace fp8_moe_down_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, MIN_BLOCKS)
    NETRA_SYMBOL(__nv_bfloat16* __restrict__ out, const uint8_t* __restrict__ hq, const float* __restrict__ hs,
                 const int* __restrict__ ids, const float* __restrict__ weights, const uint8_t* __restrict__ w2,
                 const float* __restrict__ w2s, float* __restrict__ y32, uint32_t* __restrict__ counts,
                 uint32_t tokens NETRA_TRACE_PARAM) {
  using namespace fp8_moe_down_sm90;
#if SLOT_TILE  // (the other tactics compile exactly the source they were certified with)
  // SLOT_TILE: this CTA computes output columns n0 .. n0 + 15 for every pair of the call and sums each
  // token's slots itself. Warp w takes the hit experts w, w + warps, ... (ascending id); for each it lists
  // the expert's pairs and multiplies the expert's 16 rows, its whole INTER in sub-slices of K_SLICE
  // bytes, into each pair's row of ys (shared). The first sub-slice of a warp's first expert is loaded
  // before the wait for gate/up (EARLY's predicated wait: the loads cannot be sunk below it). No y32,
  // counter, fence or atomic: after one barrier each (token, column) is summed in slot order from ys.
  __shared__ uint32_t mask[(kE + 31) / 32];
  __shared__ uint16_t plist[kWarps][kMaxPairs];  // each warp's current expert's pairs
  __shared__ float ys[kMaxPairs][16];        // each pair's 16 output columns
  __shared__ float rw[kMaxPairs];            // each pair's router weight
  __shared__ uint8_t named[kMaxPairs];       // whether the pair's id names an expert (else skipped)
  NETRA_TRACE_MARK(0);
  if (tokens > MAX_TOKENS) return;  // never launched so (the contract's limit)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int n0 = blockIdx.x * 16, pairs = (int)tokens * kK;
  netra_moe::hit_mask<kE, ROUTE != 0>(ids, pairs, mask);  // ends with a barrier
  for (int p = threadIdx.x; p < pairs; p += NETRA_BLOCK) {  // inputs of the call: read before the wait
    const bool v = valid(ids[p]);
    named[p] = v;
    rw[p] = v ? weights[p] : 0.f;
  }
  int hits = 0;
#pragma unroll
  for (int w = 0; w < (kE + 31) / 32; ++w) hits += __popc(mask[w]);
  NETRA_TRACE_MARK(1);
  bool waited = false;
  for (int r = warp; r < hits; r += kWarps) {
    const int e = netra_moe::nth_hit<kE>(mask, r);
    int n = 0;  // the pairs naming e, ascending
    for (int base = 0; base < pairs; base += 32) {
      const int p = base + lane;
      const bool hit = p < pairs && ids[p] == e;
      const uint32_t b = __ballot_sync(0xffffffffu, hit);
      const int at = n + __popc(b & ((1u << lane) - 1u));
      if (hit) plist[warp][at] = (uint16_t)p;
      n += __popc(b);
    }
    __syncwarp();
    const uint8_t* rows = w2 + ((size_t)e * kH + n0) * kI;
    const float* srow = w2s + ((size_t)e * (kH / 128) + n0 / 128) * (kI / 128);
    const int chunks = (n + 7) / 8;
    for (int c0 = 0; c0 < chunks; c0 += kRC) {
      float acc[kRC][4] = {};
#pragma unroll 1
      for (int sub = 0; sub < kI / kKS; ++sub) {
        const int k0 = sub * kKS;
        uint4 w[kKS / 128][2][2];
        float sw[kKS / 128];
        netra_moe::load_rows<kKS, kI>(w, rows, k0);
#pragma unroll
        for (int kb = 0; kb < kKS / 128; ++kb) sw[kb] = srow[(k0 >> 7) + kb];
        if (!waited) {  // the first sub-slice streams while gate/up runs
          netra_moe::wait_previous_after(tokens | netra_moe::or_words<sizeof(w) / sizeof(uint4)>(&w[0][0][0]));
          waited = true;
          NETRA_TRACE_MARK(2);
        }
#pragma unroll
        for (int rc = 0; rc < kRC; ++rc) {
          const int ch = kRC > 1 ? netra_moe::opaque(c0 + rc) : c0 + rc;  // see netra_moe::opaque
          if (ch < chunks)  // the same for every lane of the warp
            netra_moe::warp_tile1<kKS, kI>(w, hq, hs, &plist[warp][0], n, ch, k0, sw, acc[rc]);
        }
      }
#pragma unroll
      for (int rc = 0; rc < kRC; ++rc) {
        const int i0 = (c0 + rc) * 8 + 2 * c, i1 = i0 + 1;
        if (i0 < n) {
          ys[plist[warp][i0]][g] = acc[rc][0];
          ys[plist[warp][i0]][g + 8] = acc[rc][2];
        }
        if (i1 < n) {
          ys[plist[warp][i1]][g] = acc[rc][1];
          ys[plist[warp][i1]][g + 8] = acc[rc][3];
        }
      }
    }
    __syncwarp();  // this expert's list has been read
  }
  if (!waited) netra_moe::wait_previous();  // a warp with no expert (fewer hits than warps)
  __syncthreads();
  NETRA_TRACE_MARK(3);
  NETRA_TRACE_MARK(4);  // (no counter phase)
  for (int i = threadIdx.x; i < (int)tokens * 16; i += NETRA_BLOCK) {
    const int t = i >> 4, j = i & 15;
    float acc = 0.f;
#pragma unroll
    for (int s = 0; s < kK; ++s) {
      if (named[t * kK + s]) acc = __fmaf_rn(rw[t * kK + s], ys[t * kK + s][j], acc);
    }
    out[(size_t)t * kH + n0 + j] = __float2bfloat16_rn(acc);
  }
  NETRA_TRACE_SYNC();
  NETRA_TRACE_MARK(5);
#else
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
  __shared__ int last[kMaxPairs];
#if SLOT_SUM
  // the tokens whose slot sums this CTA writes (those whose pair arrived last), with their valid slots
  __shared__ int sum_t[kMaxPairs];
  __shared__ uint32_t sum_v[kMaxPairs];
  __shared__ int sum_n;
#endif
#if ACT_STAGE
  __shared__ __align__(16) uint8_t acts[kWarps][ActSlot::kBytes];
#endif
  NETRA_TRACE_MARK(0);  // phase marks: include/netra_trace.cuh (nothing in a release build)
  if (tokens > MAX_TOKENS) return;  // never launched so (the contract's limit); no write past list
#if GRID_EXPERTS < EXPERTS  // (the other tactics compile exactly the source they were certified with)
  // The hit experts' mask once; then this CTA row's experts y, y + gridDim.y, ... one after another (the
  // grid's y axis is min(EXPERTS, tokens * TOPK, GRID_EXPERTS)), each as a CTA of its own would.
  for (int slot = blockIdx.y;; slot += gridDim.y) {
  const netra_moe::Route r = netra_moe::route_nth<kE, kMaxPairs, ROUTE != 0>(ids, (int)tokens * kK, list, slot);
  const bool first = slot == (int)blockIdx.y;
#else
  const netra_moe::Route r = netra_moe::route<kE, kMaxPairs, ROUTE != 0>(ids, (int)tokens * kK, list);
  constexpr bool first = true;
#endif
  NETRA_TRACE_MARK(1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int n0 = blockIdx.x * 32;  // output columns n0 .. n0 + 31: one 128-row scale block
  if (blockIdx.y == 0 && first) {  // a token none of whose ids names an expert here: no pair arrives; write 0
    for (int t = warp; t < (int)tokens; t += kWarps) {
      bool any = false;
      for (int s = 0; s < kK; ++s) any |= valid(ids[t * kK + s]);
      if (!any) out[(size_t)t * kH + n0 + lane] = __float2bfloat16_rn(0.f);
    }
  }
  if (r.expert < 0) {
    NETRA_TRACE_MARK(5);
    return;
  }
  const uint8_t* we = w2 + (size_t)r.expert * kH * kI;
  const float* se = w2s + (size_t)r.expert * (kH / 128) * (kI / 128) + (n0 / 128) * (kI / 128);
#if WGMMA
  {
    // Chunks of kNT pairs (fp8_moe_gate_up.cu's WGMMA): warp wi of warpgroup j holds rows n0 + 16 (wi & 1)
    // .. + 15 of part 2j + wi / 2; the parts' sums meet in shared memory, added in ascending order.
    uint8_t* btile = netra_dyn;
    float* bscale = reinterpret_cast<float*>(netra_dyn + (size_t)kNT * kI);
    const int wi = warp & 3, part = 2 * (warp >> 2) + (wi >> 1), tile = wi & 1;
    const uint8_t* wrows = we + (size_t)(n0 + 16 * tile) * kI;
    const uint32_t btile_wg = netra_moe::smem_addr(btile) + (uint32_t)((warp >> 2) * (kKP / 32) * (kNT * 64));
    uint4 wbuf[2][kKSw / 128][2][2];
    netra_moe::load_rows<kKSw, kI>(wbuf[0], wrows, part * kKP);  // does not depend on the gate/up stage
    netra_moe::wait_previous();
    NETRA_TRACE_MARK(2);
    const int wchunks = (r.n + kNT - 1) / kNT;
    for (int ch = 0; ch < wchunks; ++ch) {
      // a later chunk's first sub-slice requested before its hq rows are staged (the first chunk's was
      // before the wait); one sub-slice stays in registers for every chunk
      if (kNSw > 1 && ch > 0) netra_moe::load_rows<kKSw, kI>(wbuf[0], wrows, part * kKP);
      if (ch > 0) __syncthreads();  // the previous chunk's sums have been read from the tile
      netra_moe::stage_b<kNT, kI, kKP, 1>(btile, bscale, hq, hs, list, r.n, ch);
      netra_moe::fence_proxy_shared();
      __syncthreads();
      float acc[kNT / 2] = {};
      netra_moe::w_part<kNT, kKSw, kNSw, kI>(wbuf, wrows, part * kKP, btile_wg, se, bscale, (wi >> 1) != 0, acc);
      __syncthreads();
      float* sums = reinterpret_cast<float*>(netra_dyn);  // [kParts][2 tiles][16][kNT]
      netra_moe::w_store<kNT>(sums, part * 2 + tile, acc);
      __syncthreads();
      for (int e = threadIdx.x; e < 32 * kNT; e += NETRA_BLOCK) {
        const int row = e / kNT, col = e % kNT, i = ch * kNT + col;  // row: output column n0 + row
        if (i >= r.n) continue;
        float t = sums[((row >> 4) * 16 + (row & 15)) * kNT + col];
        for (int pp = 1; pp < kParts; ++pp) t = __fadd_rn(t, sums[((pp * 2 + (row >> 4)) * 16 + (row & 15)) * kNT + col]);
        y32[(size_t)list[i] * kH + n0 + row] = t;
      }
    }
  }
#else
  const int chunks = (r.n + 7) / 8;
  // The first sub-slice's weights and scales do not depend on the gate/up stage: load them, then wait.
#if STAGES
  // The ring (fp8_moe_gate_up.cu): sub-slice s in slot s % STAGES, one commit per sub-slice. Before the
  // wait only the weights of the first round's first STAGES sub-slices are requested (each its own
  // group); their activations (hq, hs) follow the wait, one group each, so sub-slice s has arrived once
  // all but the newest STAGES - 1 groups have, as in every later round.
  const auto slot = [&](int sub) { return &ring[sub % STAGES][warp][0]; };
  const auto request_weights = [&](int sub) {
    const int k0 = warp * kKW + sub * kKS;
    netra_moe::stage_weights<kKS, kI, kRC>(slot(sub), we + (size_t)n0 * kI, we + (size_t)(n0 + 16) * kI, k0,
                                           se + (k0 >> 7), se + (k0 >> 7));
  };
  const auto request_acts = [&](int sub, int c0) {
    netra_moe::stage_acts<kKS, kI, 1, kRC>(slot(sub), hq, hs, list, r.n, c0, chunks, warp * kKW + sub * kKS);
  };
#pragma unroll
  for (int sub = 0; sub < STAGES; ++sub) {
    if (sub < kNS) request_weights(sub);
    netra_moe::cp_commit();
  }
#elif PREFETCH
  // PREFETCH 1: two register buffers, sub-slice s + 1 requested before s is multiplied (fp8_moe_gate_up.cu)
  uint4 pa[2][kKS / 128][2][2], pb[2][kKS / 128][2][2];
  float ps[2][kKS / 128];
  const auto request = [&](int s, uint4 (&wa_)[kKS / 128][2][2], uint4 (&wb_)[kKS / 128][2][2], float* sa_) {
    const int k0 = warp * kKW + s * kKS;
    netra_moe::load_rows<kKS, kI>(wa_, we + (size_t)n0 * kI, k0);
    netra_moe::load_rows<kKS, kI>(wb_, we + (size_t)(n0 + 16) * kI, k0);
#pragma unroll
    for (int kb = 0; kb < kKS / 128; ++kb) sa_[kb] = se[(k0 >> 7) + kb];
  };
  request(0, pa[0], pb[0], ps[0]);  // does not depend on the gate/up stage
#else
  uint4 wa[kKS / 128][2][2], wb[kKS / 128][2][2];
  float sa[kKS / 128];
  netra_moe::load_rows<kKS, kI>(wa, we + (size_t)n0 * kI, warp * kKW);
  netra_moe::load_rows<kKS, kI>(wb, we + (size_t)(n0 + 16) * kI, warp * kKW);
#pragma unroll
  for (int kb = 0; kb < kKS / 128; ++kb) sa[kb] = se[(warp * kKW >> 7) + kb];
#endif
#if L2_AHEAD
  // The rest of the tile from L2 after the wait: where this CTA is resident beside gate/up's (co-resident
  // tactics), its bytes stream during that stage without a register or shared byte held for them.
  if (threadIdx.x == 0) netra_moe::prefetch_l2(we + (size_t)n0 * kI, 32u * kI);
#endif
#if EARLY  // (the other tactics compile exactly the source they were certified with)
  constexpr int kWords = sizeof(wa) / sizeof(uint4);
  netra_moe::wait_previous_after(tokens | netra_moe::or_words<kWords>(&wa[0][0][0]) |
                                 netra_moe::or_words<kWords>(&wb[0][0][0]));
#else
  netra_moe::wait_previous();
#endif
  NETRA_TRACE_MARK(2);
#if STAGES
#pragma unroll
  for (int sub = 0; sub < STAGES; ++sub) {
    if (sub < kNS) request_acts(sub, 0);
    netra_moe::cp_commit();
  }
#endif
  // Rounds of kRC chunks: each sub-slice's weights are loaded once per round and used by every chunk
  // of it; the chunks' accumulators stay in registers (acc[rc] indexed at compile time).
  for (int c0 = 0; c0 < chunks; c0 += kRC) {
    float acc[kRC][8] = {};  // every chunk's accumulators start at zero
#if STAGES
    // the first round's first STAGES sub-slices were requested around the wait
    netra_moe::staged_round<STAGES, kKS, kRC>(
        kNS, c0 == 0, r.n, c0, chunks, slot,
        [&](int sub) {
          request_weights(sub);
          request_acts(sub, c0);
        },
        acc);
#elif PREFETCH
    {
      const auto multiply = [&](int s, const uint4 (&wa_)[kKS / 128][2][2], const uint4 (&wb_)[kKS / 128][2][2],
                                const float* sa_) {
        const int k0 = warp * kKW + s * kKS;
#pragma unroll
        for (int rc = 0; rc < kRC; ++rc) {
          const int ch = kRC > 1 ? netra_moe::opaque(c0 + rc) : c0 + rc;  // see netra_moe::opaque
          if (ch < chunks)  // the same for every thread of the CTA
            netra_moe::warp_tile<kKS, kI, 1>(wa_, wb_, hq, hs, list, r.n, ch, k0, sa_, sa_, acc[rc]);
        }
      };
      if (c0 > 0) request(0, pa[0], pb[0], ps[0]);  // the first round's was requested before the wait
#pragma unroll 1
      for (int sub = 0; sub < kNS; sub += 2) {
        request(sub + 1, pa[1], pb[1], ps[1]);
        multiply(sub, pa[0], pb[0], ps[0]);
        if (sub + 2 < kNS) request(sub + 2, pa[0], pb[0], ps[0]);
        multiply(sub + 1, pa[1], pb[1], ps[1]);
      }
    }
#else
#pragma unroll 1
    for (int sub = 0; sub < kKW / kKS; ++sub) {
      const int k0 = warp * kKW + sub * kKS;
#if ACT_STAGE
      // fp8_moe_gate_up.cu's ACT_STAGE: the round's hq rows and scales of this sub-slice requested before
      // its weights, one wait for both
      __syncwarp();  // this lane has read the previous sub-slice's rows from its units
      netra_moe::stage_acts<kKS, kI, 1, kRC, false>(&acts[warp][0], hq, hs, list, r.n, c0, chunks, k0);
      netra_moe::cp_commit();
#endif
      if ((c0 > 0 && kKW != kKS) || sub > 0) {  // one sub-slice: its weights stay for every round
        netra_moe::load_rows<kKS, kI>(wa, we + (size_t)n0 * kI, k0);
        netra_moe::load_rows<kKS, kI>(wb, we + (size_t)(n0 + 16) * kI, k0);
#pragma unroll
        for (int kb = 0; kb < kKS / 128; ++kb) sa[kb] = se[(k0 >> 7) + kb];
      }
#if ACT_STAGE
      netra_moe::cp_wait<0>();
#endif
#pragma unroll
      for (int rc = 0; rc < kRC; ++rc) {
        const int ch = kRC > 1 ? netra_moe::opaque(c0 + rc) : c0 + rc;  // see netra_moe::opaque
        if (ch < chunks)  // the same for every thread of the CTA
#if ACT_STAGE
          netra_moe::staged_acts_tile<kKS, kRC>(wa, wb, &acts[warp][0], r.n, ch, rc, sa, sa, acc[rc]);
#else
          netra_moe::warp_tile<kKS, kI, 1>(wa, wb, hq, hs, list, r.n, ch, k0, sa, sa, acc[rc]);
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
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int row = g + 8 * ((j >> 1) & 1) + 16 * (j >> 2), i = ch * 8 + 2 * c + (j & 1);
          if (i < r.n) y32[(size_t)list[i] * kH + n0 + row] = t[j];
        }
      }
      __syncthreads();
    }
  }
#endif
  NETRA_TRACE_MARK(3);
  __threadfence();
#if SLOT_SUM
  if (threadIdx.x == 0) sum_n = 0;
#endif
  __syncthreads();
  // One counter per (token, 32-column tile): the pair that arrives TOPK-th sums the token's slots.
  constexpr int kTiles = kH / 32;
  for (int i = threadIdx.x; i < r.n; i += blockDim.x) {
    const int t = list[i] / kK;
    uint32_t arriving = 0;  // the token's pairs that name an expert: each arrives once per tile
#if SLOT_SUM
    uint32_t v = 0;  // which of them
    for (int s = 0; s < kK; ++s) v |= (uint32_t)valid(ids[t * kK + s]) << s;
    arriving = __popc(v);
#else
    for (int s = 0; s < kK; ++s) arriving += valid(ids[t * kK + s]);
#endif
    const uint32_t old = atomicAdd(&counts[t * kTiles + blockIdx.x], 1u);
    const bool l = old == arriving - 1;
    if (l) counts[t * kTiles + blockIdx.x] = 0u;  // ready for the next call
#if SLOT_SUM
    if (l) {  // (the order of the list does not matter: each token's sum is its own)
      const int at = atomicAdd(&sum_n, 1);
      sum_t[at] = t;
      sum_v[at] = v;
    }
#else
    last[i] = l;
#endif
  }
  __syncthreads();
  NETRA_TRACE_MARK(4);
  __threadfence();
#if SLOT_SUM
  // kSumAtOnce tokens per warp at a time: their TOPK router weights and y32 values requested together
  // (one wait, where the loop below waits per token), then each token's fmas in slot order, a slot
  // naming no expert here skipped: the same sums.
  for (int j0 = warp; j0 < sum_n; j0 += kSumAtOnce * kWarps) {
    int tt[kSumAtOnce];
    float wv[kSumAtOnce][kK], yv[kSumAtOnce][kK];
#pragma unroll
    for (int u = 0; u < kSumAtOnce; ++u) {
      const int j = j0 + u * kWarps;
      tt[u] = sum_t[j < sum_n ? j : j0];
#pragma unroll
      for (int s = 0; s < kK; ++s) {
        wv[u][s] = __ldcg(weights + tt[u] * kK + s);
        yv[u][s] = __ldcg(y32 + ((size_t)tt[u] * kK + s) * kH + n0 + lane);
      }
    }
#pragma unroll
    for (int u = 0; u < kSumAtOnce; ++u) {
      const int j = j0 + u * kWarps;
      if (j >= sum_n) break;  // the same for every lane of the warp
      const uint32_t v = sum_v[j];
      float acc = 0.f;
#pragma unroll
      for (int s = 0; s < kK; ++s) {
        if ((v >> s) & 1u) acc = __fmaf_rn(wv[u][s], yv[u][s], acc);
      }
      out[(size_t)tt[u] * kH + n0 + lane] = __float2bfloat16_rn(acc);
    }
  }
#else
  for (int i = warp; i < r.n; i += kWarps) {
    if (!last[i]) continue;
    const int t = list[i] / kK;
    float acc = 0.f;
#pragma unroll
    for (int s = 0; s < kK; ++s) {
      if (valid(ids[t * kK + s]))  // a slot naming no expert here contributes nothing
        acc = __fmaf_rn(__ldcg(weights + t * kK + s), __ldcg(y32 + ((size_t)t * kK + s) * kH + n0 + lane), acc);
    }
    out[(size_t)t * kH + n0 + lane] = __float2bfloat16_rn(acc);
  }
#endif
  NETRA_TRACE_SYNC();
  NETRA_TRACE_MARK(5);
#if GRID_EXPERTS < EXPERTS
  }
#endif
#endif  // SLOT_TILE
}
