// Hopper (sm_90a) GEMM: TMA loads into 128-byte-swizzled shared memory, an mbarrier pipeline,
// one producer warpgroup and two consumer warpgroups issuing wgmma, a persistent grid. Same
// epilogue hook and column-statistics contract as gemm_simt.cuh / gemm_tc.cuh:
//
//   C[row, col] = epi.apply(epi.column(col), row, col, sum_k A[row, k] * B[col, k])
//
// A is [m, k] and B is [n, k] (a PyTorch Linear weight), both row-major, so both operands are
// K-major as tf32 wgmma requires. They are read through tensor maps (the launcher encodes them,
// see Sm90Gemm's traits); C is [m, n] row-major (ldc) and aliases neither A, B nor any epilogue
// input. Operands: Tf32 (fp32 data, the tensor cores ignore the low 13 mantissa bits), Bf16, F16,
// and Tf32x3: each fp32 value x of a stage is split by the consumers into big = x rounded to
// tf32 (written back in place) and small = x - big (exact in fp32, written to a second tile of
// the same layout, three of them in rotation), then acc += a_small*b_big + a_big*b_small +
// a_big*b_big (small*small dropped) with three wgmma per k-step, small terms first; the split
// of the next k-block runs while this one's wgmma do. Each stage's
// products go into a zeroed partial sum that is added to the accumulator with an fp32 add: the
// tensor cores' truncating accumulation would otherwise bias a long K (as in gemm_tc.cuh).
//
// Launch (Sm90Gemm<Op, BN> holds every number): block = THREADS (384), grid = min(tiles, SMs)
// persistent blocks, dynamic shared memory = smem_bytes(Epilogue::COLUMN_FLOATS) (above 48 KiB:
// the launcher raises the limit), entry point __launch_bounds__(THREADS, 1), compiled for sm_90a.
// The tensor maps are 2-D {k, rows} with box {BK, BM} for A and {BK, BN} for B, 128-byte swizzle,
// zero fill, and are passed as __grid_constant__ parameters. TMA needs the matrices 16-byte aligned
// with row strides a multiple of 16 bytes (k % 4 == 0 for fp32, k % 8 == 0 for bf16/f16): the code
// generator and the launcher check both and use gemm_tc.cuh otherwise.
//
// Roles: warpgroup 0 is the producer (one thread issues the TMA loads of stage after stage,
// waiting on each stage's `empty` barrier); warpgroups 1 and 2 are consumers, each computing 64
// rows of the 128 x BN tile with wgmma m64nBNk{8,16} from shared memory, releasing a stage once
// the wgmma that read it has completed (one k-block of wgmma stays in flight). The producer runs
// ahead into the next tile while the consumers run the epilogue of this one.
//
// Tiles: the block takes tiles blockIdx.x, blockIdx.x + gridDim.x, ... of the grouped
// rasterization (tile_scheduler.cuh). Tails in m, n and k are zero-filled by TMA and masked in
// the epilogue.
//
// Epilogue: the concept of gemm_simt.cuh plus `static constexpr int COLUMN_FLOATS`, the number
// of floats in a Column (its only members). Where caches_columns(COLUMN_FLOATS), consumer
// thread t evaluates column(n0 + t) once per tile, while the tile's first wgmma runs, into
// shared memory, and the epilogue reads Columns from there.
//
// Column statistics (partial_mean != nullptr): for row tile tm (rows [tm*BM, min(tm*BM+BM, m)))
// and each valid column, the mean and M2 of the values STORED in C (before their rounding to Out),
// at partial_mean[tm * n + col] and partial_m2[tm * n + col] (col_stats.cuh's layout with tile_rows
// = BM). Each consumer warp reduces its 16 rows with a fixed butterfly, then one thread per column
// merges the 8 warps in order with Chan's formula: deterministic, no atomics.
#pragma once

#include "dtype.cuh"
#include "gemm_simt.cuh" // GemmShape, gemm_detail::chan_merge
#include "sm90_primitives.cuh"
#include "tile_scheduler.cuh"

namespace kf {

template <sm90::Operand Op, int BlockN> struct Sm90Gemm {
  static constexpr sm90::Operand OPERAND = Op;
  static constexpr int BM = 128;    // two consumer warpgroups of 64 rows
  static constexpr int BN = BlockN; // 128 or 256 (wgmma n)
  static constexpr bool SPLIT = Op == sm90::Operand::Tf32x3;
  // The wgmma operand type: 3xTF32 multiplies tf32 parts.
  static constexpr sm90::Operand MMA = SPLIT ? sm90::Operand::Tf32 : Op;
  static constexpr int ELEMENT_BYTES = MMA == sm90::Operand::Tf32 ? 4 : 2;
  static constexpr int BK = 128 / ELEMENT_BYTES; // one 128-byte swizzled row of K per stage
  static constexpr int K_STEPS = 4;              // wgmma k-steps of 32 bytes per stage
  static constexpr int THREADS = 384;
  static constexpr int CONSUMER_WARPS = 8;
  static constexpr int GROUP_M = 8; // grouped rasterization (tile_scheduler.cuh)
  static constexpr int A_BYTES = BM * 128;
  static constexpr int B_BYTES = BN * 128;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int STAGES = SPLIT ? 3 : BN == 256 ? 4 : 6;
  static constexpr int SMALL_BYTES = SPLIT ? 3 * STAGE_BYTES : 0; // three tiles of small parts
  static constexpr int STATS_BYTES = 2 * CONSUMER_WARPS * BN * 4;
  // 1 KiB of slack to align the tiles to the 1024-byte swizzle atom, then the stages, the
  // small parts (3xTF32), the statistics scratch and the full/empty barriers.
  static constexpr int SMEM_BYTES =
      1024 + STAGES * STAGE_BYTES + SMALL_BYTES + STATS_BYTES + 2 * STAGES * 8;
  static constexpr int ACCUMULATORS = BN / 2; // fp32 registers per consumer thread
  // Epilogues whose Column holds 1..MAX_CACHED_COLUMN_FLOATS floats have it computed once per
  // tile column (not once per thread and column) into a double-buffered shared-memory cache.
  static constexpr int MAX_CACHED_COLUMN_FLOATS = 6;
  KF_HOST_DEVICE static constexpr bool caches_columns(int column_floats) {
    return column_floats > 0 && column_floats <= MAX_CACHED_COLUMN_FLOATS;
  }
  // Dynamic shared memory for an epilogue whose Column holds `column_floats` floats.
  KF_HOST_DEVICE static constexpr int smem_bytes(int column_floats) {
    return SMEM_BYTES + (caches_columns(column_floats) ? 2 * BN * 4 * column_floats : 0);
  }
  static_assert(BN == 128 || BN == 256, "wgmma tiles of 128 or 256 columns");
  static_assert(!SPLIT || BN == 128, "3xTF32 keeps a per-stage partial sum: 128 columns");
  static_assert(SMEM_BYTES <= 227 * 1024, "sm_90 allows at most 227 KiB per block");
  static_assert(BN <= 256, "one consumer thread per column merges the statistics");
  static_assert(smem_bytes(MAX_CACHED_COLUMN_FLOATS) <= 227 * 1024, "the column cache fits");
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Out: float, kf::bf16 or kf::f16 (dtype.cuh): C's element type, each value rounded once.
template <class Config, class Epilogue, class Out>
__device__ void gemm_sm90(const sm90::TensorMap &map_a, const sm90::TensorMap &map_b, GemmShape s,
                          Out *__restrict__ C, int ldc, const Epilogue &epi,
                          float *__restrict__ partial_mean, float *__restrict__ partial_m2) {
  using namespace sm90;
  constexpr int BM = Config::BM, BN = Config::BN, STAGES = Config::STAGES;
  extern __shared__ unsigned char kf_sm90_smem[];
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<unsigned long long>(kf_sm90_smem) + 1023ull) & ~1023ull);
  unsigned char *small = smem + STAGES * Config::STAGE_BYTES; // [3][STAGE_BYTES] (3xTF32)
  float *stats = reinterpret_cast<float *>(small + Config::SMALL_BYTES);
  unsigned long long *full =
      reinterpret_cast<unsigned long long *>(small + Config::SMALL_BYTES + Config::STATS_BYTES);
  unsigned long long *empty = full + STAGES;
  using Column = typename Epilogue::Column;
  constexpr bool kCache = Config::caches_columns(Epilogue::COLUMN_FLOATS);
  Column *column_cache = reinterpret_cast<Column *>(empty + STAGES); // [2][BN] when kCache

  const int tiles_m = ceil_div(s.m, BM), tiles_n = ceil_div(s.n, BN);
  const int tiles = tiles_m * tiles_n;
  const int kblocks = ceil_div(s.k, Config::BK);

  if (threadIdx.x == 0) {
    prefetch_tensor_map(map_a);
    prefetch_tensor_map(map_b);
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], Config::CONSUMER_WARPS);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    // Producer warpgroup: one thread streams the stages.
    setmaxnreg_dec<40>();
    if (threadIdx.x == 0) {
      int stage = 0;
      unsigned phase = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const TileCoord tc = grouped_tile(tile, tiles_m, tiles_n, Config::GROUP_M);
        for (int kb = 0; kb < kblocks; ++kb) {
          mbar_wait(&empty[stage], phase ^ 1u);
          unsigned char *dst = smem + stage * Config::STAGE_BYTES;
          mbar_arrive_expect_tx(&full[stage], Config::STAGE_BYTES);
          tma_load_2d(dst, map_a, &full[stage], kb * Config::BK, tc.m * BM);
          tma_load_2d(dst + Config::A_BYTES, map_b, &full[stage], kb * Config::BK, tc.n * BN);
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
    }
  } else {
    setmaxnreg_inc<232>();
    const int warp = (threadIdx.x >> 5) - 4; // consumer warp 0..7: tile rows 16 * warp ..
    const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    const int half = warp >> 2;       // consumer warpgroup: rows 64 * half ..
    const int ct = threadIdx.x - 128; // consumer thread 0..255
    int stage = 0;
    unsigned phase = 0;
    float acc[Config::ACCUMULATORS];
    int turn = 0;
    int splits = 0; // 3xTF32: stages split so far, across tiles
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x, ++turn) {
      const TileCoord tc = grouped_tile(tile, tiles_m, tiles_n, Config::GROUP_M);
      const int m0 = tc.m * BM, n0 = tc.n * BN;
      Column *cache = column_cache + (turn & 1) * BN;
      auto fill_cache = [&] {
        if constexpr (kCache) {
          if (ct < BN)
            cache[ct] = epi.column(min(n0 + ct, s.n - 1));
        }
      };
      if (kblocks == 0) {
        fill_cache();
#pragma unroll
        for (int i = 0; i < Config::ACCUMULATORS; ++i)
          acc[i] = 0.0f;
      }
      if constexpr (Config::SPLIT) {
        // 3xTF32. split() waits for a stage, writes its big parts in place and its small parts
        // into the next small tile (in rotation of three), and makes both visible to wgmma. The
        // small tile written by split j was last read by the wgmma of split j - 3, which every
        // consumer thread has waited for before it reached the barrier of split j - 1.
        auto split = [&](int st, unsigned ph) {
          mbar_wait(&full[st], ph);
          float4 *tile = reinterpret_cast<float4 *>(smem + st * Config::STAGE_BYTES);
          unsigned char *lo = small + (splits % 3) * Config::STAGE_BYTES;
          ++splits;
          for (int i = ct; i < Config::STAGE_BYTES / 16; i += 256) {
            const float4 x = tile[i];
            float4 big, part;
            split_tf32(x.x, big.x, part.x);
            split_tf32(x.y, big.y, part.y);
            split_tf32(x.z, big.z, part.z);
            split_tf32(x.w, big.w, part.w);
            tile[i] = big;
            reinterpret_cast<float4 *>(lo)[i] = part;
          }
          fence_proxy_async();
          named_barrier(3, 256);
          return lo;
        };
        unsigned char *lo = kblocks > 0 ? split(stage, phase) : nullptr;
        for (int kb = 0; kb < kblocks; ++kb) {
          unsigned char *tile = smem + stage * Config::STAGE_BYTES;
          const unsigned long long da = smem_descriptor(tile + half * 64 * 128);
          const unsigned long long db = smem_descriptor(tile + Config::A_BYTES);
          const unsigned long long la = smem_descriptor(lo + half * 64 * 128);
          const unsigned long long lb = smem_descriptor(lo + Config::A_BYTES);
          float part[Config::ACCUMULATORS];
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < Config::K_STEPS; ++kk) {
            Wgmma<Config::MMA, BN>::mma(part, la + 2 * kk, db + 2 * kk, kk > 0);
            Wgmma<Config::MMA, BN>::mma(part, da + 2 * kk, lb + 2 * kk, 1);
            Wgmma<Config::MMA, BN>::mma(part, da + 2 * kk, db + 2 * kk, 1);
          }
          wgmma_commit();
          if (kb == 0)
            fill_cache();
          const int next = stage + 1 == STAGES ? 0 : stage + 1;
          const unsigned next_phase = next == 0 ? phase ^ 1u : phase;
          // The next k-block's split overlaps this one's wgmma.
          unsigned char *next_lo = kb + 1 < kblocks ? split(next, next_phase) : nullptr;
          wgmma_wait<0>();
          fence_registers(part);
#pragma unroll
          for (int i = 0; i < Config::ACCUMULATORS; ++i)
            acc[i] = kb > 0 ? acc[i] + part[i] : part[i];
          if (lane == 0)
            mbar_arrive(&empty[stage]);
          stage = next;
          phase = next_phase;
          lo = next_lo;
        }
      } else {
        int previous = -1;
        for (int kb = 0; kb < kblocks; ++kb) {
          mbar_wait(&full[stage], phase);
          unsigned char *tile = smem + stage * Config::STAGE_BYTES;
          const unsigned long long da = smem_descriptor(tile + half * 64 * 128);
          const unsigned long long db = smem_descriptor(tile + Config::A_BYTES);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < Config::K_STEPS; ++kk)
            Wgmma<Config::MMA, BN>::mma(acc, da + 2 * kk, db + 2 * kk, kb > 0 || kk > 0);
          wgmma_commit();
          if (kb == 0)
            fill_cache(); // its loads overlap the first wgmma
          // The previous k-block's wgmma has completed: its stage can be refilled.
          wgmma_wait<1>();
          fence_registers(acc);
          if (previous >= 0 && lane == 0)
            mbar_arrive(&empty[previous]);
          previous = stage;
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1u;
          }
        }
        wgmma_wait<0>();
        fence_registers(acc);
        if (previous >= 0 && lane == 0)
          mbar_arrive(&empty[previous]);
      }

      // Epilogue from registers. Accumulator 4j + 2h + e holds row 16 * warp + g + 8h (of the
      // tile), column 8j + 2q + e. The cache of this turn is complete after the barrier; the
      // one of the next turn is written after this turn's barrier, when no thread reads it.
      if constexpr (kCache)
        named_barrier(2, 256);
      const int row0 = m0 + 16 * warp + g;
      const bool vec_c = vec2_aligned(C) && (ldc & 1) == 0;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const int col = n0 + 8 * j + 2 * q;
        Column cols[2];
        if constexpr (kCache) {
          cols[0] = cache[8 * j + 2 * q];
          cols[1] = cache[8 * j + 2 * q + 1];
        } else {
          cols[0] = epi.column(min(col, s.n - 1));
          cols[1] = epi.column(min(col + 1, s.n - 1));
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + 8 * h;
          if (row >= s.m)
            continue;
          Out *crow = C + (static_cast<long long>(row) * ldc + col);
          float &v0 = acc[4 * j + 2 * h], &v1 = acc[4 * j + 2 * h + 1];
          if (col + 1 < s.n) {
            v0 = epi.apply(cols[0], row, col, v0);
            v1 = epi.apply(cols[1], row, col + 1, v1);
            store2(crow, v0, v1, vec_c);
          } else if (col < s.n) {
            v0 = epi.apply(cols[0], row, col, v0);
            store(crow, v0);
          }
        }
      }

      if (partial_mean != nullptr) {
        const bool ok0 = row0 < s.m, ok1 = row0 + 8 < s.m;
        const int valid = min(max(s.m - (m0 + 16 * warp), 0), 16);
        const float inv = valid > 0 ? 1.0f / static_cast<float>(valid) : 0.0f;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float a0 = ok0 ? acc[4 * j + e] : 0.0f, a1 = ok1 ? acc[4 * j + 2 + e] : 0.0f;
            float sum = a0 + a1;
            sum += __shfl_xor_sync(0xffffffffu, sum, 4);
            sum += __shfl_xor_sync(0xffffffffu, sum, 8);
            sum += __shfl_xor_sync(0xffffffffu, sum, 16);
            const float mean = sum * inv;
            const float d0 = ok0 ? a0 - mean : 0.0f, d1 = ok1 ? a1 - mean : 0.0f;
            float m2 = fmaf(d0, d0, d1 * d1);
            m2 += __shfl_xor_sync(0xffffffffu, m2, 4);
            m2 += __shfl_xor_sync(0xffffffffu, m2, 8);
            m2 += __shfl_xor_sync(0xffffffffu, m2, 16);
            if (g == 0) {
              stats[warp * BN + 8 * j + 2 * q + e] = mean;
              stats[(Config::CONSUMER_WARPS + warp) * BN + 8 * j + 2 * q + e] = m2;
            }
          }
        named_barrier(1, 256);
        if (ct < BN && n0 + ct < s.n) {
          float n_acc = 0.0f, mean_acc = 0.0f, m2_acc = 0.0f;
          for (int w = 0; w < Config::CONSUMER_WARPS; ++w) {
            const int cnt = min(max(s.m - (m0 + 16 * w), 0), 16);
            gemm_detail::chan_merge(n_acc, mean_acc, m2_acc, static_cast<float>(cnt),
                                    stats[w * BN + ct],
                                    stats[(Config::CONSUMER_WARPS + w) * BN + ct]);
          }
          const long long idx = static_cast<long long>(tc.m) * s.n + n0 + ct;
          partial_mean[idx] = mean_acc;
          partial_m2[idx] = m2_acc;
        }
        named_barrier(1, 256); // the scratch is free for the next tile
      }
    }
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
