// netra template silu_mul_fp8_quant (sm_90 / Hopper, CUDA C++ compiled ahead of time to a cubin)
//
//   h[r, i] = silu(g[r, i]) * u[r, i], silu(t) = t / (1 + exp(-t)), g = x[:, :INTER], u = x[:, INTER:]
//   then the fp8_group_quant of h (never rounded to bf16): s = max(amax_g |h|, 1e-10) / 448,
//   q = e4m3fn_rne(clamp(h / s, -448, 448)).
//   x: bf16 [rows, 2*INTER]; q: E4M3FN codes [rows, INTER]; scales: fp32 [rows, INTER/128].
//
// Kernel arguments (in order, 28 bytes): q u8*, scales f32*, x bf16*, rows u32.
// Contract constants: INTER (multiple of 128 in [128, 32768]), GROUP (128 only).
// Tactic constants: BATCH (units per thread whose loads are in flight together: 1 or 2) and
// PREFETCH (1: the loads carry the L2::256B prefetch-size hint). A tactic is otherwise its launch
// shape (NETRA_BLOCK threads, NETRA_ROWS_PER_BLOCK rows, NETRA_GRID_Y column slices);
// grid.x = ceil(rows / ROWS_PER_BLOCK).
//
// Thread mapping (include/netra_quant_sm90.cuh): 8 consecutive lanes per group of 128 outputs;
// lane j of a group owns outputs 8j .. 8j+7 and 64+8j .. 64+8j+7 of it: four 16-byte
// ld.global.nc.L1::no_allocate.v4 (gate low/high half, up low/high half, the up loads INTER
// elements further into the row), two 8-byte st.global.v2 of codes; lane 0 of the group stores
// the scale. Gate and up are each read once.
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
// Measured on an H200 (bench/results/sm90-kernel-check.json): every served instantiation passes
// all netra.conformance cases; at 8192 rows 3.14 TB/s (I = 768, r4), 3.46 (1536, r4), 3.84
// (14336, s8); 1.3 to 1.7 us per call at 1 and 16 rows.

#include "include/netra_quant_sm90.cuh"

#if !defined(NETRA_SYMBOL) || !defined(NETRA_BLOCK) || !defined(NETRA_ROWS_PER_BLOCK) || \
    !defined(NETRA_GRID_Y)
#error "silu_mul_fp8_quant: the instantiation must define NETRA_SYMBOL, NETRA_BLOCK, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y"
#endif
#if !defined(INTER) || !defined(GROUP)
#error "silu_mul_fp8_quant: contract constants INTER and GROUP must be defined"
#endif
#if !defined(PREFETCH)
#error "silu_mul_fp8_quant: tactic constant PREFETCH (0, or 1 for the L2::256B prefetch-size hint on x loads) must be defined"
#endif
#if !defined(BATCH)
#error "silu_mul_fp8_quant: tactic constant BATCH (units per thread in flight: 1 or 2) must be defined"
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
static_assert(PREFETCH == 0 || PREFETCH == 1, "silu_mul_fp8_quant: PREFETCH must be 0 or 1");
using Split = netra::QuantSplit<kI, NETRA_ROWS_PER_BLOCK, NETRA_GRID_Y, NETRA_BLOCK, BATCH>;
constexpr int kMinBlocks = (BATCH == 1 ? 1024 : 768) / NETRA_BLOCK;

__device__ __forceinline__ float ex2_approx(float t) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(t));
  return e;
}

// h = silu(g) * u for the 8 bf16 pairs of one half-unit
__device__ __forceinline__ void silu_mul8(const uint4& gv, const uint4& uv, float* h) {
  float g[8], u[8];
  netra::unpack8(gv, g);
  netra::unpack8(uv, u);
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float e = ex2_approx(__fmul_rn(g[i], -0x1.715476p0f));
    const float silu = __fmul_rn(g[i], netra::rcp_approx(__fadd_rn(e, 1.0f)));
    h[i] = __fmul_rn(silu, u[i]);
  }
}
}  // namespace silu_mul_fp8_quant_sm90

namespace silu_mul_fp8_quant_sm90 {
// Units it = b .. b + NB - 1 of this thread: all 4*NB loads first, then h, quantize and store.
template <int NB>
__device__ __forceinline__ void batch(int b, uint8_t* __restrict__ q, float* __restrict__ scales,
                                      const uint16_t* __restrict__ x, uint32_t rows) {
  constexpr int kGroups = kI / 128;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  uint4 glo[NB], ghi[NB], ulo[NB], uhi[NB];
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    const Split::Pos p = Split::pos(b + k, rows);
    const uint16_t* src = x + (size_t)p.row * (2 * kI) + p.group * 128 + 8 * p.j;
    glo[k] = p.valid ? netra::ld_stream16_t<PREFETCH != 0>(src) : zero;
    ghi[k] = p.valid ? netra::ld_stream16_t<PREFETCH != 0>(src + 64) : zero;
    ulo[k] = p.valid ? netra::ld_stream16_t<PREFETCH != 0>(src + kI) : zero;
    uhi[k] = p.valid ? netra::ld_stream16_t<PREFETCH != 0>(src + kI + 64) : zero;
  }
#pragma unroll
  for (int k = 0; k < NB; ++k) {
    float h[16];
    silu_mul8(glo[k], ulo[k], h);
    silu_mul8(ghi[k], uhi[k], h + 8);
    uint2 clo, chi;
    const float s = netra::quant_unit(h, clo, chi);
    const Split::Pos p = Split::pos(b + k, rows);  // recomputed: fewer live registers
    if (p.valid) {
      uint8_t* dst = q + (size_t)p.row * kI + p.group * 128 + 8 * p.j;
      netra::st8(dst, clo);
      netra::st8(dst + 64, chi);
      if (p.j == 0) netra::st4(scales + (size_t)p.row * kGroups + p.group, __float_as_uint(s));
    }
  }
}
}  // namespace silu_mul_fp8_quant_sm90

extern "C" __global__ void __launch_bounds__(NETRA_BLOCK, silu_mul_fp8_quant_sm90::kMinBlocks)
    NETRA_SYMBOL(uint8_t* __restrict__ q, float* __restrict__ scales,
                 const uint16_t* __restrict__ x, uint32_t rows) {
  using namespace silu_mul_fp8_quant_sm90;
  NETRA_QUANT_SCHEDULE(batch, q, scales, x, rows);
}
