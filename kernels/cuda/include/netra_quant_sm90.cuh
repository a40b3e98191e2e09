// netra sm_90: the work split shared by fp8_group_quant.cu and silu_mul_fp8_quant.cu, with a unit's load
// (ld_unit16) and its quantize-and-store (QuantSplit::quant_store).
//
// Both quantize rows of N (= HIDDEN or INTER) fp32 values in groups of 128. A group is held by LPG
// (a tactic's LANES_PER_GROUP: 8 or 16) consecutive lanes of a warp; lane j of the group owns one
// "unit" of its values:
//   LPG = 8:  16 values, elements 8j .. 8j+7 of the group (its low half) and 64+8j .. 64+8j+7 (its
//             high half): two 16-byte bf16 loads per tensor read
//   LPG = 16:  8 values, elements 8j .. 8j+7: one 16-byte load per tensor read (torch's elementwise
//             shape: one vector per thread and tensor)
// Each 16-byte bf16 load instruction of a warp then reads 32 x 16 contiguous-per-group bytes (4
// groups x 128 bytes, or 2 groups x 256 bytes), and each 8-byte code store writes 4 x 64 or 2 x 128
// contiguous bytes: every access covers whole 32-byte sectors.
//
// Block (blockIdx.x, blockIdx.y) covers ROWS_PER_BLOCK rows and column slice blockIdx.y of
// GRID_Y slices of ceil(groups / GRID_Y) groups each (the last slices may be partly or wholly
// empty). Its units are numbered u = row_in_block * slice_units + unit_in_slice, and thread t
// handles u = t, t + BLOCK, t + 2*BLOCK, ... (kIters of them, fixed at compile time), in batches
// of BATCH (a tactic constant) whose loads are all issued before the first use. A unit whose
// row >= rows or whose column lies past the row end loads nothing and stores nothing, but still
// takes part in its group's shuffles; the LPG lanes of a group always agree on both conditions (a
// slice holds whole groups, BLOCK is a multiple of 32 and LPG divides 32), so a group is wholly
// valid or wholly idle. (Coverage of every (row, group, lane) exactly once was checked by
// enumerating this mapping for every served contract x tactic: tools/sm90-quant-coverage.)
//
// The unit shape changes which lane computes what, never a value: the group amax is an exact max,
// and the scale and every code follow from it elementwise, so all tactics give the same bits.

#pragma once

#include "netra_sm90.cuh"

namespace netra {

template <int N, int ROWS, int GRID_Y, int BLOCK, int MAX_BATCH, int LPG>
struct QuantSplit {
  static_assert(LPG == 8 || LPG == 16, "netra: LANES_PER_GROUP must be 8 or 16");
  static constexpr int kLpg = LPG;
  static constexpr int kUnitElems = 128 / LPG;  // values per unit: 16 or 8
  static constexpr int kGroups = N / 128;
  static constexpr int kSliceGroups = (kGroups + GRID_Y - 1) / GRID_Y;
  static constexpr int kSliceUnits = kSliceGroups * LPG;
  static constexpr int kUnits = ROWS * kSliceUnits;
  static constexpr int kIters = (kUnits + BLOCK - 1) / BLOCK;
  static constexpr int kBatch = kIters < MAX_BATCH ? kIters : MAX_BATCH;
  // true: every unit of every block lies inside its row (no column or count mask is compiled)
  static constexpr bool kExact = (kUnits % BLOCK == 0) && (kGroups % GRID_Y == 0);

  struct Pos {
    uint32_t row;
    int group;  // group index within the row
    int j;      // lane within the group's LPG
    bool valid;
  };

  // Unit number it * BLOCK + threadIdx.x of this block.
  static __device__ __forceinline__ Pos pos(int it, uint32_t rows) {
    const int u = it * BLOCK + static_cast<int>(threadIdx.x);
    const int lr = u / kSliceUnits;
    const int cu = static_cast<int>(blockIdx.y) * kSliceUnits + u % kSliceUnits;
    Pos p;
    p.row = blockIdx.x * ROWS + lr;
    p.group = cu / LPG;
    p.j = cu % LPG;
    p.valid = (kExact || (u < kUnits && p.group < kGroups)) && p.row < rows;
    return p;
  }

  // Offset of the unit's first element in its row; the second half (LPG = 8) is 64 further.
  static __device__ __forceinline__ int col(const Pos& p) { return p.group * 128 + 8 * p.j; }

  // Unit it's values v quantized (quant_unit, below) and stored: its codes at q's row and column (8 bytes
  // per 8 values, the second 8 64 bytes further) and, from the group's first lane, its scale. The unit's
  // place is computed again here, not carried from its loads: fewer live registers.
  template <int C>  // the tactic's CACHE (a macro where the kernel is built: not a parameter name)
  static __device__ __forceinline__ void quant_store(float* v, int it, uint32_t rows, uint8_t* __restrict__ q,
                                                     float* __restrict__ scales);
};

// The batch schedule of a kernel body: kIters / kBatch full batches, then the remainder. Up to
// two full batches are unrolled; longer rows run the full batches as a loop with a trip count
// fixed at compile time (unroll 1: the code stays a few KB instead of growing with the row).
#define NETRA_QUANT_SCHEDULE(BATCH_FN, ...)                                              \
  do {                                                                                   \
    constexpr int kNb_ = Split::kIters / Split::kBatch;                                  \
    constexpr int kRem_ = Split::kIters % Split::kBatch;                                 \
    if constexpr (kNb_ <= 2) {                                                           \
      _Pragma("unroll") for (int i_ = 0; i_ < kNb_; ++i_)                                \
          BATCH_FN<Split::kBatch>(i_ * Split::kBatch, __VA_ARGS__);                      \
    } else {                                                                             \
      _Pragma("unroll 1") for (int i_ = 0; i_ < kNb_; ++i_)                              \
          BATCH_FN<Split::kBatch>(i_ * Split::kBatch, __VA_ARGS__);                      \
    }                                                                                    \
    if constexpr (kRem_ > 0) BATCH_FN<(kRem_ > 0 ? kRem_ : 1)>(kNb_ * Split::kBatch, __VA_ARGS__); \
  } while (0)

// Quantize the NV (16 or 8) values v of one unit (see above) as one lane of its group of LPG lanes:
// group amax, scale, x/s with clamp, E4M3FN RNE. Returns the scale; codes for the first 8 values in
// lo and (NV = 16) the next 8 in hi. All 32 lanes of the warp must call it together.
template <int NV, int LPG>
__device__ __forceinline__ float quant_unit(float* v, uint2& lo, uint2& hi) {
  static_assert(NV * LPG == 128, "netra: a unit is 128 / LANES_PER_GROUP values");
  float a = 0.0f;
#pragma unroll
  for (int i = 0; i < NV; ++i) a = fmaxf(a, fabsf(v[i]));
  a = group_max<LPG>(a);
  const float s = fp8_scale(a);
  const float r = rcp_newton(s);
  fp8_scale_clamp<NV>(v, s, r);
  lo = pack_e4m3x8_rn(v);
  if constexpr (NV == 16) hi = pack_e4m3x8_rn(v + 8);
  return s;
}

// A unit's 16-byte load: with the L2::256B prefetch hint (PF 1, the tactic's PREFETCH) or at cache level C
// (its CACHE).
template <int PF, int C>
__device__ __forceinline__ uint4 ld_unit16(const uint16_t* p) {
  if constexpr (PF != 0) {
    return ld_stream16_pf(p);
  } else {
    return ld_x16<C>(p);
  }
}

template <int N, int ROWS, int GRID_Y, int BLOCK, int MAX_BATCH, int LPG>
template <int C>
__device__ __forceinline__ void QuantSplit<N, ROWS, GRID_Y, BLOCK, MAX_BATCH, LPG>::quant_store(
    float* v, int it, uint32_t rows, uint8_t* __restrict__ q, float* __restrict__ scales) {
  uint2 codes[2];
  const float s = quant_unit<kUnitElems, LPG>(v, codes[0], codes[1]);
  const Pos p = pos(it, rows);
  if (p.valid) {
    uint8_t* dst = q + (size_t)p.row * N + col(p);
#pragma unroll
    for (int h = 0; h < kUnitElems / 8; ++h) st_x8<C>(dst + 64 * h, codes[h]);
    if (p.j == 0) st_x4<C>(scales + (size_t)p.row * kGroups + p.group, __float_as_uint(s));
  }
}

}  // namespace netra
