// netra template fp8_moe_gate_up_tc (sm_90a / Hopper, CUDA C++ compiled ahead of time to a cubin): the
// first stage of the routed FP8 MoE (docs/ops/fp8_moe.md) as a grouped GEMM on the warpgroup tensor
// cores, both operands in shared memory. The same op and ABI as fp8_moe_gate_up.cu (its header has the
// definition); this template is another build path for it, chosen by the tactic.
//
//   for each pair p = t * TOPK + s with e = ids[t, s]:
//     gate[j] = sum_b  w13s[e, j/128, b] * xs[t, b] * sum_{k in block b} w13[e, j, k] * xq[t, k]
//     up[j]   = the same over rows INTER + j
//     h[p, j] = silu(gate[j]) * up[j]  (fp32, silu_mul_fp8_quant's instruction sequence)
//     hq[p, :], hs[p, :] = h[p, :] quantized per 128 columns exactly as fp8_group_quant
//
// Kernel arguments: fp8_moe_gate_up.cu's (hq, hs, xq, xs, ids, w13, w13s, h32, counts, tokens; h32 and
// counts are not touched). Contract constants: EXPERTS, TOPK, HIDDEN, INTER (multiples of 128). Tactic
// constants: COLUMNS (the h columns of a CTA: 128, one quantization group, or 64, the group's two CTAs a
// thread-block cluster), TILE_PAIRS (8, 16, 32 or 64: the pairs of a chunk, the N of every wgmma), STAGES (2 to 8: k blocks in flight), MAX_TOKENS,
// MIN_BLOCKS (1), GRID_EXPERTS (EXPERTS or more: a row of CTAs per hit expert; fewer: row y takes hit
// experts y, y + gridDim.y, ... in turn, so a call whose tokens hit few experts launches no CTA that only
// routes and exits, each one holding its ring's shared memory while it does), KSPLIT (1, or 2, 4 or 8
// with COLUMNS 128: below). Grid: (INTER / COLUMNS x KSPLIT, min(EXPERTS, tokens * TOPK, GRID_EXPERTS)), 2 x COLUMNS
// threads (a warpgroup per 64 columns), dynamic shared memory STAGES x (COLUMNS x 256 + TILE_PAIRS x 128)
// + the chunk's activation scales + 1 KB.
//
// OVERLAP 1 takes the k blocks in pairs, block kb + 1's wgmma running while block kb's partial is promoted
// (one group in flight, retired before the next pair: ptxas serializes a group carried across the loop's
// back edge); SPREAD 1 makes the rows chunk-parallel (netra_moe::route_chunk: row y takes the items (hit
// expert, chunk) y, y + gridDim.y, ..., each one chunk). Neither changes a pair's arithmetic.
//
// KSPLIT S > 1 splits HIDDEN among the S CTAs of a thread-block cluster (__cluster_dims__(S, 1, 1); CTA x
// takes column group x / S and k blocks (x % S) x HIDDEN / 128 / S onward): where few experts are hit (one
// token, or many tokens on the same experts) the grid has S times the CTAs, each with 1 / S of the k blocks
// in its serial chain and 1 / S of the weight bytes to stream. Each CTA writes its gate and up sums of every
// (pair, column) to its shared memory; after one cluster barrier, CTA q takes the pairs q, q + S, ... and
// adds the S CTAs' sums in rank order (distributed shared memory), then silu * up and the quantization as
// below; a second cluster barrier keeps each CTA's sums until the others have read them.
//
// Mapping: CTA (x, y) takes the y-th hit expert (include/netra_moe_sm90.cuh: route) and h columns n0 =
// COLUMNS x .. + COLUMNS - 1, for all n of its pairs in chunks of TILE_PAIRS (ceil(n / TILE_PAIRS) chunks; at
// most one while TILE_PAIRS >= tokens, since a token names an expert at most once). Warpgroup j owns
// columns n0 + 64j .. + 63: per 128-byte k block b it multiplies the 64 gate rows and the 64 up rows
// (A, 64 x 128 bytes each) by the chunk's activations (B, TILE_PAIRS x 128 bytes): four wgmma
// m64n(TILE_PAIRS)k32 e4m3 per tile, A and B read from shared memory through descriptors (K-major,
// 128-byte swizzle). Every thread of the CTA requests the k blocks by cp.async (16 bytes each, written
// at their swizzled places: chunk c of row r at 16 (c ^ (r % 8))) into a ring of STAGES slots, STAGES - 1
// ahead of the block being multiplied; a slot is refilled only after every warpgroup has waited on the
// wgmma that read it (the barrier at the top of each step). So the bytes a CTA has in flight are up to
// STAGES - 1 blocks of COLUMNS x 256 bytes of weights, held by no register. After the last block h =
// silu(gate) * up is formed in the registers that hold both sums, written to shared memory as [pair][COLUMNS], and
// each warp quantizes whole rows of it (fp8_moe_gate_up.cu's sequence) into hq and hs: with COLUMNS 128
// the CTA holds the whole 128-column group, so there is no h32 store, fence, counter or last CTA; with 64
// the group's two CTAs are a cluster (__cluster_dims__(2, 1, 1)) and exchange each pair's max |h| over
// their columns through distributed shared memory (one cluster barrier): the same max, so the same scale
// and codes; twice the CTAs of 128 (and two fit an SM), for the calls whose experts are few.
//
// Numerics (u = 2^-24): each product of two E4M3FN values is exact in fp32; per 128-byte block the
// tensor core sums the 4 x 32 products into a fresh partial (wgmma e4m3 keeps 13 fraction bits of its
// partial sums: the template manifest's accumulator_bits 14, which the judge's bound models), which is
// added to the fp32 accumulator with one fma by RN(w_scale * x_scale), blocks in ascending k order (one
// accumulator per (row, pair) over the whole HIDDEN; with KSPLIT S, one per (row, pair) and CTA over its
// HIDDEN / S, and the S sums then added in rank order, RN each: still blocks - 1 merges of the blocks'
// products, which is what the judge's bound counts). h = silu(gate) * up: t = RN(g *
// RN(-log2 e)), ex2.approx, RN(1 + e), rcp.approx, two RN multiplies. Quantization: fp8_group_quant.cu's
// sequence (scale RN(max(amax, 1e-10) / 448), quotient within 1 ulp, clamp, cvt.rn.satfinite.e4m3x2).
//
// Batch invariance: a pair's column of B holds its own activations and nothing else; the zero columns
// past n add nothing to any other column; its accumulator receives the same fmas in the same order in any
// chunk and at any column (and, with KSPLIT, the same split and the same rank order). So a token's bits do
// not depend on M or on the other tokens (within a tactic).
//
// Bytes: each hit expert's 2*INTER*HIDDEN weight bytes and scales once per chunk: once whatever n while
// TILE_PAIRS >= tokens. xq, xs, ids per CTA (L2). No atomics on an output; no local memory.

#include "include/netra_moe_sm90.cuh"
#include "include/netra_sm90.cuh"
#include "include/netra_tc_sm90.cuh"
#include "include/netra_trace.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK)
#error "fp8_moe_gate_up_tc: the instantiation must define NETRA_SYMBOL and NETRA_BLOCK"
#endif
#if !defined(EXPERTS) || !defined(TOPK) || !defined(HIDDEN) || !defined(INTER)
#error "fp8_moe_gate_up_tc: contract constants EXPERTS, TOPK, HIDDEN and INTER must be defined"
#endif
#if !defined(COLUMNS) || !defined(TILE_PAIRS) || !defined(STAGES) || !defined(OVERLAP) || !defined(SPREAD) || \
    !defined(MAX_TOKENS) || !defined(MIN_BLOCKS) || !defined(GRID_EXPERTS) || !defined(KSPLIT)
#error "fp8_moe_gate_up_tc: tactic constants COLUMNS, TILE_PAIRS, STAGES, OVERLAP, SPREAD, MAX_TOKENS, MIN_BLOCKS, GRID_EXPERTS and KSPLIT must be defined"
#endif

namespace fp8_moe_gate_up_tc_sm90 {
constexpr int kE = EXPERTS, kK = TOPK, kH = HIDDEN, kI = INTER;
constexpr int kNT = TILE_PAIRS;                 // pairs per chunk: the N of every wgmma
constexpr int kS = STAGES;                      // k blocks in flight
constexpr int kKB = kH / 128;                   // k blocks of HIDDEN
constexpr int kSplit = KSPLIT;                  // CTAs (a cluster) sharing a column group's k blocks
constexpr int kKBL = kKB / kSplit;              // k blocks of one CTA
constexpr int kMaxPairs = MAX_TOKENS * kK;
constexpr int kTile = 64 * 128;                 // one 64-row A tile of a k block (8 KB)
constexpr int kC = COLUMNS;                      // h columns of a CTA: 64 per warpgroup
constexpr int kWG = kC / 64;                     // warpgroups
constexpr int kW = 2 * kWG * kTile;              // a stage's weights: the gate and up tiles of each warpgroup
constexpr int kStage = kW + ((kNT * 128 + 1023) / 1024) * 1024;  // + the chunk's activations, 1 KB aligned
static_assert(kE >= 1 && kE <= 1024, "fp8_moe_gate_up_tc: EXPERTS must be in [1, 1024]");
static_assert(kK >= 1 && kK <= 32 && kK <= kE, "fp8_moe_gate_up_tc: TOPK must be in [1, min(32, EXPERTS)]");
static_assert(kH % 128 == 0 && kI % 128 == 0 && kH <= 16384 && kI <= 16384,
              "fp8_moe_gate_up_tc: HIDDEN and INTER must be multiples of 128, at most 16384");
static_assert(COLUMNS == 64 || COLUMNS == 128, "fp8_moe_gate_up_tc: COLUMNS must be 64 or 128");
static_assert(NETRA_BLOCK == 2 * COLUMNS, "fp8_moe_gate_up_tc: NETRA_BLOCK must be 2 x COLUMNS (a warpgroup per 64 columns)");
static_assert(kNT == 8 || kNT == 16 || kNT == 32 || kNT == 64, "fp8_moe_gate_up_tc: TILE_PAIRS must be 8, 16, 32 or 64");
static_assert(kS >= 2 && kS <= 8, "fp8_moe_gate_up_tc: STAGES must be in [2, 8]");
static_assert(MAX_TOKENS >= 1 && MAX_TOKENS <= 256, "fp8_moe_gate_up_tc: MAX_TOKENS must be in [1, 256]");
static_assert(MIN_BLOCKS >= 1 && MIN_BLOCKS <= 4, "fp8_moe_gate_up_tc: MIN_BLOCKS must be in [1, 4]");
static_assert(OVERLAP == 0 || OVERLAP == 1, "fp8_moe_gate_up_tc: OVERLAP must be 0 or 1");
static_assert(SPREAD == 0 || SPREAD == 1, "fp8_moe_gate_up_tc: SPREAD must be 0 or 1");
static_assert(kS >= 2 + OVERLAP, "fp8_moe_gate_up_tc: STAGES must be at least 2 + OVERLAP (with OVERLAP the ring runs STAGES - 2 blocks ahead)");
static_assert(GRID_EXPERTS >= 1 && GRID_EXPERTS <= 1024, "fp8_moe_gate_up_tc: GRID_EXPERTS must be in [1, 1024]");
static_assert(kS * kStage + kNT * kKB * 4 + 1024 <= 228352,
              "fp8_moe_gate_up_tc: the ring and the chunk's scales must fit the 223 KB of dynamic shared memory");
static_assert(kMaxPairs * 4 + kH / 16 + (SPREAD * kE + (1 - SPREAD) * ((kE + 31) / 32)) * 4 <= 4096,
              "fp8_moe_gate_up_tc: the pair list, the weight scales and the hit mask (the expert counts with SPREAD) must fit 4 KB of static shared memory");
static_assert(kNT * kC * 4 <= kS * kStage, "fp8_moe_gate_up_tc: the ring must hold a chunk's h");
static_assert(kSplit == 1 || kSplit == 2 || kSplit == 4 || kSplit == 8, "fp8_moe_gate_up_tc: KSPLIT must be 1, 2, 4 or 8");
static_assert((kSplit - 1) * (128 - kC) == 0, "fp8_moe_gate_up_tc: KSPLIT above 1 needs COLUMNS 128");
static_assert(kH % (128 * kSplit) == 0, "fp8_moe_gate_up_tc: HIDDEN must split into KSPLIT equal runs of whole k blocks");
// (always true for the constants admitted: two slots of 32 KB of weights hold a 64-pair chunk's 64 KB of sums)
static_assert(kSplit == 1 || 2 * kNT * kC * 4 <= kS * kStage,
              "fp8_moe_gate_up_tc: with KSPLIT the ring must hold a chunk's gate and up sums");

}  // namespace fp8_moe_gate_up_tc_sm90

#if COLUMNS == 64
#define NETRA_TC_CLUSTER __cluster_dims__(2, 1, 1)  // the two CTAs of a 128-column group
#elif KSPLIT > 1
#define NETRA_TC_CLUSTER __cluster_dims__(KSPLIT, 1, 1)  // the CTAs sharing a 128-column group's k blocks
#else
#define NETRA_TC_CLUSTER
#endif
extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, MIN_BLOCKS) NETRA_TC_CLUSTER
    NETRA_SYMBOL(uint8_t* __restrict__ hq, float* __restrict__ hs, const uint8_t* __restrict__ xq,
                 const float* __restrict__ xs, const int* __restrict__ ids, const uint8_t* __restrict__ w13,
                 const float* __restrict__ w13s, float* __restrict__ h32, uint32_t* __restrict__ counts,
                 uint32_t tokens NETRA_TRACE_PARAM) {
  using namespace fp8_moe_gate_up_tc_sm90;
  namespace tc = netra_tc;
  (void)h32;
  (void)counts;
  __shared__ int list[kMaxPairs];
  __shared__ float wscale[2][kKB];  // the gate and up rows' weight scales of each k block
#if COLUMNS == 64
  __shared__ float gmax[kNT];  // each pair's max |h| over this CTA's 64 columns (read by the other CTA)
#endif
  extern __shared__ uint8_t netra_dyn[];
  NETRA_TRACE_MARK(0);  // phase marks: include/netra_trace.cuh (nothing in a release build)
  netra_moe::launch_dependents();  // the down stage may start routing and loading its weights now
  if (tokens > MAX_TOKENS) return;  // never launched so (the contract's limit); no write past list
#ifdef NETRA_TRACE
  bool traced_first = false;  // mark 7 at the CTA's first block
#endif
  for (int item = blockIdx.y;; item += gridDim.y) {  // the row's items (netra_moe::work)
  const netra_moe::Work r = netra_moe::work<kE, kMaxPairs, kNT, SPREAD, (GRID_EXPERTS < EXPERTS)>(ids, (int)tokens * kK, list, item);
  if (r.expert < 0) break;  // the same for every thread (and both CTAs of a cluster: one row)
  NETRA_TRACE_MARK(1);  // (the last item's routing, with SPREAD)

  // The ring (1 KB aligned: the swizzle's base), then the chunk's activation scales [pair][k block].
  const uint32_t dyn = netra_moe::smem_addr(netra_dyn);
  const uint32_t ring = (dyn + 1023u) & ~1023u;
  uint8_t* ring_p = netra_dyn + (ring - dyn);
  float* xscale = reinterpret_cast<float*>(ring_p + kS * kStage);

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, c = lane & 3;
  const int wg = warp >> 2;  // warpgroup: columns n0 + 64 wg .. + 63
#if KSPLIT > 1
  const int n0 = (int)(blockIdx.x / kSplit) * kC;
  const int kb0 = (int)(blockIdx.x % kSplit) * kKBL, kb1 = kb0 + kKBL;  // this CTA's k blocks
#else
  const int n0 = blockIdx.x * kC;
  constexpr int kb0 = 0, kb1 = kKB;
#endif
  const uint8_t* we = w13 + (size_t)r.expert * 2 * kI * kH;
  const float* se = w13s + (size_t)r.expert * (2 * kI / 128) * kKB;
  for (int t = tid; t < 2 * kKB; t += NETRA_BLOCK)
    wscale[t / kKB][t % kKB] = se[(((t / kKB) * kI + n0) / 128) * kKB + t % kKB];

  for (int ch = r.c0; ch < r.c1; ++ch) {
    for (int t = tid; t < kNT * kKB; t += NETRA_BLOCK) {
      const int col = t / kKB, i = ch * kNT + col;
      xscale[t] = i < r.n ? xs[(size_t)(list[i] / kK) * kKB + t % kKB] : 0.f;
    }
    // k block kb into slot kb % STAGES: tile q = 2 * warpgroup + (0 gate, 1 up), then the activations.
    const auto request = [&](int kb) {
      const uint32_t slot = ring + (uint32_t)((kb % kS) * kStage);
#pragma unroll
      for (int u = tid; u < kW / 16; u += NETRA_BLOCK) {
        const int q = u >> 9, row = (u >> 3) & 63, cc = u & 7;  // tile q: warpgroup q / 2, gate or up
        const size_t grow = (size_t)((q & 1) * kI + n0 + 64 * (q >> 1) + row);
        netra_moe::cp_weight16(slot + (uint32_t)(q * kTile) + tc::sw128(row, cc), we + grow * kH + kb * 128 + cc * 16);
      }
      for (int u = tid; u < kNT * 8; u += NETRA_BLOCK) {
        const int row = u >> 3, cc = u & 7, i = ch * kNT + row;
        const uint32_t dst = slot + (uint32_t)kW + tc::sw128(row, cc);
        if (i < r.n)
          netra_moe::cp_act16(dst, xq + (size_t)(list[i] / kK) * kH + kb * 128 + cc * 16);
        else
          tc::cp_zero16(dst, xq);
      }
    };
    // The ring runs kAhead blocks ahead of the block being multiplied: STAGES - 1, or STAGES - 2 with
    // OVERLAP, whose blocks go in pairs: block kb + 1's wgmma runs while block kb's partial is promoted
    // (wait_group 1), both retired before the next pair (a group in flight across the loop's back edge
    // makes ptxas wait on every wgmma), so the slot refilled at step kb is block kb - 2's.
    constexpr int kAhead = kS - 1 - OVERLAP;
#pragma unroll 1
    for (int s = 0; s < kAhead; ++s) {
      if (s < kKBL) request(kb0 + s);
      netra_moe::cp_commit();  // (an empty group past the last block keeps the count uniform)
    }
    float accg[kNT / 2] = {}, accu[kNT / 2] = {};
    // Block kb's partials times RN(w_scale * x_scale), one fma each into the accumulators (after its wait).
    const auto promote = [&](int kb, float (&dg)[kNT / 2], float (&du)[kNT / 2]) {
#pragma unroll
      for (int j = 0; j < kNT / 2; ++j) asm volatile("" : "+f"(dg[j]), "+f"(du[j])::"memory");  // after the wait
      const float wsg = wscale[0][kb], wsu = wscale[1][kb];
#pragma unroll
      for (int i = 0; i < kNT / 8; ++i) {
#pragma unroll
        for (int v = 0; v < 4; ++v) {
          const float x = xscale[(8 * i + 2 * c + (v & 1)) * kKB + kb];
          accg[4 * i + v] = __fmaf_rn(dg[4 * i + v], __fmul_rn(wsg, x), accg[4 * i + v]);
          accu[4 * i + v] = __fmaf_rn(du[4 * i + v], __fmul_rn(wsu, x), accu[4 * i + v]);
        }
      }
    };
    // Block kb's copies landed, the next block requested, block kb's wgmma issued into dg, du (not waited).
    const auto issue = [&](int kb, float (&dg)[kNT / 2], float (&du)[kNT / 2]) {
      netra_moe::cp_wait<kAhead - 1>();  // this thread's copies of block kb have landed
      netra_moe::fence_proxy_shared();  // ... and are visible to the tensor cores' (async) proxy
      __syncthreads();                  // every thread's; and every wgmma of the slot about to be refilled has completed
#ifdef NETRA_TRACE
      if (!traced_first) NETRA_TRACE_MARK(7);  // the CTA's first block landed
      traced_first = true;
#endif
      if (kb + kAhead < kb1) request(kb + kAhead);  // into the slot block kb + kAhead - STAGES used
      netra_moe::cp_commit();
      const uint32_t slot = ring + (uint32_t)((kb % kS) * kStage);
      const uint32_t ag = slot + (uint32_t)((2 * wg) * kTile), au = ag + kTile, b = slot + (uint32_t)kW;
      netra_moe::wg_fence();
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        tc::mma_ss<kNT>(dg, tc::sw128_desc(ag + 32 * s), tc::sw128_desc(b + 32 * s), s);
        tc::mma_ss<kNT>(du, tc::sw128_desc(au + 32 * s), tc::sw128_desc(b + 32 * s), s);
      }
      netra_moe::wg_commit();
    };
    float dg0[kNT / 2], du0[kNT / 2];
#if OVERLAP
    float dg1[kNT / 2], du1[kNT / 2];
#pragma unroll 1
    for (int kb = kb0; kb < kb1; kb += 2) {
      issue(kb, dg0, du0);
      if (kb + 1 < kb1) {
        issue(kb + 1, dg1, du1);
        tc::wg_wait_upto1();  // block kb's wgmma has completed (kb + 1's may still run)
        promote(kb, dg0, du0);
        netra_moe::wg_wait_all();
        promote(kb + 1, dg1, du1);
      } else {
        netra_moe::wg_wait_all();
        promote(kb, dg0, du0);
      }
    }
#else
#pragma unroll 1
    for (int kb = kb0; kb < kb1; ++kb) {
      issue(kb, dg0, du0);
      netra_moe::wg_wait_all();
      promote(kb, dg0, du0);
    }
#endif
    NETRA_TRACE_MARK(2);
    // h of the chunk into the ring as [pair][128 columns] (every wgmma has completed and every copy
    // landed: the last step waited on both), then each warp quantizes whole pairs.
    netra_moe::cp_wait<0>();
    __syncthreads();
    float* hbuf = reinterpret_cast<float*>(ring_p);
    // Where this thread's accumulator 4 i + v sits in a [pair][COLUMNS] buffer (wgmma's fragment layout).
    const int row0 = 64 * wg + 16 * (warp & 3) + (lane >> 2);
    const auto at = [&](int i, int v) { return (8 * i + 2 * c + (v & 1)) * kC + row0 + 8 * (v >> 1); };
    // A warp's pair p: h's 128 columns of group n0 / 128, quantized into hq, the group's scale into hs.
    const auto store_group = [&](size_t p, float4 v) {
      float s;
      reinterpret_cast<uint32_t*>(hq + p * kI + n0)[lane] = netra::quant_group128_warp(v, s);
      if (lane == 0) hs[p * (kI / 128) + n0 / 128] = s;
    };
#if KSPLIT > 1
    // this CTA's sums over its k blocks: gate as [pair][128 columns], then up likewise
#pragma unroll
    for (int i = 0; i < kNT / 8; ++i) {
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        hbuf[at(i, v)] = accg[4 * i + v];
        hbuf[kNT * kC + at(i, v)] = accu[4 * i + v];
      }
    }
    tc::cluster_sync();  // every CTA's sums written and visible to the cluster
    NETRA_TRACE_MARK(3);
    NETRA_TRACE_MARK(4);
    // CTA q takes pairs q, q + KSPLIT, ...: per pair a warp adds the CTAs' sums in rank order, then h =
    // silu(gate) * up and the group's quantization, as a CTA that held every k block does.
    const uint32_t rank = tc::cluster_rank();
    for (int col = (int)rank + kSplit * warp; col < kNT; col += kSplit * (NETRA_BLOCK / 32)) {
      const int i = ch * kNT + col;
      if (i >= r.n) break;  // the same for every lane
      const float* gp = hbuf + col * kC + 4 * lane;
      float4 gsum = tc::ld_cluster4(gp, 0), usum = tc::ld_cluster4(gp + kNT * kC, 0);
#pragma unroll
      for (int q = 1; q < kSplit; ++q) {
        gsum = tc::add4_rn(gsum, tc::ld_cluster4(gp, (uint32_t)q));
        usum = tc::add4_rn(usum, tc::ld_cluster4(gp + kNT * kC, (uint32_t)q));
      }
      store_group(list[i], make_float4(netra::silu_mul(gsum.x, usum.x), netra::silu_mul(gsum.y, usum.y),
                                       netra::silu_mul(gsum.z, usum.z), netra::silu_mul(gsum.w, usum.w)));
    }
    tc::cluster_sync();  // the other CTAs have read this one's sums (before they are overwritten, or it exits)
#else
#pragma unroll
    for (int i = 0; i < kNT / 8; ++i) {
#pragma unroll
      for (int v = 0; v < 4; ++v) hbuf[at(i, v)] = netra::silu_mul(accg[4 * i + v], accu[4 * i + v]);
    }
    __syncthreads();
    NETRA_TRACE_MARK(3);
#if COLUMNS == 128
    NETRA_TRACE_MARK(4);  // (no exchange: the CTA holds the group)
    for (int col = warp; col < kNT; col += NETRA_BLOCK / 32) {
      const int i = ch * kNT + col;
      if (i >= r.n) break;  // the same for every lane
      store_group(list[i], reinterpret_cast<const float4*>(hbuf + col * 128)[lane]);
    }
#else
    // The group's other 64 columns are the other CTA of the cluster's: each pair's max |h| over this CTA's
    // columns into gmax, one cluster barrier, the max of both (exact: the same scale in both CTAs, the
    // one a 128-column CTA finds), then each CTA quantizes its own columns; the group's first writes hs.
    for (int col = warp; col < kNT; col += NETRA_BLOCK / 32) {
      const float2 v = reinterpret_cast<const float2*>(hbuf + col * 64)[lane];
      float a = fmaxf(fabsf(v.x), fabsf(v.y));
#pragma unroll
      for (int o = 16; o; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
      if (lane == 0) gmax[col] = a;
    }
    tc::cluster_sync();  // both CTAs' gmax written
    NETRA_TRACE_MARK(4);
    const uint32_t other = tc::cluster_rank() ^ 1u;
    for (int col = warp; col < kNT; col += NETRA_BLOCK / 32) {
      const int i = ch * kNT + col;
      if (i >= r.n) break;  // the same for every lane
      const size_t p = list[i];
      const float2 v = reinterpret_cast<const float2*>(hbuf + col * 64)[lane];
      const float a = fmaxf(gmax[col], tc::ld_cluster(&gmax[col], other));
      const float s = netra::fp8_scale(a), rs = netra::rcp_newton(s);
      float q[2] = {v.x, v.y};
      netra::fp8_scale_clamp<2>(q, s, rs);
      reinterpret_cast<uint16_t*>(hq + p * kI + n0)[lane] = (uint16_t)netra::pack_e4m3x2_rn(q[0], q[1]);
      if (lane == 0 && (n0 & 127) == 0) hs[p * (kI / 128) + n0 / 128] = s;
    }
    tc::cluster_sync();  // the other CTA has read this one's gmax (before it is rewritten, or the CTA exits)
#endif
#endif  // KSPLIT
    __syncthreads();  // the next chunk's scales and copies overwrite what this one read
  }
  if (!SPREAD && GRID_EXPERTS >= EXPERTS) break;  // a row per hit expert: its one item
  }
  NETRA_TRACE_FLAG(6, 1);  // every CTA quantizes its own columns
  NETRA_TRACE_MARK(5);
}
