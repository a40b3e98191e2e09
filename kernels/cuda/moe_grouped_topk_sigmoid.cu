// netra template moe_grouped_topk_sigmoid (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin)
//
//   DeepSeek-V3's router (noaux_tc). Per token, with l the fp32 logits and bias the fp32
//   e_score_correction_bias:
//     s[e] = 1 / (1 + exp(-l[e]))          the unbiased scores (they weigh)
//     b[e] = s[e] + bias[e]                 the biased scores (they choose)
//     group j (experts j*S .. j*S+S-1, S = EXPERTS / GROUPS) scores g[j] = sum of its two largest b;
//     the TOPK_GROUPS groups of largest g are kept (equal g: the lower group first);
//     ids = the TOPK experts of largest b in the kept groups, in descending b (equal b: lower id first);
//     w[r] = scale * s[ids[r]] / (sum_r s[ids[r]] + 1e-20f).
//   logits: f32 [rows, EXPERTS]; bias: f32 [EXPERTS]; ids: int32 [rows, TOPK]; weights: f32 [rows, TOPK].
//   scale: the routed scaling factor (2.5 for DeepSeek-V3), a runtime f32.
//
// Kernel arguments (in order, 40 bytes): ids i32*, weights f32*, logits f32*, bias f32*, rows u32,
// scale f32.
// Contract constants: EXPERTS (multiple of 128 in [128, 512]), TOPK (1 to 8), GROUPS (S = EXPERTS /
// GROUPS a multiple of 4 with S / 4 a power of two <= 32), TOPK_GROUPS (1 to GROUPS, TOPK <=
// TOPK_GROUPS * S). Tactic: NETRA_BLOCK = 32 * NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y = 1.
//
// Lane mapping. One warp per token: row = blockIdx.x * ROWS_PER_BLOCK + warp; a warp whose row >= rows
// returns at once. Lane l holds EXPERTS / 32 experts as EXPERTS / 128 vectors of 4 contiguous f32:
// vector i is experts 4 (32 i + l) .. 4 (32 i + l) + 3, so each load instruction of the warp reads 512
// contiguous bytes of logits (ld.global.nc.L1::no_allocate: read once) and of bias (ld.global.nc, L1
// cached: every token reads the same 4*EXPERTS bytes). A group's S experts of vector i are S / 4
// consecutive lanes.
//
// Numerics, per expert (u = 2^-24):
//   step              instruction / intrinsic                  deviation
//   e = exp(-l)       expf (CUDA libdevice, full range,        <= 2 ulp (4u relative)
//                     no fast-math, denormals kept)
//   d = 1 + e         __fadd_rn                                <= 4u (1 - s) + u relative
//   s = 1 / d         div_1ulp: rcp.approx + Newton step,      <= 4u (1 - s) + 3u relative, so
//                     one correction with the exact residual   |s' - s| <= (7s - 4s^2) u <= 49u/16
//   (l < -20: s = expf(l), as 1 + e^l rounds to 1; d stays <= 4.9e8 and 1 / d normal)
//   b = s + bias      __fadd_rn                                |b' - b| <= 49u/16 + u |b|
//   g = t1 + t2       __fadd_rn of the group's two largest b   <= 2 max |b' - b| + u |g|
// Selection is exact on the rounded values: groups by (g, lower index), experts by the key
// ord(b) << 32 | ~id (ord: the fp32 bits made order-preserving as unsigned; b is never -0 since
// s >= +0), experts outside the kept groups key 0, below every real key. Where two exact scores lie
// within these bounds of each other the order may differ from the float64 reference's: conformance
// accepts such a swap only within the bounds (netra/certify/numerics/moe_grouped_topk_sigmoid.py);
// identical (logit, bias) pairs give identical keys up to the id, so exact ties keep the contract's
// order.
// Weights: the sum of the TOPK selected s over lanes 0..7 (slot r at lane r, slots >= TOPK are 0):
// shfl.sync.bfly 1, 2, 4, the tree ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) in every lane (3 roundings
// along any path); D = sum + 1e-20f (1 rounding); w = RN(div_1ulp(s, D) * scale): 7u (s) + 3u + u
// (D) + 2u (quotient) + 7u (s again) + u (scale) = 21u of w per weight, whatever the logits.
// Deterministic, no atomics, no shared memory, no local memory; a token's bits do not depend on the
// other tokens or the launch (batch invariant).
//
// Bytes per token: 4*EXPERTS logits read (the bias, 4*EXPERTS, once per call from HBM, then L1/L2);
// 4*TOPK (ids) + 4*TOPK (weights) written, by lanes 0..TOPK-1 (4 bytes each).
// Non-finite logits or bias are outside the contract. Not yet run on a GPU.

#include "include/netra_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "moe_grouped_topk_sigmoid: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(EXPERTS) || !defined(TOPK) || !defined(GROUPS) || !defined(TOPK_GROUPS)
#error "moe_grouped_topk_sigmoid: contract constants EXPERTS, TOPK, GROUPS and TOPK_GROUPS must be defined"
#endif

namespace moe_grouped_topk_sigmoid_sm90 {
constexpr int kE = EXPERTS;
constexpr int kK = TOPK;
constexpr int kG = GROUPS;
constexpr int kTG = TOPK_GROUPS;
constexpr int kNv = kE / 128;         // 16-byte vectors per lane
constexpr int kPer = 4 * kNv;         // experts per lane
constexpr int kS = kE / kG;           // experts per group
constexpr int kLg = kS / 4;           // lanes per group (within one vector)
constexpr int kGpv = 32 / kLg;        // groups per vector
static_assert(kE % 128 == 0 && kE >= 128 && kE <= 512,
              "moe_grouped_topk_sigmoid: EXPERTS must be a multiple of 128 in [128, 512]");
static_assert(kK >= 1 && kK <= 8, "moe_grouped_topk_sigmoid: TOPK must be in [1, 8]");
static_assert(kG >= 1 && kE % kG == 0 && kS % 4 == 0 && kLg <= 32 && (kLg & (kLg - 1)) == 0,
              "moe_grouped_topk_sigmoid: EXPERTS / GROUPS must be 4 times a power of two <= 32");
static_assert(kTG >= 1 && kTG <= kG, "moe_grouped_topk_sigmoid: TOPK_GROUPS must be in [1, GROUPS]");
static_assert(kK <= kTG * kS, "moe_grouped_topk_sigmoid: TOPK must not exceed the kept groups' experts");
static_assert(NETRA_BLOCK == 32 * NETRA_ROWS_PER_BLOCK,
              "moe_grouped_topk_sigmoid: NETRA_BLOCK must equal 32 * NETRA_ROWS_PER_BLOCK (a warp per token)");
static_assert(NETRA_GRID_Y == 1, "moe_grouped_topk_sigmoid: NETRA_GRID_Y must be 1");
constexpr uint32_t kFull = 0xffffffffu;

__device__ __forceinline__ unsigned long long make_key(float b, int id) {
  const uint32_t u = __float_as_uint(b);
  const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(ord) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}

__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
#pragma unroll
  for (int off = 16; off >= 1; off >>= 1) {
    const unsigned long long o = __shfl_xor_sync(kFull, v, off);
    v = o > v ? o : v;
  }
  return v;
}

// a / d within 1 ulp for a normal d whose reciprocal is normal: r = rcp.approx + one Newton step,
// q0 = RN(a r), then one correction with the exact residual fma(-q0, d, a). (div.rn.f32 would be a
// called subroutine whose frame is local memory on sm_100a.)
__device__ __forceinline__ float div_1ulp(float a, float d) {
  const float r = netra::rcp_newton(d);
  const float q0 = __fmul_rn(a, r);
  return __fmaf_rn(__fmaf_rn(-q0, d, a), r, q0);
}

// 1 / (1 + exp(-x)). Below x = -20, exp(x) < 2^-28 and 1 + exp(x) rounds to 1: s = exp(x) there
// (relative error of that identity below 2^-28), which keeps d = 1 + exp(-x) <= 4.9e8 on the other
// path (1 / d normal, as div_1ulp needs) and gives denormal s for x < -87.3 instead of a flushed 0.
__device__ __forceinline__ float sigmoid(float x) {
  const bool tail = x < -20.0f;
  const float e = expf(tail ? x : -x);
  return tail ? e : div_1ulp(1.0f, __fadd_rn(1.0f, e));
}

// (a1 >= a2) := the two largest of {a1, a2, c1, c2} given c1 >= c2 (values only).
__device__ __forceinline__ void top2_merge(float& a1, float& a2, float c1, float c2) {
  const float hi = fmaxf(a1, c1), lo = fmaxf(fminf(a1, c1), fmaxf(a2, c2));
  a1 = hi;
  a2 = lo;
}
}  // namespace moe_grouped_topk_sigmoid_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, 512 / NETRA_BLOCK)
    NETRA_SYMBOL(int32_t* __restrict__ ids, float* __restrict__ weights, const float* __restrict__ logits,
                 const float* __restrict__ bias, uint32_t rows, float scale) {
  using namespace moe_grouped_topk_sigmoid_sm90;
  const int lane = threadIdx.x % 32;
  const uint32_t row = blockIdx.x * NETRA_ROWS_PER_BLOCK + threadIdx.x / 32;
  if (row >= rows) return;  // the whole warp shares the row

  float s[kPer], b[kPer];
  const float* src = logits + (size_t)row * kE;
#pragma unroll
  for (int i = 0; i < kNv; ++i) {
    const int e0 = 4 * (32 * i + lane);
    const uint4 lv = netra::ld_stream16(src + e0);
    const uint4 bv = netra::ld_keep16(bias + e0);
    const uint32_t lw[4] = {lv.x, lv.y, lv.z, lv.w};
    const uint32_t bw[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      s[4 * i + t] = sigmoid(__uint_as_float(lw[t]));
      b[4 * i + t] = __fadd_rn(s[4 * i + t], __uint_as_float(bw[t]));
    }
  }

  // group scores: per vector, this lane's two largest b, merged over the group's kLg lanes
  float gs[kNv];
  int grp[kNv];
#pragma unroll
  for (int i = 0; i < kNv; ++i) {
    float t1 = fmaxf(b[4 * i], b[4 * i + 1]), t2 = fminf(b[4 * i], b[4 * i + 1]);
    top2_merge(t1, t2, fmaxf(b[4 * i + 2], b[4 * i + 3]), fminf(b[4 * i + 2], b[4 * i + 3]));
#pragma unroll
    for (int off = 1; off < kLg; off <<= 1) {
      const float c1 = __shfl_xor_sync(kFull, t1, off), c2 = __shfl_xor_sync(kFull, t2, off);
      top2_merge(t1, t2, c1, c2);
    }
    gs[i] = __fadd_rn(t1, t2);
    grp[i] = i * kGpv + lane / kLg;
  }

  // group ranks: the number of groups ahead of each of this lane's groups (larger g, or equal g and a
  // lower index); a group is kept when fewer than TOPK_GROUPS are ahead of it
  int ahead[kNv];
#pragma unroll
  for (int m = 0; m < kNv; ++m) ahead[m] = 0;
#pragma unroll
  for (int i = 0; i < kNv; ++i) {
#pragma unroll
    for (int q = 0; q < kGpv; ++q) {
      const int j = i * kGpv + q;
      const float v = __shfl_sync(kFull, gs[i], q * kLg);
#pragma unroll
      for (int m = 0; m < kNv; ++m) ahead[m] += (v > gs[m] || (v == gs[m] && j < grp[m])) ? 1 : 0;
    }
  }

  bool kept[kNv];
#pragma unroll
  for (int i = 0; i < kNv; ++i) kept[i] = ahead[i] < kTG;

  // TOPK rounds of a warp max over the keys below the previous winner (keys made from b each round,
  // not held: 64-bit keys for every expert would double the registers); lane r keeps slot r
  unsigned long long prev = ~0ull;
  int my_id = 0;
  float my_s = 0.0f;
#pragma unroll
  for (int r = 0; r < kK; ++r) {
    unsigned long long best = 0ull;
    float best_s = 0.0f;
#pragma unroll
    for (int t = 0; t < kPer; ++t) {
      const unsigned long long key = kept[t / 4] ? make_key(b[t], 4 * (32 * (t / 4) + lane) + t % 4) : 0ull;
      const bool take = key < prev && key > best;
      best = take ? key : best;
      best_s = take ? s[t] : best_s;
    }
    prev = warp_max(best);
    const int id = static_cast<int>(~static_cast<uint32_t>(prev));
    const float sw = __shfl_sync(kFull, best_s, (id / 4) % 32);  // the owner's best is the winner
    if (lane == r) {
      my_id = id;
      my_s = sw;
    }
  }

  float z = lane < kK ? my_s : 0.0f;
#pragma unroll
  for (int off = 1; off < 8; off <<= 1) z = __fadd_rn(z, __shfl_xor_sync(kFull, z, off));
  if (lane < kK) {
    const float d = __fadd_rn(z, 1e-20f);
    ids[(size_t)row * kK + lane] = my_id;
    weights[(size_t)row * kK + lane] = __fmul_rn(div_1ulp(my_s, d), scale);
  }
}
