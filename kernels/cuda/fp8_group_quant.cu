// netra template fp8_group_quant (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin)
//
//   for each row r and group g of 128 elements:
//     s[r, g] = max(amax_g |x|, 1e-10) / 448;  q[r, i] = e4m3fn_rne(clamp(x[r, i] / s, -448, 448))
//   x: bf16 [rows, HIDDEN]; q: E4M3FN codes [rows, HIDDEN]; scales: fp32 [rows, HIDDEN/128].
//
// Kernel arguments (in order, 28 bytes): q u8*, scales f32*, x bf16*, rows u32.
// Contract constants: HIDDEN (multiple of 128 in [128, 65536]), GROUP (128 only).
// Tactic constants: BATCH (units per thread whose loads are in flight together: 1, 2 or 4),
// LANES_PER_GROUP (LPG: 8, a unit is 16 values of a group in two 16-byte loads; 16, a unit is 8
// values in one 16-byte load), CACHE (0: x by ld.global.nc.L1::no_allocate, stores st.global; 1:
// plain ld.global / st.global; 2: ld.global.cs / st.global.cs) and PREFETCH (1, CACHE 0 only: the x
// loads carry the L2::256B prefetch-size hint). A tactic is otherwise its launch shape (NETRA_BLOCK
// threads, NETRA_ROWS_PER_BLOCK rows per block, NETRA_GRID_Y column slices per row); grid.x =
// ceil(rows / ROWS_PER_BLOCK).
//
// Thread mapping (include/netra_quant_sm90.cuh): LPG consecutive lanes per group; LPG = 8: lane j of
// a group loads x[8j .. 8j+7] and x[64+8j .. 64+8j+7] of it and stores their 16 codes as two 8-byte
// stores; LPG = 16: lane j loads x[8j .. 8j+7] and stores 8 codes (one 8-byte store). Lane 0 of the
// group stores the scale (4 bytes; the groups of a warp instruction are contiguous).
// Per thread ceil(ROWS_PER_BLOCK * ceil(groups / GRID_Y) * LPG / BLOCK) units, in batches of BATCH
// with all loads of a batch in flight before the first use (a row of more than 2 batches runs
// them as a loop with a compile-time trip count). No tactic constant changes a value: every tactic
// gives the same bits.
//
// Numerics (u = 2^-24), per group (include/netra_sm90.cuh has the helpers):
//   step               instruction / intrinsic                      deviation
//   x -> fp32          shift / and                                  exact
//   amax               fmaxf of fabsf over the lane's 16 (8) values, exact
//                      then shfl.sync.bfly (8,) 4, 2, 1 with fmaxf
//   a = max(amax, f)   fmaxf with f = 1e-10f = 0x2edbe6ff           exact; f is 1e-10 (1 + 1.3e-8)
//   s = a / 448        q0 = RN(a * c), c = RN(1/448) = 0x3b124925;   correctly rounded: RN(a/448) for
//                      s = fma(fma(-q0, 448, a), c, q0)             every fp32 a in the normal range
//                      (netra::fp8_scale; no division instruction)  (exact integer check of all 2^23
//                                                                   significands: tests/
//                                                                   test_conformance.py); so <= u
//                                                                   from the reference scale when
//                                                                   amax >= 1e-10, <= u + 1.3e-8
//                                                                   for groups at the floor
//   r ~ 1 / s          rcp.approx.ftz.f32 (MUFU.RCP) + one Newton   within 1 ulp of 1/s
//                      step r = fma(r0, fma(-s, r0, 1), r0)
//   x / s              q0 = RN(x r); e = fma(-q0, s, x);            within 1 ulp of x/s, and RN(x/s)
//                      q = copysign(fma(e, r, q0), x)               unless x/s lies within ~2^-45
//                                                                   (relative) of an fp32 midpoint
//   clamp              fminf(fmaxf(q, -448), 448)                   exact
//   encode             cvt.rn.satfinite.e4m3x2.f32                  RNE to E4M3FN (subnormals kept)
//   So the quotient the encoder sees is within (1 + 2) u + 2^-45 ~ 2^-22.4 relative of the exact
//   x / s_exact of the reference, and a code differs from the reference only where that value
//   lies within 2^-22.4 (relative) of an E4M3FN rounding midpoint, then by one step. bf16 inputs
//   often land on midpoints exactly: when s is exact (amax = 448 * 2^k) the quotient is exact and
//   the tie goes to even like the reference; otherwise the rounded s moves it off the tie.
//   The element equal to amax encodes as +-448 (0x7e / 0xfe). -0.0 and negatives that round to
//   zero give 0x80. Non-finite x is outside the contract (a NaN is ignored by fmaxf).
//
// Bytes per row: 2*HIDDEN read; HIDDEN + 4*HIDDEN/128 written. Every byte is read or written
// once. No shared memory, no local memory.
// Measured on an H200 (docs/gpu-runs/kernels-explore/README.md, graph replay, us per call): every
// tactic passes all netra.conformance cases (dequant deviation 0.0357, the format's half step; codes
// off by one only at exact midpoints), and all tactics give the same bits; at 32768 rows 52.8 us
// (H = 2048, r1s), 89.8 (3584), 99.0 (4096), 189.8 (8192) = 90 / 93 / 96 / 100% of the copy limit
// (4.28 TB/s); 1.08 to 1.24 us at 1 and 16 rows (s8). CACHE 2 gained 3-9% at prefill over CACHE 0;
// one 8-value unit per thread (LANES_PER_GROUP 16) lost 3-7% there (the per-group work is fixed).

#include "include/netra_quant_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "fp8_group_quant: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(HIDDEN) || !defined(GROUP)
#error "fp8_group_quant: contract constants HIDDEN and GROUP must be defined"
#endif
#if !defined(PREFETCH) || !defined(BATCH) || !defined(LANES_PER_GROUP) || !defined(CACHE)
#error "fp8_group_quant: tactic constants BATCH (1, 2, 4), LANES_PER_GROUP (8, 16), CACHE (0, 1, 2) and PREFETCH (0, 1) must be defined"
#endif

namespace fp8_group_quant_sm90 {
constexpr int kH = HIDDEN;
static_assert(kH % 128 == 0 && kH >= 128 && kH <= 65536,
              "fp8_group_quant: HIDDEN must be a multiple of 128 in [128, 65536]");
static_assert(GROUP == 128, "fp8_group_quant: GROUP must be 128");
static_assert(NETRA_BLOCK % 32 == 0 && NETRA_BLOCK <= 1024,
              "fp8_group_quant: NETRA_BLOCK must be a multiple of 32, at most 1024");
static_assert(NETRA_GRID_Y >= 1 && NETRA_GRID_Y <= 64,
              "fp8_group_quant: NETRA_GRID_Y must be in [1, 64] (slices past the row end are idle)");
static_assert(BATCH == 1 || BATCH == 2 || BATCH == 4, "fp8_group_quant: BATCH must be 1, 2 or 4");
static_assert(LANES_PER_GROUP == 8 || LANES_PER_GROUP == 16, "fp8_group_quant: LANES_PER_GROUP must be 8 or 16");
static_assert(CACHE == 0 || CACHE == 1 || CACHE == 2, "fp8_group_quant: CACHE must be 0, 1 or 2");
static_assert(PREFETCH == 0 || (PREFETCH == 1 && CACHE == 0),
              "fp8_group_quant: PREFETCH must be 0, or 1 with CACHE = 0");
using Split = netra::QuantSplit<kH, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y, NETRA_BLOCK, BATCH, LANES_PER_GROUP>;
constexpr int kNv = Split::kUnitElems;
constexpr int kLoads = kNv / 8;  // 16-byte loads of x per unit
// registers: 64 per thread (BATCH * loads per unit <= 4), else 80 (BATCH = 4 at LPG 8: 4 units of
// raw bf16 in flight); one 16-byte load per thread (LPG 16, BATCH 1): 32, for full occupancy
constexpr int kMinBlocksRaw = (BATCH * kLoads == 1 ? 2048 : (BATCH * kLoads <= 4 ? 1024 : 768)) / NETRA_BLOCK;
constexpr int kMinBlocks = kMinBlocksRaw < 1 ? 1 : kMinBlocksRaw;

// Units it = b .. b + NB - 1 of this thread: all loads first, then quantize and store.
template <int NB>
__device__ __forceinline__ void batch(int b, uint8_t* __restrict__ q, float* __restrict__ scales,
                                      const uint16_t* __restrict__ x, uint32_t rows) {
  uint4 raw[NB][kLoads];
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    const Split::Pos p = Split::pos(b + k, rows);
    const uint16_t* src = x + (size_t)p.row * kH + Split::col(p);
#pragma unroll
    for (int h = 0; h < kLoads; ++h)
      raw[k][h] = p.valid ? netra::ld_unit16<PREFETCH, CACHE>(src + 64 * h) : make_uint4(0u, 0u, 0u, 0u);
  }
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    float v[kNv];
#pragma unroll
    for (int h = 0; h < kLoads; ++h) netra::unpack8(raw[k][h], v + 8 * h);
    Split::quant_store<CACHE>(v, b + k, rows, q, scales);
  }
}
}  // namespace fp8_group_quant_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, fp8_group_quant_sm90::kMinBlocks)
    NETRA_SYMBOL(uint8_t* __restrict__ q, float* __restrict__ scales,
                 const uint16_t* __restrict__ x, uint32_t rows) {
  using namespace fp8_group_quant_sm90;
  NETRA_QUANT_SCHEDULE(batch, q, scales, x, rows);
}
