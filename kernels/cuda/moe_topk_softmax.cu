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
// Tactic constants: LANES_PER_ROW (L) in {2, 4, 8, 16, 32} and SELECT (0: TOPK rounds of a row max,
// 1: sorted lists merged, below); NETRA_BLOCK = L * NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y = 1.
//
// Lane mapping. Row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / L; lane l = threadIdx.x % L of
// the row's L consecutive lanes owns E/L experts as E/(L W) vectors of W = min(8, E/L) contiguous
// bf16: vector i of lane l is experts W (L i + l) .. W (L i + l) + W - 1 (ld.global.nc.L1::no_allocate,
// 16 bytes for W = 8), so each load instruction of the row's lanes reads L W * 2 contiguous bytes.
// L = 32: a warp whose row >= rows returns at once; L < 32: rows of a warp past rows load nothing
// and store nothing but keep taking part in the shuffles.
//
// Keys (exact). Each logit becomes the int32 key ord(l) << 16 | (0xffff - id), ord the signed
// ordinal of the bf16 sign-magnitude pattern (+m -> m, -m -> -m; +0 and -0 both 0). Key order is
// logit order with ties to the lower id, and keys are unique, so selection is exact.
// SELECT = 0, TOPK rounds: W_0 = max key; W_r = max of the keys below W_{r-1}. Per round each lane
// takes the max over its E/L keys that are < W_{r-1} (compare + select, INT_MIN when none), then
// the row's max: redux.sync.max.s32 (L = 32) or log2(L) shfl.sync.bfly steps of max (L < 32).
// SELECT = 1, merge: with P = the power of two >= TOPK (8 for TOPK 5..8), each lane sorts its keys
// in groups of P (Batcher's odd-even merge sort network of max/min, descending; a group shorter than
// P is padded with INT_MIN, below every key) and merges the groups into its own top P: for sorted lists A, B the top
// P of both is the bitonic sequence max(A_i, B_{P-1-i}), sorted by a bitonic half-cleaner cascade.
// Then log2(L) butterfly steps do the same across lanes (the partner's list by shfl.sync.bfly):
// both partners form the same set, so after each step every lane of the row holds the same sorted
// top P of its lanes' keys, and after the last the row's top P in descending order.
// Either way the result is the exact top TOPK keys in descending order (the same ids, in the same
// order, and so the same weights bit for bit, whichever SELECT and L); nothing is rounded.
//
// Weights, slot s < TOPK of the row's sorted top keys, at lane s (L >= 8) or lane s / (8 / L) (L < 8,
// 8/L consecutive slots per lane; SELECT = 1 only, where every lane holds all of them); slots >= TOPK
// contribute 0:
//   step                 instruction / intrinsic                 deviation
//   l_s, l_S0 from keys  integer ops, then shift to fp32         exact
//   d = l_s - l_S0       __fsub_rn                               exact when the exponents differ
//                                                                by <= 16, else one rounding:
//                                                                absolute error <= |d| u, which moves
//                                                                e by <= e |d| u <= u/e (absolute)
//   e = exp(d)           expf (CUDA libdevice, full range,       <= 2 ulp; e_0 = 1 exactly; e below
//                        denormals kept)                         2^-126 is denormal, not flushed
//   Z = sum of e_s       ((e0+e1)+(e2+e3))+((e4+e5)+(e6+e7)): a lane's own slots first, then
//                        shfl.sync.bfly over the lanes holding the others (L >= 8: 1, 2, 4), the
//                        same tree and bits in every lane and every tactic; TOPK - 1 roundings (<= 7u)
//   w = e / Z            r = rcp.approx + one Newton step; q0 = RN(e r); w = fma(fma(-q0, Z, e), r, q0)
//                                                                within 1 ulp of e / Z
//   => |w - w_ref| <= (4 + 7 + 4 + 2) u w + u/e per weight, about 20u of the row's largest weight
//   (>= 1/TOPK) for TOPK = 8: relative_max_error over a tensor <= about 2^-19.7, whatever the gap
//   between the logits.
// Stores: the lane of slot s writes ids[row, s] and weights[row, s] (4 bytes each per slot, the
// slots of a lane contiguous: 4*TOPK bytes per row and output).
//
// Bytes per row: 2*EXPERTS read; 4*TOPK (ids) + 4*TOPK (weights) written. No shared memory, no
// local memory. Non-finite logits are outside the contract.
// Measured on an H200 (docs/gpu-runs/kernels-explore/README.md, graph replay, us per call): every
// case passes (ids exact including ties and +-0, weights within 1.4e-7 of the float64 reference),
// SELECT 0 and 1 give the same bits; 2.36 us at 8192 tokens and 6.26 at 32768 (m4; the rounds of
// q32: 3.22 and 9.52), 1.13 at 1 and 1.26 at 16 tokens (m32). Issue-bound: m4 is 720 instructions per
// lane (303 of them integer min/max) against q32's 568 per lane at twice the lanes per token.

#include "include/netra_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "moe_topk_softmax: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(EXPERTS) || !defined(TOPK)
#error "moe_topk_softmax: contract constants EXPERTS and TOPK must be defined"
#endif
#if !defined(LANES_PER_ROW) || !defined(SELECT)
#error "moe_topk_softmax: tactic constants LANES_PER_ROW (2 .. 32) and SELECT (0 rounds, 1 merge) must be defined"
#endif

namespace moe_topk_softmax_sm90 {
constexpr int kE = EXPERTS;
constexpr int kK = TOPK;
constexpr int kL = LANES_PER_ROW;
constexpr int kPer = kE / kL;               // logits per lane
constexpr int kW = kPer < 8 ? kPer : 8;     // logits per load (a vector of kW bf16)
constexpr int kNv = kPer / kW;              // loads per lane
constexpr int kP = kK <= 1 ? 1 : kK <= 2 ? 2 : kK <= 4 ? 4 : 8;  // merge list length
constexpr int kG = kPer < kP ? kPer : kP;   // keys per sorted group (a power of two)
constexpr int kSlots = kL >= 8 ? 1 : 8 / kL;  // weight slots per lane (merge, L < 8)
static_assert(kE % 64 == 0 && kE >= 64 && kE <= 512,
              "moe_topk_softmax: EXPERTS must be a multiple of 64 in [64, 512]");
static_assert(kK >= 1 && kK <= 8, "moe_topk_softmax: TOPK must be in [1, 8]");
static_assert(kL == 2 || kL == 4 || kL == 8 || kL == 16 || kL == 32,
              "moe_topk_softmax: LANES_PER_ROW must be 2, 4, 8, 16 or 32");
static_assert(SELECT == 0 || SELECT == 1, "moe_topk_softmax: SELECT must be 0 (rounds) or 1 (merge)");
static_assert(SELECT == 1 || kL >= 8, "moe_topk_softmax: SELECT = 0 (rounds) needs LANES_PER_ROW >= 8");
static_assert(NETRA_BLOCK == kL * NETRA_ROWS_PER_BLOCK,
              "moe_topk_softmax: NETRA_BLOCK must equal LANES_PER_ROW * NETRA_ROWS_PER_BLOCK");
static_assert(NETRA_BLOCK % 32 == 0, "moe_topk_softmax: NETRA_BLOCK must be a multiple of 32");
static_assert(NETRA_GRID_Y == 1, "moe_topk_softmax: NETRA_GRID_Y must be 1");
static_assert(kW == 2 || kW == 4 || kW == 8, "moe_topk_softmax: internal: a lane's vector is 4, 8 or 16 bytes");
constexpr int kKeyMin = static_cast<int>(0x80000000u);  // below every key (min -0x7f7f0000)

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

// Descending sort of N (a power of two) keys in place: Batcher's odd-even merge sort network (19
// compare-exchanges of max/min for N = 8, 5 for 4, 1 for 2; the pairs below, checked against every
// 0/1 input), written out so that every index is a compile-time constant.
// (net_at: the pairs as a constexpr function, evaluated in template arguments only, so that no
// table becomes device data.)
__host__ __device__ constexpr int net_size(int n) { return n == 2 ? 1 : n == 4 ? 5 : n == 8 ? 19 : 0; }
__host__ __device__ constexpr int net_at(int n, int k) {
  const int n2[] = {0, 1};
  const int n4[] = {0, 1, 2, 3, 0, 2, 1, 3, 1, 2};
  const int n8[] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 2, 1, 3, 4, 6, 5, 7, 1, 2, 5, 6,
                    0, 4, 1, 5, 2, 6, 3, 7, 2, 4, 3, 5, 1, 2, 3, 4, 5, 6};
  return n == 2 ? n2[k] : n == 4 ? n4[k] : n8[k];
}

template <int N, int C = 0>
__device__ __forceinline__ void sort_desc(int* a) {
  if constexpr (C < net_size(N)) {
    constexpr int i = net_at(N, 2 * C), j = net_at(N, 2 * C + 1);
    const int hi = max(a[i], a[j]), lo = min(a[i], a[j]);
    a[i] = hi;
    a[j] = lo;
    sort_desc<N, C + 1>(a);
  }
}

// a := the top P of the sorted lists a and b (both descending), sorted descending.
template <int N>
__device__ __forceinline__ void merge_top(int* a, const int* b) {
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = max(a[i], b[N - 1 - i]);  // bitonic: the top N of both
#pragma unroll
  for (int j = N >> 1; j > 0; j >>= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int l = i ^ j;
      if (l > i) {
        const int hi = max(a[i], a[l]), lo = min(a[i], a[l]);
        a[i] = hi;
        a[l] = lo;
      }
    }
  }
}

__device__ __forceinline__ int make_key(uint32_t bits, int id) {
  const int mag = static_cast<int>(bits & 0x7fffu);
  const int ord = (bits & 0x8000u) ? -mag : mag;
  return static_cast<int>((static_cast<uint32_t>(ord) << 16) | static_cast<uint32_t>(0xffff - id));
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

  // keys, vector by vector: vector i of this lane holds experts kW * (kL * i + lane) ..
  int key[kPer];
  const uint16_t* src = logits + (size_t)row * kE;
#pragma unroll
  for (int i = 0; i < kNv; ++i) {
    const int e0 = kW * (kL * i + lane);
    uint32_t wv[kW / 2];
    if constexpr (kW == 8) {
      const uint4 v = valid ? netra::ld_stream16(src + e0) : make_uint4(0u, 0u, 0u, 0u);
      wv[0] = v.x;
      wv[1] = v.y;
      wv[2] = v.z;
      wv[3] = v.w;
    } else if constexpr (kW == 4) {
      const uint2 v = valid ? netra::ld_stream8(src + e0) : make_uint2(0u, 0u);
      wv[0] = v.x;
      wv[1] = v.y;
    } else {
      wv[0] = valid ? netra::ld_stream4(src + e0) : 0u;
    }
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      const uint32_t bits = (k & 1) ? (wv[k / 2] >> 16) : (wv[k / 2] & 0xffffu);
      key[kW * i + k] = make_key(bits, e0 + k);
    }
  }

  // the row's top keys: top[s] for the slots this lane holds (rounds: slot `lane`, merge: all)
  int top = 0;
  int mine[kSlots];
  if constexpr (SELECT == 0) {
    int w_prev = 0x7fffffff;  // above every key of a finite logit (max 0x7f7fffff)
    mine[0] = 0;
#pragma unroll
    for (int r = 0; r < kK; ++r) {
      int best = kKeyMin;
#pragma unroll
      for (int i = 0; i < kPer; ++i) best = max(best, key[i] < w_prev ? key[i] : kKeyMin);
      w_prev = row_max(best);
      if (r == 0) top = w_prev;
      if (lane == r) mine[0] = w_prev;
    }
  } else {
    int list[kP];
#pragma unroll
    for (int g = 0; g * kG < kPer; ++g) {
      int grp[kP];
#pragma unroll
      for (int i = 0; i < kP; ++i) grp[i] = i < kG ? key[g * kG + i] : kKeyMin;
      sort_desc<kG>(grp);
      if (g == 0) {
#pragma unroll
        for (int i = 0; i < kP; ++i) list[i] = grp[i];
      } else {
        merge_top<kP>(list, grp);
      }
    }
#pragma unroll
    for (int off = 1; off < kL; off <<= 1) {
      int other[kP];
#pragma unroll
      for (int i = 0; i < kP; ++i) other[i] = __shfl_xor_sync(0xffffffffu, list[i], off);
      merge_top<kP>(list, other);
    }
    top = list[0];
    if constexpr (kSlots == 1) {
      mine[0] = list[0];
#pragma unroll
      for (int s = 1; s < kP; ++s) mine[0] = lane == s ? list[s] : mine[0];
    } else {
#pragma unroll
      for (int j = 0; j < kSlots; ++j) {
        mine[j] = list[j];
#pragma unroll
        for (int l = 1; l < kL; ++l) mine[j] = lane == l ? list[(l * kSlots + j) % kP] : mine[j];
      }
    }
  }

  // weights: slot s = lane * kSlots + j; the sum tree is ((e0+e1)+(e2+e3))+((e4+e5)+(e6+e7))
  float e[kSlots];
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int s = lane * kSlots + j;
    e[j] = s < kK ? expf(__fsub_rn(key_logit(mine[j]), key_logit(top))) : 0.0f;
  }
  float z;
  if constexpr (kSlots == 1) {
    z = e[0];
  } else if constexpr (kSlots == 2) {
    z = __fadd_rn(e[0], e[1]);
  } else if constexpr (kSlots == 4) {
    z = __fadd_rn(__fadd_rn(e[0], e[1]), __fadd_rn(e[2], e[3]));
  } else {
    static_assert(kSlots <= 4, "moe_topk_softmax: internal: at most 4 slots per lane");
  }
#pragma unroll
  for (int off = 1; off * kSlots < 8; off <<= 1) z = __fadd_rn(z, __shfl_xor_sync(0xffffffffu, z, off));
  const float r = netra::rcp_newton(z);
#pragma unroll
  for (int j = 0; j < kSlots; ++j) {
    const int s = lane * kSlots + j;
    const float q0 = __fmul_rn(e[j], r);
    const float wgt = __fmaf_rn(__fmaf_rn(-q0, z, e[j]), r, q0);
    if (valid && s < kK) {
      ids[(size_t)row * kK + s] = 0xffff - (mine[j] & 0xffff);
      weights[(size_t)row * kK + s] = wgt;
    }
  }
}
