// Device helpers shared by the cp.async GEMM mainloops (gemm_simt.cuh, gemm_tc.cuh) and the
// GEMM epilogue (gemm_epilogue.cuh): shared-memory addresses, cp.async copies, alignment checks,
// vector stores. The Hopper-only building blocks (TMA, mbarriers, wgmma) are in
// sm90_primitives.cuh; Chan's merge of (count, mean, M2) summaries is col_stats.cuh's.
#pragma once

#include "dtype.cuh"
#include "host_device.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace gemm_detail {

// True when V-wide vector accesses of T (float, kf::bf16, kf::f16) at (row, col) with
// col % V == 0 are aligned for every row: the base is V * sizeof(T)-byte aligned and the leading
// dimension a multiple of V.
template <int V, class T> __device__ __forceinline__ bool vector_ok(const T *p, int ld) {
  return (reinterpret_cast<unsigned long long>(p) & (sizeof(T) * V - 1)) == 0 && ld % V == 0;
}

// The V values of v stored at p, each rounded once to T, as one access (p aligned as vector_ok
// checks).
template <int V> __device__ __forceinline__ void store_vector(float *p, const float (&v)[V]) {
  static_assert(V == 2 || V == 4, "float2 or float4 stores");
  if constexpr (V == 4)
    *reinterpret_cast<float4 *>(p) = make_float4(v[0], v[1], v[2], v[3]);
  else
    *reinterpret_cast<float2 *>(p) = make_float2(v[0], v[1]);
}
template <int V, class T> __device__ __forceinline__ void store_vector(T *p, const float (&v)[V]) {
  static_assert(V == 2 || V == 4, "4- or 8-byte stores of two-byte elements");
  unsigned pair[V / 2];
#pragma unroll
  for (int e = 0; e < V / 2; ++e)
    pair[e] = from_float<T>(v[2 * e]).bits | static_cast<unsigned>(from_float<T>(v[2 * e + 1]).bits)
                                                 << 16;
  if constexpr (V == 4)
    *reinterpret_cast<uint2 *>(p) = make_uint2(pair[0], pair[1]);
  else
    *reinterpret_cast<unsigned *>(p) = pair[0];
}

__device__ __forceinline__ unsigned smem_addr(const void *p) {
  unsigned long long a;
  asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
  return static_cast<unsigned>(a);
}

// 16-byte async copy; only src_bytes (0..16) are read, the rest of the 16 is zero-filled.
__device__ __forceinline__ void cp_async16(unsigned dst, const float *src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}
// 4-byte async copy; src_bytes is 0 (zero-fill, nothing read) or 4.
__device__ __forceinline__ void cp_async4(unsigned dst, const float *src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

} // namespace gemm_detail

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
