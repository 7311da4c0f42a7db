// Generated elementwise kernels that also write the column partials of their value: the
// statistics a later column kernel merges (col_stats.cuh's merge_column), computed where the
// value is, instead of by a col_partials kernel that loads it again.
//
//   elements_with_partials<STORE>(m, n, f, tile_rows, partial_mean, partial_m2)
//
// f is map_elements's functor (elementwise.cuh), with `using Out = ...` naming the value's
// element type (float, kf::bf16 or kf::f16). STORE: f.output()[row * n + col] = f.apply(...);
// without it the value is only summarized (a value nothing but its statistics reads). The
// partials are those of the value as stored, rounded to Out, so that they equal what
// col_partials computes from the stored value; their layout is col_partials's (tile_rows rows
// per tile, partial_mean[tile * n + col]).
//
// Launch as col_partials: block = COL_STATS_THREADS, grid = (ceil(n / COL_STATS_COLS),
// ceil(m / tile_rows)). Lane l of a warp takes columns c0 + l + 32 j (j < 4), so each warp's
// loads and stores of one row are consecutive elements; warp w takes rows w, w + 8, ... of the
// tile, and the warps' Welford summaries merge in order (deterministic, no atomics).
#pragma once

#include "col_stats.cuh"
#include "dtype.cuh"
#include "host_device.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <bool STORE, class F>
__device__ void elements_with_partials(int m, int n, const F &f, int tile_rows,
                                       float *__restrict__ partial_mean,
                                       float *__restrict__ partial_m2) {
  using Out = typename F::Out;
  constexpr int SLOTS = F::MATRICES > 0 ? F::MATRICES : 1;
  constexpr int PER_THREAD = COL_STATS_COLS / 32;
  __shared__ float sm_mean[COL_STATS_ROW_GROUPS][COL_STATS_COLS];
  __shared__ float sm_m2[COL_STATS_ROW_GROUPS][COL_STATS_COLS];

  const int t = threadIdx.x;
  const int rg = t >> 5;
  const int c0 = blockIdx.x * COL_STATS_COLS + (t & 31);
  const int r0 = blockIdx.y * tile_rows;
  const int rows = min(tile_rows, m - r0);

  float mean[PER_THREAD], m2[PER_THREAD];
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    mean[j] = 0.0f;
    m2[j] = 0.0f;
  }
  int count = 0;
  for (int r = rg; r < rows; r += COL_STATS_ROW_GROUPS) {
    const int row = r0 + r;
    ++count;
    const float inv = 1.0f / static_cast<float>(count);
#pragma unroll
    for (int j = 0; j < PER_THREAD; ++j) {
      const int col = c0 + 32 * j;
      if (col >= n)
        continue;
      float in[SLOTS];
      load_matrix_elements(f, row, col, in);
      const Out stored = from_float<Out>(f.apply(row, col, in));
      if constexpr (STORE)
        f.output()[static_cast<long long>(row) * n + col] = stored;
      const float y = to_float(stored);
      const float d = y - mean[j];
      mean[j] = fmaf(d, inv, mean[j]);
      m2[j] = fmaf(d, y - mean[j], m2[j]);
    }
  }
#pragma unroll
  for (int j = 0; j < PER_THREAD; ++j) {
    sm_mean[rg][(t & 31) + 32 * j] = mean[j];
    sm_m2[rg][(t & 31) + 32 * j] = m2[j];
  }
  __syncthreads();
  store_tile_partials(sm_mean, sm_m2, rows, n, partial_mean, partial_m2);
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
