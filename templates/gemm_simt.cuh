// fp32 SIMT GEMM mainloop with an epilogue hook and optional per-tile column statistics.
//
//   C[row, col] = epi.apply(epi.column(col), row, col, sum_k A[row, k] * B'[k, col])
//
// A is [m, k] row-major (leading dim lda). B' is B^T when TransB (B is [n, k] row-major, a
// PyTorch Linear weight) and B itself otherwise (B is [k, n] row-major). C is [m, n] row-major
// (ldc) and aliases neither A, B nor any epilogue input.
//
// Launch geometry (the generated entry point must use exactly this):
//   block = dim3(GEMM_THREADS), grid = dim3(ceil(n / GEMM_BN), ceil(m / GEMM_BM)),
//   dynamic shared memory = gemm_smem_bytes (below 48 KiB: no opt-in attribute needed),
//   entry point declared __launch_bounds__(GEMM_THREADS, GEMM_MIN_BLOCKS) so that the register
//   cap keeps two blocks per SM.
// Block (bx, by) computes the BM x BN tile at rows by*BM, cols bx*BN; blocks write disjoint
// parts of C and of the partial statistics.
//
// Epilogue concept:
//   struct Column { ... };  copy-constructible per-column constants
//   __device__ Column column(int col) const;   called once per column a thread owns; for owned
//       columns past n it is called with n - 1 instead (its result is then never used), so it
//       may read per-column arrays unguarded.
//   __device__ float apply(const Column &c, int row, int col, float acc) const;
//       called only for valid (row, col).
//
// Column statistics: when partial_mean != nullptr, block (bx, by) also writes, for each valid
// column col of its tile, the mean and M2 (sum of squared deviations from that mean) of the
// values it STORED in C over the tile's valid rows, count = min(BM, m - by*BM):
//   partial_mean[by * n + col], partial_m2[by * n + col]
// (the layout col_stats.cuh's col_partials produces with tile_rows = GEMM_BM, and merge_column
// consumes). partial_mean and partial_m2 are both null or both valid. Each thread takes the
// two-pass mean/M2 of its (at most 8) rows from registers, then one thread per column merges the
// 16 row groups with Chan's formula in a fixed order: deterministic, no atomics.
//
// Sizes: any m, n, k >= 0 (k = 0 gives apply(..., 0.0f)). float4 global loads/stores are used
// only where the base pointer is 16-byte aligned and the leading dimension is a multiple of 4
// (checked at run time, uniformly per matrix) and all four elements are in bounds; everything
// else falls back to guarded scalar accesses. Addresses are computed in 64-bit.
//
// This header is also valid host C++ (device code is compiled only by NVCC/NVRTC), so the
// code generator can take the geometry constants from the same source.
#pragma once

#include "host_device.cuh"

namespace kf {

struct GemmShape {
  int m, n, k;
};

inline constexpr int GEMM_BM = 128;       // tile rows (the statistics tile height as well)
inline constexpr int GEMM_BN = 128;       // tile columns
inline constexpr int GEMM_BK = 8;         // K depth of one shared-memory stage
inline constexpr int GEMM_TM = 8;         // accumulator rows per thread: two groups of 4, 64 rows apart
inline constexpr int GEMM_TN = 8;         // accumulator cols per thread: two groups of 4, 64 cols apart
inline constexpr int GEMM_THREADS = 256;  // (BM / TM) * (BN / TN)
inline constexpr int GEMM_MIN_BLOCKS = 2; // second __launch_bounds__ argument: caps registers at 128
// Shared tiles are K-major ([BK][BM] for A, [BK][BN] for B) so a thread reads its 4-wide row
// and column fragments as float4. The row stride is padded by 4 floats so that the transposing
// stores of the k-contiguous loads hit 32 distinct banks (4 * 132 = 16 mod 32), and stays a
// multiple of 4 floats for 16-byte fragment reads.
inline constexpr int GEMM_LDS = GEMM_BM + 4;
inline constexpr int GEMM_STAGE_FLOATS = GEMM_BK * GEMM_LDS * 2;      // A tile + B tile
inline constexpr int GEMM_ROW_GROUPS = GEMM_BM / GEMM_TM;             // threads sharing one column: 16
inline constexpr int gemm_mainloop_bytes = 2 * GEMM_STAGE_FLOATS * 4; // two stages
inline constexpr int gemm_stats_bytes = 2 * GEMM_ROW_GROUPS * GEMM_BN * 4; // mean and M2 per group
inline constexpr int gemm_smem_bytes =
    gemm_mainloop_bytes > gemm_stats_bytes ? gemm_mainloop_bytes : gemm_stats_bytes;

static_assert(GEMM_BM == 128 && GEMM_BN == 128 && GEMM_BK == 8 && GEMM_THREADS == 256,
              "the load and fragment mappings below are written for this configuration");
static_assert(GEMM_LDS % 4 == 0, "fragment reads are 16 bytes");


#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace gemm_detail {

// True when float4 accesses at (row, col) with col % 4 == 0 are 16-byte aligned for every row.
__device__ __forceinline__ bool vec4_ok(const float *p, int ld) {
  return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0 && (ld & 3) == 0;
}

// P[row, col .. col+3] of a row-major [rows, cols] matrix, zero outside it. col % 4 == 0.
__device__ __forceinline__ float4 load4(const float *__restrict__ p, int ld, int row, int col,
                                        int rows, int cols, bool vec) {
  float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (row < rows) {
    const float *q = p + (static_cast<long long>(row) * ld + col);
    if (vec && col + 3 < cols) {
      v = __ldg(reinterpret_cast<const float4 *>(q));
    } else {
      if (col < cols)
        v.x = __ldg(q);
      if (col + 1 < cols)
        v.y = __ldg(q + 1);
      if (col + 2 < cols)
        v.z = __ldg(q + 2);
      if (col + 3 < cols)
        v.w = __ldg(q + 3);
    }
  }
  return v;
}

// Thread t of the block loads 4 consecutive k of one tile row (k-contiguous operand: A, or B
// when TransB): row t / 2, k offset (t % 2) * 4. 128 rows x 8 k = 1024 floats = 256 float4.
__device__ __forceinline__ int kmajor_row(int t) { return t >> 1; }
__device__ __forceinline__ int kmajor_k(int t) { return (t & 1) * 4; }
// Thread t loads 4 consecutive n of one k row of B when !TransB: k row t / 32, n offset
// (t % 32) * 4.
__device__ __forceinline__ int nmajor_k(int t) { return t >> 5; }
__device__ __forceinline__ int nmajor_col(int t) { return (t & 31) * 4; }

// Stores a k-contiguous float4 transposed into a K-major tile.
__device__ __forceinline__ void store_transposed(float *tile, int t, float4 v) {
  const int r = kmajor_row(t), kk = kmajor_k(t);
  tile[(kk + 0) * GEMM_LDS + r] = v.x;
  tile[(kk + 1) * GEMM_LDS + r] = v.y;
  tile[(kk + 2) * GEMM_LDS + r] = v.z;
  tile[(kk + 3) * GEMM_LDS + r] = v.w;
}

// Tile-local row (column) of a thread's accumulator row i (column j): thread row group ty owns
// rows ty*4 + {0..3} and 64 + ty*4 + {0..3}; the same for columns with tx.
__device__ __forceinline__ int frag_offset(int group, int i) {
  return i < 4 ? group * 4 + i : 64 + group * 4 + (i - 4);
}

// Chan et al.'s pairwise merge of (count, mean, M2) summaries; nb == 0 leaves a unchanged.
__device__ __forceinline__ void chan_merge(float &na, float &mean_a, float &m2_a, float nb,
                                           float mean_b, float m2_b) {
  if (nb == 0.0f)
    return;
  const float n = na + nb;
  const float delta = mean_b - mean_a;
  const float wb = nb / n;
  mean_a = mean_a + delta * wb;
  m2_a = m2_a + m2_b + delta * delta * na * wb;
  na = n;
}

} // namespace gemm_detail

template <bool TransB, class Epilogue>
__device__ void gemm_simt(GemmShape s, const float *__restrict__ A, int lda,
                          const float *__restrict__ B, int ldb, float *__restrict__ C, int ldc,
                          const Epilogue &epi, float *__restrict__ partial_mean,
                          float *__restrict__ partial_m2) {
  using namespace gemm_detail;
  extern __shared__ __align__(16) float kf_gemm_smem[];

  const int t = threadIdx.x;
  const int m0 = blockIdx.y * GEMM_BM;
  const int n0 = blockIdx.x * GEMM_BN;
  const bool vec_a = vec4_ok(A, lda);
  const bool vec_b = vec4_ok(B, ldb);

  // Compute mapping: a warp is 4 (rows) x 8 (cols) threads, the 8 warps are 4 x 2, so a warp's
  // fragment reads touch 64 contiguous bytes of A and 128 of B per k (one wavefront each).
  const int warp = t >> 5, lane = t & 31;
  const int ty = (warp >> 1) * 4 + (lane >> 3); // 0..15: rows ty*4 + {0..3}, 64 + ty*4 + {0..3}
  const int tx = (warp & 1) * 8 + (lane & 7);   // 0..15: cols tx*4 + {0..3}, 64 + tx*4 + {0..3}

  float acc[GEMM_TM][GEMM_TN];
#pragma unroll
  for (int i = 0; i < GEMM_TM; ++i)
#pragma unroll
    for (int j = 0; j < GEMM_TN; ++j)
      acc[i][j] = 0.0f;

  // Global -> register loads of K-tile kt (kept in registers while the previous tile is
  // multiplied, then stored to the other shared stage).
  auto load_a = [&](int kt) {
    return load4(A, lda, m0 + kmajor_row(t), kt * GEMM_BK + kmajor_k(t), s.m, s.k, vec_a);
  };
  auto load_b = [&](int kt) {
    if constexpr (TransB)
      return load4(B, ldb, n0 + kmajor_row(t), kt * GEMM_BK + kmajor_k(t), s.n, s.k, vec_b);
    else
      return load4(B, ldb, kt * GEMM_BK + nmajor_k(t), n0 + nmajor_col(t), s.k, s.n, vec_b);
  };
  auto store_stage = [&](int stage, float4 a, float4 b) {
    float *as = kf_gemm_smem + stage * GEMM_STAGE_FLOATS;
    float *bs = as + GEMM_BK * GEMM_LDS;
    store_transposed(as, t, a);
    if constexpr (TransB)
      store_transposed(bs, t, b);
    else
      *reinterpret_cast<float4 *>(bs + nmajor_k(t) * GEMM_LDS + nmajor_col(t)) = b;
  };

  const int ktiles = (s.k + GEMM_BK - 1) / GEMM_BK;
  {
    const float4 a = load_a(0), b = load_b(0);
    store_stage(0, a, b);
  }
  __syncthreads();

  for (int kt = 0; kt < ktiles; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < ktiles;
    float4 next_a = make_float4(0.0f, 0.0f, 0.0f, 0.0f), next_b = next_a;
    if (more) {
      next_a = load_a(kt + 1);
      next_b = load_b(kt + 1);
    }
    const float *as = kf_gemm_smem + cur * GEMM_STAGE_FLOATS;
    const float *bs = as + GEMM_BK * GEMM_LDS;
#pragma unroll
    for (int kk = 0; kk < GEMM_BK; ++kk) {
      const float4 a_lo = *reinterpret_cast<const float4 *>(as + kk * GEMM_LDS + ty * 4);
      const float4 a_hi = *reinterpret_cast<const float4 *>(as + kk * GEMM_LDS + 64 + ty * 4);
      const float4 b_lo = *reinterpret_cast<const float4 *>(bs + kk * GEMM_LDS + tx * 4);
      const float4 b_hi = *reinterpret_cast<const float4 *>(bs + kk * GEMM_LDS + 64 + tx * 4);
      const float a[GEMM_TM] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
      const float b[GEMM_TN] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
      for (int i = 0; i < GEMM_TM; ++i)
#pragma unroll
        for (int j = 0; j < GEMM_TN; ++j)
          acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    // The other stage was last read in iteration kt - 1, which ended with a barrier.
    if (more)
      store_stage(cur ^ 1, next_a, next_b);
    __syncthreads();
  }
  // Every thread is past its last shared-memory read here (the loop, or the prologue when
  // ktiles == 0, ends with a barrier), so the statistics below may reuse the shared memory.

  // Epilogue: apply, store, and keep the stored value in acc for the statistics.
  const bool vec_c = vec4_ok(C, ldc);
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const int c0 = n0 + g * 64 + tx * 4;
    const typename Epilogue::Column cols[4] = {
        epi.column(min(c0 + 0, s.n - 1)), epi.column(min(c0 + 1, s.n - 1)),
        epi.column(min(c0 + 2, s.n - 1)), epi.column(min(c0 + 3, s.n - 1))};
#pragma unroll
    for (int i = 0; i < GEMM_TM; ++i) {
      const int row = m0 + frag_offset(ty, i);
      if (row >= s.m)
        continue;
      float *crow = C + (static_cast<long long>(row) * ldc + c0);
      if (c0 + 3 < s.n) {
        float4 v;
        v.x = epi.apply(cols[0], row, c0 + 0, acc[i][g * 4 + 0]);
        v.y = epi.apply(cols[1], row, c0 + 1, acc[i][g * 4 + 1]);
        v.z = epi.apply(cols[2], row, c0 + 2, acc[i][g * 4 + 2]);
        v.w = epi.apply(cols[3], row, c0 + 3, acc[i][g * 4 + 3]);
        acc[i][g * 4 + 0] = v.x;
        acc[i][g * 4 + 1] = v.y;
        acc[i][g * 4 + 2] = v.z;
        acc[i][g * 4 + 3] = v.w;
        if (vec_c) {
          *reinterpret_cast<float4 *>(crow) = v;
        } else {
          crow[0] = v.x;
          crow[1] = v.y;
          crow[2] = v.z;
          crow[3] = v.w;
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (c0 + j < s.n) {
            const float v = epi.apply(cols[j], row, c0 + j, acc[i][g * 4 + j]);
            acc[i][g * 4 + j] = v;
            crow[j] = v;
          }
        }
      }
    }
  }

  if (partial_mean == nullptr)
    return;

  // Per-thread summary of its valid rows (the same rows for all 8 of its columns): two-pass
  // mean and M2 over at most 8 register values.
  const int tile_rows = min(GEMM_BM, s.m - m0);
  int count = 0;
#pragma unroll
  for (int i = 0; i < GEMM_TM; ++i)
    count += frag_offset(ty, i) < tile_rows;
  float *sm_mean = kf_gemm_smem;                           // [ROW_GROUPS][BN]
  float *sm_m2 = kf_gemm_smem + GEMM_ROW_GROUPS * GEMM_BN; // [ROW_GROUPS][BN]
  const float inv_count = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
#pragma unroll
  for (int j = 0; j < GEMM_TN; ++j) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < GEMM_TM; ++i)
      if (frag_offset(ty, i) < tile_rows)
        sum += acc[i][j];
    const float mean = sum * inv_count;
    float m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < GEMM_TM; ++i) {
      if (frag_offset(ty, i) < tile_rows) {
        const float d = acc[i][j] - mean;
        m2 = fmaf(d, d, m2);
      }
    }
    const int cl = frag_offset(tx, j);
    sm_mean[ty * GEMM_BN + cl] = mean;
    sm_m2[ty * GEMM_BN + cl] = m2;
  }
  __syncthreads();

  // One thread per tile column merges the row groups in order 0..15.
  if (t < GEMM_BN && n0 + t < s.n) {
    float n_acc = 0.0f, mean_acc = 0.0f, m2_acc = 0.0f;
    for (int g = 0; g < GEMM_ROW_GROUPS; ++g) {
      int cnt = 0; // the valid rows of row group g
#pragma unroll
      for (int i = 0; i < GEMM_TM; ++i)
        cnt += frag_offset(g, i) < tile_rows;
      chan_merge(n_acc, mean_acc, m2_acc, static_cast<float>(cnt), sm_mean[g * GEMM_BN + t],
                 sm_m2[g * GEMM_BN + t]);
    }
    const long long idx = static_cast<long long>(blockIdx.y) * s.n + n0 + t;
    partial_mean[idx] = mean_acc;
    partial_m2[idx] = m2_acc;
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
