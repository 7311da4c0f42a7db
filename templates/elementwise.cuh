// Generated elementwise kernels: each element of an [m, n] row-major output computed by the
// generated functor from the elements at the same (row, col) of its input matrices.
//
//   map_elements<VEC>(m, n, ld, f):  f.output()[row * ld + col] = f.apply(row, col, in)
//
// Functor (one per elementwise kernel):
//   static constexpr int MATRICES;   operands read at (row, col): [m, n] matrices, and rows every
//       row reads (a per-feature [1, n] vector) with leading dimension 0
//   template <int I> __device__ Matrix<T> matrix() const;   elements (float, kf::bf16 or
//       kf::f16) and leading dimension; absent where MATRICES is 0
//   __device__ Out *output() const;   the output (float, kf::bf16 or kf::f16), leading dim ld:
//       n, or n rounded up where its rows are padded for the Hopper GEMMs reading it
//   __device__ float apply(int row, int col, const float *in) const;   in[I]: the I-th matrix's
//       element; other operands (a per-row [m, 1] column, a scalar) apply loads itself
//
// Grid-stride over row-major order, consecutive threads on consecutive columns. Where n, every
// leading dimension (ld among them) and base pointer allow (checked at run time, uniformly), a thread moves VEC
// columns as 16-byte accesses; otherwise one element at a time. Any 1-D grid is correct; the
// launcher uses ELEMENTWISE_THREADS per block and min(ceil(m * n / (VEC * ELEMENTWISE_THREADS)),
// ELEMENTWISE_BLOCKS_PER_SM * SMs) blocks, at least 1. The linear index is 64-bit, row and column
// advance incrementally (no 64-bit division per element). Also valid host C++, so the code
// generator takes the geometry constants from the same source.
#pragma once

#include "dtype.cuh"
#include "host_device.cuh"

namespace kf {

inline constexpr int ELEMENTWISE_THREADS = 256;
inline constexpr int ELEMENTWISE_BLOCKS_PER_SM = 8;
// The bytes a thread moves per matrix in one access of the vector path.
inline constexpr int ELEMENTWISE_VECTOR_BYTES = 16;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace elementwise_detail {

// Calls f(row, col) exactly once for every 0 <= row < m, 0 <= col < n, consecutive threads
// taking consecutive columns.
template <class F> __device__ void for_each_index(int m, int n, F &f) {
  if (m <= 0 || n <= 0)
    return;
  const long long total = static_cast<long long>(m) * n;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total)
    return;
  // (row, col) of i, and the stride split the same way; both divisions happen once.
  int row = static_cast<int>(i / n);
  int col = static_cast<int>(i - static_cast<long long>(row) * n);
  const long long stride_rows = stride / n;
  const int stride_cols = static_cast<int>(stride - stride_rows * n);
  for (;;) {
    f(row, col);
    long long next_col = static_cast<long long>(col) + stride_cols; // < 2n: may pass INT_MAX
    long long next_row = row + stride_rows;
    if (next_col >= n) {
      next_col -= n;
      ++next_row;
    }
    if (next_row >= m)
      break; // the same test as i + stride >= total, and keeps row an int
    row = static_cast<int>(next_row);
    col = static_cast<int>(next_col);
  }
}

template <int VEC, class T> __device__ __forceinline__ bool aligned(const T *p, long long ld) {
  return ld % VEC == 0 && (reinterpret_cast<unsigned long long>(p) & (VEC * sizeof(T) - 1)) == 0;
}

// Whether matrices I.. of f take the vector path.
template <int VEC, int I, class F> __device__ __forceinline__ bool matrices_aligned(const F &f) {
  if constexpr (I < F::MATRICES) {
    const auto mat = f.template matrix<I>();
    return aligned<VEC>(mat.p, mat.ld) && matrices_aligned<VEC, I + 1>(f);
  } else {
    return true;
  }
}

// VEC elements of each matrix I.. at (row, col ..) into in[0 .. VEC - 1][I..].
template <int VEC, int I, int SLOTS, class F>
__device__ __forceinline__ void load_vector(const F &f, int row, int col, float (&in)[VEC][SLOTS]) {
  if constexpr (I < F::MATRICES) {
    const auto mat = f.template matrix<I>();
    float x[VEC];
    load_vec(mat.p + static_cast<size_t>(row) * mat.ld + col, x);
#pragma unroll
    for (int e = 0; e < VEC; ++e)
      in[e][I] = x[e];
    load_vector<VEC, I + 1>(f, row, col, in);
  }
}

} // namespace elementwise_detail

template <int VEC, class F> __device__ void map_elements(int m, int n, long long ld, const F &f) {
  using namespace elementwise_detail;
  constexpr int SLOTS = F::MATRICES > 0 ? F::MATRICES : 1;
  auto *out = f.output();
  if constexpr (VEC > 1) {
    if (n % VEC == 0 && aligned<VEC>(out, ld) && matrices_aligned<VEC, 0>(f)) {
      auto vector = [&](int row, int v) {
        const int col = v * VEC;
        float in[VEC][SLOTS];
        load_vector<VEC, 0>(f, row, col, in);
        float y[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
          y[e] = f.apply(row, col + e, in[e]);
        store_vec(out + static_cast<size_t>(row) * ld + col, y);
      };
      for_each_index(m, n / VEC, vector);
      return;
    }
  }
  auto element = [&](int row, int col) {
    float in[SLOTS];
    load_matrix_elements(f, row, col, in);
    store(out + static_cast<size_t>(row) * ld + col, f.apply(row, col, in));
  };
  for_each_index(m, n, element);
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
