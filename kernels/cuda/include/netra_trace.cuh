// Phase marks for a development build only (bench/trace_moe.py): with NETRA_TRACE defined, a kernel that
// uses these takes one more argument, trace u64* [gridDim.y][gridDim.x][NETRA_TRACE_SLOTS], and thread 0
// of each CTA writes %globaltimer (ns) to its slot at each mark (NETRA_TRACE_FLAG writes a value instead).
// Without NETRA_TRACE every mark is nothing and the parameter list is the template's: a release build
// compiles exactly the source it would without this header (the lock's .text hashes hold it to that).
#pragma once

#ifdef NETRA_TRACE
#ifndef NETRA_TRACE_SLOTS
#define NETRA_TRACE_SLOTS 8
#endif
#define NETRA_TRACE_PARAM , unsigned long long* __restrict__ netra_trace
#define NETRA_TRACE_MARK(slot) netra_trace_put(netra_trace, (slot), netra_trace_now())
#define NETRA_TRACE_FLAG(slot, value) netra_trace_put(netra_trace, (slot), (unsigned long long)(value))
#define NETRA_TRACE_SYNC() __syncthreads()  // so that thread 0's mark follows every warp's work
__device__ __forceinline__ unsigned long long netra_trace_now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
  return t;
}
// The CTA's slot in the trace buffer. With NETRA_TRACE_RECOMPUTE it is recomputed at each mark from
// special registers read by volatile asm, so that no register holds it across the kernel (bench/trace_moe.py
// builds so where the plain build spills: a tactic at its register budget, d3ys); without it the compiler
// may keep it, which costs fewer registers at the marks themselves (d3ol at 80 spills the other way).
__device__ __forceinline__ size_t netra_trace_cta() {
#ifdef NETRA_TRACE_RECOMPUTE
  unsigned x, y, nx;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(y));
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(nx));
  return (size_t)y * nx + x;
#else
  return (size_t)blockIdx.y * gridDim.x + blockIdx.x;
#endif
}
__device__ __forceinline__ void netra_trace_put(unsigned long long* t, int slot, unsigned long long v) {
  if (threadIdx.x == 0) t[netra_trace_cta() * NETRA_TRACE_SLOTS + slot] = v;
}
#else
#define NETRA_TRACE_PARAM
#define NETRA_TRACE_MARK(slot) ((void)0)
#define NETRA_TRACE_FLAG(slot, value) ((void)0)
#define NETRA_TRACE_SYNC() ((void)0)
#endif
