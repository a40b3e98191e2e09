// netra sm_90: what the two stages of the routed FP8 MoE share (fp8_moe_gate_up.cu, fp8_moe_down.cu):
// the routing of a CTA to its hit expert, the FP8 tensor-core tile over that expert's tokens, the
// weight loads. docs/ops/fp8_moe.md is the contract; each template's header has its numerics.
//
// Routing. grid.y enumerates the experts the call hits: CTA y takes the y-th expert (ascending id)
// that some (token, slot) pair names, and lists its pairs p = token * TOPK + slot in ascending order;
// CTAs past the number of hit experts exit at once (a tactic whose GRID_EXPERTS caps the rows launches
// none: row y takes hit experts y, y + rows, ... in turn, route_nth). So an expert's weights are read by the CTAs of
// one grid row only, and a token's result never depends on which other tokens are in the call (the
// per-pair arithmetic is the same for any list). How often that grid row reads them is the template's
// RESIDENT_CHUNKS: once per round of that many chunks of 8 pairs (each template's Bytes paragraph).
//
// Tile. mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32: 16 weight rows (A) times 8 pairs (B),
// k = 32 per instruction, fp32 accumulators. Inside each 128-byte scale block a lane holds 32
// contiguous bytes of its rows and of its pair; the k order inside the block is permuted the same way
// for A and B, so every load is a coalesced 16-byte load and the block's dot product is unchanged
// (its 128 products are exact in fp32; the tensor core adds them). Each block's sum is multiplied by
// RN(w_scale * x_scale) and added to the accumulator with one fma, blocks in ascending k order per warp.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

namespace netra_moe {

// Weights are streamed once: no L1 allocation, 256-byte L2 prefetch.
__device__ __forceinline__ uint4 ld_weight16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// A contiguous range of weights requested into L2 by one instruction (sm_90's bulk prefetch: no
// destination, no register, nothing to wait for); `bytes` a multiple of 16 from a 16-byte aligned address.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
// Activations are read by every CTA of a grid row: keep them cached.
__device__ __forceinline__ uint4 ld_act16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_e4m3(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word(const uint4 (&v)[2], int i) {
  const uint4& u = v[i >> 2];
  switch (i & 3) {
    case 0:
      return u.x;
    case 1:
      return u.y;
    case 2:
      return u.z;
    default:
      return u.w;
  }
}

struct Route {
  int expert;  // -1: this CTA has no expert (grid.y past the hit experts)
  int n;       // pairs routed to it, listed in ascending order
};

// The mask of the experts some pair hits, in `mask` ((E + 31) / 32 words of shared memory). Every thread
// calls it; it ends with the mask complete. With REDUCED false one shared-memory atomicOr per pair, which
// serializes where many pairs name experts of one 32-expert word (64 tokens on the same 8 experts: 512
// atomics on one word, about 4 us, paid by every CTA of the grid, those past the hit experts included);
// with REDUCED true each lane ORs its pairs' bits into one register per word (selected by comparison, not
// by index: no local memory), each warp reduces them (redux.sync) and one lane ORs each nonzero word into
// shared memory. The same mask either way.
template <int E, bool REDUCED>
__device__ __forceinline__ void hit_mask(const int* __restrict__ ids, int pairs, uint32_t* mask) {
  const int tid = threadIdx.x;
  for (int w = tid; w < (E + 31) / 32; w += blockDim.x) mask[w] = 0;
  __syncthreads();
  if constexpr (REDUCED) {
    constexpr int kW = (E + 31) / 32;
    uint32_t bits[kW];
#pragma unroll
    for (int w = 0; w < kW; ++w) bits[w] = 0;
    for (int p = tid; p < pairs; p += blockDim.x) {
      const int e = ids[p];
      const uint32_t b = (e >= 0 && e < E) ? 1u << (e & 31) : 0u;
#pragma unroll
      for (int w = 0; w < kW; ++w) bits[w] |= (e >> 5) == w ? b : 0u;
    }
#pragma unroll
    for (int w = 0; w < kW; ++w) {
      const uint32_t v = __reduce_or_sync(0xffffffffu, bits[w]);  // every lane of every warp reaches it
      if ((tid & 31) == 0 && v) atomicOr(&mask[w], v);
    }
  } else {
    for (int p = tid; p < pairs; p += blockDim.x) {
      const int e = ids[p];
      if (e >= 0 && e < E) atomicOr(&mask[e >> 5], 1u << (e & 31));
    }
  }
  __syncthreads();
}

// The pairs p that name expert e, in ascending order, into list (the first MAX_PAIRS of them), by the
// first warp of the CTA (every lane of it calls it: threadIdx.x is the lane); returns how many name it.
template <int MAX_PAIRS>
__device__ __forceinline__ int list_pairs(const int* __restrict__ ids, int pairs, int e, int* list) {
  const int lane = threadIdx.x;
  int n = 0;
  for (int base = 0; base < pairs; base += 32) {
    const int p = base + lane;
    const bool hit = p < pairs && ids[p] == e;
    const uint32_t b = __ballot_sync(0xffffffffu, hit);
    if (hit && n + __popc(b & ((1u << lane) - 1)) < MAX_PAIRS) list[n + __popc(b & ((1u << lane) - 1))] = p;
    n += __popc(b);
  }
  return n;
}

// The which()-th hit expert of `mask` (ascending id; -1 past the last) and its pairs (in `list`,
// MAX_PAIRS long, ascending), found by the first warp and handed to every thread through s_e, s_n
// (shared). Every thread calls it, after the previous Route's list has been read. (`which` is read by
// the first warp alone, as route always read blockIdx.y: the certified tactics' machine code.)
template <int E, int MAX_PAIRS, class Which>
__device__ __forceinline__ Route select(const int* __restrict__ ids, int pairs, int* list, const uint32_t* mask,
                                        Which which, int& s_e, int& s_n) {
  const int tid = threadIdx.x;
  if (tid < 32) {
    int want = which(), e = -1;
    for (int w = 0; w < (E + 31) / 32; ++w) {
      const int c = __popc(mask[w]);
      if (e < 0 && want < c) {
        uint32_t m = mask[w];
        for (int i = 0; i < want; ++i) m &= m - 1;
        e = w * 32 + __ffs(m) - 1;
      }
      if (e < 0) want -= c;
    }
    const int n = e >= 0 ? list_pairs<MAX_PAIRS>(ids, pairs, e, list) : 0;
    if (tid == 0) {
      s_e = e;
      s_n = n < MAX_PAIRS ? n : MAX_PAIRS;
    }
  }
  __syncthreads();
  return Route{s_e, s_n};
}

// The slot-th hit expert and its pairs, for a CTA row that takes hit experts blockIdx.y, blockIdx.y +
// gridDim.y, ... in turn (GRID_EXPERTS below EXPERTS): the mask is built at the row's first expert and
// kept. Every thread calls it, for slot = blockIdx.y first and then in ascending order.
template <int E, int MAX_PAIRS, bool REDUCED>
__device__ __forceinline__ Route route_nth(const int* __restrict__ ids, int pairs, int* list, int slot) {
  __shared__ uint32_t mask[(E + 31) / 32];
  __shared__ int s_e, s_n;
  if (slot == (int)blockIdx.y)
    hit_mask<E, REDUCED>(ids, pairs, mask);
  else
    __syncthreads();  // the previous expert's list and flags have been read
  return select<E, MAX_PAIRS>(ids, pairs, list, mask, [slot] { return slot; }, s_e, s_n);
}

// The blockIdx.y-th hit expert and its pairs: a grid row per hit expert (the tactics whose GRID_EXPERTS
// is at least EXPERTS). Every thread calls it.
template <int E, int MAX_PAIRS, bool REDUCED = false>
__device__ __forceinline__ Route route(const int* __restrict__ ids, int pairs, int* list) {
  __shared__ uint32_t mask[(E + 31) / 32];
  __shared__ int s_e, s_n;
  hit_mask<E, REDUCED>(ids, pairs, mask);
  return select<E, MAX_PAIRS>(ids, pairs, list, mask, [] { return (int)blockIdx.y; }, s_e, s_n);
}

struct ChunkRoute {
  int expert;  // -1: no item left for this CTA
  int n;       // the expert's pairs, all listed in ascending order
  int chunk;   // the item's TP of them: list[chunk * TP ..]
};

// Chunk-parallel rows (the _tc templates' SPREAD): the call's work items are (hit expert, chunk of TP of
// its pairs), hit experts in ascending id and each expert's chunks in order, and CTA row y takes items y,
// y + gridDim.y, ... in turn (`item`), so the chunks of an expert that many tokens name run side by side
// (their weights read from DRAM about once, the repeats from L2) where they would otherwise run one after
// another in one row, and the rows past the hit experts have work. The per-expert pair counts are built at
// the row's first item (`first`) and kept; one shared-memory atomic per distinct expert of a warp's 32
// pairs. Every thread calls it, after the previous item's list and scales have been read.
template <int E, int MAX_PAIRS, int TP>
__device__ __forceinline__ ChunkRoute route_chunk(const int* __restrict__ ids, int pairs, int* list, int item,
                                                  bool first) {
  __shared__ int count[E];
  __shared__ int s_e, s_n, s_c;
  const int tid = threadIdx.x, lane = tid & 31;
  if (first) {
    for (int e = tid; e < E; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int base = tid & ~31; base < pairs; base += blockDim.x) {  // the same base for a warp's lanes
      const int p = base + lane;
      const int e = p < pairs ? ids[p] : -1;
      const bool ok = e >= 0 && e < E;
      const uint32_t same = __match_any_sync(0xffffffffu, ok ? e : -1);
      if (ok && lane == __ffs(same) - 1) atomicAdd(&count[e], __popc(same));
    }
  }
  __syncthreads();  // the counts are complete (and the previous item's list has been read)
  if (tid < 32) {
    constexpr int G = (E + 31) / 32;  // a lane's experts: lane * G .. lane * G + G - 1
    int mine = 0;
#pragma unroll
    for (int j = 0; j < G; ++j)
      if (lane * G + j < E) mine += (count[lane * G + j] + TP - 1) / TP;
    int upto = mine;  // the items of lanes 0 .. lane
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, upto, o);
      if (lane >= o) upto += v;
    }
    const uint32_t owner = __ballot_sync(0xffffffffu, item >= upto - mine && item < upto);
    int e = -1, c = 0;
    if (owner) {  // the same for every lane
      const int src = __ffs(owner) - 1;
      if (lane == src) {
        int rest = item - (upto - mine);
        for (int j = 0; j < G && e < 0; ++j) {
          const int k = lane * G + j < E ? (count[lane * G + j] + TP - 1) / TP : 0;
          if (rest < k) {
            e = lane * G + j;
            c = rest;
          } else {
            rest -= k;
          }
        }
      }
      e = __shfl_sync(0xffffffffu, e, src);
      c = __shfl_sync(0xffffffffu, c, src);
    }
    const int n = e >= 0 ? list_pairs<MAX_PAIRS>(ids, pairs, e, list) : 0;
    if (tid == 0) {
      s_e = e;
      s_n = n < MAX_PAIRS ? n : MAX_PAIRS;
      s_c = c;
    }
  }
  __syncthreads();
  return ChunkRoute{s_e, s_n, s_c};
}

// A CTA's work, for the templates that take either mapping (the _tc templates' SPREAD): a hit expert, its
// pairs (listed in ascending order) and the chunks [c0, c1) of TP of them it takes. A row per hit expert
// (CHUNKED false) takes all of its expert's chunks at its first item and nothing after; chunk-parallel rows
// (CHUNKED) take one chunk an item (route_chunk). Every thread calls it, for item = blockIdx.y first, then
// blockIdx.y + gridDim.y, ... until the expert is -1.
struct Work {
  int expert, n, c0, c1;
};
template <int E, int MAX_PAIRS, int TP, bool CHUNKED, bool NTH = false>
__device__ __forceinline__ Work work(const int* __restrict__ ids, int pairs, int* list, int item) {
  if constexpr (CHUNKED) {
    const ChunkRoute r = route_chunk<E, MAX_PAIRS, TP>(ids, pairs, list, item, item == (int)blockIdx.y);
    return Work{r.expert, r.n, r.chunk, r.chunk + 1};
  } else if constexpr (NTH) {  // fewer rows than experts (GRID_EXPERTS): the row's hit experts in turn
    const Route r = route_nth<E, MAX_PAIRS, true>(ids, pairs, list, item);
    return Work{r.expert, r.n, 0, (r.n + TP - 1) / TP};
  } else {
    if (item != (int)blockIdx.y) return Work{-1, 0, 0, 0};
    const Route r = route<E, MAX_PAIRS, true>(ids, pairs, list);
    return Work{r.expert, r.n, 0, (r.n + TP - 1) / TP};
  }
}

// Two 16-row weight tiles of a warp's k sub-slice of KS bytes, rows r..r+15 of `rows` (row stride KD),
// starting at byte k0: lane (g, c) holds rows g and g + 8, bytes 32c .. 32c + 31 of each 128-byte block.
template <int KS, int KD>
__device__ __forceinline__ void load_rows(uint4 (&w)[KS / 128][2][2], const uint8_t* __restrict__ rows, int k0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int kb = 0; kb < KS / 128; ++kb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* r = rows + (size_t)(g + 8 * h) * KD + k0 + kb * 128 + 32 * c;
      w[kb][h][0] = ld_weight16(r);
      w[kb][h][1] = ld_weight16(r + 16);
    }
  }
}

// One 128-byte scale block of both weight tiles (wa, wb: this lane's 32 bytes of rows g and g + 8) against
// this lane's 32 bytes of its B column (xb): the tensor cores' partial sums pa (tile a), pv (tile b).
__device__ __forceinline__ void block_mma(const uint4 (&wa)[2][2], const uint4 (&wb)[2][2], const uint4 (&xb)[2],
                                          float (&pa)[4], float (&pv)[4]) {
#pragma unroll
  for (int s = 0; s < 4; ++s) {
    const uint32_t b0 = word(xb, 2 * s), b1 = word(xb, 2 * s + 1);
    mma_e4m3(pa, word(wa[0], 2 * s), word(wa[1], 2 * s), word(wa[0], 2 * s + 1), word(wa[1], 2 * s + 1), b0, b1);
    mma_e4m3(pv, word(wb[0], 2 * s), word(wb[1], 2 * s), word(wb[0], 2 * s + 1), word(wb[1], 2 * s + 1), b0, b1);
  }
}
// Each partial sum times RN(w_scale * x_scale) added to acc with one fma (acc[0..3] tile a, acc[4..7] tile
// b; the lane's C columns, pairs 2c and 2c + 1, scaled by s0 and s1).
__device__ __forceinline__ void block_fma(const float (&pa)[4], const float (&pv)[4], float sa, float sb, float s0,
                                          float s1, float* acc) {
  acc[0] = __fmaf_rn(pa[0], __fmul_rn(sa, s0), acc[0]);
  acc[1] = __fmaf_rn(pa[1], __fmul_rn(sa, s1), acc[1]);
  acc[2] = __fmaf_rn(pa[2], __fmul_rn(sa, s0), acc[2]);
  acc[3] = __fmaf_rn(pa[3], __fmul_rn(sa, s1), acc[3]);
  acc[4] = __fmaf_rn(pv[0], __fmul_rn(sb, s0), acc[4]);
  acc[5] = __fmaf_rn(pv[1], __fmul_rn(sb, s1), acc[5]);
  acc[6] = __fmaf_rn(pv[2], __fmul_rn(sb, s0), acc[6]);
  acc[7] = __fmaf_rn(pv[3], __fmul_rn(sb, s1), acc[7]);
}

// One warp, one k sub-slice [k0, k0 + KS) of both weight tiles (wa, wb) against the 8 pairs of chunk
// `ch` of the list: acc[0..3] tile a, acc[4..7] tile b (C layout: rows g, g + 8; pairs 2c, 2c + 1).
// act: FP8 rows of length KD, indexed by list[i] / DIV; act_s: their f32 scales per 128 block.
template <int KS, int KD, int DIV>
__device__ __forceinline__ void warp_tile(const uint4 (&wa)[KS / 128][2][2], const uint4 (&wb)[KS / 128][2][2],
                                          const uint8_t* __restrict__ act, const float* __restrict__ act_s,
                                          const int* list, int n, int ch, int k0, const float* swa,
                                          const float* swb, float* acc) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int tok_b = ch * 8 + g;  // the B column (pair) this lane loads
  const int pb = tok_b < n ? list[tok_b] / DIV : -1;
  const int t0 = ch * 8 + 2 * c, t1 = t0 + 1;  // the C columns this lane holds
  const int p0 = t0 < n ? list[t0] / DIV : -1, p1 = t1 < n ? list[t1] / DIV : -1;
#pragma unroll
  for (int kb = 0; kb < KS / 128; ++kb) {
    const int kbyte = k0 + kb * 128 + 32 * c;
    uint4 xb[2];
    if (pb >= 0) {
      xb[0] = ld_act16(act + (size_t)pb * KD + kbyte);
      xb[1] = ld_act16(act + (size_t)pb * KD + kbyte + 16);
    } else {
      xb[0] = make_uint4(0u, 0u, 0u, 0u);
      xb[1] = xb[0];
    }
    float pa[4] = {0.f, 0.f, 0.f, 0.f}, pv[4] = {0.f, 0.f, 0.f, 0.f};
    block_mma(wa[kb], wb[kb], xb, pa, pv);
    const int kblk = (k0 >> 7) + kb;
    const float s0 = p0 >= 0 ? act_s[(size_t)p0 * (KD / 128) + kblk] : 0.f;
    const float s1 = p1 >= 0 ? act_s[(size_t)p1 * (KD / 128) + kblk] : 0.f;
    block_fma(pa, pv, swa[kb], swb[kb], s0, s1, acc);
  }
}

// One 16-row weight tile (w: this lane's 32 bytes of rows g and g + 8 of each 128-byte block, load_rows)
// against the 8 pairs of chunk `ch` of the list, as warp_tile does for two: acc[0], acc[1] row g and
// acc[2], acc[3] row g + 8, pairs 2c and 2c + 1 (the down stage's SLOT_TILE tactics).
template <int KS, int KD>
__device__ __forceinline__ void warp_tile1(const uint4 (&w)[KS / 128][2][2], const uint8_t* __restrict__ act,
                                           const float* __restrict__ act_s, const uint16_t* list, int n, int ch, int k0,
                                           const float* sw, float* acc) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int tok_b = ch * 8 + g;
  const int pb = tok_b < n ? list[tok_b] : -1;
  const int t0 = ch * 8 + 2 * c, t1 = t0 + 1;
  const int p0 = t0 < n ? list[t0] : -1, p1 = t1 < n ? list[t1] : -1;
#pragma unroll
  for (int kb = 0; kb < KS / 128; ++kb) {
    const int kbyte = k0 + kb * 128 + 32 * c;
    uint4 xb[2];
    if (pb >= 0) {
      xb[0] = ld_act16(act + (size_t)pb * KD + kbyte);
      xb[1] = ld_act16(act + (size_t)pb * KD + kbyte + 16);
    } else {
      xb[0] = make_uint4(0u, 0u, 0u, 0u);
      xb[1] = xb[0];
    }
    float pa[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < 4; ++s)
      mma_e4m3(pa, word(w[kb][0], 2 * s), word(w[kb][1], 2 * s), word(w[kb][0], 2 * s + 1),
               word(w[kb][1], 2 * s + 1), word(xb, 2 * s), word(xb, 2 * s + 1));
    const int kblk = (k0 >> 7) + kb;
    const float s0 = p0 >= 0 ? act_s[(size_t)p0 * (KD / 128) + kblk] : 0.f;
    const float s1 = p1 >= 0 ? act_s[(size_t)p1 * (KD / 128) + kblk] : 0.f;
    acc[0] = __fmaf_rn(pa[0], __fmul_rn(sw[kb], s0), acc[0]);
    acc[1] = __fmaf_rn(pa[1], __fmul_rn(sw[kb], s1), acc[1]);
    acc[2] = __fmaf_rn(pa[2], __fmul_rn(sw[kb], s0), acc[2]);
    acc[3] = __fmaf_rn(pa[3], __fmul_rn(sw[kb], s1), acc[3]);
  }
}

// The r-th hit expert of `mask` (ascending id), read by every thread from shared memory.
template <int E>
__device__ __forceinline__ int nth_hit(const uint32_t* mask, int r) {
#pragma unroll 1
  for (int w = 0; w < (E + 31) / 32; ++w) {
    const int c = __popc(mask[w]);
    if (r < c) {
      uint32_t m = mask[w];
      for (int i = 0; i < r; ++i) m &= m - 1;
      return w * 32 + __ffs(m) - 1;
    }
    r -= c;
  }
  return -1;
}

// ---- Staging in shared memory (tactics with STAGES > 0) -------------------------------------------
// cp.async copies global memory to shared memory without holding a register per byte in flight, so a warp
// can have several sub-slices of weights requested while it multiplies an earlier one. Each lane copies
// exactly the bytes it later reads itself (its weight fragments, its B column, its scales), so completion
// needs only the lane's own cp.async.wait_group, no barrier.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// Weights: streamed once, bypassing L1, 256-byte L2 prefetch (as ld_weight16). dst is a shared-memory
// address (the tensor-core tiles compute theirs from the swizzle) or a pointer into shared memory.
__device__ __forceinline__ void cp_weight16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_weight16(void* dst, const void* src) { cp_weight16(smem_addr(dst), src); }
__device__ __forceinline__ void cp_act16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_act16(void* dst, const void* src) { cp_act16(smem_addr(dst), src); }
__device__ __forceinline__ void cp_4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most N of this thread's most recent groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// A warp's slot: one k sub-slice of KS bytes of both 16-row weight tiles with their scales (one per tile
// and 128-byte block), and for each of RC chunks of 8 pairs the activations and activation scales of the
// same k range. Lane-major: 16-byte unit u of lane l at byte (u * 32 + l) * 16, 4-byte value f at
// kUnits * 512 + (f * 32 + l) * 4, so a warp's shared loads of one unit are 512 contiguous bytes. W false:
// the activations alone (ACT_STAGE: the weights stay in registers).
template <int KS, int RC, bool W = true>
struct Slot {
  static constexpr int kKB = KS / 128;
  static constexpr int kWU = W ? kKB * 8 : 0, kWV = W ? kKB * 2 : 0;  // the weights' units and scales
  static constexpr int kUnits = kWU + RC * kKB * 2;   // weights: kb, tile, row half, 16-byte half; acts
  static constexpr int kValues = kWV + RC * kKB * 2;  // weight scales: kb, tile; act scales: rc, kb, column
  static constexpr int kBytes = 32 * (16 * kUnits + 4 * kValues);
  __device__ static int w(int kb, int t, int h, int q) { return ((kb * 2 + t) * 2 + h) * 2 + q; }
  __device__ static int a(int rc, int kb, int q) { return kWU + (rc * kKB + kb) * 2 + q; }
  __device__ static int ws(int kb, int t) { return kb * 2 + t; }
  __device__ static int as(int rc, int kb, int j) { return kWV + (rc * kKB + kb) * 2 + j; }
  __device__ static uint4* unit(uint8_t* s, int u) { return reinterpret_cast<uint4*>(s) + u * 32 + (threadIdx.x & 31); }
  __device__ static const uint4* unit(const uint8_t* s, int u) {
    return reinterpret_cast<const uint4*>(s) + u * 32 + (threadIdx.x & 31);
  }
  __device__ static float* value(uint8_t* s, int f) {
    return reinterpret_cast<float*>(s + kUnits * 512) + f * 32 + (threadIdx.x & 31);
  }
  __device__ static const float* value(const uint8_t* s, int f) {
    return reinterpret_cast<const float*>(s + kUnits * 512) + f * 32 + (threadIdx.x & 31);
  }
};

// Request a warp's sub-slice [k0, k0 + KS) of weight tiles a and b (16 rows each from rows_a, rows_b,
// row stride KD) and their scales (scale_a[kb], scale_b[kb]) into `slot`: the lanes' fragments as
// load_rows holds them.
template <int KS, int KD, int RC>
__device__ __forceinline__ void stage_weights(uint8_t* slot, const uint8_t* __restrict__ rows_a,
                                              const uint8_t* __restrict__ rows_b, int k0,
                                              const float* __restrict__ scale_a, const float* __restrict__ scale_b) {
  using S = Slot<KS, RC>;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int kb = 0; kb < KS / 128; ++kb) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const size_t off = (size_t)(g + 8 * h) * KD + k0 + kb * 128 + 32 * c;
      cp_weight16(S::unit(slot, S::w(kb, 0, h, 0)), rows_a + off);
      cp_weight16(S::unit(slot, S::w(kb, 0, h, 1)), rows_a + off + 16);
      cp_weight16(S::unit(slot, S::w(kb, 1, h, 0)), rows_b + off);
      cp_weight16(S::unit(slot, S::w(kb, 1, h, 1)), rows_b + off + 16);
    }
    cp_4(S::value(slot, S::ws(kb, 0)), scale_a + kb);
    cp_4(S::value(slot, S::ws(kb, 1)), scale_b + kb);
  }
}

// The B column and C-column scales of chunks c0 .. c0 + RC - 1 for the same sub-slice, as warp_tile
// reads them (act rows indexed by list[i] / DIV); pairs past n are not copied (read as zero).
template <int KS, int KD, int DIV, int RC, bool W = true>
__device__ __forceinline__ void stage_acts(uint8_t* slot, const uint8_t* __restrict__ act,
                                           const float* __restrict__ act_s, const int* list, int n, int c0,
                                           int chunks, int k0) {
  using S = Slot<KS, RC, W>;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int rc = 0; rc < RC; ++rc) {
    const int ch = c0 + rc;
    if (ch >= chunks) break;  // the same for every thread of the CTA
    const int tok_b = ch * 8 + g, t0 = ch * 8 + 2 * c, t1 = t0 + 1;
    const int pb = tok_b < n ? list[tok_b] / DIV : -1;
    const int p0 = t0 < n ? list[t0] / DIV : -1, p1 = t1 < n ? list[t1] / DIV : -1;
#pragma unroll
    for (int kb = 0; kb < KS / 128; ++kb) {
      if (pb >= 0) {
        const uint8_t* x = act + (size_t)pb * KD + k0 + kb * 128 + 32 * c;
        cp_act16(S::unit(slot, S::a(rc, kb, 0)), x);
        cp_act16(S::unit(slot, S::a(rc, kb, 1)), x + 16);
      }
      const int kblk = (k0 >> 7) + kb;
      if (p0 >= 0) cp_4(S::value(slot, S::as(rc, kb, 0)), act_s + (size_t)p0 * (KD / 128) + kblk);
      if (p1 >= 0) cp_4(S::value(slot, S::as(rc, kb, 1)), act_s + (size_t)p1 * (KD / 128) + kblk);
    }
  }
}

// Chunk rc's B column of block kb, as a slot of layout S holds it (zeros for a pair past n: hb false).
template <class S>
__device__ __forceinline__ void slot_b(const uint8_t* slot, int rc, int kb, bool hb, uint4 (&xb)[2]) {
  if (hb) {
    xb[0] = *S::unit(slot, S::a(rc, kb, 0));
    xb[1] = *S::unit(slot, S::a(rc, kb, 1));
  } else {
    xb[0] = make_uint4(0u, 0u, 0u, 0u);
    xb[1] = xb[0];
  }
}

// warp_tile's arithmetic, read from a slot that stage_weights and stage_acts filled (its cp.async group
// complete): chunk `ch`, the rc-th of its round. The same products, scales and fmas in the same order.
template <int KS, int RC>
__device__ __forceinline__ void staged_tile(const uint8_t* slot, int n, int ch, int rc, float* acc) {
  using S = Slot<KS, RC>;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int tok_b = ch * 8 + g, t0 = ch * 8 + 2 * c, t1 = t0 + 1;
  const bool hb = tok_b < n, h0 = t0 < n, h1 = t1 < n;  // as warp_tile's pb, p0, p1 >= 0 (list holds pairs)
#pragma unroll
  for (int kb = 0; kb < KS / 128; ++kb) {
    uint4 wa[2][2], wb[2][2], xb[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        wa[h][q] = *S::unit(slot, S::w(kb, 0, h, q));
        wb[h][q] = *S::unit(slot, S::w(kb, 1, h, q));
      }
    }
    slot_b<S>(slot, rc, kb, hb, xb);
    float pa[4] = {0.f, 0.f, 0.f, 0.f}, pv[4] = {0.f, 0.f, 0.f, 0.f};
    block_mma(wa, wb, xb, pa, pv);
    const float s0 = h0 ? *S::value(slot, S::as(rc, kb, 0)) : 0.f;
    const float s1 = h1 ? *S::value(slot, S::as(rc, kb, 1)) : 0.f;
    block_fma(pa, pv, *S::value(slot, S::ws(kb, 0)), *S::value(slot, S::ws(kb, 1)), s0, s1, acc);
  }
}

// warp_tile's arithmetic with the weights in registers (wa, wb, their scales swa, swb) and chunk `ch`'s
// activations read from an activations-only slot that stage_acts<..., false> filled (its cp.async group
// complete; ACT_STAGE): the rc-th chunk of the round. The same products, scales and fmas in the same order.
template <int KS, int RC>
__device__ __forceinline__ void staged_acts_tile(const uint4 (&wa)[KS / 128][2][2], const uint4 (&wb)[KS / 128][2][2],
                                                 const uint8_t* slot, int n, int ch, int rc, const float* swa,
                                                 const float* swb, float* acc) {
  using S = Slot<KS, RC, false>;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int tok_b = ch * 8 + g, t0 = ch * 8 + 2 * c, t1 = t0 + 1;
  const bool hb = tok_b < n, h0 = t0 < n, h1 = t1 < n;  // as warp_tile's pb, p0, p1 >= 0 (list holds pairs)
#pragma unroll
  for (int kb = 0; kb < KS / 128; ++kb) {
    uint4 xb[2];
    slot_b<S>(slot, rc, kb, hb, xb);
    float pa[4] = {0.f, 0.f, 0.f, 0.f}, pv[4] = {0.f, 0.f, 0.f, 0.f};
    block_mma(wa[kb], wb[kb], xb, pa, pv);
    const float s0 = h0 ? *S::value(slot, S::as(rc, kb, 0)) : 0.f;
    const float s1 = h1 ? *S::value(slot, S::as(rc, kb, 1)) : 0.f;
    block_fma(pa, pv, swa[kb], swb[kb], s0, s1, acc);
  }
}

// One round of a STAGES tactic (S slots per warp, ns sub-slices per warp): sub-slice s lives in slot(s);
// request(s) requests this round's sub-slice s into it as one cp.async group. Unless `requested` (the
// caller requested the first S, as the down stage does around its wait), the first S are requested here;
// each is multiplied once its group has arrived, and its slot then takes sub-slice s + S. One commit per
// sub-slice (empty past the last) keeps "all but the newest S - 1 groups" meaning "sub-slice s has
// arrived". Ends with every group complete and every warp past its slots (a barrier), so the caller may
// reuse the ring. The same fmas in the same order as warp_tile.
template <int S, int KS, int RC, typename SlotOf, typename Request>
__device__ __forceinline__ void staged_round(int ns, bool requested, int n, int c0, int chunks, const SlotOf& slot,
                                             const Request& request, float (&acc)[RC][8]) {
  if (!requested) {
#pragma unroll
    for (int sub = 0; sub < S; ++sub) {
      if (sub < ns) request(sub);
      cp_commit();
    }
  }
#pragma unroll 1
  for (int sub = 0; sub < ns; ++sub) {
    cp_wait<S - 1>();
#pragma unroll
    for (int rc = 0; rc < RC; ++rc) {
      if (c0 + rc < chunks)  // the same for every thread of the CTA
        staged_tile<KS, RC>(slot(sub), n, c0 + rc, rc, acc[rc]);
    }
    __syncwarp();
    if (sub + S < ns) request(sub + S);  // into the slot this lane has just read
    cp_commit();
  }
  cp_wait<0>();
  __syncthreads();  // every warp has read its slots: the ring may take the partial sums
}

// The value itself, which the compiler may not look through. A template with RESIDENT_CHUNKS > 1 passes
// each chunk's index through it inside the sub-slice loop, so the chunk's pair rows and their 64-bit
// addresses are recomputed per sub-slice (a few shared loads and integer ops) instead of being held in
// registers across the loop beside the resident accumulators: without it g4r8 spills on sm_100a. It
// emits no instruction and changes no value.
__device__ __forceinline__ int opaque(int v) {
  asm volatile("" : "+r"(v));
  return v;
}

// Programmatic dependent launch: let the next launch of the chain start, and wait for the previous
// one's writes. Both are no-ops when the launch carries no programmatic dependency.
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_previous() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
// griddepcontrol.wait once the values whose bits `arrived` ORs have arrived (the weights loaded before
// it, with something never 0 where the kernel runs and unknown to the compiler: the call's token count):
// the wait is predicated on `arrived`, so ptxas can neither sink those loads below the wait, as it does
// with wait_previous (no weight load of a register-path tactic preceded its ACQBULK, 2026-12-06), nor drop
// the predicate. The CTA then waits for its weights and for the previous grid at once, and its weights
// stream while that grid runs.
__device__ __forceinline__ void wait_previous_after(uint32_t arrived) {
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  setp.ne.u32 p, %0, 0;\n"
      "  @p griddepcontrol.wait;\n"
      "}" ::"r"(arrived)
      : "memory");
}
// The OR of every word of n 16-byte values (what wait_previous_after is given).
template <int N>
__device__ __forceinline__ uint32_t or_words(const uint4* w) {
  uint32_t v = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) v |= w[i].x | w[i].y | w[i].z | w[i].w;
  return v;
}


// ---------------------------------------------------------------------------------------------------
// Warpgroup tensor cores (WGMMA tactics of fp8_moe_gate_up; sm_90a only: wgmma does not exist on sm_100a,
// and these are compiled only where a template instantiates them).
//
// wgmma.mma_async m64nNk32 e4m3 with A (weights) from registers and B (activations) from shared memory
// takes FP8 operands as they are: no F2FP conversion (mma.sync e4m3 is conversions and f16 HMMA on
// sm_90a). A's register fragment is mma.sync m16n8k32's, per warp of the warpgroup (warp w: rows 16w ..
// 16w + 15; CUTLASS's ALayout_64x32), so load_rows fills it with the same k permutation inside each
// 128-byte block as the mma.sync tile. B is K-major without swizzle: core matrices of 8 columns x 16
// bytes (128 contiguous bytes, a column's 16 bytes at 16 * (column % 8)); per instruction the two
// k halves 128 bytes apart (the leading byte offset) and the 8-column groups 256 bytes apart (the
// stride byte offset).
// ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
// Generic-proxy stores to shared memory made visible to the async proxy (wgmma reads B through it).
__device__ __forceinline__ void fence_proxy_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// B's descriptor: start address, leading byte offset 128, stride byte offset 256 (all in 16-byte units),
// no swizzle (bits 62-63 zero), base offset 0.
__device__ __forceinline__ uint64_t b_desc(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}
// D (+)= A * B for N = 16, 32, 64 or 128 columns: d[N / 2] (CUTLASS's CLayout_64xN: d[4i + v] is row
// 16w + g + 8 (v >> 1), column 8i + 2c + (v & 1)); accumulate 0 overwrites d.
template <int N>
__device__ __forceinline__ void wgmma_e4m3(float (&d)[N / 2], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint64_t desc, int accumulate);
template <>
__device__ __forceinline__ void wgmma_e4m3<16>(float (&d)[8], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint64_t desc, int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %13, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7"
      "}, {%8,%9,%10,%11}, %12, p, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(accumulate)
      : "memory");
}
template <>
__device__ __forceinline__ void wgmma_e4m3<32>(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint64_t desc, int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %21, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15"
      "}, {%16,%17,%18,%19}, %20, p, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(accumulate)
      : "memory");
}
template <>
__device__ __forceinline__ void wgmma_e4m3<64>(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint64_t desc, int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, {%32,%33,%34,%35}, %36, p, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(accumulate)
      : "memory");
}
template <>
__device__ __forceinline__ void wgmma_e4m3<128>(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                             uint64_t desc, int accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, {%64,%65,%66,%67}, %68, p, 1, 1;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(accumulate)
      : "memory");
}

// Stage the B operand of chunk `ch` (its NT pairs: pair ch * NT + c in column c; columns past n zero)
// for a WGMMA CTA whose warpgroups split k into parts of KP bytes, two parts per warpgroup: part p's
// bytes go to warpgroup p / 2's tile, in columns (p % 2) * NT .. + NT - 1 (the block-diagonal product of
// fp8_moe_gate_up.cu's header). Tile of warpgroup j at b + j * (KP / 32) * 64 * NT; instruction q of it
// (k bytes 32q .. 32q + 31 of the part) at + q * 64 * NT. A thread copies one 128-byte block of one pair
// (8 loads of 16 bytes) and writes it as 8 rows of 16 bytes, instruction s and k half h taking the block's
// words 8c + 2s + h (c = 0..3): hardware k 16h + 4c + j is byte 32c + 8s + 4h + j of the block, the
// permutation load_rows gives A. The pairs' scales go to bs[c * (KD / 128) + block].
template <int NT, int KD, int KP, int DIV>
__device__ __forceinline__ void stage_b(uint8_t* b, float* bs, const uint8_t* __restrict__ act,
                                        const float* __restrict__ act_s, const int* list, int n, int ch) {
  constexpr int kN = 2 * NT, kBlocks = KD / 128;
  for (int t = threadIdx.x; t < NT * kBlocks; t += blockDim.x) {
    const int c = t % NT, kb = t / NT;  // consecutive threads: consecutive columns of one block
    const int i = ch * NT + c;
    const int p = i < n ? list[i] / DIV : -1;
    uint4 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u)
      v[u] = p >= 0 ? ld_act16(act + (size_t)p * KD + kb * 128 + 16 * u) : make_uint4(0u, 0u, 0u, 0u);
    const int part = kb / (KP / 128), q0 = 4 * (kb % (KP / 128)), col = (part & 1) * NT + c;
    uint8_t* dst = b + (size_t)(part >> 1) * (KP / 32) * (kN * 32) + (size_t)q0 * (kN * 32) + (col >> 3) * 256 +
                   (col & 7) * 16;
#pragma unroll
    for (int s = 0; s < 4; ++s) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int w = 2 * s + h;  // word w + 8c of the block is in v[(w + 8c) / 4], component (w + 8c) % 4
        const uint4 rowv = make_uint4(word({v[w >> 2], v[0]}, w & 3), word({v[2 + (w >> 2)], v[0]}, w & 3),
                                      word({v[4 + (w >> 2)], v[0]}, w & 3), word({v[6 + (w >> 2)], v[0]}, w & 3));
        *reinterpret_cast<uint4*>(dst + (size_t)s * (kN * 32) + h * 128) = rowv;
      }
    }
    bs[c * kBlocks + kb] = p >= 0 ? act_s[(size_t)p * kBlocks + kb] : 0.f;
  }
}

// The useful half of a WGMMA tile's columns (OFF = 0: a part's first NT columns; NT / 8: its second)
// added into acc with one fma each: d times RN(w_scale * x_scale) of its column (xs: the block's scale of
// column 0, columns KB apart).
template <int NT, int OFF, int KB>
__device__ __forceinline__ void w_promote(const float (&d)[NT], float (&acc)[NT / 2], float ws, const float* xs) {
  const int c = threadIdx.x & 3;
#pragma unroll
  for (int i = 0; i < NT / 8; ++i) {
    const int col = 8 * i + 2 * c;
    const float s0 = __fmul_rn(ws, xs[col * KB]), s1 = __fmul_rn(ws, xs[(col + 1) * KB]);
    acc[4 * i + 0] = __fmaf_rn(d[4 * (OFF + i) + 0], s0, acc[4 * i + 0]);
    acc[4 * i + 1] = __fmaf_rn(d[4 * (OFF + i) + 1], s1, acc[4 * i + 1]);
    acc[4 * i + 2] = __fmaf_rn(d[4 * (OFF + i) + 2], s0, acc[4 * i + 2]);
    acc[4 * i + 3] = __fmaf_rn(d[4 * (OFF + i) + 3], s1, acc[4 * i + 3]);
  }
}

// One sub-slice of KS bytes of a WGMMA warpgroup: per 128-byte block, four m64n(2NT)k32 instructions
// into a fresh partial (the block's 128 products summed by the tensor core), then the warp's useful
// columns promoted into acc (w_promote). w: this warp's 16 rows (load_rows); bq: the shared address of
// the sub-slice's first instruction in this warpgroup's tile; ws: the warp's weight scale of the
// sub-slice's first block; xs: column 0's activation scale of that block (columns KD / 128 apart);
// second: this warp's rows are its warpgroup's second part (columns NT .. 2NT - 1).
template <int NT, int KS, int KD>
__device__ __forceinline__ void w_subslice(const uint4 (&w)[KS / 128][2][2], uint32_t bq, const float* ws,
                                           const float* xs, bool second, float (&acc)[NT / 2]) {
  constexpr int kN = 2 * NT;
#pragma unroll
  for (int kb = 0; kb < KS / 128; ++kb) {
    float d[NT] = {};
    wg_fence();
#pragma unroll
    for (int s = 0; s < 4; ++s)
      wgmma_e4m3<kN>(d, word(w[kb][0], 2 * s), word(w[kb][1], 2 * s), word(w[kb][0], 2 * s + 1),
                     word(w[kb][1], 2 * s + 1), b_desc(bq + (uint32_t)((4 * kb + s) * (kN * 32))), s);
    wg_commit();
    wg_wait_all();
#pragma unroll
    for (int j = 0; j < NT; ++j) asm volatile("" : "+f"(d[j])::"memory");  // read d only after the wait
    if (second)
      w_promote<NT, NT / 8, KD / 128>(d, acc, ws[kb], xs + kb);
    else
      w_promote<NT, 0, KD / 128>(d, acc, ws[kb], xs + kb);
  }
}

// One chunk's part of a WGMMA warp: the NS sub-slices of KS bytes of its 16 rows (rows, k from kp), each
// through w_subslice against its warpgroup's B tile at bq and promoted into acc. w[0] holds sub-slice 0
// on entry (the caller requests it before the chunk's activations are staged, which it does not depend
// on); with more than one, two register buffers: sub-slice s + 1 is requested before s is multiplied.
template <int NT, int KS, int NS, int KD>
__device__ __forceinline__ void w_part(uint4 (&w)[2][KS / 128][2][2], const uint8_t* __restrict__ rows, int kp,
                                       uint32_t bq, const float* ws, const float* xs, bool second,
                                       float (&acc)[NT / 2]) {
  const auto multiply = [&](int s, const uint4 (&wr)[KS / 128][2][2]) {
    const int k0 = kp + s * KS;
    w_subslice<NT, KS, KD>(wr, bq + (uint32_t)(s * (KS / 32) * (NT * 64)), ws + k0 / 128, xs + k0 / 128, second,
                           acc);
  };
  if (NS == 1) {
    multiply(0, w[0]);
    return;
  }
#pragma unroll 1
  for (int sub = 0; sub < NS; sub += 2) {
    load_rows<KS, KD>(w[1], rows, kp + (sub + 1) * KS);
    multiply(sub, w[0]);
    if (sub + 2 < NS) load_rows<KS, KD>(w[0], rows, kp + (sub + 2) * KS);
    multiply(sub + 1, w[1]);
  }
}

// A WGMMA warp's sums of a chunk into shared memory laid out [tile][16 rows][NT pairs], where the
// kernel's last step adds the parts in ascending order (tile: the warp's part and its rows' role).
template <int NT>
__device__ __forceinline__ void w_store(float* sums, int tile, const float (&acc)[NT / 2]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
#pragma unroll
  for (int i = 0; i < NT / 8; ++i) {
#pragma unroll
    for (int v = 0; v < 4; ++v) sums[(tile * 16 + g + 8 * (v >> 1)) * NT + 8 * i + 2 * c + (v & 1)] = acc[4 * i + v];
  }
}

}  // namespace netra_moe
