// Grid-stride traversal of an [m, n] index space for generated elementwise kernels.
//
//   for_each_element(m, n, f) calls f(row, col) exactly once for every 0 <= row < m,
//   0 <= col < n, consecutive threads taking consecutive columns (row-major order), so
//   f's accesses to row-major tensors coalesce.
//
// Any grid and block shape is correct (1D; the generated launcher picks
// block = dim3(ELEMENTWISE_THREADS), grid = enough blocks to fill the GPU a few times over:
// min(ceil(m * n / ELEMENTWISE_THREADS), ELEMENTWISE_BLOCKS_PER_SM * SMs), at least 1 — 2048
// threads per SM, full occupancy on sm_90).
// The linear index is 64-bit (m * n may exceed 2^31); row and column are advanced
// incrementally, so there is no 64-bit division per element.
//
// This header is also valid host C++ (device code is compiled only by NVCC/NVRTC), so the
// code generator can take the geometry constants from the same source.
#pragma once

#include "host_device.cuh"

namespace kf {

inline constexpr int ELEMENTWISE_THREADS = 256;
inline constexpr int ELEMENTWISE_BLOCKS_PER_SM = 8;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <class F> __device__ void for_each_element(int m, int n, F &f) {
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

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
