// netra sm_90: the row body shared by rmsnorm.cu and the fused rmsnorm templates (fused_*.cu, rmsnorm_fp8_*.cu).
//
// One function, rms::rows<...>, specialized at compile time by the contract (H, WEIGHT_OFFSET), the
// tactic (threads per row TPR, rows per block, CACHE) and what the kernel adds around the norm:
//   ADD      v = bf16_rne(x + residual) is the row that is normalized, and is stored as residual_out
//   STORE_Y  y = bf16_rne(rmsnorm(v)) is stored
//   QUANT    y, rounded to bf16, is quantized in groups of 128 exactly as fp8_group_quant.cu does
// The norm itself (loads, sum of squares, reduction order, rs, the product, the output rounding) is
// the same code for all of them, so for one (H, TPR, V) the fused kernels' y equals rmsnorm.cu's y bit
// for bit, and their q / scales equal fp8_group_quant.cu applied to that y bit for bit (the group
// amax is exact and the quantization is elementwise given the group's scale). V differs only where
// rmsnorm.cu takes 8-byte accesses (H <= 4 TPR, e.g. H = 2048 at TPR 512) and the fused kernels,
// which always take 16-byte ones (WIDE), leave threads idle instead.
//
// Thread mapping (see rmsnorm.cu for the numerics): row = blockIdx.x * ROWS + threadIdx.x / TPR,
// t = threadIdx.x % TPR. Each thread takes V consecutive elements per chunk, V = 8 (16-byte accesses)
// when H > 4 TPR (more than half the threads then hold a full vector) and always in the fused
// kernels, else V = 4 (8-byte accesses); chunk c of a row is elements V TPR c .. V TPR (c+1)
// - 1 and thread t owns V t .. V t + V - 1 of it. nch = ceil(H / (V TPR)); in the last chunk only
// t < (H mod V TPR) / V take part when V TPR does not divide H. The first min(nch, 16) chunks of the
// row (8 for TPR <= 32) are held in registers; later ones (TPR <= 32 with long rows only, e.g. w8 and
// q16s at H >= 3584, tactics meant for H = 128) stream one at a time through the sum of squares and
// are read again for the output. TPR < 32: 32 / TPR rows share a warp, their shuffles stay inside their own
// aligned TPR lanes, and a warp returns at once only when all its rows are past `rows` (a row past
// it loads nothing and stores nothing but keeps taking part in the shuffles). TPR > 32: one row per
// block (ROWS = 1), the row's warps meet in shared memory.
//
// In-place residual (ADD): residual_out may be the same buffer as residual. Every element of
// residual is read by exactly the thread that later writes residual_out there, into registers, with
// all of the row's residual loads issued (volatile, in program order) before its first residual_out
// store; no other thread reads it. So the result is the same whether or not the two alias, and the
// pair carries no __restrict__ (ld_rw: never the read-only .nc path for residual).
//
// Quantization (QUANT, V = 8, TPR >= 16): a group of 128 is 16 consecutive lanes of one chunk (a
// chunk starts at a multiple of 128 because 8 TPR is one); lane t owns elements 8 (t mod 16) .. + 7
// of group (c V TPR + 8 t) / 128, and quantizes them with netra::quant_unit<8, 16>, the function
// fp8_group_quant.cu calls at LANES_PER_GROUP 16 (amax over the lane's 8 values, shfl.sync.bfly 8, 4,
// 2, 1 with fmaxf, fp8_scale, rcp_newton, fp8_scale_clamp, pack_e4m3x8_rn). Lane t mod 16 = 0 stores
// the group's scale.

#pragma once

#include "netra_quant_sm90.cuh"
#include "netra_sm90.cuh"

namespace netra {
namespace rms {

template <int H, int TPR, bool WIDE = false>
struct Shape {
  // elements per thread and chunk: 8 (16-byte accesses) when more than half the row's threads get a
  // full vector, or always (WIDE: the fused kernels); else 4
  static constexpr int kVec = (WIDE || 2 * H > 8 * TPR) ? 8 : 4;
  static constexpr int kChunk = kVec * TPR;
  static constexpr int kNch = (H + kChunk - 1) / kChunk;
  static constexpr int kTail = (H % kChunk) / kVec;  // threads active in the last chunk; 0: all
  static constexpr int kHoldMax = TPR > 32 ? 16 : 8;  // TPR <= 32: 8 (sm_100a spills 16 at 8 rows per block)
  static constexpr int kHold = kNch < kHoldMax ? kNch : kHoldMax;  // chunks of the row held in registers
  static constexpr int kLanes = TPR < 32 ? TPR : 32;   // lanes of one row inside a warp
  static constexpr int kWarps = TPR > 32 ? TPR / 32 : 1;
  static constexpr bool kPreW = kNch <= 4;  // w loaded together with x (its latency overlaps x's)
  // registers of row data a thread holds across the reduction: x, and w when preloaded
  static constexpr int kData = kHold * (kVec / 2) + (kPreW ? kNch * (kVec / 2) : 0);
};

// Blocks per SM asked of ptxas (__launch_bounds__): a thread holding at most 8 registers of row data
// (one x and one w chunk) is capped at the registers of 2048 threads per SM (full occupancy; no
// served instantiation spills there), at most 16 at 64 registers, anything more at 128 (the row in
// registers). 20 and 24 (5 or 6 chunks held, w loaded per chunk: hidden 5120 at 128 threads per row,
// 1536 at 32) spilled at 64 (a 16- to 104-byte stack frame). A spill is a build error, so a cap that is
// too tight cannot go unnoticed.
template <int H, int TPR, int BLOCK, bool WIDE = false>
constexpr int min_blocks() {
  constexpr int d = Shape<H, TPR, WIDE>::kData;
  constexpr int regs = d <= 8 ? 65536 / 2048 : (d <= 16 ? 64 : 128);
  constexpr int n = 65536 / (BLOCK * regs);
  return n < 1 ? 1 : n;
}

template <int V>
struct Vec {
  uint32_t w[V / 2];
};

template <int V>
__device__ __forceinline__ Vec<V> zero() {
  Vec<V> v;
#pragma unroll
  for (int i = 0; i < V / 2; ++i) v.w[i] = 0u;
  return v;
}

template <int V>
__device__ __forceinline__ Vec<V> from(const uint4& u) {
  Vec<V> v;
  v.w[0] = u.x;
  v.w[1] = u.y;
  if constexpr (V == 8) {
    v.w[2] = u.z;
    v.w[3] = u.w;
  }
  return v;
}

// x: streamed once, in the tactic's cache mode
template <int V, int CM>
__device__ __forceinline__ Vec<V> load_x(const uint16_t* p) {
  if constexpr (V == 8) {
    return from<V>(ld_x16<CM>(p));
  } else {
    const uint2 u = ld_x8<CM>(p);
    return from<V>(make_uint4(u.x, u.y, 0u, 0u));
  }
}

// w: read by every row, kept in L1 (ld.global.nc)
template <int V>
__device__ __forceinline__ Vec<V> load_w(const uint16_t* p) {
  if constexpr (V == 8) {
    return from<V>(ld_keep16(p));
  } else {
    const uint2 u = ld_keep8(p);
    return from<V>(make_uint4(u.x, u.y, 0u, 0u));
  }
}

template <int V>
__device__ __forceinline__ void unpack(const Vec<V>& v, float* f) {
#pragma unroll
  for (int i = 0; i < V / 2; ++i) {
    f[2 * i] = bf16_lo(v.w[i]);
    f[2 * i + 1] = bf16_hi(v.w[i]);
  }
}

template <int V, int CM>
__device__ __forceinline__ void store(uint16_t* p, const Vec<V>& v) {
  if constexpr (V == 8) {
    st_x16<CM>(p, make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]));
  } else {
    st_x8<CM>(p, make_uint2(v.w[0], v.w[1]));
  }
}

// Thread total of the V accumulators: ((a0+a1)+(a2+a3)) [+ ((a4+a5)+(a6+a7))].
template <int V>
__device__ __forceinline__ float tree(const float* a) {
  const float lo = __fadd_rn(__fadd_rn(a[0], a[1]), __fadd_rn(a[2], a[3]));
  if constexpr (V == 8) {
    return __fadd_rn(lo, __fadd_rn(__fadd_rn(a[4], a[5]), __fadd_rn(a[6], a[7])));
  } else {
    return lo;
  }
}

// y of one chunk from the held (normalized) row values v and w: stored and/or quantized. QUANT: every
// lane of the warp must call it (the group's shuffles), `in` only guards the stores.
template <int H, int TPR, int V, int WO, int CM, bool STORE_Y, bool QUANT>
__device__ __forceinline__ void out_chunk(uint16_t* __restrict__ y, uint8_t* __restrict__ q,
                                          float* __restrict__ scales, const Vec<V>& v, const Vec<V>& wv,
                                          float rs, uint32_t row, int c, int t, size_t base, bool in) {
  constexpr int kChunk = V * TPR;
  float xf[V], wf[V];
  unpack<V>(v, xf);
  unpack<V>(wv, wf);
  Vec<V> yv;
#pragma unroll
  for (int i = 0; i < V / 2; ++i) {
    float yy[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const float tj = __fmul_rn(xf[2 * i + k], rs);
      yy[k] = WO ? __fmaf_rn(tj, wf[2 * i + k], tj) : __fmul_rn(tj, wf[2 * i + k]);
    }
    yv.w[i] = pack_bf16x2_rn(yy[0], yy[1]);  // the only rounding of y
  }
  if constexpr (STORE_Y) {
    if (in) store<V, CM>(y + base + c * kChunk, yv);
  }
  if constexpr (QUANT) {
    float yq[8];
    unpack<8>(yv, yq);  // the bf16 y, exactly
    uint2 codes, unused;
    const float sc = quant_unit<8, 16>(yq, codes, unused);  // fp8_group_quant.cu's sequence
    if (in) {
      const size_t e = (size_t)row * H + c * kChunk + 8 * t;
      st_x8<CM>(q + e, codes);
      if ((t & 15) == 0) st_x4<CM>(scales + e / 128, __float_as_uint(sc));
    }
  }
}

template <int H, int TPR, int ROWS, int WO, int CM, bool ADD, bool STORE_Y, bool QUANT>
__device__ __forceinline__ void rows(uint16_t* res_out, uint16_t* __restrict__ y, uint8_t* __restrict__ q,
                                     float* __restrict__ scales, const uint16_t* __restrict__ x,
                                     const uint16_t* res, const uint16_t* __restrict__ w, uint32_t nrows,
                                     float eps) {
  using S = Shape<H, TPR, ADD || QUANT>;
  constexpr int V = S::kVec;
  constexpr int kChunk = S::kChunk;
  constexpr int kNch = S::kNch;
  constexpr int kTail = S::kTail;
  constexpr int kHold = S::kHold;
  constexpr float kInvH = 1.0f / H;  // correctly rounded at compile time
  static_assert(!(ADD || QUANT) || (V == 8 && kNch == kHold),
                "rmsnorm (fused): HIDDEN must be at least 8 * THREADS_PER_ROW and at most 128 * "
                "THREADS_PER_ROW (64 * for THREADS_PER_ROW <= 32): 16-byte accesses, the whole row held "
                "in registers");
  static_assert(!QUANT || TPR >= 16, "rmsnorm (fused quant): THREADS_PER_ROW must be at least 16 (a group "
                                     "of 128 is 16 lanes x 8)");

  const int t = threadIdx.x % TPR;
  const uint32_t row = blockIdx.x * ROWS + threadIdx.x / TPR;
  if constexpr (TPR >= 32) {
    if (row >= nrows) return;  // TPR = 32: warp-uniform; TPR > 32: block-uniform (ROWS = 1)
  } else {
    if (blockIdx.x * ROWS + (threadIdx.x / 32) * (32 / TPR) >= nrows) return;  // the warp's first row
  }
  const bool valid = TPR >= 32 || row < nrows;
  const size_t base = (size_t)row * H + V * t;

  // ---- pass 1: every load of the row in flight, then the sum of squares ----
  Vec<V> xv[kHold];
  Vec<V> rv[ADD ? kHold : 1];
  Vec<V> wpre[S::kPreW ? kNch : 1];
#pragma unroll
  for (int c = 0; c < kHold; ++c) {
    const bool in = valid && ((c < kNch - 1) || (kTail == 0) || (t < kTail));
    xv[c] = in ? load_x<V, CM>(x + base + c * kChunk) : zero<V>();
    if constexpr (ADD) rv[c] = in ? from<V>(ld_rw16<CM>(res + base + c * kChunk)) : zero<V>();
  }
  if constexpr (S::kPreW) {
#pragma unroll
    for (int c = 0; c < kNch; ++c) {
      const bool in = (c < kNch - 1) || (kTail == 0) || (t < kTail);
      wpre[c] = in ? load_w<V>(w + V * t + c * kChunk) : zero<V>();
    }
  }
  float acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = 0.0f;
#pragma unroll
  for (int c = 0; c < kHold; ++c) {
    const bool in = valid && ((c < kNch - 1) || (kTail == 0) || (t < kTail));
    Vec<V> v = xv[c];
    if constexpr (ADD) {
      float a[V], b[V];
      unpack<V>(v, a);
      unpack<V>(rv[c], b);
#pragma unroll
      for (int i = 0; i < V / 2; ++i)
        v.w[i] = pack_bf16x2_rn(__fadd_rn(a[2 * i], b[2 * i]), __fadd_rn(a[2 * i + 1], b[2 * i + 1]));
      xv[c] = v;
      if (in) store<V, CM>(res_out + base + c * kChunk, v);
    }
    float f[V];
    unpack<V>(v, f);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = __fmaf_rn(f[j], f[j], acc[j]);
  }
  // chunks past kHold (TPR <= 32 with long rows only; no fused variant): streamed, one at a time
#pragma unroll 1
  for (int c = kHold; c < kNch; ++c) {
    const bool in = valid && ((c < kNch - 1) || (kTail == 0) || (t < kTail));
    float f[V];
    unpack<V>(in ? load_x<V, CM>(x + base + c * kChunk) : zero<V>(), f);
#pragma unroll
    for (int j = 0; j < V; ++j) acc[j] = __fmaf_rn(f[j], f[j], acc[j]);
  }

  // ---- reduction: thread, row lanes, row warps; the same order in every lane ----
  float s = tree<V>(acc);
#pragma unroll
  for (int off = S::kLanes / 2; off >= 1; off >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
  if constexpr (S::kWarps > 1) {
    __shared__ float part[S::kWarps];
    if ((threadIdx.x & 31) == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    float p[S::kWarps];
#pragma unroll
    for (int i = 0; i < S::kWarps; ++i) p[i] = part[i];
#pragma unroll
    for (int d = 1; d < S::kWarps; d *= 2) {
#pragma unroll
      for (int i = 0; i + d < S::kWarps; i += 2 * d) p[i] = __fadd_rn(p[i], p[i + d]);
    }
    s = p[0];  // pairwise: ((p0 + p1) + (p2 + p3)) + ...
  }
  const float rs = __frsqrt_rn(__fadd_rn(__fmul_rn(s, kInvH), eps));

  // ---- pass 2: y per chunk; stored, and/or quantized ----
#pragma unroll
  for (int c = 0; c < kHold; ++c) {
    const bool in = valid && ((c < kNch - 1) || (kTail == 0) || (t < kTail));
    if constexpr (!QUANT) {
      if (!in) continue;
    }
    Vec<V> wv;
    if constexpr (S::kPreW) {
      wv = wpre[c];
    } else {
      wv = in ? load_w<V>(w + V * t + c * kChunk) : zero<V>();
    }
    out_chunk<H, TPR, V, WO, CM, STORE_Y, QUANT>(y, q, scales, xv[c], wv, rs, row, c, t, base, in);
  }
#pragma unroll 1
  for (int c = kHold; c < kNch; ++c) {  // !ADD, !QUANT only (static_assert above)
    const bool in = valid && ((c < kNch - 1) || (kTail == 0) || (t < kTail));
    if (in) {
      out_chunk<H, TPR, V, WO, CM, STORE_Y, QUANT>(y, q, scales, load_x<V, CM>(x + base + c * kChunk),
                                                  load_w<V>(w + V * t + c * kChunk), rs, row, c, t, base, in);
    }
  }
}

}  // namespace rms
}  // namespace netra
