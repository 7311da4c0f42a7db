// Row reductions of a GEMM's product too wide for one tile, in two steps
// (row_partials_epilogue): the GEMM's epilogue reduces each row of a tile over each
// ROW_PARTIAL_COLS of the tile's columns, from its accumulators in registers, into one partial
// per (row, column slice), and a row kernel after it merges a row's partials in slice order into
// the reduction's result. No atomics: the result is the same run after run. The slices are
// narrower than any tile, so that the row kernel merges the same partials whichever tile a run
// of the GEMM takes.
//
//   partial (partial_add,   Sum / Mean: the sum; Max / Min: the extremum (NaN with a NaN)
//   partial_merge):
//   merge (row_merge):      the sum of the sums (Mean: over n), the extremum of the extrema;
//                           special values as row_reduce.cuh's
//
// Layout: a row's partials are [tiles][floats] floats (tiles: the column slices; floats: one
// per reduction the epilogue writes, RowPartials<R...>::FLOATS); a reduction at offset o has row
// r's partial of tile t at p[(r * tiles + t) * floats + o]. Partials in registers likewise.
#pragma once

#include "row_reduce.cuh"

namespace kf {

// The columns of one partial: every GEMM tile's width is a multiple of it.
inline constexpr int ROW_PARTIAL_COLS = 128;

// Whether a GEMM epilogue's Rows writes row partials (a member `static constexpr bool
// PARTIALS = true`) rather than running whole-row passes.
template <class R, class = void> struct writes_row_partials {
  static constexpr bool value = false;
};
template <class R> struct writes_row_partials<R, decltype(void(R::PARTIALS))> {
  static constexpr bool value = R::PARTIALS;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

template <Reduce R> __device__ __forceinline__ void check_partial_reduction() {
  static_assert(R == Reduce::Sum || R == Reduce::Mean || R == Reduce::Max || R == Reduce::Min,
                "a reduction with row partials");
}

// Reduction R's partial over no values.
template <Reduce R> __device__ __forceinline__ float partial_init() {
  using namespace row_detail;
  check_partial_reduction<R>();
  return R == Reduce::Max ? neg_inf() : R == Reduce::Min ? inf() : 0.0f;
}

// The partial p of a value y more (of the values before it and y, merged: partial_merge).
template <Reduce R> __device__ __forceinline__ float partial_merge(float p, float y) {
  using namespace row_detail;
  check_partial_reduction<R>();
  if constexpr (R == Reduce::Max)
    return maximum(p, y);
  else if constexpr (R == Reduce::Min)
    return minimum(p, y);
  else
    return p + y;
}

// Value y added to the partial at p.
template <Reduce R> __device__ __forceinline__ void partial_add(float *p, float y) {
  p[0] = partial_merge<R>(p[0], y);
}

// The partials of reductions R..., one float each in order.
template <Reduce... R> struct RowPartials {
  static constexpr int FLOATS = sizeof...(R);

  __device__ static void init(float *p) {
    int o = 0;
    ((p[o++] = partial_init<R>()), ...);
  }
  // The partials q of later values merged into p's (of the values before them).
  __device__ static void merge(float *p, const float *q) {
    int o = 0;
    ((p[o] = partial_merge<R>(p[o], q[o]), ++o), ...);
  }
};

// Reduction R of row `row` of n values from its `tiles` partials at offset `offset` of the
// partials (`floats` per tile), merged in tile order by a block of Threads threads (or a Team);
// every member gets the result.
template <int Threads, Reduce R, class Team = BlockTeam<Threads>>
__device__ __forceinline__ float row_merge(int row, int tiles, const float *partials, int floats,
                                           int offset, int n, Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;
  check_partial_reduction<R>();
  const float *p = partials + static_cast<long long>(row) * tiles * floats + offset;
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    float s = 0.0f;
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      s += p[t * floats];
    s = team.sum(s);
    return R == Reduce::Mean ? s / static_cast<float>(n) : s;
  } else if constexpr (R == Reduce::Max) {
    float m = neg_inf();
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      m = maximum(m, p[t * floats]);
    return team.combine(m, MaximumOp{});
  } else {
    float m = inf();
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      m = minimum(m, p[t * floats]);
    return team.combine(m, MinimumOp{});
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
