// Row reductions of a GEMM's product too wide for one tile, in two steps
// (row_partials_epilogue): the GEMM's epilogue reduces each row of a tile over each
// ROW_PARTIAL_COLS of the tile's columns, from its accumulators in registers, into one partial
// per (row, column slice), and a row kernel after it merges a row's partials in slice order into
// the reduction's result. No atomics: the result is the same run after run. The slices are
// narrower than any tile, so that the row kernel merges the same partials whichever tile a run
// of the GEMM takes.
//
//   partial (partial_add,   Sum / Mean: the sum; Max / Min: the extremum (NaN with a NaN);
//   partial_merge):         Var / Std: Welford's (count, mean, M2), merged with Chan's formula
//   merge (row_merge):      the sum of the sums (Mean: over n), the extremum of the extrema,
//                           the Welford triples merged with Chan's formula (no E[y^2] - E[y]^2
//                           cancellation); special values as row_reduce.cuh's
//
// Layout: a row's partials are [tiles][floats] floats (tiles: the column slices), floats the sum of
// partial_floats() over the reductions the epilogue writes (RowPartials<R...>::FLOATS); a reduction
// at offset o has row r's partial of tile t at p[(r * tiles + t) * floats + o] (and o + 1, o + 2
// for Welford's mean and M2). A partial in registers has the same floats.
#pragma once

#include "row_reduce.cuh"

namespace kf {

// The columns of one partial: every GEMM tile's width is a multiple of it.
inline constexpr int ROW_PARTIAL_COLS = 128;

KF_HOST_DEVICE constexpr int partial_floats(Reduce r) {
  return r == Reduce::Var || r == Reduce::Std ? 3 : 1;
}

// Whether a GEMM epilogue's Rows writes row partials (a member `static constexpr bool
// PARTIALS = true`) rather than running whole-row passes.
template <class R, class = void> struct writes_row_partials {
  static constexpr bool value = false;
};
template <class R> struct writes_row_partials<R, decltype(void(R::PARTIALS))> {
  static constexpr bool value = R::PARTIALS;
};

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

// Reduction R's partial over no values, at p[0 .. partial_floats(R) - 1].
template <Reduce R> __device__ __forceinline__ void partial_init(float *p) {
  using namespace row_detail;
  if constexpr (R == Reduce::Max)
    p[0] = neg_inf();
  else if constexpr (R == Reduce::Min)
    p[0] = inf();
  else {
#pragma unroll
    for (int e = 0; e < partial_floats(R); ++e)
      p[e] = 0.0f;
  }
}

// Value y added to the partial at p.
template <Reduce R> __device__ __forceinline__ void partial_add(float *p, float y) {
  using namespace row_detail;
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    p[0] += y;
  } else if constexpr (R == Reduce::Max) {
    p[0] = maximum(p[0], y);
  } else if constexpr (R == Reduce::Min) {
    p[0] = minimum(p[0], y);
  } else {
    static_assert(R == Reduce::Var || R == Reduce::Std, "a reduction with row partials");
    Welford a{p[0], p[1], p[2]};
    welford_add(a, y);
    p[0] = a.n;
    p[1] = a.mean;
    p[2] = a.m2;
  }
}

// The partial of later values q merged into p's (of the values before them).
template <Reduce R> __device__ __forceinline__ void partial_merge(float *p, const float *q) {
  using namespace row_detail;
  if constexpr (R == Reduce::Sum || R == Reduce::Mean) {
    p[0] += q[0];
  } else if constexpr (R == Reduce::Max) {
    p[0] = maximum(p[0], q[0]);
  } else if constexpr (R == Reduce::Min) {
    p[0] = minimum(p[0], q[0]);
  } else {
    static_assert(R == Reduce::Var || R == Reduce::Std, "a reduction with row partials");
    const Welford a = welford_merge(Welford{p[0], p[1], p[2]}, Welford{q[0], q[1], q[2]});
    p[0] = a.n;
    p[1] = a.mean;
    p[2] = a.m2;
  }
}

// The partials of reductions R..., one after another (their offsets: the floats before them).
template <Reduce... R> struct RowPartials {
  static constexpr int FLOATS = (partial_floats(R) + ...);

  __device__ static void init(float *p) {
    int o = 0;
    ((partial_init<R>(p + o), o += partial_floats(R)), ...);
  }
  __device__ static void merge(float *p, const float *q) {
    int o = 0;
    ((partial_merge<R>(p + o, q + o), o += partial_floats(R)), ...);
  }
};

// Reduction R of row `row` of n values from its `tiles` partials at offset `offset` of the
// partials (`floats` per tile), merged in tile order by a block of Threads threads (or a Team);
// every member gets the result. `correction`: var / std's (divisor max(0, n - correction)).
template <int Threads, Reduce R, class Team = BlockTeam<Threads>>
__device__ __forceinline__ float row_merge(int row, int tiles, const float *partials, int floats,
                                           int offset, int n, float correction,
                                           Team team = Team{}) {
  static_assert(Team::SIZE == Threads, "the team is Threads threads");
  using namespace row_detail;
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
  } else if constexpr (R == Reduce::Min) {
    float m = inf();
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      m = minimum(m, p[t * floats]);
    return team.combine(m, MinimumOp{});
  } else {
    static_assert(R == Reduce::Var || R == Reduce::Std, "a reduction with row partials");
    Welford acc{0.0f, 0.0f, 0.0f};
    for (int t = team.rank(); t < tiles; t += Team::SIZE)
      acc = welford_merge(acc, Welford{p[t * floats], p[t * floats + 1], p[t * floats + 2]});
    const Welford tot = team.welford(acc);
    const float var = tot.m2 / fmaxf(0.0f, static_cast<float>(n) - correction);
    return R == Reduce::Std ? sqrtf(var) : var;
  }
}

#endif // __CUDACC__ || __CUDACC_RTC__

} // namespace kf
