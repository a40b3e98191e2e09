// netra template rmsnorm_fp8_group_quant (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin)
//
//   y[r, :] = bf16_rne( (x[r, :] * rs) * (w + WEIGHT_OFFSET) ),  rs = 1/sqrt(mean(x^2) + eps)
//   then fp8_group_quant of y (its bf16 values): for each group g of 128,
//   s[r, g] = max(amax_g |y|, 1e-10) / 448;  q[r, i] = e4m3fn_rne(clamp(y[r, i] / s, -448, 448))
//   x: bf16 [rows, HIDDEN]; w: bf16 [HIDDEN]; q: E4M3FN codes [rows, HIDDEN]; scales: fp32
//   [rows, HIDDEN/128]. = the rmsnorm contract followed by the fp8_group_quant contract; y itself
//   is not written.
//
// Kernel arguments (in order, 40 bytes): q u8*, scales f32*, x bf16*, w bf16*, rows u32, eps f32.
// Contract constants: HIDDEN (multiple of 128 in [128, 16384]), WEIGHT_OFFSET (0 or 1), GROUP (128).
// Tactic constants: THREADS_PER_ROW (TPR) in {16, 32, 64, 128, 256, 512} and CACHE in {0, 1, 2}, as
// in rmsnorm.cu (x, y, residual_out, q and scales in the CACHE mode; residual by ld_rw, never .nc);
// NETRA_BLOCK = TPR * NETRA_ROWS_PER_BLOCK, TPR > 32 needs NETRA_ROWS_PER_BLOCK = 1, NETRA_GRID_Y = 1.
// Always 16-byte accesses (V = 8: a row shorter than 8 TPR leaves threads idle) and the whole row in
// registers: HIDDEN <= 128 TPR (64 TPR for TPR <= 32; static_assert).
// TPR >= 16: a group of 128 is 16 consecutive lanes of one chunk.
//
// Thread mapping: rmsnorm.cu's (include/netra_rmsnorm_sm90.cuh); in each chunk lane t owns y
// elements 8t .. 8t+7 of the chunk, i.e. lane t mod 16 of group (chunk start + 8t) / 128, stores
// their 8 codes (8 bytes; a warp 256 contiguous bytes) and, for t mod 16 = 0, the group's scale.
//
// Numerics (u = 2^-24), per element, row and group:
//   step                instruction / intrinsic                    deviation
//   x, w -> fp32        shift / and                                exact
//   The norm of v: exactly rmsnorm.cu's code (include/netra_rmsnorm_sm90.cuh) and so its numerics
//   table: V fp32 accumulators of __fmaf_rn(v, v, acc) over the chunks, thread tree, log2 min(TPR,
//   32) butterfly steps, pairwise sum of the warp partials; S within k u, k = nch - 1 + log2(V TPR);
//   mean = S * RN(1/H), + eps, rs = __frsqrt_rn; t = v * rs, y = t * w (WEIGHT_OFFSET 1: fma(t, w,
//   t)), all __*_rn; y carries at most (k + 3)/2 u + 3u before its only rounding, cvt.rn.bf16x2.f32
//   (t128 / t256 / t512: 10 to 11u at H = 2048 .. 4096).
//   y -> bf16 -> fp32   cvt.rn.bf16x2.f32, then shift / and       the only rounding of y; exact back
//   amax, s, 1/s, y/s,  netra::quant_unit<8, 16>: the function     fp8_group_quant.cu's table: s =
//   clamp, encode       fp8_group_quant.cu calls at 16 lanes per    RN(max(amax, 1e-10f) / 448), the
//                       group (fmaxf / shfl.sync.bfly 8, 4, 2, 1,   quotient within 1 ulp of y / s,
//                       fp8_scale, rcp_newton, fp8_scale_clamp,    RNE to E4M3FN
//                       cvt.rn.satfinite.e4m3x2.f32)
//   Bit for bit: q and scales equal fp8_group_quant.cu (any tactic: its tactics agree bit for bit)
//   applied to the y of rmsnorm.cu for a tactic of the same THREADS_PER_ROW and vector width (not
//   rmsnorm.cu's 8-byte rows at H = 2048, TPR 512); against another TPR,
//   a group whose y differs by one ulp at a bf16 midpoint can differ in that code and its scale.
//
// Bytes per row: 2*HIDDEN read (x); HIDDEN + 4*HIDDEN/128 written (q, scales); w once per launch.
// Static shared memory TPR/32 floats for TPR > 32; no local memory.
// Measured on an H200 (docs/gpu-runs/kernels-explore/README.md, call 2): bit-equal to the unfused
// chain as stated above, float64 judges pass; at 8192 rows 18.9 / 31.2 / 33.9 us (H = 2048 / 3584 /
// 4096, t128s) = 1.69 / 1.71 / 1.77x the unfused rmsnorm + fp8_group_quant; at 32768 rows 66.9 /
// 113.8 / 122.2 = 71 / 73 / 78% of the copy limit: issue-bound (about 15 instructions per element,
// the group of 128 spread over 16 lanes); 1.50 to 1.81 us at 1 and 16 rows.

#include "include/netra_rmsnorm_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "rmsnorm_fp8_group_quant: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(HIDDEN) || !defined(WEIGHT_OFFSET) || !defined(GROUP)
#error "rmsnorm_fp8_group_quant: contract constants HIDDEN, WEIGHT_OFFSET, GROUP must be defined"
#endif
#if !defined(THREADS_PER_ROW) || !defined(CACHE)
#error "rmsnorm_fp8_group_quant: tactic constants THREADS_PER_ROW (16 .. 512) and CACHE (0, 1, 2) must be defined"
#endif

namespace rmsnorm_fp8_group_quant_sm90 {
static_assert(HIDDEN % 128 == 0 && HIDDEN >= 128 && HIDDEN <= 16384,
              "rmsnorm_fp8_group_quant: HIDDEN must be a multiple of 128 in [128, 16384]");
static_assert(WEIGHT_OFFSET == 0 || WEIGHT_OFFSET == 1, "rmsnorm_fp8_group_quant: WEIGHT_OFFSET must be 0 or 1");
static_assert(GROUP == 128, "rmsnorm_fp8_group_quant: GROUP must be 128");
static_assert(THREADS_PER_ROW == 16 || THREADS_PER_ROW == 32 || THREADS_PER_ROW == 64 ||
                  THREADS_PER_ROW == 128 || THREADS_PER_ROW == 256 || THREADS_PER_ROW == 512,
              "rmsnorm_fp8_group_quant: THREADS_PER_ROW must be 16, 32, 64, 128, 256 or 512");
static_assert(CACHE == 0 || CACHE == 1 || CACHE == 2, "rmsnorm_fp8_group_quant: CACHE must be 0, 1 or 2");
static_assert(NETRA_BLOCK == THREADS_PER_ROW * NETRA_ROWS_PER_BLOCK,
              "rmsnorm_fp8_group_quant: NETRA_BLOCK must equal THREADS_PER_ROW * NETRA_ROWS_PER_BLOCK");
static_assert(THREADS_PER_ROW <= 32 || NETRA_ROWS_PER_BLOCK == 1,
              "rmsnorm_fp8_group_quant: THREADS_PER_ROW > 32 needs NETRA_ROWS_PER_BLOCK = 1");
static_assert(NETRA_GRID_Y == 1, "rmsnorm_fp8_group_quant: NETRA_GRID_Y must be 1 (a row is reduced inside one block)");
constexpr int kMinBlocks = netra::rms::min_blocks<HIDDEN, THREADS_PER_ROW, NETRA_BLOCK, true>();
}  // namespace rmsnorm_fp8_group_quant_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, rmsnorm_fp8_group_quant_sm90::kMinBlocks)
    NETRA_SYMBOL(uint8_t* __restrict__ q, float* __restrict__ scales, const uint16_t* __restrict__ x,
                 const uint16_t* __restrict__ w, uint32_t rows, float eps) {
  netra::rms::rows<HIDDEN, THREADS_PER_ROW, NETRA_ROWS_PER_BLOCK, WEIGHT_OFFSET, CACHE, false, false, true>(
      nullptr, nullptr, q, scales, x, nullptr, w, rows, eps);
}
