// The GEMM epilogue, shared by every mainloop: it takes one tile's fp32 accumulators from
// registers, applies the generated functor, stores C, and writes the tile's column-statistics
// partials or runs its rows' passes.
//
//   C[row, col] = functor.apply(functor.column(col), row, col, acc)
//
// Functor (the code generator writes one per GEMM kernel; an aggregate, so the epilogue can name
// matrix<I>()'s type through Functor{}):
//   struct Column; static constexpr int COLUMN_FLOATS;   per-column constants, floats only
//   __device__ Column column(int col) const;   may be called with n - 1 for columns past n (the
//       result is then unused), so it may read per-column arrays unguarded
//   static constexpr int MATRICES; template <int I> __device__ Matrix<T> matrix() const;
//       the matrices apply reads at (row, col) (a residual, say): elements (float, kf::bf16 or
//       kf::f16) and leading dimension; matrix() is absent where MATRICES is 0
//   __device__ float apply(const Column &c, int row, int col, float acc, const float *in) const;
//       in[I]: the I-th matrix's element at (row, col), loaded by the epilogue. A pure function,
//       called with row < m and col < n (the staged stores apply rows past m and columns past
//       n at m - 1 and n - 1 and drop the result).
//
// Fragment (a traits struct per mainloop: SimtFragment, TcFragment, Sm90Fragment):
//   BM, BN            the tile, the scheduler's as well
//   ROWS, COLS, VEC   a thread's ROWS x COLS accumulators (i, j); columns VEC * v .. + VEC - 1
//                     are adjacent in C (one store)
//   ROW_LANE_SHIFT    lanes differing only in bits ROW_LANE_SHIFT..4 hold the same columns on
//                     other rows; the lanes below 1 << ROW_LANE_SHIFT cover the warp's columns
//   ROW_GROUPS        warps holding the same columns hold ROW_GROUPS disjoint row sets
//   col_group()       which of the THREADS / 32 / ROW_GROUPS warps holding the same rows this
//                     thread's warp is (their columns in no particular order)
//   THREADS, thread   the epilogue's threads, this one's index
//   row(i), col(j), row_group(), group_rows(group, tile_rows), at(acc, i, j), sync()
//   STORE             Direct: from the registers. WarpSlices: each warp through its slice of
//                     shared memory; its accumulators lie on rows warp_row0() .. + WARP_ROWS - 1
//                     (a multiple of 4) and all BN columns, col(j) increases with j, a thread holds
//                     as many columns in every 128 bytes of a row, and no VEC straddles 16 bytes.
//                     Tile: the whole tile through shared memory; VEC is 4, col(j) a multiple of
//                     4 for j a multiple of 4, THREADS a multiple of BN / 4.
//
// Stores: Out (C's type: float, kf::bf16 or kf::f16) is rounded to once per value. Vector stores
// where C is VEC-aligned, ldc a multiple of VEC and the columns inside n, guarded scalars
// otherwise; rows past m are not written; addresses are 64-bit. WarpSlices stores chunks of
// 128 / sizeof(Out) columns through a WARP_ROWS x 128-byte slice (epilogue_store_bytes; 16-byte
// units swizzled by row % 8, conflict-free) as 16-byte row vectors: between two chunks' stores
// it writes only shared memory, so a chunk's functor inputs, loaded before the previous chunk is
// applied, are in flight together (a store to C would hold back every later load). Tile stages
// the raw accumulators ([BM][rows_stage_ld] fp32, epilogue_tile_bytes, which the mainloop
// provides) and a rolled loop over rows applies the functor to four columns per thread and
// stores whole 512-byte row segments: the functor's code appears a few times instead of once per
// accumulator, which keeps kernels small (shorter compiles, fewer instruction-cache misses).
//
// Apply (GemmEpilogue's How): Unrolled applies the functor to each accumulator in registers, its
// code inlined once per accumulator. Rolled, for WarpSlices fragments and functors heavy enough
// that those copies overflow the instruction cache (the code generator chooses it from the
// functor's transcendental calls), stages a chunk of 32 columns of raw fp32 accumulators through
// the warp's slice (WARP_ROWS x 128 bytes, the same units and swizzle), then a rolled loop of
// rounds applies the functor to 4 adjacent columns of a staged row per lane, reading the
// Columns (from the cache where Cached) and the matrices' elements (coalesced) at the lane's
// columns, and stores them as one vector: the functor's code appears 4 times. It writes no
// statistics and runs no row passes (those read the stored values back from the accumulators or
// stage the whole tile already).
//
// Column statistics (partial_mean and partial_m2 both null or both valid): for row tile tm and
// each valid column, the mean and M2 (sum of squared deviations from it) of the values stored,
// in fp32 before rounding to Out, over rows [tm * BM, min(tm * BM + BM, m)), at
// partial_mean[tm * n + col] and partial_m2[tm * n + col]: col_stats.cuh's merge_column layout
// with tile_rows = BM. A fixed order (each warp's butterfly, then the ROW_GROUPS merged in order
// with Chan's formula) makes it deterministic, without atomics. Its shared scratch
// (epilogue_stats_bytes) may alias the mainloop's stages; the epilogue synchronises it. Where
// statistics are written, the stored values replace the accumulators they came from.
//
// Rows (gemm_row_epilogue, n <= BN: the tile holds whole rows): a row kernel's generated passes
// over C's values, run here. Concept: ENABLED = true; LANES (row_kernel.cuh's row_team_lanes(n));
// operator()(int row, const Staged *x, LaneTeam<LANES> team) over x[0 .. n - 1]. The tile is
// staged as stored (rounded to Out; C may be null when only the rows need it) in
// epilogue_tile_bytes of scratch, then team t of LANES lanes stores rows t, t + THREADS / LANES,
// ... and runs their passes. NoRows: none.
//
// Row partials (row_partials_epilogue, any n): no staging. Rows has PARTIALS = true, Partials
// (row_partials.cuh's RowPartials of its reductions), add(float *p, int row, int col, float x),
// which adds the value x of column col (as stored: rounded to Out where C is written) to
// partial p, and out(int row, int slice), where the partial of the row's column
// slice (ROW_PARTIAL_COLS columns) goes. Each thread folds its accumulators into one partial per
// row and slice in registers, a column at a time, in column order; the lanes holding the row's
// columns merge theirs by a butterfly (lower lanes' first) and, where several warps hold a row
// (col_group()), those merge in order through [BM][slices][groups][FLOATS] floats of
// epilogue_tile_bytes' scratch. Deterministic, without atomics. Then C, where written, is
// stored as without rows (after the partials, so that the store's registers and theirs are not
// live together).
//
// Split-K (a unit with splits > 1): run() hands the partial accumulators to split_k_reduce
// (split_k.cuh); only the tile's last split, holding the sum in split order, stores and writes
// statistics, so each tile's epilogue runs exactly once. split_partials and split_counters may
// be null when every unit is a whole tile.
//
// Also valid host C++ (device code is compiled only by NVCC/NVRTC), so the mainloops' geometry
// can read epilogue_stats_bytes.
#pragma once

#include "col_stats.cuh"
#include "dtype.cuh"
#include "gemm_primitives.cuh"
#include "row_kernel.cuh"
#include "row_partials.cuh"
#include "split_k.cuh"
#include "tile_scheduler.cuh"

namespace kf {

// How many of the rows first .. first + count - 1 lie below `limit` (Fragment::group_rows).
KF_HOST_DEVICE constexpr int rows_below(int limit, int first, int count) {
  return limit - first < 0 ? 0 : limit - first > count ? count : limit - first;
}

// Shared scratch of the column statistics: a mean and an M2 per row group and tile column.
template <class Fragment> KF_HOST_DEVICE constexpr int epilogue_stats_bytes() {
  return 2 * Fragment::ROW_GROUPS * Fragment::BN * 4;
}

// A staged row's stride in floats: 16-byte aligned rows for the passes' vector reads.
template <class Fragment> KF_HOST_DEVICE constexpr int rows_stage_ld() { return Fragment::BN + 4; }

// How a fragment's tile goes out (Fragment::STORE; Stores, above).
enum class Store { Direct, WarpSlices, Tile };

// Shared scratch of the store through warp slices: a warp's rows, 128 bytes of each.
// Both applies of the store fit it (Apply, above): a chunk of Out is 128 bytes of a row, and so
// is one of the raw fp32 accumulators.
template <class Fragment> KF_HOST_DEVICE constexpr int epilogue_store_bytes() {
  return Fragment::STORE == Store::WarpSlices ? Fragment::THREADS / 32 * Fragment::WARP_ROWS * 128
                                              : 0;
}

// Shared scratch of a whole tile staged: for its rows' passes, or by Store::Tile.
template <class Fragment> KF_HOST_DEVICE constexpr int epilogue_tile_bytes() {
  return Fragment::BM * rows_stage_ld<Fragment>() * 4;
}

struct NoRows {
  static constexpr bool ENABLED = false;
};

// How a WarpSlices store applies the functor (Apply, above).
enum class Apply { Unrolled, Rolled };

// Statistics false: the epilogue never writes column statistics (partial_mean must be null), and
// the stored values are not written back into the accumulators; writing them on the store's
// divergent paths (rows past m, columns past n) makes ptxas serialize the sm90 mainloop's wgmma
// (its C7520), so the code generator passes false for every kernel without statistics.
template <class Functor, class Out = float, bool Statistics = true, class Rows = NoRows,
          Apply How = Apply::Unrolled>
struct GemmEpilogue {
  static_assert(!(Statistics && Rows::ENABLED), "a row epilogue writes no column statistics");
  static_assert(How == Apply::Unrolled || (!Statistics && !Rows::ENABLED),
                "a rolled apply writes no column statistics and runs no row passes");
  using Column = typename Functor::Column;
  static constexpr int COLUMN_FLOATS = Functor::COLUMN_FLOATS;
  static constexpr bool PARTIALS = writes_row_partials<Rows>::value;
  static constexpr bool STAGES_ROWS = Rows::ENABLED && !PARTIALS;
  static constexpr int MATRICES = Functor::MATRICES;
  static constexpr int INPUTS = MATRICES > 0 ? MATRICES : 1; // in[] of apply(), never empty

  Functor functor;
  Out *C;
  int ldc;
  float *partial_mean; // column-statistics partials, or both null
  float *partial_m2;
  float *split_partials = nullptr; // split-K's workspace (split_k.cuh)
  unsigned *split_counters = nullptr;
  Rows rows = {};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  // Column cache of a tile whose first column is n0: epilogue thread t evaluates columns
  // n0 + t, n0 + t + THREADS, ... once into cache[t], ... (mainloops with room in shared memory
  // call it while their first k-block of MMAs runs, and synchronise before run<true> reads it).
  template <class Fragment>
  __device__ void fill_columns(const Fragment &f, GemmShape s, int n0, Column *cache) const {
    for (int t = f.thread; t < Fragment::BN; t += Fragment::THREADS)
      cache[t] = functor.column(min(n0 + t, s.n - 1));
  }

  // The whole epilogue of work unit u: its split's partial added to the tile's sum (split-K),
  // then, once the tile is whole, apply and store, then the statistics where requested.
  // Cached: read the Columns from `cache` (filled by fill_columns) instead of evaluating them.
  template <bool Cached, class Fragment, class Acc>
  __device__ void run(const Fragment &f, GemmShape s, const WorkUnit &u, Acc &acc,
                      const Column *cache, float *scratch) const {
    if (u.splits > 1 && !split_k_reduce(f, u, split_partials, split_counters, acc,
                                        reinterpret_cast<int *>(scratch)))
      return;
    if constexpr (PARTIALS) {
      row_partials<Cached>(f, s, u.tile, acc, cache, scratch);
      if (C != nullptr)
        store_any<Cached>(f, s, u, acc, cache, scratch);
      return;
    }
    if constexpr (Fragment::STORE == Store::Tile) {
      store_tile<Cached>(f, s, u.tile, acc, cache, scratch);
      return;
    }
    if constexpr (STAGES_ROWS) {
      run_rows<Cached>(f, s, u.tile, acc, cache, scratch);
      return;
    }
    static_assert(How == Apply::Unrolled || Fragment::STORE == Store::WarpSlices,
                  "a rolled apply stores through warp slices (Store::Tile's apply is rolled)");
    if constexpr (How == Apply::Rolled)
      store_rolled<Cached>(f, s, u, acc, cache, scratch);
    else if constexpr (Fragment::STORE == Store::WarpSlices)
      store_staged<Cached>(f, s, u, acc, cache, scratch);
    else
      store<Cached>(f, s, u.tile, acc, cache);
    if constexpr (Statistics)
      if (partial_mean != nullptr)
        statistics(f, s, u.tile, acc, scratch);
  }

private:
  // The store of the fragment's STORE, without statistics (row partials' product).
  template <bool Cached, class Fragment, class Acc>
  __device__ void store_any(const Fragment &f, GemmShape s, const WorkUnit &u, Acc &acc,
                            const Column *cache, float *scratch) const {
    if constexpr (Fragment::STORE == Store::Tile)
      store_tile<Cached>(f, s, u.tile, acc, cache, scratch);
    else if constexpr (Fragment::STORE == Store::WarpSlices)
      store_staged<Cached>(f, s, u, acc, cache, scratch);
    else
      store<Cached>(f, s, u.tile, acc, cache);
  }

  // The Columns of columns c0 .. c0 + V - 1 of the tile at column n0 (past n: the last one's).
  template <bool Cached, int V>
  __device__ void columns(GemmShape s, int n0, int c0, const Column *cache,
                          Column (&cols)[V]) const {
#pragma unroll
    for (int e = 0; e < V; ++e) {
      if constexpr (Cached)
        cols[e] = cache[c0 - n0 + e];
      else
        cols[e] = functor.column(min(c0 + e, s.n - 1));
    }
  }

  template <bool Cached, class Fragment, class Acc>
  __device__ void store(const Fragment &f, GemmShape s, TileCoord tc, Acc &acc,
                        const Column *cache) const {
    using namespace gemm_detail;
    constexpr int V = Fragment::VEC;
    const int m0 = tc.m * Fragment::BM, n0 = tc.n * Fragment::BN;
    const bool vec_c = vector_ok<V>(C, ldc);
#pragma unroll
    for (int v = 0; v < Fragment::COLS / V; ++v) {
      const int c0 = n0 + f.col(V * v); // this thread's columns c0 .. c0 + V - 1
      Column cols[V];
      columns<Cached>(s, n0, c0, cache, cols);
#pragma unroll
      for (int i = 0; i < Fragment::ROWS; ++i) {
        const int row = m0 + f.row(i);
        if (row >= s.m)
          continue;
        Out *crow = C + (static_cast<long long>(row) * ldc + c0);
        if (c0 + V - 1 < s.n) {
          float y[V];
#pragma unroll
          for (int e = 0; e < V; ++e) {
            float &a = Fragment::at(acc, i, V * v + e);
            float in[INPUTS];
            load_matrix_elements(functor, row, c0 + e, in);
            y[e] = functor.apply(cols[e], row, c0 + e, a, in);
            if constexpr (Statistics)
              a = y[e];
          }
          if (vec_c) {
            store_vector<V>(crow, y);
          } else {
#pragma unroll
            for (int e = 0; e < V; ++e)
              kf::store(crow + e, y[e]);
          }
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            if (c0 + e < s.n) {
              float &a = Fragment::at(acc, i, V * v + e);
              float in[INPUTS];
              load_matrix_elements(functor, row, c0 + e, in);
              const float y = functor.apply(cols[e], row, c0 + e, a, in);
              if constexpr (Statistics)
                a = y;
              kf::store(crow + e, y);
            }
          }
        }
      }
    }
  }

  // The store through each warp's slice of the scratch (Stores, above).
  template <bool Cached, class Fragment, class Acc>
  __device__ void store_staged(const Fragment &f, GemmShape s, const WorkUnit &u, Acc &acc,
                               const Column *cache, float *scratch) const {
    const TileCoord tc = u.tile;
    constexpr int SIZE = sizeof(Out), CHUNK = 128 / SIZE, UNIT = 16 / SIZE;
    constexpr int ROWS = Fragment::WARP_ROWS;
    static_assert(ROWS * 8 % 32 == 0, "a warp stores whole rounds of its slice");
    const int m0 = tc.m * Fragment::BM, n0 = tc.n * Fragment::BN;
    const int lane = f.thread & 31, first = f.warp_row0();
    unsigned char *slice =
        reinterpret_cast<unsigned char *>(scratch) + (f.thread >> 5) * ROWS * 128;
    const bool vec_c = gemm_detail::vector_ok<UNIT>(C, ldc);
    // Split-K's flag and the previous tile's statistics alias the slices; nothing else does (a
    // warp alone writes and reads its slice), so only those wait for every warp.
    if (Statistics || u.splits > 1)
      Fragment::sync();
    // The inputs of a chunk and of the next one: a chunk's loads are issued before the chunk
    // before it is applied, so their latency passes while that chunk is applied and stored.
    unsigned in[2][INPUTS][Fragment::ROWS][chunk_columns<Fragment>()];
    gather_inputs<0>(f, s, m0, n0, 0, in[0]);
#pragma unroll
    for (int chunk = 0; chunk < Fragment::BN / CHUNK; ++chunk) {
      if (chunk + 1 < Fragment::BN / CHUNK)
        gather_inputs<0>(f, s, m0, n0, chunk + 1, in[(chunk + 1) & 1]);
      stage_chunk<Cached>(f, s, m0, n0, chunk, acc, cache, in[chunk & 1], slice);
      __syncwarp();
      // Not unrolled: the rounds read the slice, not the accumulators, and one copy of them
      // keeps NVRTC's compile of the kernel short.
#pragma unroll 1
      for (int round = 0; round < ROWS * 8 / 32; ++round) {
        const int r = round * 4 + (lane >> 3), unit = lane & 7;
        const int row = m0 + first + r, col = n0 + chunk * CHUNK + unit * UNIT;
        if (row >= s.m)
          continue;
        const unsigned char *from = slice + r * 128 + ((unit ^ (r & 7)) << 4);
        Out *to = C + (static_cast<long long>(row) * ldc + col);
        if (vec_c && col + UNIT <= s.n) {
          *reinterpret_cast<uint4 *>(to) = *reinterpret_cast<const uint4 *>(from);
        } else {
#pragma unroll 1
          for (int e = 0; e < UNIT && col + e < s.n; ++e)
            to[e] = reinterpret_cast<const Out *>(from)[e];
        }
      }
      __syncwarp(); // the slice is read before the next chunk overwrites it
    }
  }

  // The columns a thread holds of a row in one chunk of the staged store: its accumulators
  // (i, chunk * chunk_columns() + c), c = 0 .. chunk_columns() - 1.
  template <class Fragment> KF_HOST_DEVICE static constexpr int chunk_columns() {
    return Fragment::COLS / (Fragment::BN / (128 / static_cast<int>(sizeof(Out))));
  }

  // Whether the I-th matrix's elements of a chunk are held two to a register (2-byte elements,
  // the fragment's column pairs): half the registers and loads.
  template <int I, class Fragment> KF_HOST_DEVICE static constexpr bool paired() {
    using T = typename decltype(Functor{}.template matrix<I>())::Element;
    return sizeof(T) == 2 && Fragment::VEC == 2;
  }

  // raw[I][i][c]: the bits of the I-th matrix (I >= FIRST) at this thread's row i and column c
  // of the chunk, or of columns 2c and 2c + 1 where paired (Inputs, above). Rows past m and
  // columns past n are read at m - 1 and n - 1.
  template <int FIRST, class Fragment>
  __device__ void
  gather_inputs(const Fragment &f, GemmShape s, int m0, int n0, int chunk,
                unsigned (&raw)[INPUTS][Fragment::ROWS][chunk_columns<Fragment>()]) const {
    if constexpr (FIRST < MATRICES) {
      constexpr int CV = chunk_columns<Fragment>();
      const auto m = functor.template matrix<FIRST>();
#pragma unroll
      for (int i = 0; i < Fragment::ROWS; ++i) {
        const auto *at = m.p + static_cast<long long>(min(m0 + f.row(i), s.m - 1)) * m.ld;
        if constexpr (paired<FIRST, Fragment>()) {
          // Where n and the matrix's rows are even, a pair is one aligned 4-byte load.
          const bool whole = s.n % 2 == 0 && gemm_detail::vector_ok<2>(m.p, m.ld);
#pragma unroll
          for (int c = 0; c < CV / 2; ++c) {
            const int col = n0 + f.col(chunk * CV + 2 * c);
            raw[FIRST][i][c] = whole ? *reinterpret_cast<const unsigned *>(at + min(col, s.n - 2))
                                     : at[min(col, s.n - 1)].bits |
                                           static_cast<unsigned>(at[min(col + 1, s.n - 1)].bits)
                                               << 16;
          }
        } else {
#pragma unroll
          for (int c = 0; c < CV; ++c)
            raw[FIRST][i][c] = __float_as_uint(load(at + min(n0 + f.col(chunk * CV + c), s.n - 1)));
        }
      }
      gather_inputs<FIRST + 1>(f, s, m0, n0, chunk, raw);
    }
  }

  // x[I] (I >= FIRST): the I-th matrix's value at row i and column c of the chunk, from raw.
  template <int FIRST, class Fragment>
  __device__ static void
  input_values(const unsigned (&raw)[INPUTS][Fragment::ROWS][chunk_columns<Fragment>()], int i,
               int c, float (&x)[INPUTS]) {
    if constexpr (FIRST < MATRICES) {
      using T = typename decltype(Functor{}.template matrix<FIRST>())::Element;
      if constexpr (paired<FIRST, Fragment>())
        x[FIRST] =
            to_float(T{static_cast<unsigned short>(raw[FIRST][i][c >> 1] >> (16 * (c & 1)))});
      else
        x[FIRST] = __uint_as_float(raw[FIRST][i][c]);
      input_values<FIRST + 1, Fragment>(raw, i, c, x);
    }
  }

  // This thread's values of columns n0 + chunk * CHUNK .. + CHUNK - 1, applied and rounded to
  // Out, written to the warp's slice. Rows past m and columns past n are applied at m - 1 and
  // n - 1 (their values are staged and never stored): no branch, so the chunk's applies (and
  // their loads of vectors) are one straight run of code that the compiler issues together.
  template <bool Cached, class Fragment, class Acc>
  __device__ void
  stage_chunk(const Fragment &f, GemmShape s, int m0, int n0, int chunk, Acc &acc,
              const Column *cache,
              const unsigned (&in)[INPUTS][Fragment::ROWS][chunk_columns<Fragment>()],
              unsigned char *slice) const {
    constexpr int V = Fragment::VEC, SIZE = sizeof(Out), CHUNK = 128 / SIZE;
    constexpr int PER_CHUNK = Fragment::COLS / V / (Fragment::BN / CHUNK); // vectors per chunk
    static_assert(V * SIZE <= 16 && PER_CHUNK * (Fragment::BN / CHUNK) * V == Fragment::COLS,
                  "a thread's vectors spread evenly over the chunks, none across 16 bytes");
    const int first = f.warp_row0();
#pragma unroll
    for (int p = 0; p < PER_CHUNK; ++p) {
      const int v = chunk * PER_CHUNK + p;
      const int c0 = n0 + f.col(V * v); // this thread's columns c0 .. c0 + V - 1
      Column cols[V];
      columns<Cached>(s, n0, c0, cache, cols);
      const int byte = (c0 - n0 - chunk * CHUNK) * SIZE;
      // Where V divides n (n is a literal in generated code), a vector lies wholly inside n or
      // wholly past it: one clamp per vector, its columns at immediate offsets from it.
      const bool even = s.n % V == 0;
      const int col0 = min(c0, s.n - V);
#pragma unroll
      for (int i = 0; i < Fragment::ROWS; ++i) {
        const int row = min(m0 + f.row(i), s.m - 1), r = f.row(i) - first;
        Out y[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          float &a = Fragment::at(acc, i, V * v + e);
          float x_in[INPUTS];
          input_values<0, Fragment>(in, i, p * V + e, x_in);
          const float x =
              functor.apply(cols[e], row, even ? col0 + e : min(c0 + e, s.n - 1), a, x_in);
          if constexpr (Statistics)
            a = x;
          y[e] = from_float<Out>(x);
        }
        Out *to =
            reinterpret_cast<Out *>(slice + r * 128 + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15));
        if constexpr (SIZE == 2 && V == 2) { // one 4-byte shared store for the pair
          *reinterpret_cast<unsigned *>(to) = y[0].bits | static_cast<unsigned>(y[1].bits) << 16;
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e)
            to[e] = y[e];
        }
      }
    }
  }

  // The store of Apply::Rolled (above): per chunk of CHUNK columns, the raw accumulators staged
  // in the warp's slice, then rounds, each applying the functor to V columns of a row per lane
  // and storing them. Neither loop is unrolled: the functor's code appears V times.
  template <bool Cached, class Fragment, class Acc>
  __device__ void store_rolled(const Fragment &f, GemmShape s, const WorkUnit &u, const Acc &acc,
                               const Column *cache, float *scratch) const {
    constexpr int CHUNK = 32, V = 4, ROWS = Fragment::WARP_ROWS;
    constexpr int ROW_LANES = CHUNK / V, ROUND_ROWS = 32 / ROW_LANES; // lanes of a row; rows
    static_assert(ROWS % ROUND_ROWS == 0 && Fragment::BN % CHUNK == 0,
                  "a warp stores whole rounds of its slice, the tile whole chunks");
    const int m0 = u.tile.m * Fragment::BM, n0 = u.tile.n * Fragment::BN;
    const int lane = f.thread & 31, unit = lane % ROW_LANES, first = f.warp_row0();
    float *slice = scratch + (f.thread >> 5) * ROWS * CHUNK;
    const bool vec_c = gemm_detail::vector_ok<V>(C, ldc);
    // Where V divides n (n is a literal in generated code), a lane's columns lie wholly inside n
    // or wholly past it: one clamp, its columns at immediate offsets from it.
    const bool even = s.n % V == 0;
    if (u.splits > 1)
      Fragment::sync(); // split-K's flag aliases the slices
#pragma unroll 1
    for (int chunk = 0; chunk < Fragment::BN / CHUNK; ++chunk) {
      stage_raw_chunk(f, chunk, acc, slice);
      __syncwarp();
      const int c0 = n0 + chunk * CHUNK + unit * V; // this lane's columns c0 .. c0 + V - 1
      Column cols[V];
      columns<Cached>(s, n0, c0, cache, cols);
      const int col0 = min(c0, s.n - V);
      const bool vec = vec_c && c0 + V <= s.n;
#pragma unroll 1
      for (int round = 0; round < ROWS / ROUND_ROWS; ++round) {
        const int r = round * ROUND_ROWS + lane / ROW_LANES, row = m0 + first + r;
        if (row >= s.m)
          continue;
        const float4 x4 =
            *reinterpret_cast<const float4 *>(slice + r * CHUNK + ((unit ^ (r & 7)) << 2));
        const float x[V] = {x4.x, x4.y, x4.z, x4.w};
        float y[V];
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const int col = even ? col0 + e : min(c0 + e, s.n - 1);
          float in[INPUTS];
          load_matrix_elements(functor, row, col, in);
          y[e] = functor.apply(cols[e], row, col, x[e], in);
        }
        Out *crow = C + (static_cast<long long>(row) * ldc + c0);
        if (vec) {
          gemm_detail::store_vector<V>(crow, y);
        } else {
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (c0 + e < s.n)
              kf::store(crow + e, y[e]);
        }
      }
      __syncwarp(); // the slice is read before the next chunk overwrites it
    }
  }

  // This thread's raw accumulators of columns chunk * 32 .. + 31 of the tile, written to the
  // warp's slice: row r of it holds the chunk's 32 floats of row warp_row0() + r, its 16-byte
  // units swizzled by r % 8. The accumulators are registers, so each chunk's writes are code of
  // their own, chosen by `chunk`; they are a few shared stores, not the functor.
  template <class Fragment, class Acc>
  __device__ static void stage_raw_chunk(const Fragment &f, int chunk, const Acc &acc,
                                         float *slice) {
    constexpr int V = Fragment::VEC, CV = Fragment::COLS / (Fragment::BN / 32);
    static_assert(CV % V == 0 && V * 4 <= 16, "a chunk in whole vectors, none across 16 bytes");
    const int first = f.warp_row0();
#pragma unroll
    for (int c = 0; c < Fragment::BN / 32; ++c) {
      if (c != chunk)
        continue;
#pragma unroll
      for (int i = 0; i < Fragment::ROWS; ++i) {
        const int r = f.row(i) - first;
#pragma unroll
        for (int p = 0; p < CV; p += V) {
          const int col = f.col(c * CV + p) - c * 32; // the vector's first column in the chunk
          float *to = slice + r * 32 + (((col >> 2) ^ (r & 7)) << 2) + (col & 3);
          if constexpr (V == 2) { // one 8-byte shared store for the pair
            *reinterpret_cast<float2 *>(to) =
                make_float2(Fragment::at(acc, i, c * CV + p), Fragment::at(acc, i, c * CV + p + 1));
          } else {
#pragma unroll
            for (int e = 0; e < V; ++e)
              to[e] = Fragment::at(acc, i, c * CV + p + e);
          }
        }
      }
    }
  }

  // fn(i, j, p) for each of the thread's groups of 4 accumulators (i, j .. j + 3) and their
  // place p in a tile staged whole ([BM][rows_stage_ld] floats at scratch).
  template <class Fragment, class Fn>
  __device__ static void each_staged_vector(const Fragment &f, float *scratch, Fn fn) {
#pragma unroll
    for (int i = 0; i < Fragment::ROWS; ++i)
#pragma unroll
      for (int j = 0; j < Fragment::COLS; j += 4)
        fn(i, j,
           reinterpret_cast<float4 *>(scratch + f.row(i) * rows_stage_ld<Fragment>() + f.col(j)));
  }

  // The store of a tile staged whole (Store::Tile, above), then its row passes or statistics.
  // Reads the scratch until it returns.
  template <bool Cached, class Fragment, class Acc>
  __device__ void store_tile(const Fragment &f, GemmShape s, TileCoord tc, Acc &acc,
                             const Column *cache, float *scratch) const {
    constexpr int LD = rows_stage_ld<Fragment>(), V = 4, VECS = Fragment::BN / V;
    constexpr int STEP = Fragment::THREADS / VECS; // rows one round of the loop covers
    static_assert(Fragment::VEC == V && Fragment::THREADS % VECS == 0 && Fragment::BM % STEP == 0,
                  "a thread's accumulators in float4s; whole rows per round, whole rounds");
    const int m0 = tc.m * Fragment::BM, n0 = tc.n * Fragment::BN;
    Fragment::sync(); // the mainloop's stages and split-K's flag alias the scratch
    each_staged_vector(f, scratch, [&](int i, int j, float4 *p) {
      *p = make_float4(Fragment::at(acc, i, j), Fragment::at(acc, i, j + 1),
                       Fragment::at(acc, i, j + 2), Fragment::at(acc, i, j + 3));
    });
    Fragment::sync();

    const int tile_col = f.thread % VECS * V, c0 = n0 + tile_col;
    Column cols[V];
    columns<Cached>(s, n0, c0, cache, cols);
    // Where V divides n (n is a literal in generated code), the vector lies wholly inside n or
    // wholly past it: one clamp, its columns at immediate offsets from it.
    const bool even = s.n % V == 0;
    const int col0 = min(c0, s.n - V);
    const bool vec_c = c0 + V <= s.n && gemm_detail::vector_ok<V>(C, ldc);
    // The stored values go back to the scratch for the row passes and the statistics.
    constexpr bool KEEP = STAGES_ROWS || Statistics;
#pragma unroll 2
    for (int round = 0; round < Fragment::BM / STEP; ++round) {
      const int r = f.thread / VECS + round * STEP;
      const int row = min(m0 + r, s.m - 1);
      float *staged = scratch + r * LD + tile_col;
      const float4 x4 = *reinterpret_cast<const float4 *>(staged);
      const float x[V] = {x4.x, x4.y, x4.z, x4.w};
      float y[V];
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int col = even ? col0 + e : min(c0 + e, s.n - 1);
        float in[INPUTS];
        load_matrix_elements(functor, row, col, in);
        y[e] = functor.apply(cols[e], row, col, x[e], in);
        if constexpr (STAGES_ROWS)
          if (C != nullptr)
            y[e] = to_float(from_float<Out>(y[e]));
      }
      if constexpr (KEEP)
        *reinterpret_cast<float4 *>(staged) = make_float4(y[0], y[1], y[2], y[3]);
      if (STAGES_ROWS || m0 + r >= s.m)
        continue; // the row passes store C
      Out *crow = C + (static_cast<long long>(row) * ldc + c0);
      if (vec_c) {
        gemm_detail::store_vector<V>(crow, y);
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e)
          if (c0 + e < s.n)
            kf::store(crow + e, y[e]);
      }
    }
    if constexpr (STAGES_ROWS) {
      Fragment::sync();
      rows_of_tile<Fragment::THREADS, LD>(f.thread, m0, min(Fragment::BM, s.m - m0), s.n, scratch);
    } else if constexpr (Statistics) {
      if (partial_mean == nullptr)
        return;
      Fragment::sync();
      each_staged_vector(f, scratch, [&](int i, int j, const float4 *p) {
        Fragment::at(acc, i, j) = p->x;
        Fragment::at(acc, i, j + 1) = p->y;
        Fragment::at(acc, i, j + 2) = p->z;
        Fragment::at(acc, i, j + 3) = p->w;
      });
      statistics(f, s, tc, acc, scratch);
    }
  }

  // Stages the tile's values in scratch, then a team of lanes per row stores it to C (where C
  // is written) and runs the row passes: each value is computed once.
  template <bool Cached, class Fragment, class Acc>
  __device__ void run_rows(const Fragment &f, GemmShape s, TileCoord tc, const Acc &acc,
                           const Column *cache, float *scratch) const {
    constexpr int LD = rows_stage_ld<Fragment>();
    const int m0 = tc.m * Fragment::BM, n0 = tc.n * Fragment::BN;
    const int tile_rows = min(Fragment::BM, s.m - m0);
    Fragment::sync(); // split-K's flag and the mainloop's stages may alias the scratch
#pragma unroll
    for (int j = 0; j < Fragment::COLS; ++j) {
      const int col = n0 + f.col(j);
      if (col >= s.n)
        continue;
      const Column c = Cached ? cache[col - n0] : functor.column(col);
#pragma unroll
      for (int i = 0; i < Fragment::ROWS; ++i)
        if (f.row(i) < tile_rows) {
          float in[INPUTS];
          load_matrix_elements(functor, m0 + f.row(i), col, in);
          const float y = functor.apply(c, m0 + f.row(i), col, Fragment::at(acc, i, j), in);
          scratch[f.row(i) * LD + (col - n0)] = C != nullptr ? to_float(from_float<Out>(y)) : y;
        }
    }
    Fragment::sync();
    rows_of_tile<Fragment::THREADS, LD>(f.thread, m0, tile_rows, s.n, scratch);
    Fragment::sync(); // the next tile's staging waits for these reads
  }

  // Team t of the epilogue's THREADS / LANES stores (where C is written) and runs the passes of
  // rows t, t + TEAMS, ... of the staged tile, whose values are already rounded to Out where
  // stored. Not inlined: the row passes' registers then do not add to the mainloop's (which
  // would spill).
  template <int THREADS, int LD>
  __device__ __noinline__ void rows_of_tile(int thread, int m0, int tile_rows, int n,
                                            const float *scratch) const {
    constexpr int LANES = Rows::LANES, TEAMS = THREADS / LANES;
    const LaneTeam<LANES> team{thread & 31};
    for (int r = thread / LANES; r < tile_rows; r += TEAMS) {
      const float *staged = scratch + r * LD;
      if (C != nullptr) {
        Out *crow = C + static_cast<long long>(m0 + r) * ldc;
        for (int c = team.rank(); c < n; c += LANES)
          kf::store(crow + c, staged[c]);
      }
      rows(m0 + r, reinterpret_cast<const Staged *>(staged), team);
    }
  }

  // The tile's row partials from the accumulators (Row partials, above): every partial of the
  // thread's rows and slices folded in registers first, a column at a time (its Column and
  // per-column loads once for all the rows, no store between them), then merged and written.
  // Rows past m are folded at m - 1 and not written; columns past n are skipped, and slices
  // past n not written.
  template <bool Cached, class Fragment, class Acc>
  __device__ void row_partials(const Fragment &f, GemmShape s, TileCoord tc, const Acc &acc,
                               const Column *cache, float *scratch) const {
    using P = typename Rows::Partials;
    constexpr int F = P::FLOATS, SPAN = 1 << Fragment::ROW_LANE_SHIFT;
    constexpr int SLICES = Fragment::BN / ROW_PARTIAL_COLS;
    constexpr int COL_GROUPS = Fragment::THREADS / 32 / Fragment::ROW_GROUPS;
    static_assert(Fragment::BN % ROW_PARTIAL_COLS == 0, "a tile holds whole column slices");
    static_assert(SLICES * COL_GROUPS * F <= rows_stage_ld<Fragment>(),
                  "a tile's row partials of every slice and column group fit a staged tile's "
                  "scratch");
    const int m0 = tc.m * Fragment::BM, n0 = tc.n * Fragment::BN, lane = f.thread & 31;
    const int tile_rows = min(Fragment::BM, s.m - m0);
    const bool leader = (lane & (SPAN - 1)) == 0;
    if constexpr (COL_GROUPS > 1)
      Fragment::sync(); // the store and split-K's flag may use the scratch
    float p[Fragment::ROWS][SLICES][F];
    if (n0 + Fragment::BN <= s.n) // a whole tile: no column checks
      fold_row_partials<Cached, true>(f, s, m0, n0, acc, cache, p);
    else
      fold_row_partials<Cached, false>(f, s, m0, n0, acc, cache, p);
#pragma unroll
    for (int i = 0; i < Fragment::ROWS; ++i) {
#pragma unroll
      for (int slice = 0; slice < SLICES; ++slice) {
        merge_lanes<P, F, SPAN>(p[i][slice], lane);
        if (!leader)
          continue;
        const int global_slice = tc.n * SLICES + slice;
        float *to = COL_GROUPS > 1
                        ? scratch + ((f.row(i) * SLICES + slice) * COL_GROUPS + f.col_group()) * F
                    : f.row(i) < tile_rows && n0 + slice * ROW_PARTIAL_COLS < s.n
                        ? rows.out(m0 + f.row(i), global_slice)
                        : nullptr;
        if (to != nullptr)
#pragma unroll
          for (int e = 0; e < F; ++e)
            to[e] = p[i][slice][e];
      }
    }
    if constexpr (COL_GROUPS > 1) {
      // The warps holding a row merge in col_group() order, slice by slice.
      Fragment::sync();
      const int slices = min(SLICES, (s.n - n0 + ROW_PARTIAL_COLS - 1) / ROW_PARTIAL_COLS);
      for (int r = f.thread; r < tile_rows * slices; r += Fragment::THREADS) {
        const int row = r / slices, slice = r % slices;
        float merged[F];
        const float *from = scratch + (row * SLICES + slice) * COL_GROUPS * F;
#pragma unroll
        for (int e = 0; e < F; ++e)
          merged[e] = from[e];
        for (int group = 1; group < COL_GROUPS; ++group)
          P::merge(merged, from + group * F);
        float *out = rows.out(m0 + row, tc.n * SLICES + slice);
#pragma unroll
        for (int e = 0; e < F; ++e)
          out[e] = merged[e];
      }
      Fragment::sync(); // the next tile's use of the scratch waits for these reads
    }
  }

  // The thread's partial p[i][slice] of each of its rows i and column slices, its columns folded
  // in column order. Full: every column of the tile is below n.
  template <bool Cached, bool Full, class Fragment, class Acc, int R, int S, int F>
  __device__ void fold_row_partials(const Fragment &f, GemmShape s, int m0, int n0, const Acc &acc,
                                    const Column *cache, float (&p)[R][S][F]) const {
    using P = typename Rows::Partials;
    int row[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      row[i] = min(m0 + f.row(i), s.m - 1);
#pragma unroll
      for (int slice = 0; slice < S; ++slice)
        P::init(p[i][slice]);
    }
#pragma unroll
    for (int j = 0; j < Fragment::COLS; ++j) {
      const int c = f.col(j);
      if (!Full && n0 + c >= s.n)
        continue;
      const Column column = Cached ? cache[c] : functor.column(n0 + c);
#pragma unroll
      for (int i = 0; i < R; ++i) {
        float in[INPUTS];
        load_matrix_elements(functor, row[i], n0 + c, in);
        const float y = functor.apply(column, row[i], n0 + c, Fragment::at(acc, i, j), in);
        const float x = C != nullptr ? to_float(from_float<Out>(y)) : y;
        // A static index into p; the test is a constant where slice_of(j) is (Sm90Fragment).
#pragma unroll
        for (int slice = 0; slice < S; ++slice)
          if (f.slice_of(j, ROW_PARTIAL_COLS) == slice)
            rows.add(p[i][slice], row[i], n0 + c, x);
      }
    }
  }

  // Partial p of the lanes of a row's columns in this warp, merged by a butterfly (the lower
  // lane's first), in every one of them.
  template <class P, int F, int SPAN> __device__ static void merge_lanes(float *p, int lane) {
#pragma unroll
    for (int mask = 1; mask < SPAN; mask <<= 1) {
      const bool upper = (lane & mask) != 0;
      float lo[F], hi[F];
#pragma unroll
      for (int e = 0; e < F; ++e) {
        const float other = __shfl_xor_sync(0xffffffffu, p[e], mask);
        lo[e] = upper ? other : p[e];
        hi[e] = upper ? p[e] : other;
      }
      P::merge(lo, hi);
#pragma unroll
      for (int e = 0; e < F; ++e)
        p[e] = lo[e];
    }
  }

  template <class Fragment, class Acc>
  __device__ void statistics(const Fragment &f, GemmShape s, TileCoord tc, const Acc &acc,
                             float *scratch) const {
    constexpr int BN = Fragment::BN, GROUPS = Fragment::ROW_GROUPS;
    const int m0 = tc.m * Fragment::BM, n0 = tc.n * BN;
    const int tile_rows = min(Fragment::BM, s.m - m0);
    const int lane = f.thread & 31;
    const int group = f.row_group();
    const int count = Fragment::group_rows(group, tile_rows);
    const float inv_count = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
    bool valid[Fragment::ROWS];
#pragma unroll
    for (int i = 0; i < Fragment::ROWS; ++i)
      valid[i] = f.row(i) < tile_rows;
    float *sm_mean = scratch;             // [GROUPS][BN]
    float *sm_m2 = scratch + GROUPS * BN; // [GROUPS][BN]
    Fragment::sync();                     // nobody still reads what the scratch aliases
#pragma unroll
    for (int j = 0; j < Fragment::COLS; ++j) {
      float x[Fragment::ROWS]; // the column's stored values, 0 on rows past m
#pragma unroll
      for (int i = 0; i < Fragment::ROWS; ++i)
        x[i] = valid[i] ? Fragment::at(acc, i, j) : 0.0f;
      float sum = x[0];
#pragma unroll
      for (int i = 1; i < Fragment::ROWS; ++i)
        sum += x[i];
#pragma unroll
      for (int mask = 1 << Fragment::ROW_LANE_SHIFT; mask < 32; mask <<= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, mask);
      const float mean = sum * inv_count;
#pragma unroll
      for (int i = 0; i < Fragment::ROWS; ++i)
        x[i] = valid[i] ? x[i] - mean : 0.0f;
      float m2 = x[0] * x[0];
#pragma unroll
      for (int i = 1; i < Fragment::ROWS; ++i)
        m2 = fmaf(x[i], x[i], m2);
#pragma unroll
      for (int mask = 1 << Fragment::ROW_LANE_SHIFT; mask < 32; mask <<= 1)
        m2 += __shfl_xor_sync(0xffffffffu, m2, mask);
      if (lane < (1 << Fragment::ROW_LANE_SHIFT)) {
        sm_mean[group * BN + f.col(j)] = mean;
        sm_m2[group * BN + f.col(j)] = m2;
      }
    }
    Fragment::sync();

    // One thread per tile column merges the row groups in order 0..GROUPS - 1.
    for (int t = f.thread; t < BN && n0 + t < s.n; t += Fragment::THREADS) {
      float n_acc = 0.0f, mean_acc = 0.0f, m2_acc = 0.0f;
      for (int g = 0; g < GROUPS; ++g)
        chan_merge(n_acc, mean_acc, m2_acc, static_cast<float>(Fragment::group_rows(g, tile_rows)),
                   sm_mean[g * BN + t], sm_m2[g * BN + t]);
      const long long idx = static_cast<long long>(tc.m) * s.n + n0 + t;
      partial_mean[idx] = mean_acc;
      partial_m2[idx] = m2_acc;
    }
  }
#endif // __CUDACC__ || __CUDACC_RTC__
};

} // namespace kf
