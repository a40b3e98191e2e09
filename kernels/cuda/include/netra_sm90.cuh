// netra: shared device helpers for the CUDA kernel templates in kernels/cuda/ (built for sm_90a and sm_100a).
//
// Everything here is __forceinline__ and specialized at compile time; nothing allocates shared
// memory, local memory or a stack frame. Each helper names the PTX instruction it emits and its
// rounding, so that the numerics sections of the templates can cite them:
//
//   bf16 -> fp32            lo: w << 16, hi: w & 0xffff0000 (integer ops)        exact
//   fp32 x2 -> bf16x2       cvt.rn.bf16x2.f32                                    RNE, one rounding
//   fp32 x2 -> e4m3 x2      cvt.rn.satfinite.e4m3x2.f32 (sm_89+)                 RNE to OCP E4M3FN;
//                           satfinite only matters for |v| > 448, which the callers clamp away first
//   16-byte loads           ld.global.nc.L1::no_allocate.v4.u32 (streamed once: x, logits), with
//                           .L2::256B (prefetch-size hint) where a tactic sets PREFETCH = 1
//                           ld.global.nc.v4.u32 (re-read by every row: rmsnorm's w, kept in L1)
//   stores                  st.global.v4.u32 / .v2.u32 / .u32, no cache hint
//   cache modes (ld_x / st_x, a tactic's CACHE constant; the data and rounding never change):
//     0 streamed   ld.global.nc.L1::no_allocate (read-only path, no L1 line); st.global
//     1 plain      ld.global (weak, L1-allocating); st.global: what torch's elementwise kernels and
//                  Liger's Triton kernels emit
//     2 streaming  ld.global.cs / st.global.cs (cache-streaming, evict first: __ldcs / __stcs)
//   ld_rw is the load of a tensor the same kernel may also write (fused add: residual_out may be
//   residual): never .nc, which is only defined for memory that is read-only for the whole kernel.
//   group amax              max over the 8 (or 16) lanes of a quantization group: 3 (or 4)
//                           shfl.sync.bfly steps of fmaxf (exact: max is not rounded)
//   fp8 scale               a = max(amax, 1e-10f); q0 = RN(a * c) with c = RN(1/448) = 0x3b124925;
//                           s = fma(fma(-q0, 448, a), c, q0): the inner fma is exact, and s equals
//                           RN(a / 448) for every fp32 a in the normal range (checked here against
//                           exact rationals for all 2^23 significands; 448 is 7 * 2^6, so the
//                           exponent does not matter). No division instruction or library call.
//   reciprocal              r0 = rcp.approx.ftz.f32(s) (MUFU.RCP), r = fma(r0, fma(-s, r0, 1), r0):
//                           one Newton step, within 1 ulp of 1/s (2^-46 before its rounding)
//   x / s                   q0 = RN(x * r); e = fma(-q0, s, x); q = fma(e, r, q0): one Markstein
//                           correction; q is within 1 ulp of x/s and equals RN(x/s) unless x/s lies
//                           within about 2^-45 (relative) of an fp32 rounding midpoint; the sign of
//                           x is copied onto q (so -0.0 stays -0.0)
//   clamp                   fminf(fmaxf(q, -448), 448)                           exact
//
// 1e-10f is 0x2edbe6ff = 1.00000001335e-10: the floor differs from the contract's real 1e-10 by
// 1.3e-8 relative, which only matters for groups whose amax is below it.

#pragma once

#include <stdint.h>

namespace netra {

// ---- loads and stores (generic addresses of global memory) ----

__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// The same with the L2::256B prefetch-size hint: a miss fetches the whole aligned 256 bytes into L2
// (the other half of a quantization group's 256 bytes is then an L2 hit).
__device__ __forceinline__ uint4 ld_stream16_pf(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

template <bool PF>
__device__ __forceinline__ uint4 ld_stream16_t(const void* p) {
  if constexpr (PF) {
    return ld_stream16_pf(p);
  } else {
    return ld_stream16(p);
  }
}

__device__ __forceinline__ uint2 ld_stream8(const void* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t ld_stream4(const void* p) {
  uint32_t v;
  asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

__device__ __forceinline__ uint4 ld_keep16(const void* p) {
  uint4 v;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ uint2 ld_keep8(const void* p) {
  uint2 v;
  asm("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ void st16(void* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

__device__ __forceinline__ void st8(void* p, uint2 v) {
  asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
}

__device__ __forceinline__ void st4(void* p, uint32_t v) {
  asm volatile("st.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ---- cache modes (see the header) ----

template <int CM>
__device__ __forceinline__ uint4 ld_x16(const void* p) {
  static_assert(CM >= 0 && CM <= 2, "netra: CACHE must be 0, 1 or 2");
  uint4 v;
  if constexpr (CM == 0) {
    v = ld_stream16(p);
  } else if constexpr (CM == 1) {
    asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  } else {
    asm("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  }
  return v;
}

template <int CM>
__device__ __forceinline__ uint2 ld_x8(const void* p) {
  uint2 v;
  if constexpr (CM == 0) {
    v = ld_stream8(p);
  } else if constexpr (CM == 1) {
    asm("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  } else {
    asm("ld.global.cs.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  }
  return v;
}

// A tensor the kernel may also write (fused add's residual): mode 0 is ld.global.L1::no_allocate
// (coherent, no L1 line), never .nc.
template <int CM>
__device__ __forceinline__ uint4 ld_rw16(const void* p) {
  uint4 v;
  if constexpr (CM == 0) {
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  } else if constexpr (CM == 1) {
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  } else {
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
  }
  return v;
}

template <int CM>
__device__ __forceinline__ void st_x16(void* p, uint4 v) {
  if constexpr (CM == 2) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  } else {
    st16(p, v);
  }
}

template <int CM>
__device__ __forceinline__ void st_x8(void* p, uint2 v) {
  if constexpr (CM == 2) {
    asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
  } else {
    st8(p, v);
  }
}

template <int CM>
__device__ __forceinline__ void st_x4(void* p, uint32_t v) {
  if constexpr (CM == 2) {
    asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  } else {
    st4(p, v);
  }
}

// ---- bf16 ----

__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// Two fp32 -> packed bf16x2 (lo in bits 0..15), round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16x2_rn(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// Unpack 8 bf16 (one 16-byte vector) into fp32, element order preserved.
__device__ __forceinline__ void unpack8(const uint4& v, float* f) {
  f[0] = bf16_lo(v.x);
  f[1] = bf16_hi(v.x);
  f[2] = bf16_lo(v.y);
  f[3] = bf16_hi(v.y);
  f[4] = bf16_lo(v.z);
  f[5] = bf16_hi(v.z);
  f[6] = bf16_lo(v.w);
  f[7] = bf16_hi(v.w);
}

// ---- FP8 E4M3FN ----

// Two fp32 -> two E4M3FN codes (lo in bits 0..7), RNE.
__device__ __forceinline__ uint32_t pack_e4m3x2_rn(float lo, float hi) {
  uint16_t d;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(d) : "f"(hi), "f"(lo));
  return d;
}

// Eight fp32 already clamped to [-448, 448] -> eight codes, element order preserved.
__device__ __forceinline__ uint2 pack_e4m3x8_rn(const float* q) {
  uint2 r;
  r.x = pack_e4m3x2_rn(q[0], q[1]) | (pack_e4m3x2_rn(q[2], q[3]) << 16);
  r.y = pack_e4m3x2_rn(q[4], q[5]) | (pack_e4m3x2_rn(q[6], q[7]) << 16);
  return r;
}

// Max over the 8 consecutive lanes of a quantization group (lanes 8g .. 8g+7 of the warp).
// Every lane of the warp must execute it (full-mask butterfly, offsets 4, 2, 1 stay in the group).
__device__ __forceinline__ float group8_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 4));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return v;
}

// Max over the LPG (8 or 16) consecutive lanes of a quantization group; every lane of the warp
// must execute it (full-mask butterfly; the offsets stay inside the aligned group of LPG lanes).
template <int LPG>
__device__ __forceinline__ float group_max(float v) {
  static_assert(LPG == 8 || LPG == 16, "netra: a quantization group spans 8 or 16 lanes");
  if constexpr (LPG == 16) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 8));
  return group8_max(v);
}

// The group's scale from its amax: s = RN(max(amax, 1e-10f) / 448), see the header.
__device__ __forceinline__ float fp8_scale(float amax) {
  const float a = fmaxf(amax, 1e-10f);
  const float c = 0x1.24924ap-9f;  // RN(1/448) = 0x3b124925
  const float q0 = __fmul_rn(a, c);
  return __fmaf_rn(__fmaf_rn(-q0, 448.0f, a), c, q0);
}

// MUFU.RCP, no flush of its (normal) input matters here: approx 1/x, about 1 ulp.
__device__ __forceinline__ float rcp_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// silu(g) = RN(g * rcp.approx(RN(1 + ex2.approx(RN(g * -log2(e)))))) and h = RN(silu(g) * u) in fp32: the
// one sequence of silu_mul_fp8_quant.cu (whose header bounds it) and the routed MoE's gate/up templates.
__device__ __forceinline__ float silu(float g) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(__fmul_rn(g, -0x1.715476p0f)));
  return __fmul_rn(g, rcp_approx(__fadd_rn(e, 1.0f)));
}
__device__ __forceinline__ float silu_mul(float g, float u) { return __fmul_rn(silu(g), u); }

// 1/s within 1 ulp for a normal s whose reciprocal is normal (every fp8 scale).
__device__ __forceinline__ float rcp_newton(float s) {
  const float r0 = rcp_approx(s);
  return __fmaf_rn(r0, __fmaf_rn(-s, r0, 1.0f), r0);
}

// v[i] / s (within 1 ulp, see the header), clamped to [-448, 448], in place. r = rcp_newton(s).
template <int N>
__device__ __forceinline__ void fp8_scale_clamp(float* v, float s, float r) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float q0 = __fmul_rn(v[i], r);
    const float e = __fmaf_rn(-q0, s, v[i]);
    const float q = copysignf(__fmaf_rn(e, r, q0), v[i]);
    v[i] = fminf(fmaxf(q, -448.0f), 448.0f);
  }
}

// One 128-value group held by a warp, values 4l .. 4l + 3 in lane l: the group's scale s (every lane) and
// the lane's four E4M3FN codes (element order, the first in bits 0..7). All 32 lanes call it together.
__device__ __forceinline__ uint32_t quant_group128_warp(const float4& v, float& s) {
  float a = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
#pragma unroll
  for (int o = 16; o; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
  s = fp8_scale(a);
  float q[4] = {v.x, v.y, v.z, v.w};
  fp8_scale_clamp<4>(q, s, rcp_newton(s));
  return pack_e4m3x2_rn(q[0], q[1]) | (pack_e4m3x2_rn(q[2], q[3]) << 16);
}

}  // namespace netra
