// What every row kernel shares (row_softmax.cuh, row_norm.cuh, row_reduce.cuh): one block of
// Threads threads per row of an [m, n] row-major matrix, the block size by row length, the
// shared-memory budget of a resident row, deterministic block reductions, and vector loads of
// the row (any element type of dtype.cuh, converted to float) with the per-column prologue
// applied on load.
//
// Resident rows: a kernel that keeps its transformed row in dynamic shared memory (smem,
// 16-byte aligned) gets round_up(n, 4) floats where that fits in ROW_SMEM_CAP_BYTES and none
// otherwise (smem_floats = 0: it streams, reading the row twice).
//
// Deterministic: each thread visits its elements in a fixed order, warps reduce with a fixed
// shuffle pattern, and the per-warp results are combined in warp order by every thread.
//
// This header is also valid host C++ (device code is compiled only by NVCC/NVRTC), so the
// code generator sizes blocks and shared memory with the same constants.
#pragma once

#include "dtype.cuh"
#include "host_device.cuh"

namespace kf {

// Default cap on the dynamic shared memory of one row block. An H100 block may opt in to
// 227 KiB; above 48 KiB the launcher must raise CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
inline constexpr int ROW_SMEM_CAP_BYTES = 200 * 1024;

// Block size by row length: about 8 to 32 elements per thread.
KF_HOST_DEVICE constexpr int row_threads(int n) {
  return n <= 1024 ? 128 : n <= 4096 ? 256 : n <= 16384 ? 512 : 1024;
}

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace row_detail {

// NVRTC has no <cmath> INFINITY.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

// All threads of the block get combine() of v over the block, lanes first (butterfly: every
// lane of a warp ends with the same value when combine is commutative bitwise), then warps in
// order. Uses red[32] of shared memory and leaves it free for the next call (trailing barrier).
template <int Threads, class Combine>
__device__ __forceinline__ float block_combine(float v, float *red, Combine combine) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = combine(v, __shfl_xor_sync(0xffffffffu, v, o));
  if ((threadIdx.x & 31) == 0)
    red[threadIdx.x >> 5] = v;
  __syncthreads();
  float r = red[0];
#pragma unroll
  for (int w = 1; w < Threads / 32; ++w)
    r = combine(r, red[w]);
  __syncthreads();
  return r;
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

template <int Threads> __device__ __forceinline__ float block_max(float v, float *red) {
  return block_combine<Threads>(v, red, MaxOp{});
}
template <int Threads> __device__ __forceinline__ float block_sum(float v, float *red) {
  return block_combine<Threads>(v, red, SumOp{});
}

// Online softmax summary: the running max m and sum s of exp(y - m) over the values seen.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ void online_add(MaxSum &a, float y) {
  if (y > a.m) {
    a.s = a.s * expf(a.m - y) + 1.0f; // a.m = -inf: exp(-inf) = 0
    a.m = y;
  } else {
    // -inf adds 0 (exp(-inf - -inf) would be NaN); NaN fails y > a.m and poisons s.
    a.s += y == neg_inf() ? 0.0f : expf(y - a.m);
  }
}

// Commutative bitwise (fmaxf and + are), so butterfly lanes agree.
__device__ __forceinline__ MaxSum online_merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  // An empty side (s == 0, m == -inf) adds 0 rather than 0 * exp(NaN).
  const float sa = a.s == 0.0f ? 0.0f : a.s * expf(a.m - m);
  const float sb = b.s == 0.0f ? 0.0f : b.s * expf(b.m - m);
  return MaxSum{m, sa + sb};
}

template <int Threads> __device__ __forceinline__ MaxSum block_max_sum(MaxSum v, float *red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = online_merge(v, other);
  }
  if ((threadIdx.x & 31) == 0) {
    red[threadIdx.x >> 5] = v.m;
    red[32 + (threadIdx.x >> 5)] = v.s;
  }
  __syncthreads();
  MaxSum r{red[0], red[32]};
#pragma unroll
  for (int w = 1; w < Threads / 32; ++w)
    r = online_merge(r, MaxSum{red[w], red[32 + w]});
  __syncthreads();
  return r;
}

// Welford's running (count, mean, M2) of the values seen; merged with Chan's formula, so a
// row's variance needs one read and no E[y^2] - E[y]^2 cancellation.
struct Welford {
  float n, mean, m2;
};

__device__ __forceinline__ void welford_add(Welford &a, float y) {
  a.n += 1.0f;
  const float d = y - a.mean;
  a.mean += d / a.n;
  a.m2 += d * (y - a.mean);
}

__device__ __forceinline__ Welford welford_merge(Welford a, Welford b) {
  if (b.n == 0.0f)
    return a;
  if (a.n == 0.0f)
    return b;
  const float n = a.n + b.n, d = b.mean - a.mean;
  return Welford{n, a.mean + d * (b.n / n), a.m2 + b.m2 + d * d * (a.n * (b.n / n))};
}

// The block's merged Welford, the same in every thread. Lanes merge down to lane 0 (the merge
// is not commutative bitwise, so only lane 0's result is used), then warps in order. Uses
// red[96] of shared memory and leaves it free (trailing barrier).
template <int Threads> __device__ __forceinline__ Welford block_welford(Welford v, float *red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const Welford other{__shfl_down_sync(0xffffffffu, v.n, o),
                        __shfl_down_sync(0xffffffffu, v.mean, o),
                        __shfl_down_sync(0xffffffffu, v.m2, o)};
    v = welford_merge(v, other);
  }
  const int w = threadIdx.x >> 5;
  if ((threadIdx.x & 31) == 0) {
    red[w] = v.n;
    red[32 + w] = v.mean;
    red[64 + w] = v.m2;
  }
  __syncthreads();
  Welford r{red[0], red[32], red[64]};
#pragma unroll
  for (int i = 1; i < Threads / 32; ++i)
    r = welford_merge(r, Welford{red[i], red[32 + i], red[64 + i]});
  __syncthreads();
  return r;
}

// Calls f(col, pre(col, src[col])) for this thread's elements of a row of n: groups of four
// tid, tid + Threads, ... (one access each where src is aligned to four elements), then the
// scalar tail.
template <int Threads, class T, class Pre, class F>
__device__ __forceinline__ void for_each_loaded(const T *src, int n, const Pre &pre, F &&f) {
  const bool vec = vec4_aligned(src);
  const int n4 = n / 4;
  for (int i = threadIdx.x; i < n4; i += Threads) {
    const float4 v = load4(src, i, vec);
    f(4 * i, pre(4 * i, v.x));
    f(4 * i + 1, pre(4 * i + 1, v.y));
    f(4 * i + 2, pre(4 * i + 2, v.z));
    f(4 * i + 3, pre(4 * i + 3, v.w));
  }
  for (int c = 4 * n4 + threadIdx.x; c < n; c += Threads)
    f(c, pre(c, ldg(src + c)));
}

} // namespace row_detail

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
