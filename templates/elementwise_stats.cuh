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
// ceil(m / tile_rows)). Lane l of a warp takes columns c0 + 4l .. c0 + 4l + 3 (col_partials's),
// as one access per matrix where every matrix, the output, n and the columns allow, so each
// warp's loads and stores of one row are consecutive elements; warp w takes rows w, w + 8, ... of
// the tile, and the warps' Welford summaries merge in order (deterministic, no atomics). A thread
// loads ROWS_IN_FLIGHT rows of every matrix before it computes and stores any: the compiler
// keeps a load behind an earlier store, as it cannot prove the output aliases no input.
#pragma once

#include "col_stats.cuh"
#include "dtype.cuh"
#include "host_device.cuh"

namespace kf {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace elementwise_stats_detail {

// Whether matrices I.. of f move four columns at a time from a column that is a multiple of 4.
template <int I, class F> __device__ __forceinline__ bool four_aligned(const F &f) {
  if constexpr (I < F::MATRICES) {
    const auto mat = f.template matrix<I>();
    return vec4_aligned(mat.p) && (mat.ld & 3) == 0 && four_aligned<I + 1>(f);
  } else {
    return true;
  }
}

// Elements (row, c .. c + 3) of matrices I.. into in[j][I]: one access each where vec, guarded
// scalars (0 past n) otherwise.
template <int I, int SLOTS, class F>
__device__ __forceinline__ void load_four(const F &f, int row, int c, int n, bool vec,
                                          float (&in)[4][SLOTS]) {
  if constexpr (I < F::MATRICES) {
    const auto mat = f.template matrix<I>();
    const auto *p = mat.p + (static_cast<long long>(row) * mat.ld + c);
    if (vec) {
      const float4 v = load4(p, 0, true);
      in[0][I] = v.x;
      in[1][I] = v.y;
      in[2][I] = v.z;
      in[3][I] = v.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        in[j][I] = c + j < n ? ldg(p + j) : 0.0f;
    }
    load_four<I + 1>(f, row, c, n, vec, in);
  }
}

} // namespace elementwise_stats_detail

template <bool STORE, class F>
__device__ void elements_with_partials(int m, int n, const F &f, int tile_rows,
                                       float *__restrict__ partial_mean,
                                       float *__restrict__ partial_m2) {
  using namespace elementwise_stats_detail;
  using Out = typename F::Out;
  constexpr int SLOTS = F::MATRICES > 0 ? F::MATRICES : 1;
  constexpr int ROWS_IN_FLIGHT = SLOTS <= 2 ? 4 : SLOTS <= 4 ? 2 : 1;
  static_assert(COL_STATS_COLS == 32 * 4, "a warp spans the block's columns, four per lane");
  __shared__ float sm_mean[COL_STATS_ROW_GROUPS][COL_STATS_COLS];
  __shared__ float sm_m2[COL_STATS_ROW_GROUPS][COL_STATS_COLS];

  const int t = threadIdx.x;
  const int rg = t >> 5;
  const int cl = (t & 31) * 4; // this thread's first column in the block
  const int c0 = blockIdx.x * COL_STATS_COLS + cl;
  const int r0 = blockIdx.y * tile_rows;
  const int rows = min(tile_rows, m - r0);
  const bool vec = c0 + 3 < n && four_aligned<0>(f);
  Out *out = nullptr;
  bool vec_out = false;
  if constexpr (STORE) {
    out = f.output();
    vec_out = c0 + 3 < n && (n & 3) == 0 && vec4_aligned(out);
  }

  float mean[4] = {0.0f, 0.0f, 0.0f, 0.0f}, m2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int count = 0;
  if (c0 < n) {
    for (int r = rg; r < rows; r += ROWS_IN_FLIGHT * COL_STATS_ROW_GROUPS) {
      float in[ROWS_IN_FLIGHT][4][SLOTS];
#pragma unroll
      for (int u = 0; u < ROWS_IN_FLIGHT; ++u) // rows past the tile load its last row again
        load_four<0>(f, r0 + min(r + u * COL_STATS_ROW_GROUPS, rows - 1), c0, n, vec, in[u]);
#pragma unroll
      for (int u = 0; u < ROWS_IN_FLIGHT; ++u) {
        if (r + u * COL_STATS_ROW_GROUPS >= rows)
          break;
        const int row = r0 + r + u * COL_STATS_ROW_GROUPS;
        ++count;
        const float inv = 1.0f / static_cast<float>(count);
        float y[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // Columns past n are computed at column n - 1 and never stored.
          const Out stored = from_float<Out>(f.apply(row, min(c0 + j, n - 1), in[u][j]));
          y[j] = to_float(stored);
          const float d = y[j] - mean[j];
          mean[j] = fmaf(d, inv, mean[j]);
          m2[j] = fmaf(d, y[j] - mean[j], m2[j]);
        }
        if constexpr (STORE) {
          Out *o = out + (static_cast<long long>(row) * n + c0);
          if (vec_out) {
            store4(o, 0, make_float4(y[0], y[1], y[2], y[3]), true);
          } else {
#pragma unroll
            for (int j = 0; j < 4; ++j)
              if (c0 + j < n)
                o[j] = from_float<Out>(y[j]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    sm_mean[rg][cl + j] = mean[j];
    sm_m2[rg][cl + j] = m2[j];
  }
  __syncthreads();
  store_tile_partials(sm_mean, sm_m2, rows, n, partial_mean, partial_m2);
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
