// netra template silu_mul_fp8_quant (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin)
//
//   h[r, i] = silu(g[r, i]) * u[r, i], silu(t) = t / (1 + exp(-t)), g = x[:, :INTER], u = x[:, INTER:]
//   then the fp8_group_quant of h (never rounded to bf16): s = max(amax_g |h|, 1e-10) / 448,
//   q = e4m3fn_rne(clamp(h / s, -448, 448)).
//   x: bf16 [rows, 2*INTER]; q: E4M3FN codes [rows, INTER]; scales: fp32 [rows, INTER/128].
//
// Kernel arguments (in order, 28 bytes): q u8*, scales f32*, x bf16*, rows u32.
// Contract constants: INTER (multiple of 128 in [128, 32768]), GROUP (128 only).
// Tactic constants: BATCH (units per thread whose loads are in flight together: 1 or 2),
// LANES_PER_GROUP (LPG: 8, a unit is 16 outputs; 16, a unit is 8 outputs), CACHE (0: loads
// ld.global.nc.L1::no_allocate, stores st.global; 1: plain ld.global / st.global; 2: ld.global.cs /
// st.global.cs) and PREFETCH (1, CACHE 0 only: the loads carry the L2::256B prefetch-size hint). A
// tactic is otherwise its launch shape (NETRA_BLOCK threads, NETRA_ROWS_PER_BLOCK rows, NETRA_GRID_Y
// column slices); grid.x = ceil(rows / ROWS_PER_BLOCK).
//
// Thread mapping (include/netra_quant_sm90.cuh): LPG consecutive lanes per group of 128 outputs;
// LPG = 8: lane j of a group owns outputs 8j .. 8j+7 and 64+8j .. 64+8j+7 of it: four 16-byte loads
// (gate low/high half, up low/high half, the up loads INTER elements further into the row), two
// 8-byte stores of codes; LPG = 16: lane j owns outputs 8j .. 8j+7: two 16-byte loads (gate, up),
// one 8-byte store. Lane 0 of the group stores the scale. Gate and up are each read once. No
// tactic constant changes a value: every tactic gives the same bits.
//
// Numerics (u = 2^-24), per element, then per group as in fp8_group_quant.cu:
//   step               instruction / intrinsic                      deviation
//   g, u -> fp32       shift / and                                  exact
//   t = g * c          __fmul_rn, c = RN(-log2 e) = 0xbfb8aa3b      <= u, i.e. |g| u relative in
//                                                                   exp(-g) below
//   e = 2^t            ex2.approx.ftz.f32 (MUFU.EX2)                about 2 ulp; t > 128 gives +inf,
//                                                                   results below 2^-126 flush to 0
//   d = 1 + e          __fadd_rn                                    <= u
//   silu = g * rcp(d)  rcp.approx.ftz.f32 (MUFU.RCP), __fmul_rn     about 1 ulp, then <= u; d = inf
//                                                                   (g < about -88.7) gives silu =
//                                                                   -0 (exact |silu| < 1e-36)
//   h = silu * u       __fmul_rn                                    <= u
//   => h within about (|g| + 10) u relative of the exact silu(g) * u; the |g| term only matters
//   where exp(-g) is not negligible against 1 (g < 17), i.e. for negative g, where |h| <= 0.28|u|.
//   For g >= 17, 1 + e rounds to 1 and silu = g exactly.
//   amax, scale, 1/s, x/s, clamp, encode: exactly the fp8_group_quant.cu sequence (the scale is
//   RN(max(amax, 1e-10f) / 448) of the fp32 amax; the quotient within 1 ulp of h / s).
//   So the scale carries h's error at the group maximum (<= (|g*| + 10) u, g* the gate there)
//   plus u, and a code differs from the reference only where h / s lies within about
//   (|g| + 14) u of an E4M3FN rounding midpoint, then by one step.
//   Outside the contract: |h| above the fp32 range (|g * u| > 3.4e38) gives inf and a NaN scale;
//   non-finite inputs. For g < -88.7, h = +-0 whatever u is; the exact |h| there is below
//   1e-36 |u|, which can only be seen when |u| is far beyond any activation (> 1e20).
//
// Bytes per row: 4*INTER read (g and u); INTER + 4*INTER/128 written. No shared memory, no local
// memory.
// Measured on an H200 (docs/gpu-runs/kernels-explore/README.md, graph replay, us per call): every
// tactic passes the netra.conformance cases, all tactics give the same bits; at 32768 rows 33.0 us
// (I = 768, u192), 64.3 (1536, u192), 550.0 (14336, r4s) = 90 / 92 / 100% of the copy limit (4.28
// TB/s); 1.12 to 1.46 us at 1 and 16 rows (s16, u192). CACHE 2 gained 6-7% at I = 14336.

#include "include/netra_quant_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "silu_mul_fp8_quant: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(INTER) || !defined(GROUP)
#error "silu_mul_fp8_quant: contract constants INTER and GROUP must be defined"
#endif
#if !defined(PREFETCH) || !defined(BATCH) || !defined(LANES_PER_GROUP) || !defined(CACHE)
#error "silu_mul_fp8_quant: tactic constants BATCH (1, 2), LANES_PER_GROUP (8, 16), CACHE (0, 1, 2) and PREFETCH (0, 1) must be defined"
#endif

namespace silu_mul_fp8_quant_sm90 {
constexpr int kI = INTER;
static_assert(kI % 128 == 0 && kI >= 128 && kI <= 32768,
              "silu_mul_fp8_quant: INTER must be a multiple of 128 in [128, 32768]");
static_assert(GROUP == 128, "silu_mul_fp8_quant: GROUP must be 128");
static_assert(NETRA_BLOCK % 32 == 0 && NETRA_BLOCK <= 1024,
              "silu_mul_fp8_quant: NETRA_BLOCK must be a multiple of 32, at most 1024");
static_assert(NETRA_GRID_Y >= 1 && NETRA_GRID_Y <= 64,
              "silu_mul_fp8_quant: NETRA_GRID_Y must be in [1, 64] (slices past the row end are idle)");
static_assert(BATCH == 1 || BATCH == 2, "silu_mul_fp8_quant: BATCH must be 1 or 2");
static_assert(LANES_PER_GROUP == 8 || LANES_PER_GROUP == 16,
              "silu_mul_fp8_quant: LANES_PER_GROUP must be 8 or 16");
static_assert(CACHE == 0 || CACHE == 1 || CACHE == 2, "silu_mul_fp8_quant: CACHE must be 0, 1 or 2");
static_assert(PREFETCH == 0 || (PREFETCH == 1 && CACHE == 0),
              "silu_mul_fp8_quant: PREFETCH must be 0, or 1 with CACHE = 0");
using Split = netra::QuantSplit<kI, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y, NETRA_BLOCK, BATCH, LANES_PER_GROUP>;
constexpr int kNv = Split::kUnitElems;
constexpr int kHalves = kNv / 8;  // 8-output halves per unit: 16-byte loads of gate (and of up)
// registers: 64 (BATCH * halves <= 2) or 80 (4: two units of gate and up, 32 registers, in flight)
constexpr int kMinBlocksRaw = (BATCH * kHalves <= 2 ? 1024 : 768) / NETRA_BLOCK;
constexpr int kMinBlocks = kMinBlocksRaw < 1 ? 1 : kMinBlocksRaw;

// h = silu(g) * u for the 8 bf16 pairs of one half-unit
__device__ __forceinline__ void silu_mul8(const uint4& gv, const uint4& uv, float* h) {
  float g[8], u[8];
  netra::unpack8(gv, g);
  netra::unpack8(uv, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) h[i] = __fmul_rn(netra::silu(g[i]), u[i]);
}

// Units it = b .. b + NB - 1 of this thread: all loads first, then h, quantize and store.
template <int NB>
__device__ __forceinline__ void batch(int b, uint8_t* __restrict__ q, float* __restrict__ scales,
                                      const uint16_t* __restrict__ x, uint32_t rows) {
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 gr[NB][kHalves], ur[NB][kHalves];
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    const Split::Pos p = Split::pos(b + k, rows);
    const uint16_t* src = x + (size_t)p.row * (2 * kI) + Split::col(p);
#pragma unroll
    for (int h = 0; h < kHalves; ++h) {
      gr[k][h] = p.valid ? netra::ld_unit16<PREFETCH, CACHE>(src + 64 * h) : zero;
      ur[k][h] = p.valid ? netra::ld_unit16<PREFETCH, CACHE>(src + kI + 64 * h) : zero;
    }
  }
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    float hv[kNv];
#pragma unroll
    for (int h = 0; h < kHalves; ++h) silu_mul8(gr[k][h], ur[k][h], hv + 8 * h);
    Split::quant_store<CACHE>(hv, b + k, rows, q, scales);
  }
}
}  // namespace silu_mul_fp8_quant_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, silu_mul_fp8_quant_sm90::kMinBlocks)
    NETRA_SYMBOL(uint8_t* __restrict__ q, float* __restrict__ scales,
                 const uint16_t* __restrict__ x, uint32_t rows) {
  using namespace silu_mul_fp8_quant_sm90;
  NETRA_QUANT_SCHEDULE(batch, q, scales, x, rows);
}
