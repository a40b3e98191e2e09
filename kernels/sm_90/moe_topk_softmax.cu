// netra template moe_topk_softmax (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin)
//
//   S = the TOPK experts with the largest logits l (bf16), in descending order, equal logits:
//       lower id first;  w[s] = exp(l[s] - l[S0]) / sum_{t in S} exp(l[t] - l[S0])
//   (= softmax over all experts, top-k, renormalized over the k: the full softmax denominator
//   cancels exactly, so it is never computed.)
//   logits: bf16 [rows, EXPERTS]; ids: int32 [rows, TOPK]; weights: fp32 [rows, TOPK].
//
// Kernel arguments (in order, 28 bytes): ids i32*, weights f32*, logits bf16*, rows u32.
// Contract constants: EXPERTS (multiple of 64 in [64, 512]), TOPK (1 to 8).
// Tactic constant: LANES_PER_ROW (L) in {8, 16, 32}; NETRA_BLOCK = L * NETRA_ROWS_PER_BLOCK,
// NETRA_GRID_Y = 1.
//
// Lane mapping. Row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / L; lane l = threadIdx.x % L of
// the row's L consecutive lanes owns experts [l * E/L, (l+1) * E/L): E/L contiguous bf16 in one
// or two loads (E = 128: 8 bytes per lane at L = 32, 16 bytes at L = 16, 2 x 16 bytes at L = 8;
// ld.global.nc.L1::no_allocate). L = 32: a warp whose row >= rows returns at once; L < 32: rows of
// a warp past rows load nothing and store nothing but keep taking part in the shuffles.
//
// Keys (exact). Each logit becomes the int32 key ord(l) << 16 | (0xffff - id), ord the signed
// ordinal of the bf16 sign-magnitude pattern (+m -> m, -m -> -m; +0 and -0 both 0). Key order is
// logit order with ties to the lower id, and keys are unique, so selection is exact.
// Selection, TOPK rounds: W_0 = max key; W_r = max of the keys below W_{r-1}. Per round each lane
// takes the max over its E/L keys that are < W_{r-1} (compare + select, INT_MIN when none), then
// the row's max: redux.sync.max.s32 (L = 32) or log2(L) shfl.sync.bfly steps of max (L < 32).
// Lane r of the row keeps W_r. No key is written back; nothing is rounded.
//
// Weights, lane s < TOPK of the row (the other lanes contribute 0):
//   step                 instruction / intrinsic                 deviation
//   l_s, l_S0 from keys  integer ops, then shift to fp32         exact
//   d = l_s - l_S0       __fsub_rn                               exact when the exponents differ
//                                                                by <= 16, else one rounding:
//                                                                absolute error <= |d| u, which moves
//                                                                e by <= e |d| u <= u/e (absolute)
//   e = exp(d)           expf (CUDA libdevice, full range,       <= 2 ulp; e_0 = 1 exactly; e below
//                        denormals kept)                         2^-126 is denormal, not flushed
//   Z = sum of e_s       shfl.sync.bfly 1, 2, 4 over lanes 0..7: ((e0+e1)+(e2+e3))+((e4+e5)+(e6+e7)),
//                        the same bits in every lane             TOPK - 1 roundings (<= 7u)
//   w = e / Z            r = rcp.approx + one Newton step; q0 = RN(e r); w = fma(fma(-q0, Z, e), r, q0)
//                                                                within 1 ulp of e / Z
//   => |w - w_ref| <= (4 + 7 + 4 + 2) u w + u/e per weight, about 20u of the row's largest weight
//   (>= 1/TOPK) for TOPK = 8: relative_max_error over a tensor <= about 2^-19.7, whatever the gap
//   between the logits.
// Stores: lanes s < TOPK write ids[row, s] and weights[row, s] (4 bytes each, contiguous over the
// lanes: 4*TOPK bytes per row and output).
//
// Bytes per row: 2*EXPERTS read; 4*TOPK (ids) + 4*TOPK (weights) written. No shared memory, no
// local memory. Non-finite logits are outside the contract.
// Measured on an H200 (bench/results/sm90-kernel-check.json): every case passes (ids exact,
// weights within 1.5e-7 of the float64 reference); 3.6 us at 8192 tokens (q32), 1.2 us at 1 and
// 1.5 us at 16 tokens (w8).

#include "include/netra_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "moe_topk_softmax: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(EXPERTS) || !defined(TOPK)
#error "moe_topk_softmax: contract constants EXPERTS and TOPK must be defined"
#endif
#if !defined(LANES_PER_ROW)
#error "moe_topk_softmax: tactic constant LANES_PER_ROW (8, 16 or 32) must be defined"
#endif

namespace moe_topk_softmax_sm90 {
constexpr int kE = EXPERTS;
constexpr int kK = TOPK;
constexpr int kL = LANES_PER_ROW;
constexpr int kPer = kE / kL;      // logits per lane
constexpr int kBytes = 2 * kPer;   // bytes per lane
static_assert(kE % 64 == 0 && kE >= 64 && kE <= 512,
              "moe_topk_softmax: EXPERTS must be a multiple of 64 in [64, 512]");
static_assert(kK >= 1 && kK <= 8, "moe_topk_softmax: TOPK must be in [1, 8]");
static_assert(kL == 8 || kL == 16 || kL == 32, "moe_topk_softmax: LANES_PER_ROW must be 8, 16 or 32");
static_assert(NETRA_BLOCK == kL * NETRA_ROWS_PER_BLOCK,
              "moe_topk_softmax: NETRA_BLOCK must equal LANES_PER_ROW * NETRA_ROWS_PER_BLOCK");
static_assert(NETRA_BLOCK % 32 == 0, "moe_topk_softmax: NETRA_BLOCK must be a multiple of 32");
static_assert(NETRA_GRID_Y == 1, "moe_topk_softmax: NETRA_GRID_Y must be 1");
static_assert(kBytes % 4 == 0, "moe_topk_softmax: internal: a lane's logits must be whole words");

__device__ __forceinline__ float key_logit(int key) {
  const int ord = key >> 16;  // arithmetic shift: the signed ordinal
  const uint32_t bits = ord >= 0 ? static_cast<uint32_t>(ord) : (0x8000u | static_cast<uint32_t>(-ord));
  return __uint_as_float(bits << 16);
}

__device__ __forceinline__ int row_max(int v) {
  if constexpr (kL == 32) {
    return __reduce_max_sync(0xffffffffu, v);
  } else {
#pragma unroll
    for (int off = kL / 2; off >= 1; off >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
  }
}
}  // namespace moe_topk_softmax_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, 1024 / NETRA_BLOCK)
    NETRA_SYMBOL(int32_t* __restrict__ ids, float* __restrict__ weights,
                 const uint16_t* __restrict__ logits, uint32_t rows) {
  using namespace moe_topk_softmax_sm90;
  const int lane = threadIdx.x % kL;
  const uint32_t row = blockIdx.x * NETRA_ROWS_PER_BLOCK + threadIdx.x / kL;
  const bool valid = row < rows;
  if constexpr (kL == 32) {
    if (!valid) return;  // the whole warp shares the row
  }

  uint32_t wv[kBytes / 4];
  const uint16_t* src = logits + (size_t)row * kE + lane * kPer;
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) {
      const uint4 v = valid ? netra::ld_stream16(src + 8 * i) : make_uint4(0u, 0u, 0u, 0u);
      wv[4 * i] = v.x;
      wv[4 * i + 1] = v.y;
      wv[4 * i + 2] = v.z;
      wv[4 * i + 3] = v.w;
    }
  } else if constexpr (kBytes % 8 == 0) {
#pragma unroll
    for (int i = 0; i < kBytes / 8; ++i) {
      const uint2 v = valid ? netra::ld_stream8(src + 4 * i) : make_uint2(0u, 0u);
      wv[2 * i] = v.x;
      wv[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kBytes / 4; ++i) wv[i] = valid ? netra::ld_stream4(src + 2 * i) : 0u;
  }

  int key[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const uint32_t bits = (i & 1) ? (wv[i / 2] >> 16) : (wv[i / 2] & 0xffffu);
    const int mag = static_cast<int>(bits & 0x7fffu);
    const int ord = (bits & 0x8000u) ? -mag : mag;
    const int id = lane * kPer + i;
    key[i] = static_cast<int>((static_cast<uint32_t>(ord) << 16) | static_cast<uint32_t>(0xffff - id));
  }

  int w_prev = 0x7fffffff;  // above every key of a finite logit (max 0x7f7fffff)
  int top = 0, mine = 0;
#pragma unroll
  for (int r = 0; r < kK; ++r) {
    int best = static_cast<int>(0x80000000u);  // below every key (min -0x7f7f0000)
#pragma unroll
    for (int i = 0; i < kPer; ++i) best = max(best, key[i] < w_prev ? key[i] : static_cast<int>(0x80000000u));
    w_prev = row_max(best);
    if (r == 0) top = w_prev;
    if (lane == r) mine = w_prev;
  }

  float e = 0.0f;
  if (lane < kK) e = expf(__fsub_rn(key_logit(mine), key_logit(top)));
  float z = __fadd_rn(e, __shfl_xor_sync(0xffffffffu, e, 1));
  z = __fadd_rn(z, __shfl_xor_sync(0xffffffffu, z, 2));
  z = __fadd_rn(z, __shfl_xor_sync(0xffffffffu, z, 4));
  const float r = netra::rcp_newton(z);
  const float q0 = __fmul_rn(e, r);
  const float wgt = __fmaf_rn(__fmaf_rn(-q0, z, e), r, q0);
  if (valid && lane < kK) {
    ids[(size_t)row * kK + lane] = 0xffff - (mine & 0xffff);
    weights[(size_t)row * kK + lane] = wgt;
  }
}
