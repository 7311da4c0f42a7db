// fp32 SIMT GEMM mainloop: one BM x BN tile's accumulators in registers, on the tile the
// scheduler (tile_scheduler.cuh) assigns, handed to the shared epilogue (gemm_epilogue.cuh).
//
//   C[row, col] = epi.functor.apply(epi.functor.column(col), row, col, sum_k A[row,k] * B'[k,col])
//
// A' is A ([m, k] row-major, lda), or A^T when TransA (A [k, m] row-major: the weight gradient
// g^T x of a backward graph reads g where it lies). B' is B^T when TransB (B [n, k] row-major, a
// Linear weight), else B ([k, n] row-major). C is [m, n] row-major (ldc) and aliases neither A, B
// nor any epilogue input.
//
// SimtGemm<BM, BN, WARPS_M, WARPS_N, MIN_BLOCKS>: WARPS_M x WARPS_N warps per tile, each thread
// TM x TN accumulators (one group of 4 rows/columns, or two groups BM / 2 (BN / 2) apart).
// SimtWide (128 x 128) is the throughput tile; SimtNarrow (128 x 32) gives batches whose wide
// tiles leave SMs idle four times the tiles at the same height (statistics partials per 128 rows
// in both).
//
// Launch (the generated entry point must use exactly this): block = THREADS; grid = one block
// per work unit of TileScheduler<BM, BN, GROUP_M> (k-blocks of BK); dynamic shared memory =
// SMEM_BYTES (above 48 KiB the launcher raises the limit); __launch_bounds__(THREADS,
// MIN_BLOCKS). Blocks write disjoint tiles of C and of the partials (split-K: the last split).
//
// Mainloop: a STAGES-deep cp.async pipeline of BK = 16 K-slices into K-major shared tiles, so a
// thread reads its 4-wide fragments as float4, registers double-buffered across slices. A
// k-contiguous operand (A when !TransA, B when TransB) is transposed by its 4-byte copies
// (KMajorCopy: a warp covers 4 rows x 8 k, 32-byte global segments, 32 distinct banks); an
// operand already K-major (A when TransA, B when !TransB) goes in with 16-byte cp.async.cg where
// allowed (NMajorCopy). The epilogue stages the whole tile
// (Store::Tile) in the pipeline's shared memory, as do its statistics and row passes.
//
// Sizes: any m, n, k >= 0 (k = 0 gives apply(..., 0.0f)). K-slice elements past k, B's
// columns past n when !TransB and A's past m when TransA, are zero-filled (src-size 0, nothing
// read). A k-contiguous operand's rows past m (n) repeat its last row: they reach only accumulators
// the epilogue neither stores nor counts. 16-byte copies only where the base is 16-byte aligned and
// the leading dimension a multiple of 4 (checked at run time, per matrix). 64-bit addresses.
//
// Also valid host C++, so the code generator can take the geometry constants from this source.
#pragma once

#include "gemm_epilogue.cuh"
#include "gemm_primitives.cuh"
#include "tile_scheduler.cuh"

namespace kf {

// Which tile element each accumulator acc[i][j] of thread t holds (gemm_epilogue.cuh's
// Fragment). A warp is 4 (rows) x 8 (columns) threads and the warps are WARPS_M x WARPS_N, so
// a warp's fragment reads touch 64 contiguous bytes of A and 128 of B per k (one wavefront
// each). Thread row ty owns rows ty * 4 + {0..3} (and BM / 2 + ty * 4 + {0..3} where TM = 8);
// the same for columns with tx.
template <int BlockM, int BlockN, int WarpsM, int WarpsN, int Threads> struct SimtFragment {
  static constexpr int BM = BlockM, BN = BlockN;
  static constexpr int ROWS = BM / (4 * WarpsM), COLS = BN / (8 * WarpsN);
  static constexpr int VEC = 4;             // columns tx*4 + {0..3} (and BN / 2 + tx*4 + ...)
  static constexpr int ROW_LANE_SHIFT = 3;  // lane / 8 picks the row group inside a warp
  static constexpr int ROW_GROUPS = WarpsM; // warp row w: rows 16w.. (and BM / 2 + 16w..)
  static constexpr Store STORE = Store::Tile;
  static constexpr int THREADS = Threads;
  static_assert((ROWS == 4 || ROWS == 8) && (COLS == 4 || COLS == 8),
                "a thread holds one or two groups of 4 rows and of 4 columns");
  int thread;
  int ty; // 0 .. 4 * WARPS_M - 1
  int tx; // 0 .. 8 * WARPS_N - 1
  KF_HOST_DEVICE explicit SimtFragment(int t)
      : thread(t), ty(warp(t) / WarpsN * 4 + ((t & 31) >> 3)), tx(warp(t) % WarpsN * 8 + (t & 7)) {}
  KF_HOST_DEVICE int row(int i) const { return (i >> 2) * (BM / 2) + ty * 4 + (i & 3); }
  KF_HOST_DEVICE int col(int j) const { return (j >> 2) * (BN / 2) + tx * 4 + (j & 3); }
  KF_HOST_DEVICE int row_group() const { return static_cast<int>(warp(thread) / WarpsN); }
  KF_HOST_DEVICE int col_group() const { return static_cast<int>(warp(thread) % WarpsN); }
  // The slice of w columns holding col(j).
  KF_HOST_DEVICE int slice_of(int j, int w) const { return col(j) / w; }
  // Unsigned, so that dividing by WarpsN is a shift.
  KF_HOST_DEVICE static constexpr unsigned warp(int t) { return static_cast<unsigned>(t) >> 5; }
  KF_HOST_DEVICE static constexpr int group_rows(int group, int tile_rows) {
    return rows_below(tile_rows, 16 * group, 16) +
           (ROWS == 8 ? rows_below(tile_rows, BM / 2 + 16 * group, 16) : 0);
  }
  template <class Acc> KF_HOST_DEVICE static auto &at(Acc &acc, int i, int j) { return acc[i][j]; }
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  __device__ static void sync() { __syncthreads(); }
#endif
};

template <int BlockM, int BlockN, int WarpsM, int WarpsN, int MinBlocks, int KBlockTime>
struct SimtGemm {
  static constexpr int BM = BlockM, BN = BlockN; // tile rows and columns
  static constexpr int WARPS_M = WarpsM, WARPS_N = WarpsN;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int MIN_BLOCKS = MinBlocks; // __launch_bounds__' second argument
  static constexpr int BK = 16;                // K depth of one shared-memory stage
  static constexpr int STAGES = 3;             // cp.async pipeline depth (STAGES - 1 in flight)
  static constexpr int GROUP_M = 8;            // row tiles per rasterization group
  using Fragment = SimtFragment<BM, BN, WARPS_M, WARPS_N, THREADS>;
  static constexpr int TM = Fragment::ROWS, TN = Fragment::COLS;
  // What a split-K partial tile costs, in k-blocks (the launch's split rule): written and read
  // back, 8 bytes per element against a k-block's 2 * BK FLOP per element, so 0.25 B per FLOP;
  // at one SM's FMA rate against its share of DRAM bandwidth with every SM streaming, that
  // traffic takes about as long as 4 k-blocks.
  static constexpr int SPLIT_COST_KBLOCKS = 4;
  // A k-block's time on an SM running one block, relative to the other configurations' (the
  // launch picks the tile of lowest estimated time, runtime/launch_geometry.cpp).
  static constexpr int KBLOCK_TIME = KBlockTime;
  // Shared tiles are K-major ([BK][BM + 4] for A, [BK][BN + 4] for B). The row strides are
  // padded by 4 floats so that the transposing 4-byte copies (a warp: 8 k x 4 rows) hit 32
  // distinct banks (stride = 4 mod 32), and stay multiples of 4 floats for 16-byte fragment reads
  // and copies.
  static constexpr int LDA = BM + 4, LDB = BN + 4;
  static constexpr int A_FLOATS = BK * LDA, B_FLOATS = BK * LDB;
  static constexpr int STAGE_FLOATS = A_FLOATS + B_FLOATS;
  static constexpr int MAINLOOP_BYTES = STAGES * STAGE_FLOATS * 4;
  // The epilogue stages the whole tile (Store::Tile) in the same shared memory.
  static constexpr int SMEM_BYTES = MAINLOOP_BYTES > epilogue_tile_bytes<Fragment>()
                                        ? MAINLOOP_BYTES
                                        : epilogue_tile_bytes<Fragment>();
  // The transposing copies: THREADS / 8 rows per round (a thread: k offsets t % 8 and + 8).
  static constexpr int COPY_ROWS = THREADS / 8;

  static_assert(BM % COPY_ROWS == 0 && BN % COPY_ROWS == 0, "whole rounds of transposing copies");
  static_assert(BK == 16, "a thread's transposing copies cover k offsets t % 8 and t % 8 + 8");
  static_assert(STAGES >= 2, "the pipeline needs at least two stages");
  static_assert(LDA % 4 == 0 && LDA % 32 == 4 && LDB % 4 == 0 && LDB % 32 == 4,
                "fragment reads are 16 bytes; the transposing copies need stride = 4 mod 32");
  static_assert(epilogue_stats_bytes<Fragment>() <= SMEM_BYTES, "the statistics scratch fits");
  static_assert(MIN_BLOCKS * SMEM_BYTES <= 227 * 1024, "MIN_BLOCKS blocks must fit an SM");
};

// The throughput tile: 64 FFMAs per 4 fragment loads, 128 registers (two blocks per SM).
using SimtWide = SimtGemm<128, 128, 4, 2, 2, 5>;
// Four times the tiles at the same height, for batches whose wide tiles leave SMs idle or
// split K into short units. A k-block takes 2/5 of a wide one's time alone on an SM (a quarter
// of the FLOPs at 1.6x the time per FLOP: 4 warps, 32 FFMAs per 3 fragment loads), a ratio
// fitted by timing whole waves of both tiles.
using SimtNarrow = SimtGemm<128, 32, 4, 1, 4, 2>;

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace gemm_detail {

// The transposing copies of a k-contiguous operand P ([rows, k] row-major, leading dimension
// ld) into K-major tiles of TILE_ROWS rows (tile[kk * LD + r] = P[r0 + r, k0 + kk]), one K-slice
// of BK = 16 per issue(), slices in order. Thread t copies rows t / 8 + COPY_ROWS * i at k
// offsets t % 8 and t % 8 + 8: a warp covers 4 rows x 8 k, so each global segment is 32
// contiguous bytes and the 32 shared words land in bank 4 * (t % 8) + (t / 8) % 4 (+ a warp
// constant): all distinct. A slice costs its copies and one multiply-add per row (the slice's
// base pointer plus row * ld, one IMAD.WIDE); a row past the matrix reads its last row instead
// (see Sizes). Only a slice reaching past k tests k, zero-filling (nothing read, the source
// address then P itself).
template <int TILE_ROWS, int COPY_ROWS, int LD> struct KMajorCopy {
  static constexpr int ROUNDS = TILE_ROWS / COPY_ROWS;
  const float *base; // &P[0, k0 + t % 8] of the next slice's k0
  int ld;
  int row0; // the first row this thread copies: r0 + t / 8
  int last; // the matrix's last row

  // r0: the tile's first row in P; k: the first slice's k0.
  __device__ __forceinline__ KMajorCopy(const float *P, int ld_, int rows, int r0, int k, int t)
      : base(P + (k + (t & 7))), ld(ld_), row0(r0 + (t >> 3)), last(max(rows - 1, 0)) {}

  // Byte offset of thread t's first word in a tile.
  __device__ __forceinline__ static unsigned first_word(int t) {
    return static_cast<unsigned>((t & 7) * LD + (t >> 3)) * 4;
  }

  // dst: the stage's tile plus first_word(t); k_rem: k - k0 of this slice.
  __device__ __forceinline__ void issue(unsigned dst, const float *P, int k_rem) {
    if (k_rem >= 16) { // uniform: only a last slice reaches past k
#pragma unroll
      for (int i = 0; i < ROUNDS; ++i) {
        const float *src = base + static_cast<long long>(min(row0 + COPY_ROWS * i, last)) * ld;
#pragma unroll
        for (int h = 0; h < 2; ++h)
          cp_async4(dst + ((8 * h) * LD + COPY_ROWS * i) * 4, src + 8 * h, 4);
      }
    } else {
#pragma unroll
      for (int i = 0; i < ROUNDS; ++i) {
        const float *src = base + static_cast<long long>(min(row0 + COPY_ROWS * i, last)) * ld;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const bool ok = 8 * h + static_cast<int>(threadIdx.x & 7) < k_rem;
          cp_async4(dst + ((8 * h) * LD + COPY_ROWS * i) * 4, ok ? src + 8 * h : P, ok ? 4 : 0);
        }
      }
    }
    base += 16;
  }
};

// The copies of B when !TransB ([k, n] row-major, already n-major; A when TransA, its m for n) into
// its [BK][LD] tile, one K-slice per issue(), slices in order: thread t copies the 4 columns n0 +
// (t % VECS) * 4 of k rows t / VECS + KROWS * h, as one 16-byte copy where vec (B 16-byte aligned,
// ld a multiple of 4), as four 4-byte copies otherwise. Columns past n and k rows past k are
// zero-filled (nothing read; a copy reading nothing takes P itself as its source).
template <int BN, int THREADS, int LD> struct NMajorCopy {
  static constexpr int VECS = BN / 4, KROWS = THREADS / VECS, ROUNDS = 16 / KROWS;
  static_assert(THREADS % VECS == 0 && 16 % KROWS == 0, "whole rounds of 16-byte copies of B");
  const float *src; // &B[k0 + t / VECS, n0 + (t % VECS) * 4] of the next slice's k0
  long long step;   // KROWS * ld: a round's k rows
  int krow;         // t / VECS
  int cols;         // of the thread's 4 columns, those inside n
  bool vec;

  // k: the first slice's k0.
  __device__ __forceinline__ NMajorCopy(const float *P, int ld, int n, int n0, int k, int t)
      : step(static_cast<long long>(KROWS) * ld),
        krow(static_cast<int>(static_cast<unsigned>(t) / VECS)), vec(vector_ok<4>(P, ld)) {
    const int col = n0 + static_cast<int>(static_cast<unsigned>(t) % VECS) * 4;
    cols = max(min(n - col, 4), 0);
    src = P + (static_cast<long long>(k + krow) * ld + col);
  }

  // Byte offset of thread t's first word in a tile.
  __device__ __forceinline__ static unsigned first_word(int t) {
    const unsigned u = static_cast<unsigned>(t);
    return (u / VECS * LD + u % VECS * 4) * 4;
  }

  // dst: the stage's tile plus first_word(t); k_rem: k - k0 of this slice.
  __device__ __forceinline__ void issue(unsigned dst, const float *P, int k_rem) {
#pragma unroll
    for (int h = 0; h < ROUNDS; ++h) {
      const bool k_ok = krow + KROWS * h < k_rem;
      const unsigned d = dst + (KROWS * h * LD) * 4;
      const float *p = src + h * step;
      if (vec) {
        const int bytes = k_ok ? cols * 4 : 0;
        cp_async16(d, bytes > 0 ? p : P, bytes);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool ok = k_ok && e < cols;
          cp_async4(d + e * 4, ok ? p + e : P, ok ? 4 : 0);
        }
      }
    }
    src += ROUNDS * step;
  }
};

// blockIdx.x, read anew: a work unit derived from it after the mainloop is not the one derived
// before it to the compiler, whose registers (index, split) are then free during the loop
// instead of kept live through it (NVRTC's build spilled them at the 128-register cap).
__device__ __forceinline__ int block_index_again() {
  unsigned x;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(x));
  return static_cast<int>(x);
}

template <bool C, class T, class F> struct If { using type = T; };
template <class T, class F> struct If<false, T, F> { using type = F; };

// x[0..3] = lo, and x[4..7] = hi where N is 8.
template <int N>
__device__ __forceinline__ void spread(const float4 &lo, const float4 &hi, float (&x)[N]) {
  x[0] = lo.x;
  x[1] = lo.y;
  x[2] = lo.z;
  x[3] = lo.w;
  if constexpr (N == 8) {
    x[4] = hi.x;
    x[5] = hi.y;
    x[6] = hi.z;
    x[7] = hi.w;
  }
}

} // namespace gemm_detail

template <class Config, bool TransB, bool TransA = false, class Scheduler, class Epilogue>
__device__ void gemm_simt(GemmShape s, const Scheduler &tiles, const float *__restrict__ A, int lda,
                          const float *__restrict__ B, int ldb, const Epilogue &epi) {
  static_assert(Scheduler::BM == Config::BM && Scheduler::BN == Config::BN,
                "the scheduler hands out this mainloop's tiles");
  using namespace gemm_detail;
  constexpr int BM = Config::BM, BN = Config::BN, BK = Config::BK, STAGES = Config::STAGES;
  constexpr int TM = Config::TM, TN = Config::TN, LDA = Config::LDA, LDB = Config::LDB;
  constexpr int COPY_ROWS = Config::COPY_ROWS;
  extern __shared__ __align__(16) float kf_gemm_smem[];

  const int t = threadIdx.x;
  const int ktiles = (s.k + BK - 1) / BK;
  const WorkUnit unit = tiles.unit(tiles.first(), ktiles); // one block per unit
  const int m0 = unit.tile.m * BM;
  const int n0 = unit.tile.n * BN;

  const typename Config::Fragment layout(t);
  const int ty = layout.ty, tx = layout.tx;

  float acc[TM][TN];
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j)
      acc[i][j] = 0.0f;

  // The copies (KMajorCopy, NMajorCopy), each at the unit's first slice.
  const int k_first = unit.k_begin * BK;
  using CopyA = typename If<TransA, NMajorCopy<BM, Config::THREADS, LDA>,
                            KMajorCopy<BM, COPY_ROWS, LDA>>::type;
  CopyA copy_a(A, lda, s.m, m0, k_first, t);
  using CopyB = typename If<TransB, KMajorCopy<BN, COPY_ROWS, LDB>,
                            NMajorCopy<BN, Config::THREADS, LDB>>::type;
  CopyB copy_b(B, ldb, s.n, n0, k_first, t);
  const unsigned smem0 = smem_addr(kf_gemm_smem);
  const unsigned a_first = CopyA::first_word(t), b_first = CopyB::first_word(t);

  // Issues the copies of K-slice kt into stage st (the caller makes one commit group); slices
  // come in order.
  auto load_stage = [&](int st, int kt) {
    const int k_rem = s.k - kt * BK;
    const unsigned a_dst = smem0 + st * (Config::STAGE_FLOATS * 4);
    copy_a.issue(a_dst + a_first, A, k_rem);
    copy_b.issue(a_dst + Config::A_FLOATS * 4 + b_first, B, k_rem);
  };

  // The fragments of slice kk of a stage: rows ty*4 + {0..3} (and BM / 2 + ty*4 + {0..3}) of
  // A, the same columns of B (via tx).
  // Named members, not float4 arrays: with arrays, NVRTC's build of a heavy row epilogue's
  // kernel (every pointwise op, then softmax) spilled 16 bytes at the 128-register cap.
  struct Frag {
    float4 a_lo, a_hi, b_lo, b_hi; // _hi: the second group of 4, where TM (TN) is 8
  };
  auto load_frag = [&](const float *as, int kk, Frag &f) {
    const float *bs = as + Config::A_FLOATS;
    f.a_lo = *reinterpret_cast<const float4 *>(as + kk * LDA + ty * 4);
    if constexpr (TM == 8)
      f.a_hi = *reinterpret_cast<const float4 *>(as + kk * LDA + BM / 2 + ty * 4);
    f.b_lo = *reinterpret_cast<const float4 *>(bs + kk * LDB + tx * 4);
    if constexpr (TN == 8)
      f.b_hi = *reinterpret_cast<const float4 *>(bs + kk * LDB + BN / 2 + tx * 4);
  };

  // Multistage pipeline over the unit's slices [k_begin, k_end): STAGES - 1 slices in flight
  // ahead of the one being multiplied. One commit group per iteration (possibly empty) keeps the
  // wait_group count uniform.
  const int k_begin = unit.k_begin, k_end = unit.k_end;
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (k_begin + st < k_end)
      load_stage(st, k_begin + st);
    cp_async_commit();
  }
  int stage = 0;               // (kt - k_begin) % STAGES
  int next_stage = STAGES - 1; // (kt - k_begin + STAGES - 1) % STAGES
  for (int kt = k_begin; kt < k_end; ++kt) {
    cp_async_wait<STAGES - 2>(); // this thread's copies of slice kt have landed
    __syncthreads(); // everyone's have; and everyone is done reading slice kt - 1's stage
    if (kt + STAGES - 1 < k_end)
      load_stage(next_stage, kt + STAGES - 1); // overwrites the stage of slice kt - 1
    cp_async_commit();

    const float *as = kf_gemm_smem + stage * Config::STAGE_FLOATS;
    Frag frag[2];
    load_frag(as, 0, frag[0]);
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      if (kk + 1 < BK)
        load_frag(as, kk + 1, frag[(kk + 1) & 1]);
      const Frag &f = frag[kk & 1];
      float a[TM], b[TN];
      spread(f.a_lo, f.a_hi, a);
      spread(f.b_lo, f.b_hi, b);
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j)
          acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    stage = stage + 1 == STAGES ? 0 : stage + 1;
    next_stage = next_stage + 1 == STAGES ? 0 : next_stage + 1;
  }
  // Only empty commit groups can be pending; the epilogue's statistics may reuse the stages
  // after a barrier of their own.
  cp_async_wait<0>();
  epi.template run<false>(layout, s, tiles.unit(block_index_again(), ktiles), acc, nullptr,
                          kf_gemm_smem);
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
