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
__device__ __forceinline__ void netra_trace_put(unsigned long long* t, int slot, unsigned long long v) {
  if (threadIdx.x == 0) t[((size_t)blockIdx.y * gridDim.x + blockIdx.x) * NETRA_TRACE_SLOTS + slot] = v;
}
#else
#define NETRA_TRACE_PARAM
#define NETRA_TRACE_MARK(slot) ((void)0)
#define NETRA_TRACE_FLAG(slot, value) ((void)0)
#define NETRA_TRACE_SYNC() ((void)0)
#endif
