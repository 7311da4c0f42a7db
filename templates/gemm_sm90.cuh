// Hopper (sm_90a) GEMM: TMA loads into 128-byte-swizzled shared memory, an mbarrier pipeline, one
// producer warpgroup and one or two consumer warpgroups issuing wgmma, a persistent grid; the
// epilogue and tile scheduler of gemm_simt.cuh and gemm_tc.cuh.
//
//   C[row, col] = epi.functor.apply(epi.functor.column(col), row, col, sum_k A[row,k] * B[col,k])
//
// A [m, k] and B [n, k] (a Linear weight), both row-major and so K-major as tf32 wgmma requires,
// read through tensor maps (see Sm90Gemm's traits); C is [m, n] row-major (ldc) and aliases
// neither A, B nor any epilogue input. Operands: Tf32 (the tensor cores ignore the low 13
// mantissa bits, so each consumer rounds its rows of A to tf32 in registers and gives wgmma A
// from registers; B comes rounded), Bf16, F16, and Tf32x3: x = big + small (big = x rounded to
// tf32, small exact in fp32), acc += a_small*b_big + a_big*b_small + a_big*b_big, three wgmma per
// k-step, small terms first. A splitter warpgroup writes B's parts to the stage (big in place,
// small into a second B tile); each consumer splits its rows of A in registers and gives wgmma A
// from registers. Each stage's products go into a zeroed partial sum added to the accumulator in
// fp32, as the tensor cores' truncating accumulation would bias a long K.
//
// Launch (Sm90Gemm<Op, BN, BM, MIN_BLOCKS> holds every number): block = THREADS (128 per
// warpgroup); grid = min(work units, MIN_BLOCKS * SMs) persistent blocks (tile_scheduler.cuh's
// units, k-blocks of BK); dynamic shared memory = smem_bytes(Epilogue::COLUMN_FLOATS) (above 48
// KiB the launcher raises the limit); __launch_bounds__(THREADS, 1); sm_90a. Tensor maps: 2-D
// {k, rows}, box {BK, BM} for A and {BK, BN} for B, 128-byte swizzle, zero fill, passed as
// __grid_constant__. TMA needs 16-byte aligned matrices and row strides (k % 4 == 0 for fp32,
// k % 8 == 0 for bf16/f16): the code generator and the launcher check both and use gemm_tc.cuh
// otherwise.
//
// Roles: warpgroup 0 produces (one thread issues each stage's TMA after its `empty` barrier); for
// 3xTF32 warpgroup 1 splits (waits on `full`, signals `split`, which the consumers wait on); the
// last BM / 64 warpgroups consume, 64 rows each with wgmma m64nBNk{8,16} from shared memory,
// releasing a stage once the wgmma that read it completed (one k-block in flight). The producer
// runs ahead into the next tile while the consumers run this one's epilogue.
//
// Tiles: work indices first(), first() + stride(), ... of TileScheduler<BM, BN, GROUP_M>. Tails
// in m, n and k are zero-filled by TMA and masked in the epilogue. Split-K's reduction
// (split_k.cuh) never waits on another block, so several units per block cannot deadlock.
//
// Epilogue: gemm_epilogue.cuh's, run by the consumers from registers (Sm90Fragment), with a
// scratch of its own (statistics, or the tile staged for row passes where StagedRows). Where
// caches_columns(COLUMN_FLOATS), consumer thread t evaluates column(n0 + t) into shared memory
// once per tile, during the tile's first wgmma (fill_columns).
#pragma once

#include "gemm_epilogue.cuh"
#include "sm90_primitives.cuh"
#include "tile_scheduler.cuh"

namespace kf {

template <sm90::Operand Op, int BlockN, int BlockM = 128, int MinBlocks = 1,
          bool StagedRows = false>
struct Sm90Gemm {
  static constexpr sm90::Operand OPERAND = Op;
  static constexpr int BM = BlockM;            // 64 rows per consumer warpgroup
  static constexpr int BN = BlockN;            // 128 or 256 (wgmma n)
  static constexpr int MIN_BLOCKS = MinBlocks; // blocks resident per SM (__launch_bounds__)
  static constexpr bool STAGED_ROWS = StagedRows;
  static constexpr bool SPLIT = Op == sm90::Operand::Tf32x3;
  // tf32: consumers round A in registers (wgmma from registers) where the tensor cores would
  // truncate it.
  static constexpr bool ROUND_A = Op == sm90::Operand::Tf32;
  // Rounding consumers issue their wgmma in groups of this many k-steps, two register sets of
  // A in turn: at 256 columns a whole k-block's two sets would not fit beside the accumulators.
  static constexpr int GROUP_STEPS = BN == 256 ? 2 : 4;
  // The wgmma operand type: 3xTF32 multiplies tf32 parts.
  static constexpr sm90::Operand MMA = SPLIT ? sm90::Operand::Tf32 : Op;
  static constexpr int ELEMENT_BYTES = MMA == sm90::Operand::Tf32 ? 4 : 2;
  static constexpr int BK = 128 / ELEMENT_BYTES; // one 128-byte swizzled row of K per stage
  // A split-K partial tile's cost in k-blocks (gemm_simt.cuh's reasoning): 4 / BK B per FLOP
  // at one SM's tensor-core rate (16-bit operands faster than tf32, 3xTF32 a third of it)
  // against its share of DRAM bandwidth.
  static constexpr int SPLIT_COST_KBLOCKS = SPLIT ? 4 : 16;
  // A k-block's time on an SM, relative to the other 128-row tiles' (a variant is weighed
  // against the one it would replace, runtime/launch_geometry.cpp): 128 x 256 takes 5 where
  // 128 x 128 takes 3, fitted by timing whole waves of both at tf32 and bf16; 0 (not known) for
  // the 64-row tiles.
  static constexpr int KBLOCK_TIME = BM == 128 ? (BN == 256 ? 5 : 3) : 0;
  static constexpr int K_STEPS = 4;         // wgmma k-steps of 32 bytes per stage
  static constexpr int CONSUMERS = BM / 64; // consumer warpgroups
  static constexpr int CONSUMER_THREADS = 128 * CONSUMERS;
  static constexpr int CONSUMER_WARPS = 4 * CONSUMERS;
  static constexpr int SPLITTER_THREADS = SPLIT ? 128 : 0;         // 3xTF32's splitter warpgroup
  static constexpr int CONSUMER_BASE = 128 + SPLITTER_THREADS;     // the first consumer thread
  static constexpr int THREADS = CONSUMER_BASE + CONSUMER_THREADS; // producer, splitter, consumers
  static constexpr int GROUP_M = 8; // grouped rasterization (tile_scheduler.cuh)
  static constexpr int A_BYTES = BM * 128;
  static constexpr int B_BYTES = BN * 128;
  static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
  static constexpr int STATS_BYTES = 2 * CONSUMER_WARPS * BN * 4;
  static constexpr int STORE_BYTES = CONSUMER_WARPS * 16 * 128; // the staged store's slices
  // The epilogue's scratch, shared by its uses in turn: the staged store's slices, its column
  // statistics, or, where StagedRows, the tile staged for the row passes (gemm_epilogue.cuh's
  // Rows: a [BM][BN + 4] fp32 tile).
  static constexpr int STAGED_BYTES = BM * (BN + 4) * 4;
  static constexpr int SCRATCH_BYTES = StagedRows && STAGED_BYTES > STATS_BYTES ? STAGED_BYTES
                                       : STORE_BYTES > STATS_BYTES              ? STORE_BYTES
                                                                                : STATS_BYTES;
  // Shared memory one block may use where MIN_BLOCKS share an SM's 228 KiB (1 KiB of each
  // block is the system's), less the largest column cache (below).
  static constexpr int BUDGET = (228 * 1024) / MIN_BLOCKS - 1024 - 2 * BN * 4 * 6;
  // 1 KiB of slack to align the tiles to the 1024-byte swizzle atom, the epilogue's scratch and
  // the barriers; then as many stages as fit, at most 6 (3xTF32: 4, with their small parts of B;
  // 3 beside a staged tile).
  static constexpr int FIXED_BYTES = 1024 + SCRATCH_BYTES + 3 * 8 * 8;
  static constexpr int STAGES = SPLIT ? (StagedRows ? 3 : 4)
                                : (BUDGET - FIXED_BYTES) / STAGE_BYTES > 6
                                    ? 6
                                    : (BUDGET - FIXED_BYTES) / STAGE_BYTES;
  static constexpr int SMALL_BYTES = SPLIT ? STAGES * B_BYTES : 0; // a stage's small parts of B
  static constexpr int BARRIERS = SPLIT ? 3 : 2; // full, empty (and split) per stage
  static constexpr int SMEM_BYTES =
      1024 + STAGES * STAGE_BYTES + SMALL_BYTES + SCRATCH_BYTES + BARRIERS * STAGES * 8;
  static constexpr int ACCUMULATORS = BN / 2; // fp32 registers per consumer thread
  // Registers: the producer and the splitter give back down to 40 per thread, the
  // consumers take what the MIN_BLOCKS blocks of an SM leave (a multiple of 8, at most 232).
  static constexpr int PRODUCER_REGISTERS = 40;
  static constexpr int SPLITTER_REGISTERS = 40;
  static constexpr int CONSUMER_REGISTERS_FREE =
      ((65536 / MIN_BLOCKS - 128 * PRODUCER_REGISTERS - SPLITTER_THREADS * SPLITTER_REGISTERS) /
       CONSUMER_THREADS) /
      8 * 8;
  static constexpr int CONSUMER_REGISTERS =
      CONSUMER_REGISTERS_FREE > 232 ? 232 : CONSUMER_REGISTERS_FREE;
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
  static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups of 64 rows");
  static_assert(MIN_BLOCKS == 1 || MIN_BLOCKS == 2, "one or two blocks per SM");
  static_assert(!SPLIT || BN == 128, "3xTF32 keeps a per-stage partial sum: 128 columns");
  static_assert(STAGES >= 3, "the pipeline keeps at least three stages");
  static_assert(SMEM_BYTES <= BUDGET, "MIN_BLOCKS blocks fit an SM's shared memory");
  static_assert(!SPLIT || MIN_BLOCKS == 1, "3xTF32's small parts leave room for one block");
  static_assert(smem_bytes(MAX_CACHED_COLUMN_FLOATS) <= 227 * 1024, "the column cache fits");
  static_assert(CONSUMER_REGISTERS >= ACCUMULATORS + 64, "the accumulators fit the registers");
};

// Which tile element each consumer accumulator acc[4 * (j / 2) + 2 * i + j % 2] holds
// (gemm_epilogue.cuh's Fragment): the wgmma m64 layout, consumer warp w (0 .. BM / 16 - 1) on
// rows 16w.., lane (g, q) = (lane / 4, lane % 4): rows 16w + 8i + g, columns
// 8 * (j / 2) + 2q + j % 2.
template <int BlockN, int BlockM> struct Sm90Fragment {
  static constexpr int BM = BlockM, BN = BlockN;
  static constexpr int ROWS = 2, COLS = BN / 4;
  static constexpr int VEC = 2;
  static constexpr int ROW_LANE_SHIFT = 2;   // g = lane / 4
  static constexpr int ROW_GROUPS = BM / 16; // the consumer warps
  static constexpr int THREADS = 2 * BM;     // the consumer warpgroups
  static constexpr Store STORE = Store::WarpSlices;
  static constexpr int WARP_ROWS = 16;
  int thread, warp, g, q;
  KF_HOST_DEVICE explicit Sm90Fragment(int t)
      : thread(t), warp(t >> 5), g((t & 31) >> 2), q(t & 3) {}
  KF_HOST_DEVICE int row(int i) const { return 16 * warp + 8 * i + g; }
  KF_HOST_DEVICE int col(int j) const { return 8 * (j >> 1) + 2 * q + (j & 1); }
  KF_HOST_DEVICE int row_group() const { return warp; }
  KF_HOST_DEVICE int col_group() const { return 0; } // a warp holds its rows' BN columns
  // The slice of w columns (a multiple of 8) holding col(j): its part below 8 (2q + j % 2)
  // never crosses one, so that an unrolled j's slice is known at compile time.
  KF_HOST_DEVICE int slice_of(int j, int w) const { return (8 * (j >> 1)) / w; }
  KF_HOST_DEVICE int warp_row0() const { return 16 * warp; }
  KF_HOST_DEVICE static constexpr int group_rows(int group, int tile_rows) {
    return rows_below(tile_rows, 16 * group, 16);
  }
  template <class Acc> KF_HOST_DEVICE static auto &at(Acc &acc, int i, int j) {
    return acc[4 * (j >> 1) + 2 * i + (j & 1)];
  }
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  __device__ static void sync() { sm90::named_barrier(1, THREADS); }
#endif
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// A role's place in the ring of pipeline stages: the stage it is at, and the phase that stage's
// barriers are in this round (it flips each time the ring wraps).
template <int STAGES> struct StageRing {
  int stage = 0;
  unsigned phase = 0;
  __device__ void advance() {
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

template <class Config, class Scheduler, class Epilogue>
__device__ void gemm_sm90(const sm90::TensorMap &map_a, const sm90::TensorMap &map_b, GemmShape s,
                          const Scheduler &scheduler, const Epilogue &epi) {
  using namespace sm90;
  constexpr int BM = Config::BM, BN = Config::BN, STAGES = Config::STAGES;
  using Fragment = Sm90Fragment<BN, BM>;
  static_assert(Scheduler::BM == BM && Scheduler::BN == BN && Fragment::BM == BM,
                "the scheduler hands out this mainloop's tiles");
  static_assert(epilogue_stats_bytes<Fragment>() <= Config::SCRATCH_BYTES &&
                    epilogue_store_bytes<Fragment>() <= Config::SCRATCH_BYTES,
                "the scratch fits");
  static_assert(!Epilogue::STAGES_ROWS || epilogue_tile_bytes<Fragment>() <= Config::SCRATCH_BYTES,
                "the staged tile fits the scratch (Sm90Gemm's StagedRows)");
  extern __shared__ unsigned char kf_sm90_smem[];
  // Aligned by pointer arithmetic, not through an integer: the compiler then knows every
  // pointer below addresses shared memory (ld/st.shared, never aliasing a global access).
  unsigned char *smem = kf_sm90_smem + ((1024u - (sm90::smem_u32(kf_sm90_smem) & 1023u)) & 1023u);
  unsigned char *small = smem + STAGES * Config::STAGE_BYTES; // [STAGES][B_BYTES] (3xTF32)
  float *stats = reinterpret_cast<float *>(small + Config::SMALL_BYTES);
  unsigned long long *full =
      reinterpret_cast<unsigned long long *>(small + Config::SMALL_BYTES + Config::SCRATCH_BYTES);
  unsigned long long *empty = full + STAGES;
  unsigned long long *split_done = empty + STAGES; // 3xTF32: the stage's parts are written
  using Column = typename Epilogue::Column;
  constexpr bool kCache = Config::caches_columns(Epilogue::COLUMN_FLOATS);
  Column *column_cache =
      reinterpret_cast<Column *>(full + Config::BARRIERS * STAGES); // [2][BN] when kCache

  const int units = scheduler.units();
  // k >= 1 (a Linear's inner extent is a positive constant) and splits <= kblocks: every unit's
  // first wgmma zeroes the accumulators. A k == 0 branch zeroing them with ordinary instructions
  // would make ptxas serialize every wgmma of the kernel (warning C7515) once the column cache is
  // in use.
  const int kblocks = ceil_div(s.k, Config::BK);

  if (threadIdx.x == 0) {
    prefetch_tensor_map(map_a);
    prefetch_tensor_map(map_b);
#pragma unroll
    for (int i = 0; i < STAGES; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], Config::CONSUMER_WARPS);
      if constexpr (Config::SPLIT)
        mbar_init(&split_done[i], Config::SPLITTER_THREADS);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    // Producer warpgroup: one thread streams the stages.
    setmaxnreg_dec<Config::PRODUCER_REGISTERS>();
    if (threadIdx.x == 0) {
      StageRing<STAGES> ring;
      for (int work = scheduler.first(); work < units; work += scheduler.stride()) {
        const WorkUnit u = scheduler.unit(work, kblocks);
        const TileCoord tc = u.tile;
        for (int kb = u.k_begin; kb < u.k_end; ++kb) {
          mbar_wait(&empty[ring.stage], ring.phase ^ 1u);
          unsigned char *dst = smem + ring.stage * Config::STAGE_BYTES;
          mbar_arrive_expect_tx(&full[ring.stage], Config::STAGE_BYTES);
          tma_load_2d(dst, map_a, &full[ring.stage], kb * Config::BK, tc.m * BM);
          tma_load_2d(dst + Config::A_BYTES, map_b, &full[ring.stage], kb * Config::BK, tc.n * BN);
          ring.advance();
        }
      }
    }
  } else if (threadIdx.x < Config::CONSUMER_BASE) {
    // 3xTF32's splitter warpgroup: each stage's B tile, once loaded, becomes its big parts (in
    // place) and its small parts (the stage's small tile), visible to wgmma before the stage's
    // `split` barrier completes. The stage's small tile was last read by the wgmma of the
    // stage's previous round, which completed before the consumers released the stage.
    setmaxnreg_dec<Config::SPLITTER_REGISTERS>();
    const int st = threadIdx.x - 128;
    StageRing<STAGES> ring;
    for (int work = scheduler.first(); work < units; work += scheduler.stride()) {
      const WorkUnit u = scheduler.unit(work, kblocks);
      for (int kb = u.k_begin; kb < u.k_end; ++kb) {
        mbar_wait(&full[ring.stage], ring.phase);
        float4 *tile =
            reinterpret_cast<float4 *>(smem + ring.stage * Config::STAGE_BYTES + Config::A_BYTES);
        float4 *lo = reinterpret_cast<float4 *>(small + ring.stage * Config::B_BYTES);
#pragma unroll 4
        for (int i = st; i < Config::B_BYTES / 16; i += Config::SPLITTER_THREADS) {
          const float4 x = tile[i];
          float4 big, part;
          split_tf32(x.x, big.x, part.x);
          split_tf32(x.y, big.y, part.y);
          split_tf32(x.z, big.z, part.z);
          split_tf32(x.w, big.w, part.w);
          tile[i] = big;
          lo[i] = part;
        }
        fence_proxy_async();
        mbar_arrive(&split_done[ring.stage]);
        ring.advance();
      }
    }
  } else {
    setmaxnreg_inc<Config::CONSUMER_REGISTERS>();
    const int ct = threadIdx.x - Config::CONSUMER_BASE; // consumer thread 0 .. CONSUMER_THREADS - 1
    const int warp = ct >> 5;                           // consumer warp: tile rows 16 * warp ..
    const int lane = ct & 31;
    const int half = warp >> 2; // consumer warpgroup: rows 64 * half ..
    const Fragment layout(ct);
    StageRing<STAGES> ring;
    float acc[Config::ACCUMULATORS];
    int turn = 0;
    for (int work = scheduler.first(); work < units; work += scheduler.stride(), ++turn) {
      const WorkUnit u = scheduler.unit(work, kblocks);
      const int kb_begin = u.k_begin, kb_end = u.k_end;
      const int n0 = u.tile.n * BN;
      Column *cache = column_cache + (turn & 1) * BN;
      auto fill_cache = [&] {
        if constexpr (kCache)
          epi.fill_columns(layout, s, n0, cache);
      };
      if constexpr (Config::SPLIT) {
        // 3xTF32: the splitter has written B's parts. This thread's A elements of a k-step kk
        // (WgmmaTf32RegA's fragment) sit in the 128-byte-swizzled A tile at row r (its 16-byte
        // chunk c at chunk c ^ (r % 8), r % 8 = g here) and chunks 2 kk, 2 kk + 1: the 32 lanes
        // of a load hit 32 distinct banks. Each stage's products go into a zeroed partial sum
        // added to acc in fp32 (see the header).
        const int g = lane >> 2, q = lane & 3;
        const int a_row = (64 * half + 16 * (warp & 3) + g) * 128 + 4 * q;
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          mbar_wait(&full[ring.stage], ring.phase); // A's bytes (the splitter waited too)
          mbar_wait(&split_done[ring.stage], ring.phase);
          const unsigned char *tile = smem + ring.stage * Config::STAGE_BYTES;
          const unsigned long long db = smem_descriptor(tile + Config::A_BYTES);
          const unsigned long long lb = smem_descriptor(small + ring.stage * Config::B_BYTES);
          unsigned a_big[Config::K_STEPS][4], a_small[Config::K_STEPS][4];
#pragma unroll
          for (int kk = 0; kk < Config::K_STEPS; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int chunk = (2 * kk + (e >> 1)) ^ g;
              const float x =
                  *reinterpret_cast<const float *>(tile + a_row + (e & 1) * 8 * 128 + chunk * 16);
              float big, part;
              split_tf32(x, big, part);
              a_big[kk][e] = __float_as_uint(big);
              a_small[kk][e] = __float_as_uint(part);
            }
          float part[Config::ACCUMULATORS];
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < Config::K_STEPS; ++kk) {
            WgmmaTf32RegA<128>::mma(part, a_small[kk], db + 2 * kk, kk > 0);
            WgmmaTf32RegA<128>::mma(part, a_big[kk], lb + 2 * kk, 1);
            WgmmaTf32RegA<128>::mma(part, a_big[kk], db + 2 * kk, 1);
          }
          wgmma_commit();
          if (kb == kb_begin)
            fill_cache();
          wgmma_wait<0>();
          fence_registers(part);
          fence_registers(a_big);
          fence_registers(a_small);
#pragma unroll
          for (int i = 0; i < Config::ACCUMULATORS; ++i)
            acc[i] = kb > kb_begin ? acc[i] + part[i] : part[i];
          if (lane == 0)
            mbar_arrive(&empty[ring.stage]);
          ring.advance();
        }
      } else if constexpr (Config::ROUND_A) {
        // tf32: this warpgroup's rows of A go through registers, rounded to nearest (the
        // tensor cores would truncate them; B comes rounded, compiler/passes/round_tf32.cpp).
        // Lane l gives ldmatrix the row of matrix l / 8 (rows 8 * (l / 8 % 2) + l % 8 of its
        // warp's 16, chunk 2 kk + l / 16), swizzled as TMA wrote it: 8 lanes read 8 distinct
        // bank groups. The wgmma go in groups of GROUP_STEPS k-steps, each reading one of two
        // register sets: a group's fragments load while the previous group runs. The groups
        // come in pairs with no branch between them, which ptxas needs to see that no register
        // an unfinished wgmma reads is written (else it serializes every wgmma).
        constexpr int GS = Config::GROUP_STEPS, GROUPS = Config::K_STEPS / GS;
        const unsigned a_row = 64 * half + 16 * (warp & 3) + 8 * ((lane >> 3) & 1) + (lane & 7);
        const unsigned a_chunk = lane >> 4, a_swizzle = lane & 7;
        unsigned set_x[GS][4], set_y[GS][4];
        int previous = -1;
        auto group = [&](int kb, int gi, unsigned(&a)[GS][4], unsigned(&other)[GS][4]) {
          if (gi == 0)
            mbar_wait(&full[ring.stage], ring.phase);
          const unsigned char *tile = smem + ring.stage * Config::STAGE_BYTES;
          const unsigned a_base = smem_u32(tile) + a_row * 128;
#pragma unroll
          for (int j = 0; j < GS; ++j) {
            const int kk = gi * GS + j;
            ldmatrix_x4(a[j], a_base + (((2 * kk + a_chunk) ^ a_swizzle) << 4));
#pragma unroll
            for (int e = 0; e < 4; ++e)
              a[j][e] = to_tf32(__uint_as_float(a[j][e]));
          }
          const unsigned long long db = smem_descriptor(tile + Config::A_BYTES);
          wgmma_fence();
#pragma unroll
          for (int j = 0; j < GS; ++j) {
            const int kk = gi * GS + j;
            WgmmaTf32RegA<BN>::mma(acc, a[j], db + 2 * kk, kb > kb_begin || kk > 0);
          }
          wgmma_commit();
          if (kb == kb_begin && gi == 0)
            fill_cache();
          wgmma_wait<1>();
          fence_registers(acc);
          fence_registers(other); // the previous group's wgmma, which read it, completed
          if (gi == 0) {          // ... and with it the previous k-block's
            if (previous >= 0 && lane == 0)
              mbar_arrive(&empty[previous]);
            previous = ring.stage;
          }
          if (gi == GROUPS - 1)
            ring.advance();
        };
        if constexpr (GROUPS == 2) {
          for (int kb = kb_begin; kb < kb_end; ++kb) {
            group(kb, 0, set_x, set_y);
            group(kb, 1, set_y, set_x);
          }
        } else {
          int kb = kb_begin;
          for (; kb + 1 < kb_end; kb += 2) {
            group(kb, 0, set_x, set_y);
            group(kb + 1, 0, set_y, set_x);
          }
          if (kb < kb_end)
            group(kb, 0, set_x, set_y);
        }
        wgmma_wait<0>();
        fence_registers(acc);
        fence_registers(set_x);
        fence_registers(set_y);
        if (previous >= 0 && lane == 0)
          mbar_arrive(&empty[previous]);
      } else {
        int previous = -1;
        for (int kb = kb_begin; kb < kb_end; ++kb) {
          mbar_wait(&full[ring.stage], ring.phase);
          unsigned char *tile = smem + ring.stage * Config::STAGE_BYTES;
          const unsigned long long da = smem_descriptor(tile + half * 64 * 128);
          const unsigned long long db = smem_descriptor(tile + Config::A_BYTES);
          wgmma_fence();
#pragma unroll
          for (int kk = 0; kk < Config::K_STEPS; ++kk)
            Wgmma<Config::MMA, BN>::mma(acc, da + 2 * kk, db + 2 * kk, kb > kb_begin || kk > 0);
          wgmma_commit();
          if (kb == kb_begin)
            fill_cache(); // its loads overlap the first wgmma
          // The previous k-block's wgmma has completed: its stage can be refilled.
          wgmma_wait<1>();
          fence_registers(acc);
          if (previous >= 0 && lane == 0)
            mbar_arrive(&empty[previous]);
          previous = ring.stage;
          ring.advance();
        }
        wgmma_wait<0>();
        fence_registers(acc);
        if (previous >= 0 && lane == 0)
          mbar_arrive(&empty[previous]);
      }

      // Epilogue from registers. The cache of this turn is complete after the barrier; the
      // one of the next turn is written after this turn's barrier, when no thread reads it.
      if constexpr (kCache)
        named_barrier(2, Config::CONSUMER_THREADS);
      epi.template run<kCache>(layout, s, u, acc, cache, stats);
    }
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
