// netra template rmsnorm (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin)
//
//   y[r, :] = bf16_rne( (x[r, :] * rs) * (w + WEIGHT_OFFSET) ),  rs = 1/sqrt(mean(x[r, :]^2) + eps)
//   x, y: bf16 [rows, HIDDEN]; w: bf16 [HIDDEN]; all arithmetic in fp32.
//
// Kernel arguments (in order, 32 bytes): y bf16*, x bf16*, w bf16*, rows u32, eps f32.
// Contract constants: HIDDEN (multiple of 128 in [128, 16384]), WEIGHT_OFFSET (0 or 1).
// Tactic constants: THREADS_PER_ROW (TPR) in {8, 16, 32, 64, 128, 256, 512} and CACHE in {0, 1, 2}
// (the x loads and y stores: 0 ld.global.nc.L1::no_allocate / st.global, 1 plain ld.global /
// st.global, 2 ld.global.cs / st.global.cs; include/netra_sm90.cuh). NETRA_BLOCK must equal TPR *
// NETRA_ROWS_PER_BLOCK; TPR > 32 needs NETRA_ROWS_PER_BLOCK = 1 (the row's warps meet in shared
// memory); NETRA_GRID_Y must be 1 (a row's reduction never leaves its block).
//
// Thread mapping (include/netra_rmsnorm_sm90.cuh, shared with the fused rmsnorm templates). Row =
// blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / TPR; t = threadIdx.x % TPR. Each thread takes V
// consecutive elements per chunk: V = 8 (16-byte accesses) when HIDDEN > 4*TPR (more than half the
// threads hold a full vector: HIDDEN = 3584 at TPR = 512 uses 448 threads), else V = 4 (8-byte
// accesses; HIDDEN = 128 at TPR = 32 then uses all 32 lanes). A row is cut into chunks of V*TPR
// elements, nch = ceil(HIDDEN / (V*TPR)); in chunk c thread t owns elements V*TPR*c + V*t .. + V-1:
// one load of x (CACHE mode), one ld.global.nc of w (L1-cached: every row reads it), one store of y,
// each V*2 bytes. Consecutive threads touch consecutive bytes, so every warp instruction moves
// 32*V*2 contiguous bytes (TPR = 8 or 16: 32/TPR rows of V*TPR*2 contiguous bytes each). When
// HIDDEN % (V*TPR) != 0 the last chunk is done by threads t < (HIDDEN % (V*TPR)) / V (a
// compile-time bound; the others load zeros and store nothing). The first min(nch, 16) chunks of x
// (8 for TPR <= 32) stay in registers (V/2 per chunk); later chunks (TPR <= 32 at HIDDEN > 2048: the
// H = 128 tactics w8 and q16s on long rows) stream through the sum of squares and are loaded again
// for the output.
// Schedule: all x loads are issued first (for nch <= 4 the w loads too), then the sum of squares,
// the reduction and rs; then per chunk: w load (nch > 4), y = ..., store.
// A thread whose row >= rows returns at once (TPR = 32: the whole warp shares the row; TPR > 32:
// ROWS_PER_BLOCK = 1, so the whole block shares it; TPR < 32: the warp returns when its first row is
// past rows, else its rows past rows load nothing and store nothing but keep shuffling).
// __launch_bounds__(NETRA_BLOCK, b): full occupancy (2048 threads per SM) for a thread holding one x
// and one w chunk, else a cap of 64 or 128 registers (netra::rms::min_blocks).
//
// Numerics (u = 2^-24):
//   step                      instruction / intrinsic                  deviation
//   x, w -> fp32              shift / and (netra::bf16_lo / bf16_hi)   exact
//   sum of x^2                V fp32 accumulators per thread (one per  squares exact in fp32 (8-bit
//                             position j in the vector), each a chain  significands); nch - 1
//                             of nch __fmaf_rn(x, x, acc)              roundings per accumulator
//   thread total              ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7))       log2 V levels (3; V = 4: 2)
//   row lanes                 log2 min(TPR, 32) butterfly steps        every lane of the row ends
//                             shfl.sync.bfly (TPR/2 or 16) .. 1        with the same bits (+ is
//                                                                      commutative)
//   row warps (TPR > 32)      warp sums through shared memory, summed  log2 (TPR/32) levels
//                             pairwise ((p0+p1)+(p2+p3))+.. by every
//                             thread, in the same order
//   => S with relative error <= k u, k = nch - 1 + log2(V*TPR) (terms >= 0)
//   mean = S * c              __fmul_rn by c = 1.0f/HIDDEN (compile-   exact for HIDDEN = 128, 2048,
//                             time constant, correctly rounded)        4096; 3584: c = 0x39924925,
//                                                                      c and the product <= 2u
//   + eps                     __fadd_rn                                <= u
//   rs                        __frsqrt_rn (correctly rounded 1/sqrt)   <= u, and halves the relative
//                                                                      error of its argument
//   t = x * rs                __fmul_rn                                <= u
//   WEIGHT_OFFSET = 0         __fmul_rn(t, w)                          <= u
//   WEIGHT_OFFSET = 1         __fmaf_rn(t, w, t) = t*(w + 1), one      <= u; equals RN(t*RN(w+1))
//                             rounding                                 whenever w + 1 is exact
//   y -> bf16                 cvt.rn.bf16x2.f32                        RNE, the only bf16 rounding
//   Before the output rounding y carries at most (k + 3)/2 u + 3u relative (mean, eps and the
//   rounded 1/HIDDEN add 3u before the square root halves it). Per served contract and TPR:
//     TPR        8      16     32     64     128    256    512
//     H = 128    8u     8u     8u     8.5u   9u     9.5u   10u
//     H = 2048   23u    15.5u  12u    10.5u  10u    10u    10u
//     H = 3584   35u    21.5u  15u    12u    11u    10.5u  10.5u
//     H = 4096   39u    23.5u  16u    12.5u  11u    10.5u  10.5u
//   and at most 135u for any instantiation (TPR = 8, HIDDEN = 16384): inside the conformance
//   tolerance (2^-8 + 137u) and far below the bf16 half ulp 2^-8 and the judge's midpoint window
//   (2^-16), so y differs from rmsnorm_bf16 only where the exact value lies within that budget of a
//   bf16 rounding midpoint (then by one ulp). The reduction order depends only on HIDDEN and TPR,
//   not on rows, other rows or CACHE: a row's result is bitwise reproducible for a given TPR, and
//   tactics of equal TPR give equal bits. Outside the contract: rows whose sum of squares overflows
//   fp32 (|x| beyond about 1.8e19 / sqrt(HIDDEN)) give rs = 0 and y = 0; eps = 0 with a zero row
//   gives NaN.
//
// Bytes per row: 2*HIDDEN read (x) + 2*HIDDEN written (y); w (2*HIDDEN) is read by every row
// from L1/L2 (one DRAM read per launch). No workspace; static shared memory only for TPR > 32
// (TPR/32 floats); no local memory.
// Measured on an H200 (docs/gpu-runs/kernels-explore/README.md, graph replay, us per call): every
// tactic kept passes all netra.conformance cases (max deviation 3.09e-3, tolerance 3.91e-3); at
// 32768 rows 64.9 us (H = 2048, t128s), 112.8 (3584, t128s), 130.2 (4096, t256s) = 96.7 / 97.2 /
// 96.4% of the copy limit (4.28 TB/s), 5.60 (128, q16s) = 70%; 1.13 to 1.36 us at 1 and 16 rows
// (t128s; H = 128: w8, 0.87 and 1.03). The .cs cache mode (CACHE 2) gained 1-4% at prefill over
// the .nc path; 512-thread rows lost 10-55% (one 16-warp block per row meets at one barrier).

#include "include/netra_rmsnorm_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "rmsnorm: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(HIDDEN) || !defined(WEIGHT_OFFSET)
#error "rmsnorm: contract constants HIDDEN and WEIGHT_OFFSET must be defined"
#endif
#if !defined(THREADS_PER_ROW) || !defined(CACHE)
#error "rmsnorm: tactic constants THREADS_PER_ROW (8 .. 512) and CACHE (0, 1, 2) must be defined"
#endif

namespace rmsnorm_sm90 {
constexpr int kTpr = THREADS_PER_ROW;
constexpr int kRows = NETRA_ROWS_PER_BLOCK;
static_assert(HIDDEN % 128 == 0 && HIDDEN >= 128 && HIDDEN <= 16384,
              "rmsnorm: HIDDEN must be a multiple of 128 in [128, 16384]");
static_assert(WEIGHT_OFFSET == 0 || WEIGHT_OFFSET == 1, "rmsnorm: WEIGHT_OFFSET must be 0 or 1");
static_assert(kTpr == 8 || kTpr == 16 || kTpr == 32 || kTpr == 64 || kTpr == 128 || kTpr == 256 || kTpr == 512,
              "rmsnorm: THREADS_PER_ROW must be 8, 16, 32, 64, 128, 256 or 512");
static_assert(CACHE == 0 || CACHE == 1 || CACHE == 2, "rmsnorm: CACHE must be 0, 1 or 2");
static_assert(NETRA_BLOCK == kTpr * kRows,
              "rmsnorm: NETRA_BLOCK must equal THREADS_PER_ROW * NETRA_ROWS_PER_BLOCK");
static_assert(kTpr <= 32 || kRows == 1,
              "rmsnorm: THREADS_PER_ROW > 32 (a row over several warps) needs NETRA_ROWS_PER_BLOCK = 1");
static_assert(NETRA_GRID_Y == 1, "rmsnorm: NETRA_GRID_Y must be 1 (a row is reduced inside one block)");
constexpr int kMinBlocks = netra::rms::min_blocks<HIDDEN, kTpr, NETRA_BLOCK>();
}  // namespace rmsnorm_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, rmsnorm_sm90::kMinBlocks)
    NETRA_SYMBOL(uint16_t* __restrict__ y, const uint16_t* __restrict__ x,
                 const uint16_t* __restrict__ w, uint32_t rows, float eps) {
  netra::rms::rows<HIDDEN, THREADS_PER_ROW, NETRA_ROWS_PER_BLOCK, WEIGHT_OFFSET, CACHE, false, true, false>(
      nullptr, y, nullptr, nullptr, x, nullptr, w, rows, eps);
}
