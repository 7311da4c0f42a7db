// Tensor-core (TF32 / 3xTF32) GEMM mainloop (mma.sync, cp.async) behind the same epilogue
// (gemm_epilogue.cuh) and tile scheduler (tile_scheduler.cuh) as gemm_simt.cuh, so the code
// generator can swap one for the other. Operands and C as in gemm_simt.cuh:
//
//   C[row, col] = epi.functor.apply(epi.functor.column(col), row, col, sum_k A[row,k] * B'[k,col])
//
// Precision: 0 = TF32: inputs rounded to tf32 (cvt.rna), fp32 accumulation; rel. error ~1e-4..1e-3.
//            1 = 3xTF32: x = hi + lo with hi = tf32(x), lo = x - hi (truncated to tf32 by the mma);
//                acc += a_lo*b_hi + a_hi*b_lo + a_hi*b_hi (lo*lo dropped); fp32-level accuracy.
//
// Launch (the generated entry point must use exactly this; P = Precision): block =
// GEMM_TC_THREADS; grid = one block per work unit of TileScheduler<GEMM_TC_BM, gemm_tc_bn(P),
// GEMM_TC_GROUP_M> (k-blocks of GEMM_TC_BK); dynamic shared memory = gemm_tc_smem_bytes(P) (above
// 48 KiB the launcher raises the limit); __launch_bounds__(GEMM_TC_THREADS, GEMM_TC_MIN_BLOCKS).
// Tiles are 128 x 256 for TF32, 128 x 128 for 3xTF32. Blocks write disjoint tiles of C and of
// the partial statistics (split-K: the tile's last split). The epilogue (TcFragment's layout,
// float2 stores) reuses the pipeline's shared memory for its statistics and staged rows.
//
// Sizes: any m, n, k >= 0 (k = 0 gives apply(..., 0.0f)). 16-byte cp.async only where the base
// is 16-byte aligned and the leading dimension a multiple of 4 (checked at run time, per
// matrix); a chunk straddling the k (or n) edge zero-fills the bytes past it (src-size), never
// reads them. Otherwise 4-byte cp.async per element, guarded the same way. 64-bit addresses.
//
// Also valid host C++, so the code generator can take the geometry constants from this source.
#pragma once

#include "gemm_epilogue.cuh"
#include "gemm_primitives.cuh"
#include "tile_scheduler.cuh"

namespace kf {

inline constexpr int GEMM_TC_BM = 128;       // tile rows: 2 warp rows of 64
inline constexpr int GEMM_TC_BK = 32;        // K depth of one shared-memory stage
inline constexpr int GEMM_TC_STAGES = 4;     // cp.async pipeline depth
inline constexpr int GEMM_TC_THREADS = 256;  // 8 warps, 2 (rows) x 4 (cols), each 64 x BN/4
inline constexpr int GEMM_TC_MIN_BLOCKS = 1; // smem (216 / 144 KiB) allows one block per SM anyway
inline constexpr int GEMM_TC_GROUP_M = 8;    // row tiles per rasterization group (L2 reuse)
// A split-K partial tile's cost in k-blocks (gemm_simt.cuh's reasoning): 0.125 B per FLOP at
// one SM's mma.sync rate (tf32; 3xTF32 a third of it) against its share of DRAM bandwidth.
inline constexpr int GEMM_TC_SPLIT_COST_KBLOCKS = 4;
// k-contiguous tiles (A, and B when TransB) are stored [rows][BK] with the row stride padded by
// 4 floats: 16-byte fragment reads by a quarter warp (rows r, r+1 x 4 column chunks 8 floats
// apart) then cover all 32 banks once, and rows stay 16-byte aligned for cp.async.
inline constexpr int GEMM_TC_LDK = GEMM_TC_BK + 4;
inline constexpr int GEMM_TC_A_FLOATS = GEMM_TC_BM * GEMM_TC_LDK;

// Tile columns depend on the precision. With fp32 operands a 128 x 128 tile moves 1 KiB from L2
// per 16 Ki multiply-adds, which caps TF32 near L2 bandwidth; 128 x 256 raises the intensity by
// a third. 3xTF32 does three times the math per byte, so it keeps 128 x 128, and needs the
// registers a wider tile would take for its per-stage accumulator (see the mainloop).
KF_HOST_DEVICE constexpr int gemm_tc_bn(int precision) { return precision == 0 ? 256 : 128; }
// One stage: A [BM][LDK] + B, either [BN][LDK] (TransB) or [BK][BN + 8] (!TransB, smaller).
KF_HOST_DEVICE constexpr int gemm_tc_stage_floats(int precision) {
  return GEMM_TC_A_FLOATS + gemm_tc_bn(precision) * GEMM_TC_LDK;
}

// Which tile element each accumulator acc[i / 2][j / 2][2 * (i % 2) + j % 2] holds
// (gemm_epilogue.cuh's Fragment): the mma m16n8 layout, warps 2 (rows) x 4 (columns). Warp
// (wm, wn), lane (g, q) = (lane / 4, lane % 4): rows wm*64 + (i/2)*16 + (i%2)*8 + g, columns
// wn*BN/4 + (j/2)*8 + 2q + j%2.
template <int BlockN> struct TcFragment {
  static constexpr int BM = GEMM_TC_BM, BN = BlockN;
  static constexpr int ROWS = 8;       // 4 m16 tiles x rows g, g + 8
  static constexpr int COLS = BN / 16; // BN / 32 n8 tiles x columns 2q, 2q + 1
  static constexpr int VEC = 2;
  static constexpr int ROW_LANE_SHIFT = 2; // g = lane / 4
  static constexpr int ROW_GROUPS = 2;     // wm: rows 0..63 and 64..127
  static constexpr Store STORE = Store::Direct;
  static constexpr int THREADS = GEMM_TC_THREADS;
  int thread, wm, wn, g, q;
  KF_HOST_DEVICE explicit TcFragment(int t)
      : thread(t), wm(t >> 7), wn((t >> 5) & 3), g((t & 31) >> 2), q(t & 3) {}
  KF_HOST_DEVICE int row(int i) const { return wm * 64 + (i >> 1) * 16 + (i & 1) * 8 + g; }
  KF_HOST_DEVICE int col(int j) const { return wn * (BN / 4) + (j >> 1) * 8 + 2 * q + (j & 1); }
  KF_HOST_DEVICE int row_group() const { return wm; }
  KF_HOST_DEVICE int col_group() const { return wn; }
  // The slice of w columns (a multiple of 8) holding col(j): its part below 8 (2q + j % 2)
  // never crosses one, so that the slice is the warp's and an unrolled j's.
  KF_HOST_DEVICE int slice_of(int j, int w) const { return (wn * (BN / 4) + (j >> 1) * 8) / w; }
  KF_HOST_DEVICE static constexpr int group_rows(int group, int tile_rows) {
    return rows_below(tile_rows, 64 * group, 64);
  }
  template <class Acc> KF_HOST_DEVICE static auto &at(Acc &acc, int i, int j) {
    return acc[i >> 1][j >> 1][2 * (i & 1) + (j & 1)];
  }
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  __device__ static void sync() { __syncthreads(); }
#endif
};

// Dynamic shared memory of one block: 221184 bytes for TF32, 147456 for 3xTF32. The epilogue's
// statistics scratch and staged rows reuse the stages.
KF_HOST_DEVICE constexpr int gemm_tc_smem_bytes(int precision) {
  return GEMM_TC_STAGES * gemm_tc_stage_floats(precision) * 4;
}
static_assert(epilogue_stats_bytes<TcFragment<gemm_tc_bn(0)>>() <= gemm_tc_smem_bytes(0) &&
                  epilogue_stats_bytes<TcFragment<gemm_tc_bn(1)>>() <= gemm_tc_smem_bytes(1),
              "the statistics scratch fits in the stages");
static_assert(epilogue_tile_bytes<TcFragment<gemm_tc_bn(0)>>() <= gemm_tc_smem_bytes(0) &&
                  epilogue_tile_bytes<TcFragment<gemm_tc_bn(1)>>() <= gemm_tc_smem_bytes(1),
              "a tile staged for its rows' passes fits in the stages");

static_assert(GEMM_TC_BM == 128 && GEMM_TC_BK == 32 && GEMM_TC_THREADS == 256,
              "the load and fragment mappings below are written for this configuration");
static_assert(gemm_tc_smem_bytes(0) <= 227 * 1024 && gemm_tc_smem_bytes(1) <= 227 * 1024,
              "sm_90 allows at most 227 KiB of shared memory per block");
static_assert(GEMM_TC_BK * (gemm_tc_bn(0) + 8) <= gemm_tc_bn(0) * GEMM_TC_LDK &&
                  GEMM_TC_BK * (gemm_tc_bn(1) + 8) <= gemm_tc_bn(1) * GEMM_TC_LDK,
              "the padded !TransB tile [BK][BN + 8] fits in the stage's [BN][LDK] B area");
static_assert(GEMM_TC_STAGES >= 2, "the pipeline needs at least two stages");
static_assert(GEMM_TC_LDK % 4 == 0, "rows of k-contiguous tiles must stay 16-byte aligned");

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace gemm_tc_detail {

// 3xTF32 split of x: hi = tf32(x) (nearest, ties away), lo = x - hi (exact in fp32). The lowering
// of cvt.rna adds a NaN/Inf select per use, which made the split (done per fragment element by
// every warp that reads it) the issue bottleneck; here hi is the integer form of the same
// rounding (3 instructions for hi and lo). lo is passed unrounded: it has at most 12 significant
// bits, so the mma's truncation to tf32 drops at most 2^-23 |x| (rounding it dropped at most
// half that). NaN stays NaN in the product: x + 0x1000 can wrap a NaN's bits to +-0 (or keep
// NaN / give Inf), and then lo = x - hi is NaN; inf gives lo = NaN as before.
__device__ __forceinline__ void split_3x(float x, unsigned &hi, unsigned &lo) {
  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

// d += a * b for one m16n8k8 tile. Fragment ownership (g = lane / 4, t = lane % 4):
// a0 = A[g][t], a1 = A[g+8][t], a2 = A[g][t+4], a3 = A[g+8][t+4]; b0 = B[t][g], b1 = B[t+4][g];
// d0, d1 = D[g][2t, 2t+1], d2, d3 = D[g+8][2t, 2t+1].
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4],
                                         const unsigned (&b)[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Offset of (krow, col) in the [BK][BN] n-contiguous B tile (!TransB). A fragment read has
// lanes q = 0..3 on k rows 8q + c (c the same for all) and lanes g = 0..7 on 8 consecutive
// columns. Rows are stored in the order (krow % 8) * 4 + krow / 8, so those four rows are
// adjacent, and the row stride BN + 8 (= 8 mod 32 words, a multiple of 4 for 16-byte cp.async)
// puts them on disjoint banks. The offset is lane base + compile-time constant per read.
template <int BN> __device__ __forceinline__ int bn_offset(int krow, int col) {
  return ((krow & 7) * 4 + (krow >> 3)) * (BN + 8) + col;
}

} // namespace gemm_tc_detail

template <bool TransB, int Precision, class Scheduler, class Epilogue>
__device__ void gemm_tc(GemmShape s, const Scheduler &tiles, const float *__restrict__ A, int lda,
                        const float *__restrict__ B, int ldb, const Epilogue &epi) {
  static_assert(Precision == 0 || Precision == 1, "Precision: 0 = TF32, 1 = 3xTF32");
  static_assert(Scheduler::BM == GEMM_TC_BM && Scheduler::BN == gemm_tc_bn(Precision),
                "the scheduler hands out this mainloop's tiles");
  using namespace gemm_detail;
  using namespace gemm_tc_detail;
  constexpr int BN = gemm_tc_bn(Precision);
  constexpr int WN = BN / 4; // warp tile columns
  constexpr int NT = WN / 8; // n8 mma tiles per warp
  constexpr int STAGE_FLOATS = gemm_tc_stage_floats(Precision);
  extern __shared__ __align__(16) float kf_gemm_smem[];

  const int t = threadIdx.x;
  const int ktiles = (s.k + GEMM_TC_BK - 1) / GEMM_TC_BK;
  const WorkUnit unit = tiles.unit(tiles.first(), ktiles); // one block per unit
  const int m0 = unit.tile.m * GEMM_TC_BM;
  const int n0 = unit.tile.n * BN;
  const bool vec_a = vector_ok<4>(A, lda);
  const bool vec_b = vector_ok<4>(B, ldb);

  const TcFragment<BN> layout(t);
  const int g = layout.g, q = layout.q; // mma fragment coordinates
  const int wm = layout.wm;             // warp rows   wm*64 .. +64
  const int wn = layout.wn;             // warp cols   wn*WN .. +WN

  float acc[4][NT][4]; // [m16 tile][n8 tile][fragment element]
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        acc[i][j][r] = 0.0f;

  const unsigned smem0 = smem_addr(kf_gemm_smem);

  // Issues the copies of K-tile kt into stage st (one commit group is made by the caller).
  // A k-contiguous tile of R rows has R * 8 chunks of 16 bytes: R / 32 per thread (reps).
  auto load_kmajor = [&](unsigned dst_base, const float *__restrict__ P, int ld, int r0, int rows,
                         int k0, bool vec, int reps) {
#pragma unroll
    for (int rep = 0; rep < 8; ++rep) {
      if (rep >= reps)
        break;
      const int c = t + rep * GEMM_TC_THREADS;
      const int row = c >> 3, kc = (c & 7) * 4;
      const int gr = r0 + row, gk = k0 + kc;
      const unsigned dst = dst_base + (row * GEMM_TC_LDK + kc) * 4;
      const float *src = P + (static_cast<long long>(gr) * ld + gk);
      if (vec) {
        int bytes = gr < rows ? (s.k - gk) * 4 : 0;
        bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);
        cp_async16(dst, bytes > 0 ? src : P, bytes);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool ok = gr < rows && gk + e < s.k;
          cp_async4(dst + e * 4, ok ? src + e : P, ok ? 4 : 0);
        }
      }
    }
  };
  // !TransB: 32 k rows x BN columns of B = 8 * BN chunks, chunk c: k row c / (BN / 4),
  // columns (c % (BN / 4)) * 4.
  auto load_nmajor = [&](unsigned dst_base, int k0) {
#pragma unroll
    for (int rep = 0; rep < BN / 32; ++rep) {
      const int c = t + rep * GEMM_TC_THREADS;
      const int krow = c / (BN / 4), col = (c % (BN / 4)) * 4;
      const int gk = k0 + krow, gn = n0 + col;
      const unsigned dst = dst_base + bn_offset<BN>(krow, col) * 4;
      const float *src = B + (static_cast<long long>(gk) * ldb + gn);
      if (vec_b) {
        int bytes = gk < s.k ? (s.n - gn) * 4 : 0;
        bytes = bytes < 0 ? 0 : (bytes > 16 ? 16 : bytes);
        cp_async16(dst, bytes > 0 ? src : B, bytes);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const bool ok = gk < s.k && gn + e < s.n;
          cp_async4(dst + e * 4, ok ? src + e : B, ok ? 4 : 0);
        }
      }
    }
  };
  auto load_stage = [&](int st, int kt) {
    const unsigned a_dst = smem0 + st * STAGE_FLOATS * 4;
    const unsigned b_dst = a_dst + GEMM_TC_A_FLOATS * 4;
    const int k0 = kt * GEMM_TC_BK;
    load_kmajor(a_dst, A, lda, m0, s.m, k0, vec_a, GEMM_TC_BM / 32);
    if constexpr (TransB)
      load_kmajor(b_dst, B, ldb, n0, s.n, k0, vec_b, BN / 32);
    else
      load_nmajor(b_dst, k0);
  };

  // K-slot permutation. A dot product does not care in which order k is visited, so each
  // 32-deep tile is fed to the four k8 mmas in an order that makes fragments contiguous: lane q
  // of k8 step (2p + u) takes mma slot q from physical k = 8q + 4p + 2u and slot q + 4 from
  // 8q + 4p + 2u + 1. A and B use the same map, so each (p) is one 16-byte read per row that
  // covers two k8 steps.
  // dst: the accumulator set the stage's mmas add into ([4][NT][4]).
  auto compute_stage = [&](int st, float(*dst)[NT][4]) {
    const float *as = kf_gemm_smem + st * STAGE_FLOATS;
    const float *bs = as + GEMM_TC_A_FLOATS;
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      float4 af[4][2]; // [m16 tile][row g / g + 8]
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          af[i][h] = *reinterpret_cast<const float4 *>(
              as + (wm * 64 + i * 16 + h * 8 + g) * GEMM_TC_LDK + 8 * q + 4 * p);
      float4 bf[NT]; // TransB: [n8 tile] physical k 8q + 4p + {0..3} of column g
      if constexpr (TransB) {
#pragma unroll
        for (int j = 0; j < NT; ++j)
          bf[j] = *reinterpret_cast<const float4 *>(bs + (wn * WN + j * 8 + g) * GEMM_TC_LDK +
                                                    8 * q + 4 * p);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        float bx[NT][2];
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          if constexpr (TransB) {
            bx[j][0] = u == 0 ? bf[j].x : bf[j].z;
            bx[j][1] = u == 0 ? bf[j].y : bf[j].w;
          } else {
            // Scalar reads, issued per k8 step to keep fewer values live (register pressure).
            const int k = 8 * q + 4 * p + 2 * u, col = wn * WN + j * 8 + g;
            bx[j][0] = bs[bn_offset<BN>(k, col)];
            bx[j][1] = bs[bn_offset<BN>(k + 1, col)];
          }
        }
        unsigned bh[NT][2], bl[NT][2];
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            if constexpr (Precision == 1) {
              split_3x(bx[j][r], bh[j][r], bl[j][r]);
            } else {
              bh[j][r] = to_tf32(bx[j][r]);
            }
          }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float ax[4] = {u == 0 ? af[i][0].x : af[i][0].z, u == 0 ? af[i][1].x : af[i][1].z,
                               u == 0 ? af[i][0].y : af[i][0].w, u == 0 ? af[i][1].y : af[i][1].w};
          unsigned ah[4], al[4];
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            if constexpr (Precision == 1) {
              split_3x(ax[r], ah[r], al[r]);
            } else {
              ah[r] = to_tf32(ax[r]);
            }
          }
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            if constexpr (Precision == 1) {
              // Small terms first: they are added to the accumulator before the large one.
              mma_tf32(dst[i][j], al, bh[j]);
              mma_tf32(dst[i][j], ah, bl[j]);
            }
            mma_tf32(dst[i][j], ah, bh[j]);
          }
        }
      }
    }
  };

  // Multistage pipeline over the unit's k-tiles [k_begin, k_end): STAGES - 1 tiles in flight
  // ahead of the one being multiplied, k-tile kt in stage (kt - k_begin) % STAGES. One commit
  // group per iteration (possibly empty) keeps the wait_group count uniform.
  const int k_begin = unit.k_begin, k_end = unit.k_end;
#pragma unroll
  for (int st = 0; st < GEMM_TC_STAGES - 1; ++st) {
    if (k_begin + st < k_end)
      load_stage(st, k_begin + st);
    cp_async_commit();
  }
  for (int kt = k_begin; kt < k_end; ++kt) {
    cp_async_wait<GEMM_TC_STAGES - 2>(); // this thread's copies of tile kt have landed
    __syncthreads(); // everyone's have; and everyone is done reading tile kt - 1's stage
    const int nk = kt + GEMM_TC_STAGES - 1;
    if (nk < k_end)
      load_stage((nk - k_begin) % GEMM_TC_STAGES, nk); // overwrites the stage of tile kt - 1
    cp_async_commit();
    if constexpr (Precision == 1) {
      // The tensor cores add into their fp32 accumulator with truncation, a bias of up to one
      // ulp per mma that reached ~4e-5 relative error at k = 8192 when the 3 x k/8 mmas of a
      // column all went into one accumulator. Each stage (12 mmas per element) therefore goes
      // into a zeroed partial sum, which is added with a correctly rounded FADD.
      float part[4][NT][4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            part[i][j][r] = 0.0f;
      compute_stage((kt - k_begin) % GEMM_TC_STAGES, part);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int r = 0; r < 4; ++r)
            acc[i][j][r] += part[i][j][r];
    } else {
      compute_stage((kt - k_begin) % GEMM_TC_STAGES, acc);
    }
  }
  // Only empty commit groups can be pending; the epilogue's statistics may reuse the stages
  // after a barrier of their own.
  cp_async_wait<0>();
  epi.template run<false>(layout, s, unit, acc, nullptr, kf_gemm_smem);
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
