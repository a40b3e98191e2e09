// netra template fused_add_rmsnorm_fp8_group_quant (sm_90 / Hopper, CUDA C++ compiled ahead of time)
//
//   residual_out[r, :] = v = bf16_rne(x[r, :] + residual[r, :])
//   y[r, :] = bf16_rne( (v * rs) * (w + WEIGHT_OFFSET) ),  rs = 1/sqrt(mean(v^2) + eps)
//   then fp8_group_quant of y: s[r, g] = max(amax_g |y|, 1e-10) / 448,
//   q[r, i] = e4m3fn_rne(clamp(y[r, i] / s, -448, 448))
//   x, residual, residual_out: bf16 [rows, HIDDEN]; w: bf16 [HIDDEN]; q: E4M3FN codes [rows,
//   HIDDEN]; scales: fp32 [rows, HIDDEN/128]. = add, rmsnorm, fp8_group_quant, each as its unfused
//   contract; y itself is not written.
//
// Kernel arguments (in order, 56 bytes): residual_out bf16*, q u8*, scales f32*, x bf16*,
// residual bf16*, w bf16*, rows u32, eps f32. residual_out may be residual (in place); q and scales
// are never aliased. Contract constants: HIDDEN (multiple of 128 in [128, 16384]), WEIGHT_OFFSET (0
// or 1), GROUP (128).
// Tactic constants: THREADS_PER_ROW (TPR) in {16, 32, 64, 128, 256, 512} and CACHE in {0, 1, 2}, as
// in rmsnorm.cu (x, y, residual_out, q and scales in the CACHE mode; residual by ld_rw, never .nc);
// NETRA_BLOCK = TPR * NETRA_ROWS_PER_BLOCK, TPR > 32 needs NETRA_ROWS_PER_BLOCK = 1, NETRA_GRID_Y = 1.
// Always 16-byte accesses (V = 8: a row shorter than 8 TPR leaves threads idle) and the whole row in
// registers: HIDDEN <= 128 TPR (64 TPR for TPR <= 32; static_assert).
// TPR >= 16: a group of 128 is 16 consecutive lanes of one chunk.
//
// Thread mapping: fused_add_rmsnorm.cu's for v and residual_out (in place: every element of
// residual is read by the thread that later writes residual_out there, all of the row's residual
// loads issued before its first store, so aliasing is safe by construction and the pair carries no
// __restrict__), rmsnorm_fp8_group_quant.cu's for q and scales.
//
// Numerics (u = 2^-24), per element, row and group:
//   step                instruction / intrinsic                    deviation
//   x, residual -> fp32 shift / and                                exact
//   v = x + residual    __fadd_rn of the two bf16 values in fp32,  one rounding in all: the fp32 sum
//                       then cvt.rn.bf16x2.f32                     is exact unless the exponents
//                                                                  differ by 16 or more, and then the
//                                                                  smaller one is below 2^-15 of the
//                                                                  larger, far from every bf16
//                                                                  midpoint around it: so v =
//                                                                  bf16_rne(x + residual) exactly,
//                                                                  bit for bit (zeros: +0 unless
//                                                                  both are -0), as the unfused add
//   residual_out = v    stored as is, before the norm uses it
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
//   Bit for bit: residual_out equals the unfused add always; q and scales equal fp8_group_quant.cu
//   applied to rmsnorm.cu's y on residual_out for a tactic of the same THREADS_PER_ROW and vector
//   width (not rmsnorm.cu's 8-byte rows at H = 2048, TPR 512).
//
// Bytes per row: 4*HIDDEN read (x, residual); 2*HIDDEN + HIDDEN + 4*HIDDEN/128 written
// (residual_out, q, scales); w once per launch. Static shared memory TPR/32 floats for TPR > 32; no
// local memory.
// Measured on an H200 (docs/gpu-runs/kernels-explore/README.md, call 2): bit-equal to the unfused
// chain as stated above, float64 judges pass; at 8192 rows 31.8 / 54.2 / 62.4 us (H = 2048 / 3584
// t128s, 4096 t512s) = 1.79 / 1.76 / 1.73x the unfused add + rmsnorm + fp8_group_quant; at 32768 rows
// 116.4 / 207.2 / 236.4 = 95 / 93 / 93% of the copy limit; 1.60 to 2.08 us at 1 and 16 rows.

#include "include/netra_rmsnorm_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "fused_add_rmsnorm_fp8_group_quant: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(HIDDEN) || !defined(WEIGHT_OFFSET) || !defined(GROUP)
#error "fused_add_rmsnorm_fp8_group_quant: contract constants HIDDEN, WEIGHT_OFFSET, GROUP must be defined"
#endif
#if !defined(THREADS_PER_ROW) || !defined(CACHE)
#error "fused_add_rmsnorm_fp8_group_quant: tactic constants THREADS_PER_ROW (16 .. 512) and CACHE (0, 1, 2) must be defined"
#endif

namespace fused_add_rmsnorm_fp8_group_quant_sm90 {
static_assert(HIDDEN % 128 == 0 && HIDDEN >= 128 && HIDDEN <= 16384,
              "fused_add_rmsnorm_fp8_group_quant: HIDDEN must be a multiple of 128 in [128, 16384]");
static_assert(WEIGHT_OFFSET == 0 || WEIGHT_OFFSET == 1, "fused_add_rmsnorm_fp8_group_quant: WEIGHT_OFFSET must be 0 or 1");
static_assert(GROUP == 128, "fused_add_rmsnorm_fp8_group_quant: GROUP must be 128");
static_assert(THREADS_PER_ROW == 16 || THREADS_PER_ROW == 32 || THREADS_PER_ROW == 64 ||
                  THREADS_PER_ROW == 128 || THREADS_PER_ROW == 256 || THREADS_PER_ROW == 512,
              "fused_add_rmsnorm_fp8_group_quant: THREADS_PER_ROW must be 16, 32, 64, 128, 256 or 512");
static_assert(CACHE == 0 || CACHE == 1 || CACHE == 2, "fused_add_rmsnorm_fp8_group_quant: CACHE must be 0, 1 or 2");
static_assert(NETRA_BLOCK == THREADS_PER_ROW * NETRA_ROWS_PER_BLOCK,
              "fused_add_rmsnorm_fp8_group_quant: NETRA_BLOCK must equal THREADS_PER_ROW * NETRA_ROWS_PER_BLOCK");
static_assert(THREADS_PER_ROW <= 32 || NETRA_ROWS_PER_BLOCK == 1,
              "fused_add_rmsnorm_fp8_group_quant: THREADS_PER_ROW > 32 needs NETRA_ROWS_PER_BLOCK = 1");
static_assert(NETRA_GRID_Y == 1, "fused_add_rmsnorm_fp8_group_quant: NETRA_GRID_Y must be 1 (a row is reduced inside one block)");
constexpr int kMinBlocks = netra::rms::min_blocks<HIDDEN, THREADS_PER_ROW, NETRA_BLOCK, true>();
}  // namespace fused_add_rmsnorm_fp8_group_quant_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, fused_add_rmsnorm_fp8_group_quant_sm90::kMinBlocks)
    NETRA_SYMBOL(uint16_t* residual_out, uint8_t* __restrict__ q, float* __restrict__ scales,
                 const uint16_t* __restrict__ x, const uint16_t* residual, const uint16_t* __restrict__ w,
                 uint32_t rows, float eps) {
  netra::rms::rows<HIDDEN, THREADS_PER_ROW, NETRA_ROWS_PER_BLOCK, WEIGHT_OFFSET, CACHE, true, false, true>(
      residual_out, nullptr, q, scales, x, residual, w, rows, eps);
}
