// Column statistics (mean, biased variance) of an [m, n] row-major matrix, in two steps:
//
// 1. col_partials: block (bx, by) summarizes rows [by * tile_rows, min((by + 1) * tile_rows, m))
//    of columns [bx * COL_STATS_COLS, ...) as a (mean, M2) pair per column of the values
//    pre(col, in[row, col]), at partial_mean[by * n + col], partial_m2[by * n + col]: the layout
//    the GEMM epilogue's statistics write (tile_rows = the GEMM's tile height), so one merge
//    serves both. Launch: block = COL_STATS_THREADS, grid = (ceil(n / COL_STATS_COLS),
//    ceil(m / tile_rows)), no dynamic shared memory; any tile_rows >= 1 (COL_STATS_TILE_ROWS).
// 2. merge_column: a team of COLUMN_MERGE_LANES lanes merges one column's tiles with Chan et al.'s
//    pairwise formula in double into the mean and M2 / m (running_var's unbiased variance is
//    var * m / (m - 1)); lane l takes tiles l, l + LANES, ... in order, then the lanes merge as a
//    fixed tree, every lane ending with the same result.
// 3. With statistics exchanged across ranks, store_summary and merge_ranks (below) come between
//    the merge and its use: each rank's (count, mean, M2) per column, all-gathered, merged in
//    rank order.
//
// Deterministic (per-thread Welford in row order, row groups merged in order, tiles in the fixed
// tree); no atomics, no E[x^2] - E[x]^2 cancellation. The matrix is float, kf::bf16 or kf::f16,
// statistics float; four columns per load where the base is aligned to four elements, ld % 4 ==
// 0 and the columns are in bounds, guarded scalars otherwise; 64-bit addresses. Also valid host
// C++, so the code generator takes the geometry constants from the same source.
#pragma once

#include "dtype.cuh"
#include "host_device.cuh"

namespace kf {

inline constexpr int COL_STATS_THREADS = 256;
inline constexpr int COL_STATS_COLS = 128; // columns per block: 32 threads x 4 columns (a float4)
inline constexpr int COL_STATS_ROW_GROUPS = 8; // COL_STATS_THREADS / 32: one warp per row group
inline constexpr int COL_STATS_TILE_ROWS = 128;
// Generated column kernels (merge, running-stat update, per-feature stores): a thread per
// feature, or a team of COLUMN_MERGE_LANES threads per feature where they merge statistics.
inline constexpr int COLUMN_THREADS = 256;
inline constexpr int COLUMN_MERGE_LANES = 8;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Chan et al.'s pairwise merge of (count, mean, M2) summaries, a followed by b's rows, in T
// (float or double); nb == 0 leaves a unchanged.
template <class T>
__device__ __forceinline__ void chan_merge(T &na, T &mean_a, T &m2_a, T nb, T mean_b, T m2_b) {
  if (nb == T(0))
    return;
  const T n = na + nb;
  const T delta = mean_b - mean_a;
  const T wb = nb / n;
  mean_a = mean_a + delta * wb;
  m2_a = m2_a + m2_b + delta * delta * na * wb;
  na = n;
}

// The block's tile partials from its row groups' Welford summaries (row group g: rows g, g +
// COL_STATS_ROW_GROUPS, ... of the tile's `rows`; sm_*[g][c] for the block's column c): one
// thread per column merges the groups in order. Call after the block's __syncthreads().
__device__ inline void
store_tile_partials(const float (&sm_mean)[COL_STATS_ROW_GROUPS][COL_STATS_COLS],
                    const float (&sm_m2)[COL_STATS_ROW_GROUPS][COL_STATS_COLS], int rows, int n,
                    float *__restrict__ partial_mean, float *__restrict__ partial_m2) {
  const int cl = threadIdx.x;
  const int col = blockIdx.x * COL_STATS_COLS + cl;
  if (cl >= COL_STATS_COLS || col >= n)
    return;
  float na = 0.0f, mu = 0.0f, s2 = 0.0f;
  for (int g = 0; g < COL_STATS_ROW_GROUPS; ++g) {
    const int cnt = rows > g ? (rows - g + COL_STATS_ROW_GROUPS - 1) / COL_STATS_ROW_GROUPS : 0;
    chan_merge(na, mu, s2, static_cast<float>(cnt), sm_mean[g][cl], sm_m2[g][cl]);
  }
  const long long idx = static_cast<long long>(blockIdx.y) * n + col;
  partial_mean[idx] = mu;
  partial_m2[idx] = s2;
}

// Pre concept: __device__ float operator()(int col, float x) const.
template <class Pre, class In>
__device__ void col_partials(int m, int n, const In *__restrict__ in, int ld, const Pre &pre,
                             int tile_rows, float *__restrict__ partial_mean,
                             float *__restrict__ partial_m2) {
  static_assert(COL_STATS_THREADS == 32 * COL_STATS_ROW_GROUPS && COL_STATS_COLS == 32 * 4,
                "one warp spans the block's columns, one float4 per thread");
  __shared__ float sm_mean[COL_STATS_ROW_GROUPS][COL_STATS_COLS];
  __shared__ float sm_m2[COL_STATS_ROW_GROUPS][COL_STATS_COLS];

  const int t = threadIdx.x;
  const int rg = t >> 5;                                     // row group: rows rg, rg + 8, ...
  const int c0 = blockIdx.x * COL_STATS_COLS + (t & 31) * 4; // this thread's 4 columns
  const int r0 = blockIdx.y * tile_rows;
  const int rows = min(tile_rows, m - r0);
  const bool vec = vec4_aligned(in) && (ld & 3) == 0 && c0 + 3 < n;

  // Welford over this thread's rows, all four columns at once (they share the count).
  float mean[4] = {0.0f, 0.0f, 0.0f, 0.0f}, m2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int count = 0;
  if (c0 < n) {
#pragma unroll 4
    for (int r = rg; r < rows; r += COL_STATS_ROW_GROUPS) {
      const In *p = in + (static_cast<long long>(r0 + r) * ld + c0);
      float x[4];
      if (vec) {
        const float4 v = load4(p, 0, true);
        x[0] = v.x;
        x[1] = v.y;
        x[2] = v.z;
        x[3] = v.w;
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          x[j] = c0 + j < n ? ldg(p + j) : 0.0f;
      }
      ++count;
      const float inv = 1.0f / static_cast<float>(count);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float y = pre(min(c0 + j, n - 1), x[j]);
        const float d = y - mean[j];
        mean[j] = fmaf(d, inv, mean[j]);
        m2[j] = fmaf(d, y - mean[j], m2[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    sm_mean[rg][(t & 31) * 4 + j] = mean[j];
    sm_m2[rg][(t & 31) * 4 + j] = m2[j];
  }
  __syncthreads();
  store_tile_partials(sm_mean, sm_m2, rows, n, partial_mean, partial_m2);
}

// ntiles = ceil(m / tile_rows); tile t holds count = min(tile_rows, m - t * tile_rows) rows.
// The column's mean and M2 (the sum of squared deviations) over its m rows. Called by the
// COLUMN_MERGE_LANES lanes of a team (lane = 0 .. LANES - 1, the team's lanes consecutive and
// aligned in their warp), all with the same col.
__device__ inline void merge_column_m2(int col, int lane, int n, int ntiles, int tile_rows, int m,
                                       const float *__restrict__ partial_mean,
                                       const float *__restrict__ partial_m2, double &mean,
                                       double &m2) {
  constexpr int LANES = COLUMN_MERGE_LANES;
  static_assert(LANES >= 1 && LANES <= 32 && (LANES & (LANES - 1)) == 0, "a power of two");
  // The partials of MERGE_BATCH of this lane's tiles are loaded before any is merged: the loads
  // do not depend on the merge, and issued one per iteration each would wait a memory latency.
  constexpr int MERGE_BATCH = 8;
  double na = 0.0, mu = 0.0, s2 = 0.0;
  for (int t0 = lane; t0 < ntiles; t0 += MERGE_BATCH * LANES) {
    float pm[MERGE_BATCH], p2[MERGE_BATCH];
#pragma unroll
    for (int u = 0; u < MERGE_BATCH; ++u) {
      const long long idx = static_cast<long long>(min(t0 + u * LANES, ntiles - 1)) * n + col;
      pm[u] = partial_mean[idx];
      p2[u] = partial_m2[idx];
    }
#pragma unroll
    for (int u = 0; u < MERGE_BATCH; ++u) {
      const int t = t0 + u * LANES;
      if (t < ntiles)
        chan_merge(na, mu, s2, static_cast<double>(max(min(tile_rows, m - t * tile_rows), 0)),
                   static_cast<double>(pm[u]), static_cast<double>(p2[u]));
    }
  }
  // The fixed tree: at each level, lane pairs (l, l ^ k) both merge the lower lane's summary
  // with the upper's.
  const unsigned team = (LANES == 32 ? 0xffffffffu : (1u << LANES) - 1u)
                        << ((threadIdx.x & 31) & ~(LANES - 1));
#pragma unroll
  for (int k = 1; k < LANES; k <<= 1) {
    double nb = __shfl_xor_sync(team, na, k), mb = __shfl_xor_sync(team, mu, k),
           sb = __shfl_xor_sync(team, s2, k);
    if (lane & k) { // the upper lane: the lower one's summary (the one received) first
      chan_merge(nb, mb, sb, na, mu, s2);
      na = nb;
      mu = mb;
      s2 = sb;
    } else {
      chan_merge(na, mu, s2, nb, mb, sb);
    }
  }
  mean = mu;
  m2 = s2;
}

// merge_column_m2 with the biased variance M2 / m (NaN for m == 0) instead of M2.
__device__ inline void merge_column(int col, int lane, int n, int ntiles, int tile_rows, int m,
                                    const float *__restrict__ partial_mean,
                                    const float *__restrict__ partial_m2, double &mean,
                                    double &var) {
  double m2;
  merge_column_m2(col, lane, n, ntiles, tile_rows, m, partial_mean, partial_m2, mean, m2);
  var = m2 / static_cast<double>(m);
}

// Statistics exchanged across ranks (SyncBatchNorm): a rank's summary of n columns is 3 * n
// doubles, counts then means then M2s; the all-gather puts rank r's at gathered + r * 3 * n.
__device__ inline void store_summary(int col, int n, int m, double mean, double m2,
                                     double *__restrict__ summary) {
  summary[col] = static_cast<double>(m);
  summary[n + col] = mean;
  summary[2 * n + col] = m2;
}

// The column's statistics over every rank's rows: the ranks' summaries merged in rank order, so
// every rank computes the same bits. var is the biased variance M2 / count (NaN for no rows).
__device__ inline void merge_ranks(int col, int n, int ranks, const double *__restrict__ gathered,
                                   double &mean, double &var, double &count) {
  double na = 0.0, mu = 0.0, s2 = 0.0;
  for (int r = 0; r < ranks; ++r) {
    const double *s = gathered + static_cast<long long>(r) * 3 * n;
    chan_merge(na, mu, s2, s[col], s[n + col], s[2 * n + col]);
  }
  mean = mu;
  var = s2 / na;
  count = na;
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
