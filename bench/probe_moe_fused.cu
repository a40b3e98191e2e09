// A probe, not a shipped kernel (bench/probe_moe_fused.py builds and times it): the routed FP8 MoE of ONE
// token as one kernel, to measure what removing the two-stage chain's structure buys at decode (issue 28's
// M = 1 target, 1.25x the read limit). Not locked, not certified, not served.
//
// The unit of work is (slot s, column group gq of 128 of INTER): the gate and up rows of that group, and
// the down projection's k block gq (the same 128 columns of h). A cluster of SPLIT CTAs takes one unit:
//   - CTA rank q takes gate/up's k blocks [q, q + 1) * HIDDEN / SPLIT and down's rows [q, q + 1) * HIDDEN /
//     SPLIT; at entry it requests all of its bytes at once (PHASES 1; with PHASES 2 one gate/up tile pair at
//     a time): its gate/up tiles into registers, then its down tile (HIDDEN / SPLIT rows x 128 bytes,
//     swizzled) into shared memory by cp.async;
//   - each CTA multiplies its gate/up k blocks (netra_moe's register tile: mma.sync m16n8k32 e4m3, block by
//     block in ascending k, each block's sum times RN(w-scale x x-scale) added by one fma) and writes its
//     256 sums (gate then up) to shared memory; one cluster barrier; then every CTA adds the ranks' sums in
//     rank order (as fp8_moe_gate_up_tc's KSPLIT does), forms h = silu(gate) * up and quantizes the group
//     (netra::quant_group128_warp): the same 128 codes and scale in every CTA of the cluster, no exchange;
//   - each CTA multiplies its down rows by the group's codes (one k block: the block's sum times RN(w2-scale
//     x h-scale)) and stores them to the workspace part[s][gq][n];
//   - a counter per row range q: the CTA that arrives last (of TOPK x INTER / 128) sums, per row n and slot
//     s, part[s][0..G)[n] in ascending gq (fp32, RN), then out[n] = bf16(fma over the slots in slot order),
//     and resets the counter.
// Numerics: the contract's (docs/ops/fp8_moe.md): exact block products on the tensor cores, the scaled
// blocks merged by RN adds in a fixed order; h's codes as silu_mul_fp8_quant; the slot sum the contract's
// fp32 fma in slot order. Deterministic (no atomics on values; the order fixed by SPLIT).

#include "include/netra_moe_sm90.cuh"
#include "include/netra_sm90.cuh"
#include "include/netra_tc_sm90.cuh"
#include "include/netra_trace.cuh"  // -DNETRA_TRACE: phase marks (probe_moe_fused.py --trace)

#ifndef EXPERTS
#define EXPERTS 128
#endif
#ifndef TOPK
#define TOPK 8
#endif
#ifndef HIDDEN
#define HIDDEN 2048
#endif
#ifndef INTER
#define INTER 768
#endif
#ifndef SPLIT
#define SPLIT 8
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef MIN_BLOCKS
#define MIN_BLOCKS 3
#endif
#ifndef PHASES
#define PHASES 1  // 1: every gate/up byte of the CTA requested at entry; 2: a tile pair at a time
#endif

namespace {
constexpr int kE = EXPERTS, kK = TOPK, kH = HIDDEN, kI = INTER, kS = SPLIT, kW = WARPS;
constexpr int kG = kI / 128;    // column groups of h: the down projection's k blocks
constexpr int kHS = kH / kS;    // gate/up k bytes of a CTA, and its down rows
constexpr int kKB = kHS / 128;  // gate/up k blocks of a CTA
constexpr int kTP = 8;          // 16-row tile pairs (gate, up) of a 128-column group
constexpr int kTPW = kTP / kW;  // tile pairs per warp
constexpr int kDT = kHS / 16;   // 16-row down tiles of a CTA
constexpr int kDTW = kDT / kW;  // per warp
static_assert(kH % (128 * kS) == 0 && kI % 128 == 0, "probe: HIDDEN must be SPLIT k blocks of 128");
static_assert(kTP % kW == 0 && kDTW % 2 == 0, "probe: WARPS must divide the tiles");
static_assert(PHASES == 1 || PHASES == kTPW, "probe: PHASES is 1 or the tile pairs of a warp");
}  // namespace

extern "C" __global__ void __cluster_dims__(SPLIT, 1, 1) __launch_bounds__(WARPS * 32, MIN_BLOCKS)
    netra_probe_moe_fused(const uint8_t* __restrict__ xq, const float* __restrict__ xs, const int* __restrict__ ids,
                          const float* __restrict__ wts, const uint8_t* __restrict__ w13,
                          const float* __restrict__ w13s, const uint8_t* __restrict__ w2,
                          const float* __restrict__ w2s, __nv_bfloat16* __restrict__ out, uint8_t* __restrict__ hq,
                          float* __restrict__ hs, float* __restrict__ part, unsigned* __restrict__ counters NETRA_TRACE_PARAM) {
  extern __shared__ __align__(1024) uint8_t sdown[];  // kHS * 128 bytes, dynamic (SPLIT 4: 64 KB)
  __shared__ __align__(16) float spart[256];
  __shared__ __align__(16) uint32_t shq[32];
  __shared__ float shs;
  __shared__ int slast;

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int slot = blockIdx.y, gq = blockIdx.x / kS;
  const uint32_t q = netra_tc::cluster_rank();
  const int e = ids[slot];
  const bool valid = e >= 0 && e < kE;  // the same for the whole cluster (one slot)
  const int k0 = (int)q * kHS;
  NETRA_TRACE_MARK(0);
#ifdef NETRA_TRACE
  {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    NETRA_TRACE_FLAG(7, sm);
  }
#endif
  if (valid) {
    // every byte of the CTA requested at once: gate/up tiles into registers, then the down tile
    uint4 wa[kTPW][kKB][2][2], wb[kTPW][kKB][2][2];
    const uint8_t* gate = w13 + ((size_t)e * 2 * kI + gq * 128) * kH;
    const uint8_t* up = gate + (size_t)kI * kH;
    const auto load_pair = [&](int t) {  // tile pair t of this warp: 16 gate rows and the same 16 up rows
      const size_t row = (size_t)16 * (warp + kW * t) * kH;
      netra_moe::load_rows<kHS, kH>(wa[t], gate + row, k0);
      netra_moe::load_rows<kHS, kH>(wb[t], up + row, k0);
    };
#pragma unroll
    for (int t = 0; t < (PHASES == 1 ? kTPW : 1); ++t) load_pair(t);
    const uint8_t* down = w2 + ((size_t)e * kH + k0) * kI + gq * 128;
    const uint32_t sbase = netra_moe::smem_addr(sdown);
#pragma unroll 4
    for (int i = threadIdx.x; i < kHS * 8; i += kW * 32) {
      const int r = i >> 3, u = i & 7;
      netra_moe::cp_weight16(sbase + netra_tc::sw128(r, u), down + (size_t)r * kI + 16 * u);
    }
    netra_moe::cp_commit();
    // the token's activations (B column 0: lanes g = 0) and scales
    uint4 xb[kKB][2];
    float swa[kKB], swb[kKB], s0[kKB];
#pragma unroll
    for (int kb = 0; kb < kKB; ++kb) {
      const int kblk = k0 / 128 + kb;
      if (g == 0) {
        xb[kb][0] = netra_moe::ld_act16(xq + k0 + kb * 128 + 32 * c);
        xb[kb][1] = netra_moe::ld_act16(xq + k0 + kb * 128 + 32 * c + 16);
      } else {
        xb[kb][0] = make_uint4(0u, 0u, 0u, 0u);
        xb[kb][1] = xb[kb][0];
      }
      swa[kb] = w13s[((size_t)e * (2 * kI / 128) + gq) * (kH / 128) + kblk];
      swb[kb] = w13s[((size_t)e * (2 * kI / 128) + kG + gq) * (kH / 128) + kblk];
      s0[kb] = c == 0 ? xs[kblk] : 0.f;
    }
#pragma unroll
    for (int t = 0; t < kTPW; ++t) {
      if (PHASES > 1 && t > 0) load_pair(t);  // PHASES 2: one tile pair's bytes in flight at a time
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int kb = 0; kb < kKB; ++kb) {
        float pa[4] = {0.f, 0.f, 0.f, 0.f}, pv[4] = {0.f, 0.f, 0.f, 0.f};
        netra_moe::block_mma(wa[t][kb], wb[t][kb], xb[kb], pa, pv);
        netra_moe::block_fma(pa, pv, swa[kb], swb[kb], s0[kb], 0.f, acc);
      }
      if (c == 0) {  // pair 0's column: rows g and g + 8 of the gate tile (acc 0, 2) and the up tile (4, 6)
        const int r = 16 * (warp + kW * t) + g;
        spart[r] = acc[0];
        spart[r + 8] = acc[2];
        spart[128 + r] = acc[4];
        spart[128 + r + 8] = acc[6];
      }
    }
    NETRA_TRACE_MARK(1);
    netra_tc::cluster_sync();  // every rank's sums written and visible to the cluster
    NETRA_TRACE_MARK(2);
    if (warp == 0) {
      const float* gp = spart + 4 * lane;
      float4 gs = netra_tc::ld_cluster4(gp, 0), us = netra_tc::ld_cluster4(gp + 128, 0);
#pragma unroll
      for (int r = 1; r < kS; ++r) {
        gs = netra_tc::add4_rn(gs, netra_tc::ld_cluster4(gp, (uint32_t)r));
        us = netra_tc::add4_rn(us, netra_tc::ld_cluster4(gp + 128, (uint32_t)r));
      }
      const float4 h = make_float4(netra::silu_mul(gs.x, us.x), netra::silu_mul(gs.y, us.y),
                                   netra::silu_mul(gs.z, us.z), netra::silu_mul(gs.w, us.w));
      float s;
      const uint32_t code = netra::quant_group128_warp(h, s);
      shq[lane] = code;
      if (lane == 0) shs = s;
      if (q == 0) {  // h's codes and scale, for the judges
        reinterpret_cast<uint32_t*>(hq + (size_t)slot * kI + gq * 128)[lane] = code;
        if (lane == 0) hs[slot * kG + gq] = s;
      }
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");  // done with the others' sums
    netra_moe::cp_wait<0>();
    __syncthreads();  // the down tile and the codes visible to every warp
    NETRA_TRACE_MARK(3);
    uint4 hb[2];
    if (g == 0) {
      hb[0] = reinterpret_cast<const uint4*>(shq)[2 * c];
      hb[1] = reinterpret_cast<const uint4*>(shq)[2 * c + 1];
    } else {
      hb[0] = make_uint4(0u, 0u, 0u, 0u);
      hb[1] = hb[0];
    }
    const float hsv = shs;
    float* dst = part + ((size_t)slot * kG + gq) * kH + k0;
#pragma unroll
    for (int t = 0; t < kDTW; t += 2) {
      const int ta = warp + kW * t, tb = warp + kW * (t + 1);
      uint4 da[2][2], db[2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          da[h][j] = *reinterpret_cast<const uint4*>(sdown + netra_tc::sw128(16 * ta + g + 8 * h, 2 * c + j));
          db[h][j] = *reinterpret_cast<const uint4*>(sdown + netra_tc::sw128(16 * tb + g + 8 * h, 2 * c + j));
        }
      }
      float pa[4] = {0.f, 0.f, 0.f, 0.f}, pv[4] = {0.f, 0.f, 0.f, 0.f};
      netra_moe::block_mma(da, db, hb, pa, pv);
      if (c == 0) {
        const float sa = __fmul_rn(w2s[((size_t)e * (kH / 128) + (k0 + 16 * ta) / 128) * kG + gq], hsv);
        const float sb = __fmul_rn(w2s[((size_t)e * (kH / 128) + (k0 + 16 * tb) / 128) * kG + gq], hsv);
        dst[16 * ta + g] = __fmul_rn(pa[0], sa);
        dst[16 * ta + g + 8] = __fmul_rn(pa[2], sa);
        dst[16 * tb + g] = __fmul_rn(pv[0], sb);
        dst[16 * tb + g + 8] = __fmul_rn(pv[2], sb);
      }
    }
  }
  __syncthreads();  // this CTA's part stores issued
  NETRA_TRACE_MARK(4);
  if (threadIdx.x == 0) {
    __threadfence();
    slast = atomicAdd(&counters[q], 1u) == (unsigned)(kK * kG - 1);
  }
  __syncthreads();
  NETRA_TRACE_MARK(5);
  if (slast) {  // every unit's rows [k0, k0 + kHS) are in part: the slot sums, in slot order
    __threadfence();
    float w[kK];
    bool ok[kK];
#pragma unroll
    for (int s = 0; s < kK; ++s) {
      const int es = ids[s];
      ok[s] = es >= 0 && es < kE;
      w[s] = wts[s];
    }
    // two rows' partial sums a thread requested before the first is added: a round trip to L2 per two rows
    constexpr int kRows = kHS / (kW * 32), kBatch = kRows < 2 ? kRows : 2;
    static_assert(kHS % (kW * 32) == 0 && kRows % kBatch == 0, "probe: the CTA's threads must divide its rows");
#pragma unroll 1
    for (int r0 = 0; r0 < kRows; r0 += kBatch) {
      float v[kBatch][kK][kG];
#pragma unroll
      for (int r = 0; r < kBatch; ++r)
#pragma unroll
        for (int s = 0; s < kK; ++s)
#pragma unroll
          for (int j = 0; j < kG; ++j)
            v[r][s][j] = __ldcg(part + ((size_t)s * kG + j) * kH + k0 + (int)threadIdx.x + (r0 + r) * kW * 32);
#pragma unroll
      for (int r = 0; r < kBatch; ++r) {
        float acc = 0.f;
#pragma unroll
        for (int s = 0; s < kK; ++s) {
          float y = v[r][s][0];
#pragma unroll
          for (int j = 1; j < kG; ++j) y = __fadd_rn(y, v[r][s][j]);
          acc = ok[s] ? __fmaf_rn(w[s], y, acc) : acc;
        }
        out[k0 + (int)threadIdx.x + (r0 + r) * kW * 32] = __float2bfloat16_rn(acc);
      }
    }
    if (threadIdx.x == 0) counters[q] = 0u;
  }
  NETRA_TRACE_MARK(6);
  if (valid) asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");  // the others read our sums
}
