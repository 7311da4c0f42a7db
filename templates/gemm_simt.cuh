// fp32 SIMT GEMM mainloop: the accumulators of one BM x BN tile in registers, handed to the
// shared epilogue (gemm_epilogue.cuh), on the tile the scheduler (tile_scheduler.cuh) assigns.
//
//   C[row, col] = epi.functor.apply(epi.functor.column(col), row, col, sum_k A[row, k] * B'[k,
//   col])
//
// A is [m, k] row-major (leading dim lda). B' is B^T when TransB (B is [n, k] row-major, a
// PyTorch Linear weight) and B itself otherwise (B is [k, n] row-major). C is [m, n] row-major
// (ldc) and aliases neither A, B nor any epilogue input.
//
// Launch geometry (the generated entry point must use exactly this):
//   block = dim3(GEMM_THREADS), grid = one block per work unit (tile and K split) of the
//   scheduler TileScheduler<GEMM_BM, GEMM_BN, GEMM_GROUP_M> (its K is split in k-blocks of
//   GEMM_BK), dynamic shared memory = gemm_smem_bytes
//   (gemm_rows_smem_bytes where the epilogue runs row passes; above 48 KiB the launcher raises
//   CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), entry
//   point declared __launch_bounds__(GEMM_THREADS, GEMM_MIN_BLOCKS) so that the register cap
//   keeps two blocks per SM.
// Blocks write disjoint tiles of C and of the partial statistics (split-K: the tile's last split).
//
// Mainloop: a GEMM_STAGES-deep cp.async pipeline of BK = 16 K-slices into K-major shared tiles
// ([BK][BM] for A, [BK][BN] for B), so that a thread reads its 4-wide row and column fragments
// as float4 (LDS.128) and does 64 FFMAs per 4 fragment loads; fragments of slice k + 1 are
// loaded while slice k is multiplied (double-buffered registers). A k-contiguous operand (A,
// and B when TransB) is transposed by the copies themselves: 4-byte cp.async, a warp covering
// 4 rows x 8 k (32-byte global segments, 32 distinct banks in shared memory). B when !TransB
// is already n-major and goes in with 16-byte cp.async.cg where allowed (see Sizes).
//
// Epilogue: gemm_epilogue.cuh's, with SimtFragment's layout (float4 stores of C); its
// statistics scratch and staged rows reuse the pipeline's shared memory.
//
// Sizes: any m, n, k >= 0 (k = 0 gives apply(..., 0.0f)). Out-of-range elements of a K-slice
// are zero-filled by the copies (src-size 0, nothing read; the source address is then the
// matrix base). 16-byte copies (of B when !TransB) are used only where the base pointer is
// 16-byte aligned and the leading dimension is a multiple of 4 (checked at run time, uniformly
// per matrix); a 16-byte copy reads only its in-bounds bytes. Addresses are computed in 64-bit.
//
// This header is also valid host C++ (device code is compiled only by NVCC/NVRTC), so the
// code generator can take the geometry constants from the same source.
#pragma once

#include "gemm_epilogue.cuh"
#include "gemm_primitives.cuh"
#include "tile_scheduler.cuh"

namespace kf {

inline constexpr int GEMM_BM = 128;   // tile rows
inline constexpr int GEMM_BN = 128;   // tile columns
inline constexpr int GEMM_BK = 16;    // K depth of one shared-memory stage
inline constexpr int GEMM_STAGES = 3; // cp.async pipeline depth (STAGES - 1 slices in flight)
inline constexpr int GEMM_TM = 8;     // accumulator rows per thread: two groups of 4, 64 rows apart
inline constexpr int GEMM_TN = 8;     // accumulator cols per thread: two groups of 4, 64 cols apart
inline constexpr int GEMM_THREADS = 256;  // (BM / TM) * (BN / TN)
inline constexpr int GEMM_MIN_BLOCKS = 2; // __launch_bounds__' second argument: 128 registers
inline constexpr int GEMM_GROUP_M = 8;    // row tiles per rasterization group (tile_scheduler)
// What a split-K partial tile costs, in k-blocks (the launch's split rule): written and read
// back, 8 bytes per element against a k-block's 2 * BK FLOP per element, so 0.25 B per FLOP;
// at the FMA rate one SM reaches here (about 0.35 TFLOP/s) against its share of DRAM bandwidth
// with every SM streaming (about 23 GB/s), about 4 k-blocks.
inline constexpr int GEMM_SPLIT_COST_KBLOCKS = 4;
// Shared tiles are K-major ([BK][BM] for A, [BK][BN] for B). The row stride is padded by 4
// floats so that the transposing 4-byte copies (a warp: 8 k x 4 rows) hit 32 distinct banks
// (132 = 4 mod 32), and stays a multiple of 4 floats for 16-byte fragment reads and copies.
inline constexpr int GEMM_LDS = GEMM_BM + 4;
inline constexpr int GEMM_TILE_FLOATS = GEMM_BK * GEMM_LDS;    // one operand's K-slice
inline constexpr int GEMM_STAGE_FLOATS = 2 * GEMM_TILE_FLOATS; // A tile + B tile
inline constexpr int gemm_mainloop_bytes = GEMM_STAGES * GEMM_STAGE_FLOATS * 4; // 50688

namespace gemm_detail {
// Tile-local row (column) of a thread's accumulator row i (column j): thread row group ty owns
// rows ty*4 + {0..3} and 64 + ty*4 + {0..3}; the same for columns with tx.
KF_HOST_DEVICE constexpr int frag_offset(int group, int i) {
  return i < 4 ? group * 4 + i : 64 + group * 4 + (i - 4);
}
} // namespace gemm_detail

// Which tile element each accumulator acc[i][j] of thread t holds (gemm_epilogue.cuh's
// Fragment). A warp is 4 (rows) x 8 (cols) threads, the 8 warps are 4 x 2, so a warp's fragment
// reads touch 64 contiguous bytes of A and 128 of B per k (one wavefront each).
struct SimtFragment {
  static constexpr int BM = GEMM_BM, BN = GEMM_BN;
  static constexpr int ROWS = GEMM_TM, COLS = GEMM_TN;
  static constexpr int VEC = 4;            // columns tx*4 + {0..3} and 64 + tx*4 + {0..3}
  static constexpr int ROW_LANE_SHIFT = 3; // lane / 8 picks the row group inside a warp
  static constexpr int ROW_GROUPS = 4;     // warps 2w and 2w + 1: rows 16w.. and 64 + 16w..
  static constexpr int THREADS = GEMM_THREADS;
  int thread;
  int ty; // 0..15: rows ty*4 + {0..3}, 64 + ty*4 + {0..3}
  int tx; // 0..15: cols tx*4 + {0..3}, 64 + tx*4 + {0..3}
  KF_HOST_DEVICE explicit SimtFragment(int t)
      : thread(t), ty((t >> 6) * 4 + ((t & 31) >> 3)), tx(((t >> 5) & 1) * 8 + (t & 7)) {}
  KF_HOST_DEVICE int row(int i) const { return gemm_detail::frag_offset(ty, i); }
  KF_HOST_DEVICE int col(int j) const { return gemm_detail::frag_offset(tx, j); }
  KF_HOST_DEVICE int row_group() const { return thread >> 6; }
  KF_HOST_DEVICE static constexpr int group_rows(int group, int tile_rows) {
    return rows_below(tile_rows, 16 * group, 16) + rows_below(tile_rows, 64 + 16 * group, 16);
  }
  template <class Acc> KF_HOST_DEVICE static auto &at(Acc &acc, int i, int j) { return acc[i][j]; }
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  __device__ static void sync() { __syncthreads(); }
#endif
};

inline constexpr int gemm_smem_bytes = gemm_mainloop_bytes > epilogue_stats_bytes<SimtFragment>()
                                           ? gemm_mainloop_bytes
                                           : epilogue_stats_bytes<SimtFragment>();

// A kernel whose epilogue runs row passes (gemm_epilogue.cuh's Rows) stages its tile in the same
// shared memory, which then needs this much.
inline constexpr int gemm_rows_smem_bytes = gemm_smem_bytes > epilogue_rows_bytes<SimtFragment>()
                                                ? gemm_smem_bytes
                                                : epilogue_rows_bytes<SimtFragment>();

static_assert(GEMM_BM == 128 && GEMM_BN == 128 && GEMM_BK == 16 && GEMM_THREADS == 256,
              "the copy and fragment mappings below are written for this configuration");
static_assert(GEMM_STAGES >= 2, "the pipeline needs at least two stages");
static_assert(GEMM_LDS % 4 == 0 && GEMM_LDS % 32 == 4,
              "fragment reads are 16 bytes; the transposing copies need stride = 4 mod 32");
static_assert(GEMM_MIN_BLOCKS * gemm_rows_smem_bytes <= 227 * 1024, "two blocks must fit an SM");

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace gemm_detail {

// Copies one K-slice of a k-contiguous operand P ([rows, k] row-major) into the K-major tile at
// shared address dst (tile[kk * LDS + r] = P[r0 + r, k0 + kk]). Thread t copies rows
// t / 8 + 32 * i (i < 4) at k offsets t % 8 + 8 * h (h < 2): a warp covers 4 rows x 8 k, so
// each global segment is 32 contiguous bytes and the 32 shared words land in bank
// 4 * (t % 8) + (t / 8) % 4 (+ a warp constant): all distinct. p is &P[r0 + t / 8, t % 8],
// row32 = 32 * ld, rows_left = rows - (r0 + t / 8), k_left = k - (k0 + t % 8).
__device__ __forceinline__ void copy_kmajor(unsigned dst, const float *__restrict__ P,
                                            const float *p, long long row32, int k0, int rows_left,
                                            int k_left) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool ok = 32 * i < rows_left && 8 * h < k_left;
      const float *src = p + (i * row32 + (k0 + 8 * h));
      cp_async4(dst + ((8 * h) * GEMM_LDS + 32 * i) * 4, ok ? src : P, ok ? 4 : 0);
    }
  }
}

} // namespace gemm_detail

template <bool TransB, class Scheduler, class Epilogue>
__device__ void gemm_simt(GemmShape s, const Scheduler &tiles, const float *__restrict__ A, int lda,
                          const float *__restrict__ B, int ldb, const Epilogue &epi) {
  static_assert(Scheduler::BM == GEMM_BM && Scheduler::BN == GEMM_BN,
                "the scheduler hands out this mainloop's tiles");
  using namespace gemm_detail;
  extern __shared__ __align__(16) float kf_gemm_smem[];

  const int t = threadIdx.x;
  const int ktiles = (s.k + GEMM_BK - 1) / GEMM_BK;
  const WorkUnit unit = tiles.unit(tiles.first(), ktiles); // one block per unit
  const int m0 = unit.tile.m * GEMM_BM;
  const int n0 = unit.tile.n * GEMM_BN;
  const bool vec_b = vector_ok<4>(B, ldb);

  const SimtFragment layout(t);
  const int ty = layout.ty, tx = layout.tx;

  float acc[GEMM_TM][GEMM_TN];
#pragma unroll
  for (int i = 0; i < GEMM_TM; ++i)
#pragma unroll
    for (int j = 0; j < GEMM_TN; ++j)
      acc[i][j] = 0.0f;

  // Per-thread copy state (see copy_kmajor): the k-contiguous operands start at row t / 8 and
  // k offset t % 8 of the tile; B when !TransB at k row t / 32 (+ 8) and columns (t % 32) * 4.
  const unsigned smem0 = smem_addr(kf_gemm_smem);
  const int cr = t >> 3, ck = t & 7;
  const unsigned kmajor_dst = ((ck * GEMM_LDS + cr) * 4);
  const float *pa = A + (static_cast<long long>(m0 + cr) * lda + ck);
  const long long a_row32 = 32ll * lda;
  const int a_rows_left = s.m - (m0 + cr);
  // TransB: B's rows (= columns of C) as for A. !TransB: pb = &B[t / 32, n0 + (t % 32) * 4],
  // b_step = 8 * ldb (the second copy's k row), b_left = n - (n0 + (t % 32) * 4) columns.
  const float *pb;
  long long b_step;
  int b_left;
  if constexpr (TransB) {
    pb = B + (static_cast<long long>(n0 + cr) * ldb + ck);
    b_step = 32ll * ldb;
    b_left = s.n - (n0 + cr);
  } else {
    pb = B + (static_cast<long long>(t >> 5) * ldb + (n0 + (t & 31) * 4));
    b_step = 8ll * ldb;
    b_left = s.n - (n0 + (t & 31) * 4);
  }

  // Issues the copies of K-slice kt into stage st (the caller makes one commit group).
  auto load_stage = [&](int st, int kt) {
    const int k0 = kt * GEMM_BK;
    const unsigned a_dst = smem0 + st * (GEMM_STAGE_FLOATS * 4);
    const unsigned b_dst = a_dst + GEMM_TILE_FLOATS * 4;
    copy_kmajor(a_dst + kmajor_dst, A, pa, a_row32, k0, a_rows_left, s.k - (k0 + ck));
    if constexpr (TransB) {
      copy_kmajor(b_dst + kmajor_dst, B, pb, b_step, k0, b_left, s.k - (k0 + ck));
    } else {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int krow = (t >> 5) + 8 * h;
        const bool k_ok = k0 + krow < s.k;
        const unsigned dst = b_dst + (krow * GEMM_LDS + (t & 31) * 4) * 4;
        const float *src = pb + (static_cast<long long>(k0) * ldb + h * b_step);
        if (vec_b) {
          int bytes = k_ok ? b_left * 4 : 0;
          bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);
          cp_async16(dst, bytes > 0 ? src : B, bytes);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const bool ok = k_ok && e < b_left;
            cp_async4(dst + e * 4, ok ? src + e : B, ok ? 4 : 0);
          }
        }
      }
    }
  };

  // The fragments of slice kk of a stage: rows ty*4 + {0..3} and 64 + ty*4 + {0..3} of A,
  // the same columns of B (via tx).
  struct Frag {
    float4 a_lo, a_hi, b_lo, b_hi;
  };
  auto load_frag = [&](const float *as, int kk, Frag &f) {
    const float *bs = as + GEMM_TILE_FLOATS;
    f.a_lo = *reinterpret_cast<const float4 *>(as + kk * GEMM_LDS + ty * 4);
    f.a_hi = *reinterpret_cast<const float4 *>(as + kk * GEMM_LDS + 64 + ty * 4);
    f.b_lo = *reinterpret_cast<const float4 *>(bs + kk * GEMM_LDS + tx * 4);
    f.b_hi = *reinterpret_cast<const float4 *>(bs + kk * GEMM_LDS + 64 + tx * 4);
  };

  // Multistage pipeline over the unit's slices [k_begin, k_end): STAGES - 1 slices in flight
  // ahead of the one being multiplied. One commit group per iteration (possibly empty) keeps the
  // wait_group count uniform.
  const int k_begin = unit.k_begin, k_end = unit.k_end;
#pragma unroll
  for (int st = 0; st < GEMM_STAGES - 1; ++st) {
    if (k_begin + st < k_end)
      load_stage(st, k_begin + st);
    cp_async_commit();
  }
  int stage = 0;                    // (kt - k_begin) % STAGES
  int next_stage = GEMM_STAGES - 1; // (kt - k_begin + STAGES - 1) % STAGES
  for (int kt = k_begin; kt < k_end; ++kt) {
    cp_async_wait<GEMM_STAGES - 2>(); // this thread's copies of slice kt have landed
    __syncthreads(); // everyone's have; and everyone is done reading slice kt - 1's stage
    if (kt + GEMM_STAGES - 1 < k_end)
      load_stage(next_stage, kt + GEMM_STAGES - 1); // overwrites the stage of slice kt - 1
    cp_async_commit();

    const float *as = kf_gemm_smem + stage * GEMM_STAGE_FLOATS;
    Frag frag[2];
    load_frag(as, 0, frag[0]);
#pragma unroll
    for (int kk = 0; kk < GEMM_BK; ++kk) {
      if (kk + 1 < GEMM_BK)
        load_frag(as, kk + 1, frag[(kk + 1) & 1]);
      const Frag &f = frag[kk & 1];
      const float a[GEMM_TM] = {f.a_lo.x, f.a_lo.y, f.a_lo.z, f.a_lo.w,
                                f.a_hi.x, f.a_hi.y, f.a_hi.z, f.a_hi.w};
      const float b[GEMM_TN] = {f.b_lo.x, f.b_lo.y, f.b_lo.z, f.b_lo.w,
                                f.b_hi.x, f.b_hi.y, f.b_hi.z, f.b_hi.w};
#pragma unroll
      for (int i = 0; i < GEMM_TM; ++i)
#pragma unroll
        for (int j = 0; j < GEMM_TN; ++j)
          acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    stage = stage + 1 == GEMM_STAGES ? 0 : stage + 1;
    next_stage = next_stage + 1 == GEMM_STAGES ? 0 : next_stage + 1;
  }
  // Only empty commit groups can be pending; the epilogue's statistics may reuse the stages
  // after a barrier of their own.
  cp_async_wait<0>();
  epi.template run<false>(layout, s, unit, acc, nullptr, kf_gemm_smem);
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
