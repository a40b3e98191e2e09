// netra sm_90: what the two stages of the routed FP8 MoE share (fp8_moe_gate_up.cu, fp8_moe_down.cu):
// the routing of a CTA to its hit expert, the FP8 tensor-core tile over that expert's tokens, the
// weight loads. docs/ops/fp8_moe.md is the contract; each template's header has its numerics.
//
// Routing. grid.y enumerates the experts the call hits: CTA y takes the y-th expert (ascending id)
// that some (token, slot) pair names, and lists its pairs p = token * TOPK + slot in ascending order;
// CTAs past the number of hit experts exit at once. So an expert's weights are read by the CTAs of
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

// The blockIdx.y-th hit expert and its pairs (in `list`, MAX_PAIRS long). Every thread calls it.
template <int E, int MAX_PAIRS>
__device__ __forceinline__ Route route(const int* __restrict__ ids, int pairs, int* list) {
  __shared__ uint32_t mask[(E + 31) / 32];
  __shared__ int s_e, s_n;
  const int tid = threadIdx.x;
  for (int w = tid; w < (E + 31) / 32; w += blockDim.x) mask[w] = 0;
  __syncthreads();
  for (int p = tid; p < pairs; p += blockDim.x) {
    const int e = ids[p];
    if (e >= 0 && e < E) atomicOr(&mask[e >> 5], 1u << (e & 31));
  }
  __syncthreads();
  if (tid < 32) {
    int want = blockIdx.y, e = -1;
    for (int w = 0; w < (E + 31) / 32; ++w) {
      const int c = __popc(mask[w]);
      if (e < 0 && want < c) {
        uint32_t m = mask[w];
        for (int i = 0; i < want; ++i) m &= m - 1;
        e = w * 32 + __ffs(m) - 1;
      }
      if (e < 0) want -= c;
    }
    int n = 0;
    if (e >= 0) {
      for (int base = 0; base < pairs; base += 32) {
        const int p = base + tid;
        const bool hit = p < pairs && ids[p] == e;
        const uint32_t b = __ballot_sync(0xffffffffu, hit);
        if (hit && n + __popc(b & ((1u << tid) - 1)) < MAX_PAIRS) list[n + __popc(b & ((1u << tid) - 1))] = p;
        n += __popc(b);
      }
    }
    if (tid == 0) {
      s_e = e;
      s_n = n < MAX_PAIRS ? n : MAX_PAIRS;
    }
  }
  __syncthreads();
  return Route{s_e, s_n};
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

// ---- Staging in shared memory (tactics with STAGES > 0) -------------------------------------------
// cp.async copies global memory to shared memory without holding a register per byte in flight, so a warp
// can have several sub-slices of weights requested while it multiplies an earlier one. Each lane copies
// exactly the bytes it later reads itself (its weight fragments, its B column, its scales), so completion
// needs only the lane's own cp.async.wait_group, no barrier.
__device__ __forceinline__ uint32_t smem_addr(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }
// Weights: streamed once, bypassing L1, 256-byte L2 prefetch (as ld_weight16).
__device__ __forceinline__ void cp_weight16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_act16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
}
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
// kUnits * 512 + (f * 32 + l) * 4, so a warp's shared loads of one unit are 512 contiguous bytes.
template <int KS, int RC>
struct Slot {
  static constexpr int kKB = KS / 128;
  static constexpr int kUnits = kKB * 8 + RC * kKB * 2;   // weights: kb, tile, row half, 16-byte half; acts
  static constexpr int kValues = kKB * 2 + RC * kKB * 2;  // weight scales: kb, tile; act scales: rc, kb, column
  static constexpr int kBytes = 32 * (16 * kUnits + 4 * kValues);
  __device__ static int w(int kb, int t, int h, int q) { return ((kb * 2 + t) * 2 + h) * 2 + q; }
  __device__ static int a(int rc, int kb, int q) { return kKB * 8 + (rc * kKB + kb) * 2 + q; }
  __device__ static int ws(int kb, int t) { return kb * 2 + t; }
  __device__ static int as(int rc, int kb, int j) { return kKB * 2 + (rc * kKB + kb) * 2 + j; }
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
template <int KS, int KD, int DIV, int RC>
__device__ __forceinline__ void stage_acts(uint8_t* slot, const uint8_t* __restrict__ act,
                                           const float* __restrict__ act_s, const int* list, int n, int c0,
                                           int chunks, int k0) {
  using S = Slot<KS, RC>;
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
    if (hb) {
      xb[0] = *S::unit(slot, S::a(rc, kb, 0));
      xb[1] = *S::unit(slot, S::a(rc, kb, 1));
    } else {
      xb[0] = make_uint4(0u, 0u, 0u, 0u);
      xb[1] = xb[0];
    }
    float pa[4] = {0.f, 0.f, 0.f, 0.f}, pv[4] = {0.f, 0.f, 0.f, 0.f};
    block_mma(wa, wb, xb, pa, pv);
    const float s0 = h0 ? *S::value(slot, S::as(rc, kb, 0)) : 0.f;
    const float s1 = h1 ? *S::value(slot, S::as(rc, kb, 1)) : 0.f;
    block_fma(pa, pv, *S::value(slot, S::ws(kb, 0)), *S::value(slot, S::ws(kb, 1)), s0, s1, acc);
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

}  // namespace netra_moe
